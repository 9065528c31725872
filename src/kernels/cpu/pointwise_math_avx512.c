/* AVX-512 erf, tanh and erf's backward: 16 lanes, both branches of each
 * formula computed and blended, the tail through masked loads and stores.
 * The formulas are pointwise_math.h's. */
#include <immintrin.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/pointwise_math.h"

static inline __m512 horner16(const float *c, int n, __m512 x) {
    __m512 r = _mm512_set1_ps(c[0]);
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
    __m512 t = _mm512_sub_ps(u, _mm512_sub_ps(kr, _mm512_set1_ps(KILN_ERF_ROUND)));
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

static inline __mmask16 tail(int64_t left) { return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1); }

/* whole vectors with plain loads and stores (masked ones cost a third more on
 * AMD's cores), the tail masked */
void kiln_cpu_erf_avx512(int64_t n, const float *x, float *y) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, erf16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = tail(n - i);
        _mm512_mask_storeu_ps(y + i, m, erf16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

void kiln_cpu_tanh_avx512(int64_t n, const float *x, float *y) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail(n - i);
        _mm512_mask_storeu_ps(y + i, m, tanh16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

void kiln_cpu_erf_bwd_avx512(int64_t n, const float *x, const float *dy, float *dx, int acc) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail(n - i);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(v, v)));
        __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dy + i), _mm512_mul_ps(_mm512_set1_ps(KILN_TWO_OVER_SQRTPI), e));
        if (acc) g = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dx + i), g);
        _mm512_mask_storeu_ps(dx + i, m, g);
    }
}
