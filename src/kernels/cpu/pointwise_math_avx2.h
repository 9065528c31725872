/* erf, tanh and exp on 8 float lanes for AVX2 CPUs without AVX-512
 * (pointwise_math.h's formulas, erf in its 4-piece form), inline: for the
 * whole-tensor loops (pointwise_math_avx2.c) and the fused kernel's vector
 * passes (pointwise_vec_avx2.c), which must give the same bits. Include only
 * from *_avx2.c files (built with AVX2 and FMA enabled). */
#ifndef KILN_KERNELS_CPU_POINTWISE_MATH_AVX2_H
#define KILN_KERNELS_CPU_POINTWISE_MATH_AVX2_H

#include <immintrin.h>
#include "kernels/cpu/pointwise_math.h"

/* the Horner loops are unrolled: GCC's -O2 keeps them rolled, and a rolled
 * loop left erf 1.3x slower (each vector's chain waited on the loop) */
static inline __m256 horner8(const float *c, int n, __m256 x) {
    __m256 r = _mm256_set1_ps(c[0]);
#pragma GCC unroll 16
    for (int i = 1; i < n; i++) r = _mm256_fmadd_ps(r, x, _mm256_set1_ps(c[i]));
    return r;
}

static inline __m256 with_sign(__m256 mag, __m256 x) { return _mm256_or_ps(mag, _mm256_and_ps(x, _mm256_set1_ps(-0.0f))); }
static inline __m256 abs8(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

/* 2^k * p for integral k in [-126, 128]: 128 as 2 * 2^127 (KILN_EXP_HI rounds to it) */
static inline __m256 exp8(__m256 x) {
    static const float p[] = KILN_EXP_P;
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(KILN_EXP_LO)), _mm256_set1_ps(KILN_EXP_HI));
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(KILN_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(KILN_LN2_HI), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(KILN_LN2_LO), r);
    __m256 q = horner8(p, KILN_EXP_NP, r), k1 = _mm256_min_ps(k, _mm256_set1_ps(127.0f));
    q = _mm256_add_ps(q, _mm256_mul_ps(q, _mm256_sub_ps(k, k1))); /* the factor 2 of k = 128 */
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k1), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(q, _mm256_castsi256_ps(e));
}

/* the piece is round(u) clamped to 3, read from u + 1.5 * 2^23's low bits: vpermilps takes bits 0-1 of each
 * lane, from a table of the four pieces' coefficient repeated in both 128-bit halves */
static inline __m256 erf8(__m256 x) {
    static const float c[KILN_ERF4_NP][4] __attribute__((aligned(16))) = KILN_ERF4_TAB;
    __m256 u = _mm256_min_ps(abs8(x), _mm256_set1_ps(4.0f));
    __m256 kr = _mm256_min_ps(_mm256_add_ps(u, _mm256_set1_ps(KILN_ERF_ROUND)), _mm256_set1_ps(KILN_ERF_ROUND + 3.0f));
    __m256i i = _mm256_castps_si256(kr);
    __m256 t = _mm256_sub_ps(u, _mm256_sub_ps(kr, _mm256_set1_ps(KILN_ERF_ROUND)));
    __m256 r = _mm256_permutevar_ps(_mm256_broadcast_ps((const __m128 *)c[KILN_ERF4_NP - 1]), i);
#pragma GCC unroll 16
    for (int j = KILN_ERF4_NP - 2; j >= 0; j--)
        r = _mm256_fmadd_ps(r, t, _mm256_permutevar_ps(_mm256_broadcast_ps((const __m128 *)c[j]), i));
    return with_sign(_mm256_min_ps(r, _mm256_set1_ps(1.0f)), x);
}

static inline __m256 tanh8(__m256 x) {
    static const float ps[] = KILN_TANH_SMALL_P;
    __m256 a = _mm256_min_ps(abs8(x), _mm256_set1_ps(KILN_TANH_CLAMP));
    __m256 small = _mm256_mul_ps(x, horner8(ps, KILN_TANH_SMALL_NP, _mm256_mul_ps(x, x)));
    __m256 e = exp8(_mm256_add_ps(a, a));
    __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    return _mm256_blendv_ps(with_sign(big, x), small, _mm256_cmp_ps(a, _mm256_set1_ps(KILN_TANH_SMALL), _CMP_LT_OQ));
}

#endif
