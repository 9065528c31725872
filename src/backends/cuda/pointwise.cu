// kiln's own CUDA kernels for elementwise work: relu, add, mul, copies, fills,
// dropout (the same Philox4x32-10 mask as the cpu and ref backends, so a seed
// gives the same run everywhere) and the fused optimizers. Each has
// a reference twin in src/kernels/ref/ and is checked against it by the op
// harness (tests/test_ops.c). Grid-stride loops: any size, one launch.
#include "backends/cuda/internal/cuda.h"
#include "backends/cuda/internal/block.h"
#include "backends/cuda/internal/pointwise_math.h"
#include "backends/cuda/internal/half_out.h"

__global__ void k_relu(int64_t n, const float *x, float *y) { FOR_N y[i] = x[i] > 0.f ? x[i] : 0.f; }
__global__ void k_relu_bwd(int64_t n, const void *y, int yk, const void *dy, int dyk, float *dx, int acc) {
    FOR_N { float g = get_kind(y, yk, i) > 0.f ? get_kind(dy, dyk, i) : 0.f; PUT(dx[i], g); }
}
__global__ void k_bias_relu(int64_t n, int64_t ch, int64_t inner, const float *b, int relu, float *y) {
    FOR_N {
        float v = y[i] + (b ? b[(i / inner) % ch] : 0.f);
        y[i] = relu && !(v > 0.f) ? 0.f : v;
    }
}
// a and b of kinds ak, bk (16 bits: values their writers rounded, read widened); y of kind yk, the sum rounded to rk
__global__ void k_add(int64_t n, const void *a, int ak, const void *b, int bk, void *y, int yk, int rk) {
    FOR_N put_kind(y, yk, i, round_kind(get_kind(a, ak, i) + get_kind(b, bk, i), rk));
}
__global__ void k_mul(int64_t n, const float *a, const float *b, float *y) { FOR_N y[i] = a[i] * b[i]; }
__global__ void k_mul_bwd(int64_t n, const float *dy, const float *o, float *dx, int acc) { FOR_N PUT(dx[i], dy[i] * o[i]); }
// y in 16 bits where the half-storage pass stores it so (yk; never accumulated then)
__global__ void k_copy(int64_t n, const float *x, void *y, int yk, int acc) { FOR_N put_or_add(y, yk, i, x[i], acc); }

struct strided { int ndim; int64_t shape[8], stride[8]; };
__global__ void k_copy_strided(int64_t n, strided d, const float *x, void *y, int yk, int acc) {
    FOR_N {
        int64_t r = i, off = 0;
        for (int k = d.ndim - 1; k >= 0; k--) {
            off += (r % d.shape[k]) * d.stride[k];
            r /= d.shape[k];
        }
        put_or_add(y, yk, i, x[off], acc);
    }
}
// dx is zero but for every step-th position from start, len of them, which take dy's
__global__ void k_slice_bwd(int64_t n, int64_t dim, int64_t inner, int64_t start, int64_t len, int64_t step, const float *dy,
                            float *dx, int acc) {
    FOR_N {
        int64_t j = (i / inner) % dim - start, o = i / (inner * dim);
        int on = j >= 0 && j % step == 0 && j / step < len;
        PUT(dx[i], on ? dy[(o * len + j / step) * inner + i % inner] : 0.f);
    }
}
// backward's seed, times the gradient scaler's scale when there is one
__global__ void k_ones(const kiln_cuda_rc *rc, float *y) { y[0] = (float)(rc->loss_scale * (rc->amp ? rc->amp->scale : 1.0f)); }
__global__ void k_fill(int64_t n, const float *v, float *y, int acc) { FOR_N PUT(y[i], v[0]); }

// clip_grad_norm: coef = max_norm / (norm + 1e-6), applied when below 1 (torch.nn.utils.clip_grad_norm_)
__global__ void k_scale_by_norm(int64_t n, const double *sumsq, double max_norm, kiln_cuda_flags *f, const kiln_cuda_rc *rc,
                                float *g) {
    if (kiln_amp_skip(rc)) return;
    double norm = sqrt(*sumsq);
    if (!isfinite(norm)) {
        if (blockIdx.x == 0 && threadIdx.x == 0) f->nonfinite_norm = 1;
        return;
    }
    double coef = max_norm / (norm + 1e-6);
    if (coef >= 1.0) return;
    float c = (float)coef;
    FOR_N g[i] *= c;
}

