/* Fast layer-wise optimizers, float: LAMB, LARS and NovoGrad as two passes
 * over a run of parameter tensors (segments.c shares the chunks of all its
 * tensors among the threads). Phase 0 reads each tensor once for its norms
 * (LAMB also updates its moments there), phase 1 reads it again to update.
 * Per-tensor scalars (bias corrections, trust ratios) are computed in double,
 * then rounded to float, as kiln_cpu_adamw does. */
#include <math.h>
#include <stddef.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

typedef struct {
    const kiln_layerwise_args *a;
    float *p, *s0, *s1;
    const float *g;
    const double *norms;
    float b1, b2, eps, wd, mom, bc1, bc2;
} ctx;

static ctx ctx_of(const kiln_layerwise_args *a, float *p, const float *g, float *s0, float *s1, const double *norms) {
    ctx c = {a, p, s0, s1, g, norms, (float)a->beta1, (float)a->beta2, (float)a->eps, (float)a->weight_decay,
             (float)a->momentum, 1, 1};
    if (a->step > 0) {
        c.bc1 = (float)(1.0 - pow(a->beta1, (double)a->step));
        c.bc2 = (float)(1.0 - pow(a->beta2, (double)a->step));
    }
    return c;
}

static float decay_of(const ctx *c, int64_t k) { return c->a->seg[3 * k + 2] ? c->wd : 0.0f; }

/* LAMB's update; phase 1 recomputes it from the moments phase 0 stored, the same bits */
static inline float lamb_u(const ctx *c, float m, float v, float p, float wd) {
    return (m / c->bc1) / (sqrtf(v / c->bc2) + c->eps) + wd * p;
}

static void lamb_moments(const void *cv, int64_t k, int64_t b, int64_t e, double acc[2]) {
    const ctx *c = cv;
    float *restrict m = c->s0, *restrict v = c->s1;
    const float *restrict g = c->g, *restrict p = c->p;
    const float wd = decay_of(c, k), b1c = 1.0f - c->b1, b2c = 1.0f - c->b2;
    if (kiln_cpu_has_avx512()) {
        kiln_cpu_lamb_consts lc = {c->b1, c->b2, c->eps, wd, c->bc1, c->bc2};
        kiln_cpu_lamb_moments_avx512(e - b, m + b, v + b, g + b, p + b, &lc, acc);
        return;
    }
    double sp = 0, su = 0;
    for (int64_t i = b; i < e; i++) {
        float mi = c->b1 * m[i] + b1c * g[i], vi = c->b2 * v[i] + b2c * g[i] * g[i];
        m[i] = mi;
        v[i] = vi;
        float u = lamb_u(c, mi, vi, p[i], wd);
        sp += (double)p[i] * p[i];
        su += (double)u * u;
    }
    acc[0] = sp;
    acc[1] = su;
}

/* ||w|| / ||update||, 1 when either is zero */
static double trust_ratio(double sp, double su) { return sp > 0 && su > 0 ? sqrt(sp) / sqrt(su) : 1.0; }

static void lamb_apply(const void *cv, int64_t k, int64_t b, int64_t e, double acc[2]) {
    (void)acc;
    const ctx *c = cv;
    const float *restrict m = c->s0, *restrict v = c->s1;
    float *restrict p = c->p;
    const float wd = decay_of(c, k), step = (float)(c->a->lr * trust_ratio(c->norms[2 * k], c->norms[2 * k + 1]));
    if (kiln_cpu_has_avx512()) {
        kiln_cpu_lamb_consts lc = {c->b1, c->b2, c->eps, wd, c->bc1, c->bc2};
        kiln_cpu_lamb_apply_avx512(e - b, p + b, m + b, v + b, &lc, step);
        return;
    }
    for (int64_t i = b; i < e; i++) p[i] -= step * lamb_u(c, m[i], v[i], p[i], wd);
}

int kiln_cpu_lamb(const kiln_layerwise_args *a, int phase, float *p, const float *g, float *m, float *v, double *norms) {
    ctx c = ctx_of(a, p, g, m, v, norms);
    return kiln_cpu_for_segments(a->nseg, a->seg, phase ? lamb_apply : lamb_moments, &c, phase ? NULL : norms);
}

/* the sums of squares of p and g (LARS), or of g alone (NovoGrad: p NULL) */
static void norms_pg(const void *cv, int64_t k, int64_t b, int64_t e, double acc[2]) {
    (void)k;
    const ctx *c = cv;
    const float *restrict p = c->p, *restrict g = c->g;
    double sp = 0, sg = 0;
#pragma omp simd reduction(+ : sg)
    for (int64_t i = b; i < e; i++) sg += (double)g[i] * g[i];
    if (p) {
#pragma omp simd reduction(+ : sp)
        for (int64_t i = b; i < e; i++) sp += (double)p[i] * p[i];
    }
    acc[0] = p ? sp : sg;
    acc[1] = p ? sg : 0;
}

static void lars_apply(const void *cv, int64_t k, int64_t b, int64_t e, double acc[2]) {
    (void)acc;
    const ctx *c = cv;
    float *restrict p = c->p, *restrict buf = c->s0;
    const float *restrict g = c->g;
    const float wd = decay_of(c, k);
    double pn = sqrt(c->norms[2 * k]), gn = sqrt(c->norms[2 * k + 1]);
    double local = pn > 0 && gn > 0 ? c->a->trust * pn / (gn + (double)wd * pn) : 1.0;
    const float step = (float)(c->a->lr * local), mom = c->mom;
#pragma omp simd
    for (int64_t i = b; i < e; i++) {
        float d = buf[i] * mom + step * (g[i] + wd * p[i]);
        buf[i] = d;
        p[i] -= d;
    }
}

int kiln_cpu_lars(const kiln_layerwise_args *a, int phase, float *p, const float *g, float *buf, double *norms) {
    ctx c = ctx_of(a, p, g, buf, NULL, norms);
    return kiln_cpu_for_segments(a->nseg, a->seg, phase ? lars_apply : norms_pg, &c, phase ? NULL : norms);
}

static void novograd_apply(const void *cv, int64_t k, int64_t b, int64_t e, double acc[2]) {
    (void)acc;
    const ctx *c = cv;
    float *restrict p = c->p, *restrict m = c->s0;
    const float *restrict g = c->g;
    const float wd = decay_of(c, k), denom = (float)c->norms[2 * k + 1], lr = (float)c->a->lr, b1 = c->b1;
#pragma omp simd
    for (int64_t i = b; i < e; i++) {
        float mi = b1 * m[i] + (g[i] / denom + wd * p[i]);
        m[i] = mi;
        p[i] -= lr * mi;
    }
}

int kiln_cpu_novograd(const kiln_layerwise_args *a, int phase, float *p, const float *g, float *m, float *v, double *norms) {
    ctx c = ctx_of(a, phase ? p : NULL, g, m, v, norms);
    if (phase == 0) return kiln_cpu_for_segments(a->nseg, a->seg, norms_pg, &c, norms);
    /* the tensors' second moments first (a scalar each), their denominators into norms[2k+1] */
    for (int64_t k = 0; k < a->nseg; k++) {
        double n2 = norms[2 * k];
        v[k] = (float)(v[k] == 0 ? n2 : a->beta2 * v[k] + (1.0 - a->beta2) * n2);
        norms[2 * k + 1] = sqrt((double)v[k]) + a->eps;
    }
    return kiln_cpu_for_segments(a->nseg, a->seg, novograd_apply, &c, NULL);
}
