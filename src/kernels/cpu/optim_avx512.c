/* AVX-512 fused optimizer steps. Every operation mirrors the portable loop in
 * optim.c (no FMA: ISO C does not contract there either), so both paths give
 * the same bits. 16-float blocks; the tail uses masked loads and stores. */
#include <immintrin.h>
#include "kernels/cpu/cpu_internal.h"

static inline __mmask16 tail_mask(int64_t n, int64_t i) {
    int64_t left = n - i;
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

void kiln_cpu_adadelta_avx512(int64_t n, float *p, const float *g, float *square_avg, float *acc_delta, float lr,
                              float rho, float eps, float weight_decay) {
    const __m512 vrho = _mm512_set1_ps(rho), vrho1 = _mm512_set1_ps(1.0f - rho), veps = _mm512_set1_ps(eps);
    const __m512 vlr = _mm512_set1_ps(lr), vwd = _mm512_set1_ps(weight_decay);
    int64_t blocks = (n + 15) / 16;
#pragma omp parallel for schedule(static) if (n >= KILN_CPU_PAR_MIN)
    for (int64_t b = 0; b < blocks; b++) {
        int64_t i = b * 16;
        __mmask16 k = tail_mask(n, i);
        __m512 vp = _mm512_maskz_loadu_ps(k, p + i), vg = _mm512_maskz_loadu_ps(k, g + i);
        __m512 vsa = _mm512_maskz_loadu_ps(k, square_avg + i), vad = _mm512_maskz_loadu_ps(k, acc_delta + i);
        __m512 d = _mm512_add_ps(vg, _mm512_mul_ps(vwd, vp));
        vsa = _mm512_add_ps(_mm512_mul_ps(vrho, vsa), _mm512_mul_ps(_mm512_mul_ps(vrho1, d), d));
        __m512 delta = _mm512_mul_ps(_mm512_div_ps(_mm512_sqrt_ps(_mm512_add_ps(vad, veps)),
                                                   _mm512_sqrt_ps(_mm512_add_ps(vsa, veps))), d);
        vad = _mm512_add_ps(_mm512_mul_ps(vrho, vad), _mm512_mul_ps(_mm512_mul_ps(vrho1, delta), delta));
        vp = _mm512_sub_ps(vp, _mm512_mul_ps(vlr, delta));
        _mm512_mask_storeu_ps(square_avg + i, k, vsa);
        _mm512_mask_storeu_ps(acc_delta + i, k, vad);
        _mm512_mask_storeu_ps(p + i, k, vp);
    }
}

void kiln_cpu_adamw_avx512(int64_t n, float *p, const float *g, float *m, float *v, float decay, float beta1,
                           float beta2, float eps, float step_size, float bc2_sqrt) {
    const __m512 vb1 = _mm512_set1_ps(beta1), vb1c = _mm512_set1_ps(1.0f - beta1);
    const __m512 vb2 = _mm512_set1_ps(beta2), vb2c = _mm512_set1_ps(1.0f - beta2);
    const __m512 veps = _mm512_set1_ps(eps), vdecay = _mm512_set1_ps(decay), vstep = _mm512_set1_ps(step_size);
    const __m512 vbc2 = _mm512_set1_ps(bc2_sqrt);
    int64_t blocks = (n + 15) / 16;
#pragma omp parallel for schedule(static) if (n >= KILN_CPU_PAR_MIN)
    for (int64_t b = 0; b < blocks; b++) {
        int64_t i = b * 16;
        __mmask16 k = tail_mask(n, i);
        __m512 vg = _mm512_maskz_loadu_ps(k, g + i), vp = _mm512_maskz_loadu_ps(k, p + i);
        __m512 vm = _mm512_add_ps(_mm512_mul_ps(vb1, _mm512_maskz_loadu_ps(k, m + i)), _mm512_mul_ps(vb1c, vg));
        __m512 vv = _mm512_add_ps(_mm512_mul_ps(vb2, _mm512_maskz_loadu_ps(k, v + i)),
                                  _mm512_mul_ps(_mm512_mul_ps(vb2c, vg), vg));
        __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vv), vbc2), veps);
        vp = _mm512_sub_ps(_mm512_mul_ps(vp, vdecay), _mm512_div_ps(_mm512_mul_ps(vstep, vm), denom));
        _mm512_mask_storeu_ps(m + i, k, vm);
        _mm512_mask_storeu_ps(v + i, k, vv);
        _mm512_mask_storeu_ps(p + i, k, vp);
    }
}
