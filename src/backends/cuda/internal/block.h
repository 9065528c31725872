/* What the CUDA backend's kernels share (included by *.cu only): grid-stride
 * loops, the grad = None write, and reductions over one block of RT threads
 * in a fixed tree order (the same bits run after run; doubles for sums). */
#ifndef KILN_BACKEND_CUDA_BLOCK_H
#define KILN_BACKEND_CUDA_BLOCK_H

#define RT 256     /* threads of a block that reduces */
#define THREADS 256 /* threads of a block of a grid-stride loop */

/* a loop over a register array unrolled, so that constant indices keep it in registers (nvcc) */
#if defined(KILN_SIMT)
#define KILN_UNROLL
#else
#define KILN_UNROLL _Pragma("unroll")
#endif

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

/* Column sums over rows, coalesced and on every SM (rows.cu's bias sums, layer norm's dw and db): stage one,
 * block (bx, by) of CT x CR threads, sums chunk `by` of the rows for CT consecutive columns (a warp reads CT
 * consecutive floats of a row) into the backend's partial sums (kiln_cuda_parts_dev); stage two adds the
 * chunks in order. A fixed order: the same bits run after run and on any GPU. Columns go in slices of
 * `width` when the partial sums cannot hold them all. */
#define CT 32
#define CR 8
typedef struct {
    int64_t chunks, chunk, width;
} col_split;
static inline col_split col_split_of(int64_t rows, int nv) {
    col_split s;
    s.chunks = (rows + 255) / 256; /* at least 256 rows a chunk, at most 64 chunks */
    if (s.chunks > 64) s.chunks = 64;
    if (s.chunks < 1) s.chunks = 1;
    s.chunk = (rows + s.chunks - 1) / s.chunks;
    s.width = KILN_CUDA_PARTS / (s.chunks * nv);
    return s;
}

#endif
