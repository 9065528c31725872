/* Tensor cores for kiln's own kernels (included by *.cu only): CUDA's warp
 * matrix operations (mma.h, nvcuda::wmma) on bf16 and fp16 (cuda_bf16.h,
 * cuda_fp16.h), and the
 * block's dynamic shared memory (KILN_DYN_SHARED(type, name): a pointer to
 * the launch's shared bytes, 128-byte aligned). Built with KILN_SIMT, simt's
 * host stand-ins (internal/simt_wmma.h). */
#ifndef KILN_BACKEND_CUDA_TENSOR_CORE_H
#define KILN_BACKEND_CUDA_TENSOR_CORE_H

#if defined(KILN_SIMT)
#include "backends/cuda/internal/simt_wmma.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#define KILN_DYN_SHARED(type, name)                                  \
    extern __shared__ __align__(128) unsigned char kiln_dyn_shared[]; \
    type *name = (type *)kiln_dyn_shared
#endif

#endif
