/* AVX-512 dropout: Philox4x32-10 for 16 consecutive counters at once, the
 * 4x16 output words transposed into element order, then a masked scale. */
#include <immintrin.h>
#include "kernels/cpu/cpu_internal.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* high 32 bits of the 32x32 products, 16 lanes: even lanes and odd lanes separately */
static inline __m512i mulhi32(__m512i a, __m512i m) {
    __m512i even = _mm512_srli_epi64(_mm512_mul_epu32(a, m), 32);
    __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
    return _mm512_mask_blend_epi32(0xAAAA, even, odd);
}

/* 64 elements from block b (groups first_group + 16 b ...) */
static inline void block(int64_t first_group, int64_t b, float scale, uint32_t thr, uint64_t key, uint64_t counter,
                         const float *x, float *y, int add) {
    const __m512i m0 = _mm512_set1_epi32((int)PHILOX_M0), m1 = _mm512_set1_epi32((int)PHILOX_M1);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i vthr = _mm512_set1_epi32((int)thr);
    const __m512 vscale = _mm512_set1_ps(scale);
    {
        /* group g = 16b + lane; ctr_lo = g (c0 low, c1 high word), ctr_hi = counter */
        uint64_t g0 = (uint64_t)(first_group + b * 16);
        __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)g0), lane);
        __m512i c1 = _mm512_set1_epi32((int)(uint32_t)(g0 >> 32)); /* g0 is a multiple of 16 (first_group too): no carry */
        __m512i c2 = _mm512_set1_epi32((int)(uint32_t)counter), c3 = _mm512_set1_epi32((int)(uint32_t)(counter >> 32));
        uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
        for (int r = 0; r < 10; r++) {
            __m512i hi0 = mulhi32(c0, m0), lo0 = _mm512_mullo_epi32(c0, m0);
            __m512i hi1 = mulhi32(c2, m1), lo1 = _mm512_mullo_epi32(c2, m1);
            c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int)k0));
            c1 = lo1;
            c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int)k1));
            c3 = lo0;
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        /* 4x4 transpose inside each 128-bit lane: t_j lane k = words of group 4k+j */
        __m512i a0 = _mm512_unpacklo_epi32(c0, c1), a1 = _mm512_unpackhi_epi32(c0, c1);
        __m512i a2 = _mm512_unpacklo_epi32(c2, c3), a3 = _mm512_unpackhi_epi32(c2, c3);
        __m512i t0 = _mm512_unpacklo_epi64(a0, a2), t1 = _mm512_unpackhi_epi64(a0, a2);
        __m512i t2 = _mm512_unpacklo_epi64(a1, a3), t3 = _mm512_unpackhi_epi64(a1, a3);
        /* then a 4x4 transpose of 128-bit lanes: out_m = groups 4m..4m+3 in element order */
        __m512i u0 = _mm512_shuffle_i32x4(t0, t1, 0x44), u1 = _mm512_shuffle_i32x4(t0, t1, 0xEE);
        __m512i u2 = _mm512_shuffle_i32x4(t2, t3, 0x44), u3 = _mm512_shuffle_i32x4(t2, t3, 0xEE);
        __m512i w[4] = {_mm512_shuffle_i32x4(u0, u2, 0x88), _mm512_shuffle_i32x4(u0, u2, 0xDD),
                        _mm512_shuffle_i32x4(u1, u3, 0x88), _mm512_shuffle_i32x4(u1, u3, 0xDD)};
        for (int m = 0; m < 4; m++) {
            int64_t at = b * 64 + m * 16;
            __mmask16 keep = _mm512_cmp_epu32_mask(w[m], vthr, _MM_CMPINT_NLT);
            __m512 v = _mm512_maskz_mul_ps(keep, _mm512_loadu_ps(x + at), vscale);
            if (add) v = _mm512_add_ps(_mm512_loadu_ps(y + at), v);
            _mm512_storeu_ps(y + at, v);
        }
    }
}

void kiln_cpu_dropout_blocks_avx512(int64_t first_group, int64_t blocks, float scale, uint32_t thr, uint64_t key, uint64_t counter,
                                    const float *x, float *y, int add, int parallel) {
    if (!parallel) { /* inside a fused kernel's region: no team of its own */
        for (int64_t b = 0; b < blocks; b++) block(first_group, b, scale, thr, key, counter, x, y, add);
        return;
    }
#pragma omp parallel for schedule(static) if (blocks >= KILN_CPU_PAR_MIN / 512)
    for (int64_t b = 0; b < blocks; b++) block(first_group, b, scale, thr, key, counter, x, y, add);
}
