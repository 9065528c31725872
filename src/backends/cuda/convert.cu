// fp32 to bf16 or fp16 (round to nearest even, as cuda_bf16.h and
// cuda_fp16.h round), two elements a thread: the 16-bit operands linear.c
// gives cuBLASLt under KILN_CUDA_GEMM=half. Reference: the cpu's own rounding
// (src/backends/cpu/precision.c), checked on simt by test_simt.
#include <string.h>
#include "backends/cuda/internal/cuda.h"
#include "backends/cuda/internal/block.h"
#include "backends/cuda/internal/mma.h"

template <class E> __global__ void k_to_half(int64_t n, const float *x, unsigned char *y) {
    int64_t pairs = n / 2;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i <= pairs; i += (int64_t)gridDim.x * blockDim.x) {
        if (i < pairs) {
            st32(y + 4 * i, pack2(E(), x[2 * i], x[2 * i + 1]));
        } else if (n % 2) { /* the odd last element alone: 16 bits, past it nothing written */
            unsigned short h = (unsigned short)pack2(E(), x[n - 1], 0.f);
            memcpy(y + 2 * (n - 1), &h, 2);
        }
    }
}

extern "C" void kiln_cuda_to_half(kcs st, int f16, int64_t n, const float *x, void *y) {
    if (f16) KLAUNCH(k_to_half<fp16>, GO(n / 2 + 1))(n, x, (unsigned char *)y);
    else KLAUNCH(k_to_half<bf16>, GO(n / 2 + 1))(n, x, (unsigned char *)y);
}
