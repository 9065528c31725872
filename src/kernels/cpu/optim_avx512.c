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

/* x*x of 16 floats added into two double accumulators (low and high 8 lanes) */
static inline void sumsq_pd(__m512 x, __m512d *lo, __m512d *hi) {
    __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    __m512d b = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    *lo = _mm512_add_pd(*lo, _mm512_mul_pd(a, a));
    *hi = _mm512_add_pd(*hi, _mm512_mul_pd(b, b));
}

/* LAMB's update (m / bc1) / (sqrt(v / bc2) + eps) + wd * p, as lamb_u in optim_layerwise.c */
static inline __m512 lamb_u16(__m512 m, __m512 v, __m512 p, const kiln_cpu_lamb_consts *c) {
    __m512 den = _mm512_add_ps(_mm512_sqrt_ps(_mm512_div_ps(v, _mm512_set1_ps(c->bc2))), _mm512_set1_ps(c->eps));
    return _mm512_add_ps(_mm512_div_ps(_mm512_div_ps(m, _mm512_set1_ps(c->bc1)), den), _mm512_mul_ps(_mm512_set1_ps(c->wd), p));
}

void kiln_cpu_lamb_moments_avx512(int64_t n, float *m, float *v, const float *g, const float *p, const kiln_cpu_lamb_consts *c,
                                  double acc[2]) {
    const __m512 vb1 = _mm512_set1_ps(c->b1), vb1c = _mm512_set1_ps(1.0f - c->b1);
    const __m512 vb2 = _mm512_set1_ps(c->b2), vb2c = _mm512_set1_ps(1.0f - c->b2);
    __m512d sp0 = _mm512_setzero_pd(), sp1 = sp0, su0 = sp0, su1 = sp0;
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n, i);
        __m512 vg = _mm512_maskz_loadu_ps(k, g + i), vp = _mm512_maskz_loadu_ps(k, p + i);
        __m512 vm = _mm512_add_ps(_mm512_mul_ps(vb1, _mm512_maskz_loadu_ps(k, m + i)), _mm512_mul_ps(vb1c, vg));
        __m512 vv = _mm512_add_ps(_mm512_mul_ps(vb2, _mm512_maskz_loadu_ps(k, v + i)),
                                  _mm512_mul_ps(_mm512_mul_ps(vb2c, vg), vg));
        _mm512_mask_storeu_ps(m + i, k, vm);
        _mm512_mask_storeu_ps(v + i, k, vv);
        __m512 u = _mm512_maskz_mov_ps(k, lamb_u16(vm, vv, vp, c)); /* masked lanes: 0 / eps, kept out of the sum */
        sumsq_pd(vp, &sp0, &sp1);
        sumsq_pd(u, &su0, &su1);
    }
    acc[0] = _mm512_reduce_add_pd(_mm512_add_pd(sp0, sp1));
    acc[1] = _mm512_reduce_add_pd(_mm512_add_pd(su0, su1));
}

void kiln_cpu_lamb_apply_avx512(int64_t n, float *p, const float *m, const float *v, const kiln_cpu_lamb_consts *c, float step) {
    const __m512 vstep = _mm512_set1_ps(step);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n, i);
        __m512 vp = _mm512_maskz_loadu_ps(k, p + i);
        __m512 u = lamb_u16(_mm512_maskz_loadu_ps(k, m + i), _mm512_maskz_loadu_ps(k, v + i), vp, c);
        _mm512_mask_storeu_ps(p + i, k, _mm512_sub_ps(vp, _mm512_mul_ps(vstep, u)));
    }
}
