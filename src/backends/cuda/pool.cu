// kiln's own CUDA kernels for average pooling (avg_pool2d with zero padding,
// count_include_pad either way, and adaptive_avg_pool2d's bins: PyTorch's
// windows) and He et al.'s option-A shortcut (x[:, :, ::s, ::s] with zero
// channels around it). Backward in gather form: each input element sums
// what the windows holding it send back, so no atomics. Reference twins in
// src/kernels/ref/avg_pool2d.c and subsample_pad.c.
#include "backends/cuda/internal/cuda.h"
#include "backends/cuda/internal/block.h"

struct avg_dims { int64_t h, w, oh, ow, k, stride, pad, include_pad, adaptive; };

// window o over an input dim of `in`, output dim `out`: input [lo, hi) and the count it divides by
__device__ void avg_window(const avg_dims &d, int64_t o, int64_t in, int64_t out, int64_t *lo, int64_t *hi, int64_t *count) {
    if (d.adaptive) {
        *lo = o * in / out;
        *hi = ((o + 1) * in + out - 1) / out;
        *count = *hi - *lo;
        return;
    }
    int64_t start = o * d.stride - d.pad, end = start + d.k;
    if (end > in + d.pad) end = in + d.pad;
    *count = end - start;
    *lo = start < 0 ? 0 : start;
    *hi = end > in ? in : end;
    if (!d.include_pad) *count = *hi - *lo;
}

__global__ void k_avg_pool(int64_t n, avg_dims d, const float *x, float *y) {
    FOR_N {
        int64_t p = i / (d.oh * d.ow), r = i / d.ow % d.oh, c = i % d.ow, r0, r1, cr, c0, c1, cc;
        avg_window(d, r, d.h, d.oh, &r0, &r1, &cr);
        avg_window(d, c, d.w, d.ow, &c0, &c1, &cc);
        double s = 0;
        for (int64_t a = r0; a < r1; a++)
            for (int64_t b = c0; b < c1; b++) s += x[(p * d.h + a) * d.w + b];
        y[i] = (float)(s / (double)(cr * cc));
    }
}

// the output windows along one dim that may hold input position i: [*lo, *hi)
__device__ void windows_of(const avg_dims &d, int64_t i, int64_t in, int64_t out, int64_t *lo, int64_t *hi) {
    if (d.adaptive) { // bins o with floor(o in / out) <= i < ceil((o + 1) in / out)
        *lo = i * out / in;
        *hi = ((i + 1) * out + in - 1) / in < out ? ((i + 1) * out + in - 1) / in : out;
        return;
    }
    *lo = i + d.pad >= d.k ? (i + d.pad - d.k) / d.stride + 1 : 0;
    *hi = (i + d.pad) / d.stride + 1 < out ? (i + d.pad) / d.stride + 1 : out;
}

__global__ void k_avg_pool_bwd(int64_t n, avg_dims d, const float *dy, float *dx, int acc) {
    FOR_N {
        int64_t p = i / (d.h * d.w), ih = i / d.w % d.h, iw = i % d.w, r0, r1, q0, q1;
        windows_of(d, ih, d.h, d.oh, &r0, &r1);
        windows_of(d, iw, d.w, d.ow, &q0, &q1);
        double g = 0;
        for (int64_t r = r0; r < r1; r++) {
            int64_t a0, a1, cr;
            avg_window(d, r, d.h, d.oh, &a0, &a1, &cr);
            if (ih < a0 || ih >= a1) continue;
            for (int64_t c = q0; c < q1; c++) {
                int64_t b0, b1, cc;
                avg_window(d, c, d.w, d.ow, &b0, &b1, &cc);
                if (iw >= b0 && iw < b1) g += dy[(p * d.oh + r) * d.ow + c] / (double)(cr * cc);
            }
        }
        PUT(dx[i], (float)g);
    }
}

struct sub_dims { int64_t n, c, h, w, s, before, after; };

__global__ void k_subsample_pad(int64_t n, sub_dims d, const float *x, float *y) {
    int64_t oc = d.c + d.before + d.after, oh = (d.h + d.s - 1) / d.s, ow = (d.w + d.s - 1) / d.s;
    FOR_N {
        int64_t q = i % ow, p = i / ow % oh, k = i / (ow * oh) % oc, b = i / (ow * oh * oc), c = k - d.before;
        y[i] = c >= 0 && c < d.c ? x[((b * d.c + c) * d.h + p * d.s) * d.w + q * d.s] : 0.f;
    }
}
__global__ void k_subsample_pad_bwd(int64_t n, sub_dims d, const float *dy, float *dx, int acc) {
    int64_t oc = d.c + d.before + d.after, oh = (d.h + d.s - 1) / d.s, ow = (d.w + d.s - 1) / d.s;
    FOR_N {
        int64_t w = i % d.w, h = i / d.w % d.h, c = i / (d.w * d.h) % d.c, b = i / (d.w * d.h * d.c);
        int on = h % d.s == 0 && w % d.s == 0;
        PUT(dx[i], on ? dy[((b * oc + c + d.before) * oh + h / d.s) * ow + w / d.s] : 0.f);
    }
}

static avg_dims avg_of(const int64_t *v) { return avg_dims{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]}; }
static sub_dims sub_of(const int64_t *v) { return sub_dims{v[0], v[1], v[2], v[3], v[4], v[5], v[6]}; }

extern "C" {
void kiln_cuda_avg_pool(kcs st, int64_t planes, const int64_t *dims, const float *x, float *y) {
    avg_dims d = avg_of(dims);
    int64_t n = planes * d.oh * d.ow;
    KLAUNCH(k_avg_pool, GO(n))(n, d, x, y);
}
void kiln_cuda_avg_pool_bwd(kcs st, int64_t planes, const int64_t *dims, const float *dy, float *dx, int acc) {
    avg_dims d = avg_of(dims);
    int64_t n = planes * d.h * d.w;
    KLAUNCH(k_avg_pool_bwd, GO(n))(n, d, dy, dx, acc);
}
void kiln_cuda_subsample_pad(kcs st, const int64_t *dims, const float *x, float *y) {
    sub_dims d = sub_of(dims);
    int64_t n = d.n * (d.c + d.before + d.after) * ((d.h + d.s - 1) / d.s) * ((d.w + d.s - 1) / d.s);
    KLAUNCH(k_subsample_pad, GO(n))(n, d, x, y);
}
void kiln_cuda_subsample_pad_bwd(kcs st, const int64_t *dims, const float *dy, float *dx, int acc) {
    sub_dims d = sub_of(dims);
    int64_t n = d.n * d.c * d.h * d.w;
    KLAUNCH(k_subsample_pad_bwd, GO(n))(n, d, dy, dx, acc);
}
}
