/* Fast pointwise arithmetic, float: affine, erf, tanh and their backward ops.
 * One thread each: the callers (a fused kernel's tiles, or an op alone split
 * into the same tiles) divide the work. erf, tanh and erf's backward take the
 * AVX-512 loops when the CPU has them, else the AVX2 ones (erf in its 8-piece
 * form); the portable loops below evaluate the AVX-512 formulas
 * (pointwise_math.h) for other CPUs. */
#include <math.h>
#include <string.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/pointwise_math.h"
#include "kernels/internal/kernels.h"

static float horner(const float *c, int n, float x) {
    float r = c[0];
    for (int i = 1; i < n; i++) r = r * x + c[i];
    return r;
}

static float exp1(float x) {
    static const float p[] = KILN_EXP_P;
    x = fminf(fmaxf(x, KILN_EXP_LO), KILN_EXP_HI);
    float k = nearbyintf(x * KILN_LOG2E);
    float r = x - k * KILN_LN2_HI;
    r = r - k * KILN_LN2_LO;
    return ldexpf(horner(p, KILN_EXP_NP, r), (int)k);
}

static float erf1(float x) {
    static const float c[KILN_ERF_NP][KILN_ERF_PIECES] = KILN_ERF_TAB;
    float u = fminf(fabsf(x) * (float)(KILN_ERF_PIECES / 4), KILN_ERF_UMAX);
    float k = (u + KILN_ERF_ROUND) - KILN_ERF_ROUND; /* round(u), as the vector loop rounds it */
    int i = (int)k;
    float t = u - k, r = c[KILN_ERF_NP - 1][i];
    for (int j = KILN_ERF_NP - 2; j >= 0; j--) r = r * t + c[j][i];
    return copysignf(fminf(r, 1.0f), x);
}

static float tanh1(float x) {
    static const float ps[] = KILN_TANH_SMALL_P;
    float a = fminf(fabsf(x), KILN_TANH_CLAMP);
    if (a < KILN_TANH_SMALL) return x * horner(ps, KILN_TANH_SMALL_NP, x * x);
    return copysignf(1.0f - 2.0f / (exp1(2.0f * a) + 1.0f), x);
}

/* one rounding (fmaf): what the fused kernel's folded affines compute in one
 * instruction (pointwise_vec.h); the x86-64-v3 clone keeps fmaf a vector
 * instruction on AVX2 machines, elsewhere it is libm's */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
void kiln_cpu_affine(int64_t n, const float *restrict x, float scale, float shift, float *restrict y) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) y[i] = fmaf(x[i], scale, shift);
}

KILN_CPU_HOT void kiln_cpu_affine_bwd(int64_t n, const float *restrict dy, float scale, float *restrict dx, int acc) {
    if (acc) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) dx[i] += scale * dy[i];
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) dx[i] = scale * dy[i];
    }
}

void kiln_cpu_erf(int64_t n, const float *x, float *y) {
    if (kiln_cpu_has_avx512()) {
        kiln_cpu_erf_avx512(n, x, y);
        return;
    }
    if (kiln_cpu_has_avx2()) {
        kiln_cpu_erf_avx2(n, x, y);
        return;
    }
    for (int64_t i = 0; i < n; i++) y[i] = erf1(x[i]);
}

void kiln_cpu_tanh(int64_t n, const float *x, float *y) {
    if (kiln_cpu_has_avx512()) {
        kiln_cpu_tanh_avx512(n, x, y);
        return;
    }
    if (kiln_cpu_has_avx2()) {
        kiln_cpu_tanh_avx2(n, x, y);
        return;
    }
    for (int64_t i = 0; i < n; i++) y[i] = tanh1(x[i]);
}

void kiln_cpu_erf_bwd(int64_t n, const float *x, const float *dy, float *dx, int acc) {
    if (kiln_cpu_has_avx512()) {
        kiln_cpu_erf_bwd_avx512(n, x, dy, dx, acc);
        return;
    }
    if (kiln_cpu_has_avx2()) {
        kiln_cpu_erf_bwd_avx2(n, x, dy, dx, acc);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float g = dy[i] * (KILN_TWO_OVER_SQRTPI * exp1(-x[i] * x[i]));
        dx[i] = acc ? dx[i] + g : g;
    }
}

KILN_CPU_HOT void kiln_cpu_tanh_bwd(int64_t n, const float *restrict y, const float *restrict dy, float *restrict dx, int acc) {
    if (acc) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) dx[i] += dy[i] * (1.0f - y[i] * y[i]);
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
    }
}
