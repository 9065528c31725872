/* exp, erf and the logistic function in float, written so that GCC vectorises
 * them inside `omp simd` loops (libm's expf and erff are calls it cannot
 * vectorise without -ffast-math). Straight-line arithmetic, no branches, no
 * table lookups; NaN propagates.
 *   kiln_vexpf:  relative error ~2e-7 (Cephes' expf polynomial after the
 *                reduction x = n ln2 + r); clamped to [-87, 88], so it never
 *                returns a denormal or inf;
 *   kiln_verff:  absolute error < 1.5e-7 (Abramowitz & Stegun 7.1.26, the
 *                formula PyTorch's vectorised erf uses).
 * The files that use them are built with -ffp-contract=fast (CMakeLists.txt):
 * ISO C mode would keep GCC from fusing the polynomials' multiply-adds in the
 * AVX-512 clones. */
#ifndef KILN_KERNELS_CPU_VEC_MATH_H
#define KILN_KERNELS_CPU_VEC_MATH_H

#include <stdint.h>

static inline float kiln_vexpf(float x) {
    float c = x > -87.0f ? x : -87.0f; /* NaN lands here too: restored at the end */
    c = c < 88.0f ? c : 88.0f;
    float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round(c / ln2): 1.5 * 2^23 trick */
    float r = c - n * 0.693359375f;
    r = r + n * 2.12194440e-4f; /* ln2 in two parts: r is exact */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { int32_t i; float f; } s = {.i = ((int32_t)n + 127) << 23}; /* 2^n (n + 127 is in [1, 254]) */
    return x == x ? p * s.f : x;
}

static inline float kiln_verff(float x) {
    float a = x < 0 ? -x : x;
    float t = 1.0f / (1.0f + 0.3275911f * a);
    float q = 1.061405429f;
    q = q * t - 1.453152027f;
    q = q * t + 1.421413741f;
    q = q * t - 0.284496736f;
    q = q * t + 0.254829592f;
    float e = 1.0f - q * t * kiln_vexpf(-a * a);
    return x < 0 ? -e : e;
}

/* 1 / (1 + e^-x) */
static inline float kiln_vsigmoidf(float x) { return 1.0f / (1.0f + kiln_vexpf(-x)); }

/* the largest of x[0 .. n): 16 lanes of running maxima, then the tail (always_inline: built into each clone that
 * calls it, as a plain static inline helper called from a clone would not be) */
static inline __attribute__((always_inline)) float kiln_row_max16(int64_t n, const float *restrict x) {
    float mv[16], m = x[0];
    int64_t j = 0;
    for (int l = 0; l < 16; l++) mv[l] = x[0];
    for (; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; l++) mv[l] = x[j + l] > mv[l] ? x[j + l] : mv[l];
    for (int l = 0; l < 16; l++) m = mv[l] > m ? mv[l] : m;
    for (; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

#endif
