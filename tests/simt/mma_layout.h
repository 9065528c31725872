/* One check of PTX's mma.sync m16n8k16 (bf16 and fp16 operands, fp32
 * accumulators) and __shfl_xor_sync, through the wrappers flash_mma.cu uses
 * (src/backends/cuda/internal/mma.h), for two builds: test_simt runs it on
 * simt's stand-ins, test_mma_gpu on a GPU. So the layout simt emulates is
 * the layout the GPU has: what test_attention_tc's mma checks on simt mean
 * on a GPU rests on this. Each lane builds its fragments from A and B by the
 * ISA text's formulas (written here apart from simt.cpp's and mma.h's), and
 * each lane's C elements must be A B + C; values with few bits, so every
 * sum is exact. Two warps, so the lanes of each are told apart from the
 * other's; the shuffle: each lane gets its xor partner's value. */
#ifndef KILN_TESTS_MMA_LAYOUT_H
#define KILN_TESTS_MMA_LAYOUT_H

#include "backends/cuda/internal/cuda.h"
#include "backends/cuda/internal/mma.h"

enum { MMA_THREADS = 64, MMA_C = 2 * 128 };

__device__ inline uint16_t mma_bits(bf16, float v) { return __bfloat16_as_ushort(__float2bfloat16(v)); }
__device__ inline uint16_t mma_bits(fp16, float v) { return __half_as_ushort(__float2half(v)); }

/* a: 16 x 16 row-major, b: 16 x 8 row-major; c: each warp's 16 x 8 */
template <class E> __global__ void k_mma_layout(const float *a_, const float *b_, float *c, float *shfl) {
    unsigned lane = threadIdx.x % 32, w = threadIdx.x / 32, g = lane >> 2, t = lane % 4;
    uint32_t a[4], b[2];
    for (int r = 0; r < 4; r++) { /* register r: elements 2r (low) and 2r + 1 (high) */
        uint32_t pa = 0, pb = 0;
        for (int hi = 0; hi < 2; hi++) {
            int i = 2 * r + hi; /* a_i: row g for i < 2 or 4 <= i < 6, else g + 8; column 2t + (i & 1), + 8 for i >= 4 */
            int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8, col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
            pa |= (uint32_t)mma_bits(E(), a_[row * 16 + col] * (float)(w + 1)) << (16 * hi);
            if (r < 2) { /* b_i: row 2t + (i & 1), + 8 for i >= 2; column g */
                int brow = 2 * t + (i & 1) + (i >= 2 ? 8 : 0);
                pb |= (uint32_t)mma_bits(E(), b_[brow * 8 + g]) << (16 * hi);
            }
        }
        a[r] = pa;
        if (r < 2) b[r] = pb;
    }
    float acc[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    mma16816<E>(acc, a, b);
    for (int i = 0; i < 4; i++) /* c_i: row g for i < 2, else g + 8; column 2t + (i & 1) */
        c[w * 128 + (g + (i >= 2 ? 8 : 0)) * 8 + 2 * t + (i & 1)] = acc[i];
    shfl[threadIdx.x] = shfl_xor((float)threadIdx.x, 5);
}

static inline unsigned mma_rnd(uint64_t *s) {
    return (unsigned)((*s = *s * 6364136223846793005ull + 1442695040888963407ull) >> 33);
}
/* A and B of few bits: quarters in [-1, 1], halves in [-1.5, 1.5] */
static inline void mma_layout_data(float a[256], float b[128]) {
    uint64_t seed = 77;
    for (int i = 0; i < 256; i++) a[i] = (float)((int)(mma_rnd(&seed) % 9) - 4) / 4;
    for (int i = 0; i < 128; i++) b[i] = (float)((int)(mma_rnd(&seed) % 7) - 3) / 2;
}
/* the elements of c that are not A B + C, and (in *bad_shfl) the lanes without their partner's value */
static inline int mma_layout_bad(const float a[256], const float b[128], const float c[MMA_C], const float shfl[MMA_THREADS],
                                 int *bad_shfl) {
    int bad = 0;
    for (int w = 0; w < 2; w++)
        for (int r = 0; r < 16; r++)
            for (int n = 0; n < 8; n++) {
                float want = 0.5f;
                for (int k = 0; k < 16; k++) want += a[r * 16 + k] * (float)(w + 1) * b[k * 8 + n];
                bad += c[w * 128 + r * 8 + n] != want;
            }
    *bad_shfl = 0;
    for (int i = 0; i < MMA_THREADS; i++) *bad_shfl += shfl[i] != (float)(i ^ 5);
    return bad;
}

#endif
