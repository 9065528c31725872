// PTX's mma.sync m16n8k16 and __shfl_xor_sync on the GPU, through the wrappers flash_mma.cu uses: the same
// check test_simt runs on simt's stand-ins (tests/simt/mma_layout.h), so a pass of both says simt emulates
// the layout the GPU has. Exits 77 ("skipped") without a GPU.
#include <stdio.h>
#include <cuda_runtime.h>
#include "mma_layout.h"

#define CU(call)                                                                       \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "test_mma_gpu: %s: %s\n", #call, cudaGetErrorString(e_)); \
            return -1;                                                                 \
        }                                                                              \
    } while (0)

/* the bad elements and lanes of one launch, or -1 on a CUDA error */
template <class E> static int run(const char *name) {
    float a[256], b[128], c[MMA_C], shfl[MMA_THREADS], *d = NULL;
    mma_layout_data(a, b);
    CU(cudaMalloc(&d, sizeof a + sizeof b + sizeof c + sizeof shfl));
    CU(cudaMemcpy(d, a, sizeof a, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(d + 256, b, sizeof b, cudaMemcpyHostToDevice));
    k_mma_layout<E><<<1, MMA_THREADS>>>(d, d + 256, d + 384, d + 384 + MMA_C);
    CU(cudaGetLastError());
    CU(cudaMemcpy(c, d + 384, sizeof c, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(shfl, d + 384 + MMA_C, sizeof shfl, cudaMemcpyDeviceToHost));
    CU(cudaFree(d));
    int bad_shfl, bad = mma_layout_bad(a, b, c, shfl, &bad_shfl);
    printf("test_mma_gpu: mma.sync m16n8k16 %s: %d of 256 elements not A B + C; __shfl_xor_sync: %d of 64 lanes wrong\n",
           name, bad, bad_shfl);
    return bad + bad_shfl;
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("test_mma_gpu: skipped: no GPU\n");
        return 77;
    }
    int bf = run<bf16>("bf16"), hf = run<fp16>("fp16");
    if (bf < 0 || hf < 0) return 1;
    return bf + hf != 0;
}
