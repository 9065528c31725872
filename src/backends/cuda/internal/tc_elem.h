/* The tensor-core attention kernels' operand types (flash_tc.cu, flash_mma.cu;
 * included by *.cu only): K = ND + 16 * fp16 names a kernel's head width
 * (ND * 16) and its operands (bf16, or fp16 under --precision fp16) in one
 * template argument, so launches take no comma; K_SWITCH picks the kernel of
 * a head width at run time. */
#ifndef KILN_BACKEND_CUDA_TC_ELEM_H
#define KILN_BACKEND_CUDA_TC_ELEM_H

#include "backends/cuda/internal/tensor_core.h"

typedef __nv_bfloat16 bf16;
typedef __half fp16;
template <int K> struct elem_of { typedef bf16 type; };
template <> struct elem_of<1> { typedef fp16 type; };
#define ELEM(K) typename elem_of<(K) / 16>::type
__device__ inline void put(bf16 *p, float v) { *p = __float2bfloat16(v); }
__device__ inline void put(fp16 *p, float v) { *p = __float2half(v); }

/* the kernel of head width d (a multiple of 16 up to 128) and operands fp16 (1) or bf16 (0): K = d / 16 + 16 fp16 */
#define K_SWITCH(d, fp16, CALL)                                                                                    \
    switch ((int)((d) / 16 + 16 * (fp16))) {                                                                       \
    case 1: CALL(1); break;                                                                                        \
    case 2: CALL(2); break;                                                                                        \
    case 3: CALL(3); break;                                                                                        \
    case 4: CALL(4); break;                                                                                        \
    case 5: CALL(5); break;                                                                                        \
    case 6: CALL(6); break;                                                                                        \
    case 7: CALL(7); break;                                                                                        \
    case 8: CALL(8); break;                                                                                        \
    case 17: CALL(17); break;                                                                                      \
    case 18: CALL(18); break;                                                                                      \
    case 19: CALL(19); break;                                                                                      \
    case 20: CALL(20); break;                                                                                      \
    case 21: CALL(21); break;                                                                                      \
    case 22: CALL(22); break;                                                                                      \
    case 23: CALL(23); break;                                                                                      \
    default: CALL(24); break;                                                                                      \
    }

#endif
