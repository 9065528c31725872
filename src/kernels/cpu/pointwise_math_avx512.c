/* AVX-512 erf, tanh and erf's backward: 16 lanes, both branches of each
 * formula computed and blended, the tail through masked loads and stores.
 * The formulas are pointwise_math.h's. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/pointwise_math_avx512.h"

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
