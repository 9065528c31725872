// kiln's own CUDA kernels for max-pooling (square windows, implicit -inf
// padding; NCHW or channels last, x and y in 16 bits where half storage puts
// them: the maximum of 16-bit numbers is one of them), average pooling (x and
// its gradient NCHW or channels last, x in 16 bits where stored so; y and its
// gradient NCHW: a classifier's flatten reads them; avg_pool2d with zero padding,
// count_include_pad either way, and adaptive_avg_pool2d's bins: PyTorch's
// windows) and He et al.'s option-A shortcut (x[:, :, ::s, ::s] with zero
// channels around it). Backward in gather form: each input element sums
// what the windows holding it send back, so no atomics. Reference twins in
// src/kernels/ref/max_pool2d.c, avg_pool2d.c and subsample_pad.c.
#include "backends/cuda/internal/cuda.h"
#include "backends/cuda/internal/block.h"
#include "backends/cuda/internal/half_out.h"

// ---- max-pool: the first maximum of a window's valid elements wins, as the reference; padding never wins ----
// A plane is one image's channel: NCHW holds it contiguous, channels last (nhwc) every c-th element, so a
// thread's neighbours (the next channel) read the next element
struct pool_dims { int64_t h, w, oh, ow, k, stride, pad, c, nhwc; };
// element (r, col) of plane p (= image * c + channel) of a rows x cols tensor, in its layout
__device__ inline int64_t plane_at(int64_t c, int64_t nhwc, int64_t p, int64_t rows, int64_t cols, int64_t r, int64_t col) {
    if (!nhwc) return (p * rows + r) * cols + col;
    return ((p / c * rows + r) * cols + col) * c + p % c;
}
// element i (memory order) of a rows x cols tensor as its plane, row and column
__device__ inline void coords(int64_t c, int64_t nhwc, int64_t rows, int64_t cols, int64_t i, int64_t *p, int64_t *r, int64_t *col) {
    if (nhwc) {
        *col = i / c % cols, *r = i / (c * cols) % rows, *p = i / (c * cols * rows) * c + i % c;
        return;
    }
    *p = i / (rows * cols), *r = i / cols % rows, *col = i % cols;
}
#define X_AT(p, r, col) plane_at(d.c, d.nhwc, p, d.h, d.w, r, col)
#define Y_AT(p, r, col) plane_at(d.c, d.nhwc, p, d.oh, d.ow, r, col)
// window (r, c)'s argmax in plane p, as its index in the plane (row * w + col)
__device__ int64_t window_argmax(const void *x, int xk, const pool_dims &d, int64_t p, int64_t r, int64_t c) {
    int64_t r0 = r * d.stride - d.pad, c0 = c * d.stride - d.pad;
    int64_t r1 = r0 + d.k < d.h ? r0 + d.k : d.h, c1 = c0 + d.k < d.w ? c0 + d.k : d.w;
    r0 = r0 < 0 ? 0 : r0;
    c0 = c0 < 0 ? 0 : c0;
    int64_t best = r0 * d.w + c0;
    float top = get_kind(x, xk, X_AT(p, r0, c0));
    for (int64_t i = r0; i < r1; i++)
        for (int64_t j = c0; j < c1; j++) {
            float v = get_kind(x, xk, X_AT(p, i, j));
            if (v > top) top = v, best = i * d.w + j;
        }
    return best;
}
__global__ void k_max_pool(int64_t n, pool_dims d, const void *x, int xk, void *y, int yk) {
    FOR_N {
        int64_t p, r, c;
        coords(d.c, d.nhwc, d.oh, d.ow, i, &p, &r, &c);
        int64_t a = window_argmax(x, xk, d, p, r, c);
        put_kind(y, yk, i, get_kind(x, xk, X_AT(p, a / d.w, a % d.w)));
    }
}
// the first window (r or c) whose span [o * stride - pad, + k) holds input position i
__device__ int64_t first_window(int64_t i, const pool_dims &d) { return i + d.pad >= d.k ? (i + d.pad - d.k) / d.stride + 1 : 0; }
// each window's argmax (its index in the plane), once, at the output's position: the backward's gather below reads
// it for each of the up to ceil(k / stride)^2 windows an input element is in, where finding it again cost k^2 reads
__global__ void k_max_pool_argmax(int64_t n, pool_dims d, const void *x, int xk, int32_t *arg) {
    FOR_N {
        int64_t p, r, c;
        coords(d.c, d.nhwc, d.oh, d.ow, i, &p, &r, &c);
        arg[i] = (int32_t)window_argmax(x, xk, d, p, r, c);
    }
}
// gather form: each input element sums the gradients of the windows whose maximum it is (no atomics: deterministic)
__global__ void k_max_pool_bwd(int64_t n, pool_dims d, int relu_mask, const void *x, int xk, const float *dy,
                               const int32_t *arg, float *dx, int acc) {
    FOR_N {
        int64_t p, ih, iw;
        coords(d.c, d.nhwc, d.h, d.w, i, &p, &ih, &iw);
        int64_t at = ih * d.w + iw;
        float g = 0.f;
        for (int64_t r = first_window(ih, d); r <= (ih + d.pad) / d.stride && r < d.oh; r++)
            for (int64_t c = first_window(iw, d); c <= (iw + d.pad) / d.stride && c < d.ow; c++) {
                int64_t o = Y_AT(p, r, c);
                if (arg[o] == at) g += dy[o];
            }
        if (relu_mask && !(get_kind(x, xk, i) > 0.f)) g = 0.f;
        PUT(dx[i], g);
    }
}

