/* Outputs the half-storage pass may store in 16 bits (src/graph/pass_half_store.c; included by *.cu only): a
 * kernel writing one takes its pointer untyped and a kind, 0 fp32, 1 bf16, 2 fp16 (kiln_cuda_half_kind of the
 * step's tensor), and rounds to nearest even as cuda_bf16.h and cuda_fp16.h round: as the matmul reading it
 * would have rounded an fp32 value. The kind is one per launch, so the branch costs the warp nothing. */
#ifndef KILN_BACKEND_CUDA_HALF_OUT_H
#define KILN_BACKEND_CUDA_HALF_OUT_H

#include "backends/cuda/internal/tensor_core.h"

/* element i of an input stored as kind */
__device__ inline float get_kind(const void *p, int kind, int64_t i) {
    if (kind == 1) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (kind == 2) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}
/* v rounded to kind's precision (0: unchanged), as a 16-bit operand would be */
__device__ inline float round_kind(float v, int kind) {
    if (kind == 1) return __bfloat162float(__float2bfloat16(v));
    if (kind == 2) return __half2float(__float2half(v));
    return v;
}
__device__ inline void put_kind(void *p, int kind, int64_t i, float v) {
    if (kind == 1) ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
    else if (kind == 2) ((__half *)p)[i] = __float2half(v);
    else ((float *)p)[i] = v;
}
/* element i written in its kind, or added to where the step accumulates (then fp32: the pass never stores an
 * accumulated output in 16 bits) */
__device__ inline void put_or_add(void *p, int kind, int64_t i, float v, int acc) {
    if (acc) ((float *)p)[i] += v;
    else put_kind(p, kind, i, v);
}

#endif
