/* AVX2 dropout (CPUs without AVX-512, such as AMD Zen 3): Philox4x32-10 for
 * 8 consecutive counters at once, the 4x8 output words transposed into element
 * order, then a masked scale; bit-identical to the portable path and to
 * dropout_avx512.c, which it follows at half the width. */
#include <immintrin.h>
#include "kernels/cpu/cpu_internal.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* high 32 bits of the 32x32 products, 8 lanes: even lanes and odd lanes separately */
static inline __m256i mulhi32(__m256i a, __m256i m) {
    __m256i even = _mm256_srli_epi64(_mm256_mul_epu32(a, m), 32);
    __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
    return _mm256_blend_epi32(even, odd, 0xAA);
}

/* the Philox words of groups g0 .. g0 + 7 (g0 a multiple of 8): w[j] lane k = word j of group g0 + k */
static inline void philox8(uint64_t g0, uint64_t key, uint64_t counter, __m256i w[4]) {
    const __m256i m0 = _mm256_set1_epi32((int)PHILOX_M0), m1 = _mm256_set1_epi32((int)PHILOX_M1);
    __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)g0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i c1 = _mm256_set1_epi32((int)(uint32_t)(g0 >> 32)); /* g0 % 8 == 0: no carry into the high word */
    __m256i c2 = _mm256_set1_epi32((int)(uint32_t)counter), c3 = _mm256_set1_epi32((int)(uint32_t)(counter >> 32));
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        __m256i hi0 = mulhi32(c0, m0), lo0 = _mm256_mullo_epi32(c0, m0);
        __m256i hi1 = mulhi32(c2, m1), lo1 = _mm256_mullo_epi32(c2, m1);
        c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
        c1 = lo1;
        c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    w[0] = c0, w[1] = c1, w[2] = c2, w[3] = c3;
}

/* 32 elements from block b (groups first_group + 8 b ...) */
static inline void block(int64_t first_group, int64_t b, float scale, uint32_t thr, uint64_t key, uint64_t counter,
                         const float *x, float *y, int add) {
    __m256i c[4];
    philox8((uint64_t)(first_group + b * 8), key, counter, c);
    /* 4x4 transpose inside each 128-bit lane: t_j's lane L holds group 4L + j's four words */
    __m256i a0 = _mm256_unpacklo_epi32(c[0], c[1]), a1 = _mm256_unpackhi_epi32(c[0], c[1]);
    __m256i a2 = _mm256_unpacklo_epi32(c[2], c[3]), a3 = _mm256_unpackhi_epi32(c[2], c[3]);
    __m256i t0 = _mm256_unpacklo_epi64(a0, a2), t1 = _mm256_unpackhi_epi64(a0, a2);
    __m256i t2 = _mm256_unpacklo_epi64(a1, a3), t3 = _mm256_unpackhi_epi64(a1, a3);
    /* element order: groups 0-1, 2-3 (low lanes), then 4-5, 6-7 (high lanes) */
    __m256i w[4] = {_mm256_permute2x128_si256(t0, t1, 0x20), _mm256_permute2x128_si256(t2, t3, 0x20),
                    _mm256_permute2x128_si256(t0, t1, 0x31), _mm256_permute2x128_si256(t2, t3, 0x31)};
    const __m256i vthr = _mm256_set1_epi32((int)thr);
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int m = 0; m < 4; m++) {
        int64_t at = b * 32 + m * 8;
        __m256i keep = _mm256_cmpeq_epi32(_mm256_max_epu32(w[m], vthr), w[m]); /* w >= thr, unsigned */
        __m256 v = _mm256_and_ps(_mm256_castsi256_ps(keep), _mm256_mul_ps(_mm256_loadu_ps(x + at), vscale));
        if (add) v = _mm256_add_ps(_mm256_loadu_ps(y + at), v);
        _mm256_storeu_ps(y + at, v);
    }
}

void kiln_cpu_dropout_blocks_avx2(int64_t first_group, int64_t blocks, float scale, uint32_t thr, uint64_t key, uint64_t counter,
                                  const float *x, float *y, int add, int parallel) {
    if (!parallel) { /* inside a fused kernel's region: no team of its own */
        for (int64_t b = 0; b < blocks; b++) block(first_group, b, scale, thr, key, counter, x, y, add);
        return;
    }
#pragma omp parallel for schedule(static) if (blocks >= KILN_CPU_PAR_MIN / 256)
    for (int64_t b = 0; b < blocks; b++) block(first_group, b, scale, thr, key, counter, x, y, add);
}