struct avg_dims { int64_t h, w, oh, ow, k, stride, pad, include_pad, adaptive, c, nhwc; };

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

__global__ void k_avg_pool(int64_t n, avg_dims d, const void *x, int xk, float *y) {
    FOR_N {
        int64_t p, r, c, r0, r1, cr, c0, c1, cc;
        coords(d.c, 0, d.oh, d.ow, i, &p, &r, &c); // y: NCHW
        avg_window(d, r, d.h, d.oh, &r0, &r1, &cr);
        avg_window(d, c, d.w, d.ow, &c0, &c1, &cc);
        double s = 0;
        for (int64_t a = r0; a < r1; a++)
            for (int64_t b = c0; b < c1; b++) s += get_kind(x, xk, X_AT(p, a, b));
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
        int64_t p, ih, iw, r0, r1, q0, q1;
        coords(d.c, d.nhwc, d.h, d.w, i, &p, &ih, &iw);
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
                if (iw >= b0 && iw < b1) g += dy[plane_at(d.c, 0, p, d.oh, d.ow, r, c)] / (double)(cr * cc); // dy: NCHW
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

static pool_dims pool_of(const int64_t *v) { return pool_dims{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]}; }
static avg_dims avg_of(const int64_t *v) {
    return avg_dims{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10]};
}
static sub_dims sub_of(const int64_t *v) { return sub_dims{v[0], v[1], v[2], v[3], v[4], v[5], v[6]}; }

extern "C" {
void kiln_cuda_max_pool(kcs st, int64_t planes, const int64_t *dims, const void *x, int xk, void *y, int yk) {
    pool_dims d = pool_of(dims);
    int64_t n = planes * d.oh * d.ow;
    KLAUNCH(k_max_pool, GO(n))(n, d, x, xk, y, yk);
}
size_t kiln_cuda_max_pool_bwd_workspace(int64_t planes, const int64_t *dims) {
    return (size_t)(planes * dims[2] * dims[3]) * sizeof(int32_t);
}
void kiln_cuda_max_pool_bwd(kcs st, int64_t planes, const int64_t *dims, int relu_mask, const void *x, int xk, const float *dy,
                            float *dx, int acc, int32_t *arg) {
    pool_dims d = pool_of(dims);
    int64_t nout = planes * d.oh * d.ow, n = planes * d.h * d.w;
    KLAUNCH(k_max_pool_argmax, GO(nout))(nout, d, x, xk, arg);
    KLAUNCH(k_max_pool_bwd, GO(n))(n, d, relu_mask, x, xk, dy, arg, dx, acc);
}
void kiln_cuda_avg_pool(kcs st, int64_t planes, const int64_t *dims, const void *x, int xk, float *y) {
    avg_dims d = avg_of(dims);
    int64_t n = planes * d.oh * d.ow;
    KLAUNCH(k_avg_pool, GO(n))(n, d, x, xk, y);
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
