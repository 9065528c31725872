/* erf, tanh and exp on 16 float lanes (pointwise_math.h's formulas), inline:
 * for the whole-tensor loops (pointwise_math_avx512.c) and the fused kernel's
 * vector passes (pointwise_vec_avx512.c), which must give the same bits.
 * Include only from *_avx512.c files (built with AVX-512 enabled). */
#ifndef KILN_KERNELS_CPU_POINTWISE_MATH_AVX512_H
#define KILN_KERNELS_CPU_POINTWISE_MATH_AVX512_H

#include <immintrin.h>
#include "kernels/cpu/pointwise_math.h"

static inline __m512 horner16(const float *c, int n, __m512 x) {
    __m512 r = _mm512_set1_ps(c[0]);
#pragma GCC unroll 16
    for (int i = 1; i < n; i++) r = _mm512_fmadd_ps(r, x, _mm512_set1_ps(c[i]));
    return r;
}

static inline __m512 exp16(__m512 x) {
    static const float p[] = KILN_EXP_P;
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(KILN_EXP_LO)), _mm512_set1_ps(KILN_EXP_HI));
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(KILN_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(KILN_LN2_HI), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(KILN_LN2_LO), r);
    return _mm512_scalef_ps(horner16(p, KILN_EXP_NP, r), k);
}

static inline __m512 abs16(__m512 x) { return _mm512_abs_ps(x); }
static inline __m512 with_sign(__m512 mag, __m512 x) {
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(mag), _mm512_and_si512(_mm512_castps_si512(x), sign)));
}

/* the piece's coefficients are lanes of two registers: vpermt2ps picks them by
 * round(u)'s low five bits, read straight from u + 1.5 * 2^23 */
static inline __m512 erf16(__m512 x) {
    static const float c[KILN_ERF_NP][KILN_ERF_PIECES] = KILN_ERF_TAB;
    __m512 u = _mm512_min_ps(_mm512_mul_ps(abs16(x), _mm512_set1_ps((float)(KILN_ERF_PIECES / 4))),
                             _mm512_set1_ps(KILN_ERF_UMAX));
    __m512 kr = _mm512_add_ps(u, _mm512_set1_ps(KILN_ERF_ROUND));
    __m512i i = _mm512_castps_si512(kr);
    /* u - round(u), exact: vreduceps in one instruction where two subtractions gave the same bits */
    __m512 t = _mm512_reduce_ps(u, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_permutex2var_ps(_mm512_loadu_ps(c[KILN_ERF_NP - 1]), i, _mm512_loadu_ps(c[KILN_ERF_NP - 1] + 16));
#pragma GCC unroll 8
    for (int j = KILN_ERF_NP - 2; j >= 0; j--)
        r = _mm512_fmadd_ps(r, t, _mm512_permutex2var_ps(_mm512_loadu_ps(c[j]), i, _mm512_loadu_ps(c[j] + 16)));
    return with_sign(_mm512_min_ps(r, _mm512_set1_ps(1.0f)), x);
}

static inline __m512 tanh16(__m512 x) {
    static const float ps[] = KILN_TANH_SMALL_P;
    __m512 a = _mm512_min_ps(abs16(x), _mm512_set1_ps(KILN_TANH_CLAMP));
    __m512 small = _mm512_mul_ps(x, horner16(ps, KILN_TANH_SMALL_NP, _mm512_mul_ps(x, x)));
    __m512 e = exp16(_mm512_add_ps(a, a));
    __m512 big = _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
    __mmask16 lt = _mm512_cmp_ps_mask(a, _mm512_set1_ps(KILN_TANH_SMALL), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(lt, with_sign(big, x), small);
}

#endif