// ---- dropout: the mask from (key, step counter), as the cpu ----
__global__ void k_dropout(int64_t n, float p, uint32_t thr, uint64_t key, const kiln_cuda_rc *rc, const float *x, float *y,
                          int acc) {
    float scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
    uint64_t counter = rc->counter;
    FOR_N {
        float v;
        if (p <= 0.f) v = x[i];
        else if (p >= 1.f) v = 0.f;
        else v = philox_word(key, counter, (uint64_t)i / 4, (int)(i % 4)) >= thr ? x[i] * scale : 0.f;
        PUT(y[i], v);
    }
}

// ---- the gradient scaler (src/optim/grad_scaler.c): every thread reads the same sum, so all agree ----
__global__ void k_amp_unscale(int64_t n, const double *sumsq, int first, kiln_amp_state *a, float *g) {
    int found = !isfinite(*sumsq);
    if (first && blockIdx.x == 0 && threadIdx.x == 0) a->found_inf = found;
    if (found) return;
    float inv = 1.f / a->scale; // a power of 2: exact
    FOR_N g[i] *= inv;
}
__global__ void k_amp_update(kiln_amp_state *a, float growth, float backoff, int64_t interval) {
    kiln_amp_update(a, growth, backoff, interval);
}

// ---- optimizers over a run of the flat parameter buffer: torch.optim (1.13) operation order ----
// (each skips itself when the gradient scaler found a non-finite gradient; its step count leaves skipped ones out)
__global__ void k_sgd(int64_t n, float *p, const float *g, float *mom, const kiln_cuda_rc *rc, float momentum,
                      float dampening, float weight_decay, int nesterov) {
    if (kiln_amp_skip(rc)) return;
    float lr = (float)rc->lr;
    int first = kiln_optim_t(rc) == 1;
    FOR_N {
        float d = g[i] + weight_decay * p[i];
        if (momentum != 0.f) {
            float buf = first ? d : momentum * mom[i] + (1.f - dampening) * d;
            mom[i] = buf;
            d = nesterov ? d + momentum * buf : buf;
        }
        p[i] -= lr * d;
    }
}
__global__ void k_adamw(int64_t n, float *p, const float *g, float *m, float *v, const kiln_cuda_rc *rc, float beta1,
                        float beta2, float eps, float weight_decay) {
    if (kiln_amp_skip(rc)) return;
    double lr = rc->lr, step = (double)kiln_optim_t(rc);
    float decay = (float)(1.0 - lr * (double)weight_decay);
    float step_size = (float)(lr / (1.0 - pow((double)beta1, step)));
    float bc2_sqrt = (float)sqrt(1.0 - pow((double)beta2, step));
    FOR_N {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.f - beta1) * gi;
        float vi = beta2 * v[i] + (1.f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = p[i] * decay - step_size * mi / denom;
    }
}
__global__ void k_adadelta(int64_t n, float *p, const float *g, float *sq, float *ad, const kiln_cuda_rc *rc, float rho,
                           float eps, float weight_decay) {
    if (kiln_amp_skip(rc)) return;
    float lr = (float)rc->lr;
    FOR_N {
        float d = g[i] + weight_decay * p[i];
        float sa = rho * sq[i] + (1.f - rho) * d * d;
        sq[i] = sa;
        float delta = sqrtf(ad[i] + eps) / sqrtf(sa + eps) * d;
        ad[i] = rho * ad[i] + (1.f - rho) * delta * delta;
        p[i] -= lr * delta;
    }
}

