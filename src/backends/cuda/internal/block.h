/* What the CUDA backend's kernels share (included by *.cu only): grid-stride
 * loops, the grad = None write, and reductions over one block of RT threads
 * in a fixed tree order (the same bits run after run; doubles for sums). */
#ifndef KILN_BACKEND_CUDA_BLOCK_H
#define KILN_BACKEND_CUDA_BLOCK_H

#define RT 256     /* threads of a block that reduces */
#define THREADS 256 /* threads of a block of a grid-stride loop */

#define FOR_N for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
#define PUT(dst, v) ((dst) = acc ? (dst) + (v) : (v))

static inline unsigned blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    if (b > 65535LL * 8) b = 65535LL * 8;
    return (unsigned)(b < 1 ? 1 : b);
}
#define GO(n) blocks_for(n), THREADS, 0, st

/* the sum over a block of per-thread doubles; every thread gets it */
__device__ inline double block_sum(double v) {
    __shared__ double sh[RT];
    __syncthreads();
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = RT / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    return sh[0];
}

__device__ inline float block_max(float v) {
    __shared__ float sh[RT];
    __syncthreads();
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = RT / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    return sh[0];
}

#endif
