/* Fast optimizers, float: one fused pass over (p, g, state) per step, same
 * operation order as torch.optim (1.13, foreach=False). Per-step scalars are
 * computed in double, as PyTorch does in Python, then rounded to float. */
#include <math.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

void kiln_cpu_sgd(int64_t n, float *restrict p, const float *restrict g, float *restrict mom, float lr,
                  float momentum, float dampening, float weight_decay, int nesterov, int first_step) {
    const float damp1 = 1.0f - dampening;
    if (momentum == 0.0f) {
#pragma omp parallel for simd schedule(static) if (n >= KILN_CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) p[i] -= lr * (g[i] + weight_decay * p[i]);
        return;
    }
    /* branches hoisted out of the loops so each loop is straight-line and vectorises */
    if (first_step) {
#pragma omp parallel for simd schedule(static) if (n >= KILN_CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float d = g[i] + weight_decay * p[i];
            mom[i] = d;
            p[i] -= lr * (nesterov ? d + momentum * d : d);
        }
    } else if (nesterov) {
#pragma omp parallel for simd schedule(static) if (n >= KILN_CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float d = g[i] + weight_decay * p[i];
            float buf = momentum * mom[i] + damp1 * d;
            mom[i] = buf;
            p[i] -= lr * (d + momentum * buf);
        }
    } else {
#pragma omp parallel for simd schedule(static) if (n >= KILN_CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float d = g[i] + weight_decay * p[i];
            float buf = momentum * mom[i] + damp1 * d;
            mom[i] = buf;
            p[i] -= lr * buf;
        }
    }
}

/* The portable Adam and Adadelta loops go in spans a parallel loop hands out:
 * each span is built for AVX2 machines as well (KILN_CPU_HOT; an OpenMP body
 * would not inherit the clone's target), and this file's -fno-math-errno
 * (CMakeLists.txt) lets sqrtf vectorise. sqrt is exact and ISO C keeps GCC
 * from fusing multiply-adds, so every clone gives the AVX-512 loops' bits. */
#define SPAN 4096

KILN_CPU_HOT static void adamw_span(int64_t n, float *restrict p, const float *restrict g, float *restrict m,
                                    float *restrict v, float decay, float beta1, float beta2, float eps,
                                    float step_size, float bc2_sqrt) {
    const float b1c = 1.0f - beta1, b2c = 1.0f - beta2;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = beta1 * m[i] + b1c * gi;
        float vi = beta2 * v[i] + b2c * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = p[i] * decay - step_size * mi / denom;
    }
}

KILN_CPU_HOT static void adadelta_span(int64_t n, float *restrict p, const float *restrict g, float *restrict square_avg,
                                       float *restrict acc_delta, float lr, float rho, float eps, float weight_decay) {
    const float rho1 = 1.0f - rho;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float d = g[i] + weight_decay * p[i];
        float sa = rho * square_avg[i] + rho1 * d * d;
        square_avg[i] = sa;
        float delta = sqrtf(acc_delta[i] + eps) / sqrtf(sa + eps) * d;
        acc_delta[i] = rho * acc_delta[i] + rho1 * delta * delta;
        p[i] -= lr * delta;
    }
}

void kiln_cpu_adamw(int64_t n, float *restrict p, const float *restrict g, float *restrict m, float *restrict v,
                    float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step) {
    const float decay = (float)(1.0 - (double)lr * (double)weight_decay);
    const double bc1 = 1.0 - pow((double)beta1, (double)step), bc2 = 1.0 - pow((double)beta2, (double)step);
    const float step_size = (float)((double)lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    if (kiln_cpu_has_avx512()) {
        kiln_cpu_adamw_avx512(n, p, g, m, v, decay, beta1, beta2, eps, step_size, bc2_sqrt);
        return;
    }
#pragma omp parallel for schedule(static) if (n >= KILN_CPU_PAR_MIN)
    for (int64_t s = 0; s < n; s += SPAN)
        adamw_span(n - s < SPAN ? n - s : SPAN, p + s, g + s, m + s, v + s, decay, beta1, beta2, eps, step_size, bc2_sqrt);
}

void kiln_cpu_adadelta(int64_t n, float *restrict p, const float *restrict g, float *restrict square_avg,
                       float *restrict acc_delta, float lr, float rho, float eps, float weight_decay) {
    if (kiln_cpu_has_avx512()) {
        kiln_cpu_adadelta_avx512(n, p, g, square_avg, acc_delta, lr, rho, eps, weight_decay);
        return;
    }
#pragma omp parallel for schedule(static) if (n >= KILN_CPU_PAR_MIN)
    for (int64_t s = 0; s < n; s += SPAN)
        adadelta_span(n - s < SPAN ? n - s : SPAN, p + s, g + s, square_avg + s, acc_delta + s, lr, rho, eps, weight_decay);
}

/* ---- the same over a run of tensors (segments.c's chunks: each call below is
 * serial, one chunk of a tensor, with that tensor's weight decay) ---- */
typedef struct {
    const kiln_layerwise_args *a;
    float *p, *s0, *s1;
    const float *g;
} tensors_ctx;

#define CHUNK_BODY(name, call)                                                             \
    static void name(const void *cv, int64_t k, int64_t b, int64_t e, double acc[2]) {     \
        (void)acc;                                                                         \
        const tensors_ctx *c = cv;                                                         \
        const kiln_layerwise_args *a = c->a;                                               \
        float wd = a->seg[3 * k + 2] ? (float)a->weight_decay : 0.0f;                      \
        int64_t n = e - b;                                                                 \
        call;                                                                              \
    }
CHUNK_BODY(sgd_chunk, kiln_cpu_sgd(n, c->p + b, c->g + b, c->s0 ? c->s0 + b : NULL, (float)a->lr, (float)a->momentum,
                                   (float)a->dampening, wd, a->nesterov, a->step == 1))
CHUNK_BODY(adamw_chunk, kiln_cpu_adamw(n, c->p + b, c->g + b, c->s0 + b, c->s1 + b, (float)a->lr, (float)a->beta1,
                                       (float)a->beta2, (float)a->eps, wd, a->step))
CHUNK_BODY(adadelta_chunk, kiln_cpu_adadelta(n, c->p + b, c->g + b, c->s0 + b, c->s1 + b, (float)a->lr, (float)a->rho,
                                             (float)a->eps, wd))

int kiln_cpu_sgd_tensors(const kiln_layerwise_args *a, float *p, const float *g, float *mom) {
    tensors_ctx c = {a, p, mom, NULL, g};
    return kiln_cpu_for_segments(a->nseg, a->seg, sgd_chunk, &c, NULL);
}
int kiln_cpu_adamw_tensors(const kiln_layerwise_args *a, float *p, const float *g, float *m, float *v) {
    tensors_ctx c = {a, p, m, v, g};
    return kiln_cpu_for_segments(a->nseg, a->seg, adamw_chunk, &c, NULL);
}
int kiln_cpu_adadelta_tensors(const kiln_layerwise_args *a, float *p, const float *g, float *square_avg, float *acc_delta) {
    tensors_ctx c = {a, p, square_avg, acc_delta, g};
    return kiln_cpu_for_segments(a->nseg, a->seg, adadelta_chunk, &c, NULL);
}