extern "C" {
void kiln_cuda_relu(kcs st, int64_t n, const float *x, float *y) { KLAUNCH(k_relu, GO(n))(n, x, y); }
void kiln_cuda_relu_bwd(kcs st, int64_t n, const void *y, int yk, const void *dy, int dyk, float *dx, int acc) {
    KLAUNCH(k_relu_bwd, GO(n))(n, y, yk, dy, dyk, dx, acc);
}
void kiln_cuda_bias_relu(kcs st, int64_t rows, int64_t ch, int64_t inner, const float *b, int relu, float *y) {
    int64_t n = rows * ch * inner;
    KLAUNCH(k_bias_relu, GO(n))(n, ch, inner, b, relu, y);
}
void kiln_cuda_add(kcs st, int64_t n, const void *a, int ak, const void *b, int bk, void *y, int yk, int rk) {
    KLAUNCH(k_add, GO(n))(n, a, ak, b, bk, y, yk, rk);
}
void kiln_cuda_mul(kcs st, int64_t n, const float *a, const float *b, float *y) { KLAUNCH(k_mul, GO(n))(n, a, b, y); }
void kiln_cuda_mul_bwd(kcs st, int64_t n, const float *dy, const float *o, float *dx, int acc) {
    KLAUNCH(k_mul_bwd, GO(n))(n, dy, o, dx, acc);
}
void kiln_cuda_copy(kcs st, int64_t n, const float *x, void *y, int yk, int acc) { KLAUNCH(k_copy, GO(n))(n, x, y, yk, acc); }
void kiln_cuda_copy_strided(kcs st, int ndim, const int64_t *shape, const int64_t *stride, const float *x, void *y, int yk,
                            int acc) {
    strided d;
    d.ndim = ndim;
    int64_t n = 1;
    for (int k = 0; k < ndim && k < 8; k++) {
        d.shape[k] = shape[k];
        d.stride[k] = stride[k];
        n *= shape[k];
    }
    KLAUNCH(k_copy_strided, GO(n))(n, d, x, y, yk, acc);
}
void kiln_cuda_slice_bwd(kcs st, int64_t outer, int64_t dim, int64_t inner, int64_t start, int64_t len, int64_t step,
                         const float *dy, float *dx, int acc) {
    int64_t n = outer * dim * inner;
    KLAUNCH(k_slice_bwd, GO(n))(n, dim, inner, start, len, step, dy, dx, acc);
}
void kiln_cuda_ones(kcs st, const kiln_cuda_rc *rc, float *y) { KLAUNCH(k_ones, 1, 1, 0, st)(rc, y); }
void kiln_cuda_fill(kcs st, int64_t n, const float *v, float *y, int acc) { KLAUNCH(k_fill, GO(n))(n, v, y, acc); }
void kiln_cuda_scale_by_norm(kcs st, int64_t n, const double *sumsq, double max_norm, kiln_cuda_flags *f, const kiln_cuda_rc *rc,
                             float *g) {
    KLAUNCH(k_scale_by_norm, GO(n))(n, sumsq, max_norm, f, rc, g);
}
void kiln_cuda_amp_unscale(kcs st, int64_t n, const double *sumsq, int first, kiln_amp_state *a, float *g) {
    KLAUNCH(k_amp_unscale, GO(n))(n, sumsq, first, a, g);
}
void kiln_cuda_amp_update(kcs st, kiln_amp_state *a, float growth, float backoff, int64_t interval) {
    KLAUNCH(k_amp_update, 1, 1, 0, st)(a, growth, backoff, interval);
}
void kiln_cuda_dropout(kcs st, int64_t n, float p, uint64_t key, const kiln_cuda_rc *rc, const float *x, float *y, int acc) {
    double t = (double)p * 4294967296.0; // kiln_dropout_threshold
    uint32_t thr = t >= 4294967295.0 ? 0xffffffffu : (uint32_t)t;
    KLAUNCH(k_dropout, GO(n))(n, p, thr, key, rc, x, y, acc);
}
void kiln_cuda_sgd(kcs st, int64_t n, float *p, const float *g, float *mom, const kiln_cuda_rc *rc, float momentum,
                   float dampening, float weight_decay, int nesterov) {
    KLAUNCH(k_sgd, GO(n))(n, p, g, mom, rc, momentum, dampening, weight_decay, nesterov);
}
void kiln_cuda_adamw(kcs st, int64_t n, float *p, const float *g, float *m, float *v, const kiln_cuda_rc *rc, float beta1,
                     float beta2, float eps, float weight_decay) {
    KLAUNCH(k_adamw, GO(n))(n, p, g, m, v, rc, beta1, beta2, eps, weight_decay);
}
void kiln_cuda_adadelta(kcs st, int64_t n, float *p, const float *g, float *sq, float *ad, const kiln_cuda_rc *rc,
                        float rho, float eps, float weight_decay) {
    KLAUNCH(k_adadelta, GO(n))(n, p, g, sq, ad, rc, rho, eps, weight_decay);
}
}
