/* The warp's register-tile matrix product for flash_mma.cu (included by *.cu
 * only): PTX's mma.sync m16n8k16 with bf16 or fp16 operands and fp32
 * accumulators, the quad shuffles a softmax's rows need, and 32-bit moves of
 * two 16-bit elements. Unlike wmma (flash_tc.cu) the fragments' layout is
 * specified (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
 * type"), so a kernel works on its scores in registers. Lane 4 g + t holds
 *   A, 16 x 16: a[0] row g, columns 2t and 2t + 1; a[1] row g + 8, the same
 *     columns; a[2], a[3] the same rows, columns 2t + 8 and 2t + 9;
 *   B, 16 x 8: b[0] rows 2t, 2t + 1 of column g; b[1] rows 2t + 8, 2t + 9;
 *   C, 16 x 8 in fp32: c[0], c[1] row g, columns 2t, 2t + 1; c[2], c[3] row g + 8;
 * the lower column (or row) of a pair in the register's low half. So the
 * four lanes of a quad hold a row between them, and C's fragments of two
 * neighbouring 8-column tiles are, packed, A's fragment of their 16 columns.
 * Built with KILN_SIMT, simt's stand-ins (tests/simt/simt.cpp) compute the
 * same from every lane's registers, in this layout. */
#ifndef KILN_BACKEND_CUDA_MMA_H
#define KILN_BACKEND_CUDA_MMA_H

#include "backends/cuda/internal/block.h"
#include "backends/cuda/internal/tc_elem.h"

#if defined(KILN_SIMT)
#include <string.h>
#define __launch_bounds__(n)
template <class E> struct is_fp16 { enum { value = 0 }; };
template <> struct is_fp16<fp16> { enum { value = 1 }; };
template <class E> __device__ inline void mma16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    kiln_simt_mma16816(c, a, b, is_fp16<E>::value);
}
__device__ inline float shfl_xor(float v, int mask) { return kiln_simt_shfl_xor(v, mask); }
__device__ inline uint32_t ld32(const void *p) {
    uint32_t u;
    memcpy(&u, p, 4);
    return u;
}
__device__ inline void st32(void *p, uint32_t u) { memcpy(p, &u, 4); }
#else
template <class E> __device__ inline void mma16816(float c[4], const uint32_t a[4], const uint32_t b[2]);
template <> __device__ inline void mma16816<bf16>(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <> __device__ inline void mma16816<fp16>(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ inline float shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
__device__ inline uint32_t ld32(const void *p) { return *(const uint32_t *)p; }
__device__ inline void st32(void *p, uint32_t u) { *(uint32_t *)p = u; }
#endif

/* two values rounded to E, lo in the low half */
__device__ inline uint32_t pack2(bf16, float lo, float hi) {
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16(lo)) | (uint32_t)__bfloat16_as_ushort(__float2bfloat16(hi)) << 16;
}
__device__ inline uint32_t pack2(fp16, float lo, float hi) {
    return (uint32_t)__half_as_ushort(__float2half(lo)) | (uint32_t)__half_as_ushort(__float2half(hi)) << 16;
}

#endif
