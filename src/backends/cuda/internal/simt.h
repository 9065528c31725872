/* The CUDA thread model on the host, for tests (tests/simt/): the backend's
 * own *.cu files compile as plain C++ with this header, and each launch runs
 * every thread of its grid on the CPU, block after block. Threads of a block
 * that meet at __syncthreads() run as fibers (one stack each), round by
 * round, so shared-memory reductions see what they would on a GPU (threads
 * at different barriers, or ending while others wait, stop the launch);
 * kernels without a barrier run their threads as plain calls. Blocks, and threads
 * within a round, run in a shuffled order, new each launch, so a result
 * that depends on an order (a missing barrier, a block reading another's
 * output) fails its checks (tests/simt/test_simt.cpp). __shared__ becomes a
 * static: one copy, which the block running now owns, all bits set when it
 * starts. What it cannot show: timing, memory coalescing, truly concurrent
 * accesses (atomics racing). The warp-level operations kiln's kernels use
 * (wmma, mma.sync, __shfl_xor_sync) are internal/simt_wmma.h's, each a
 * barrier of the warp's lanes.
 * Never part of a kiln build that runs. */
#ifndef KILN_BACKEND_CUDA_SIMT_H
#define KILN_BACKEND_CUDA_SIMT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <functional>

#define __global__ static /* internal linkage: the GPU build of the same kernels links beside */
#define __device__ static
#define __host__
/* in one section, which simt fills with NaN (all bits set) before each block: a
 * kernel that reads shared memory it has not written in this block reads
 * garbage on a GPU and fails its checks here */
#define __shared__ static __attribute__((section("kiln_simt_shared")))
#define __forceinline__ inline

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
extern dim3 kiln_simt_thread, kiln_simt_block, kiln_simt_bdim, kiln_simt_gdim;
#define threadIdx kiln_simt_thread
#define blockIdx kiln_simt_block
#define blockDim kiln_simt_bdim
#define gridDim kiln_simt_gdim

/* a barrier knows its place in the source: threads of a block must wait at the same one */
void kiln_simt_sync(const char *file, int line);
#define __syncthreads() kiln_simt_sync(__FILE__, __LINE__)
/* a barrier of the calling thread's warp (its 32 lanes): __syncwarp and the wmma calls (internal/simt_wmma.h) */
void kiln_simt_sync_warp(const char *file, int line);
static inline int atomicCAS(int *p, int cmp, int val) {
    int old = *p; /* one thread runs at a time */
    if (old == cmp) *p = val;
    return old;
}
static inline int atomicAdd(int *p, int val) {
    int old = *p;
    *p = old + val;
    return old;
}
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }

/* runs body once per thread of the grid; shmem: the bytes of dynamic shared memory (internal/simt_wmma.h) */
void kiln_simt_run(dim3 grid, dim3 block, size_t shmem, const std::function<void()> &body);

template <class... P> struct kiln_simt_launcher {
    void (*k)(P...);
    dim3 grid, block;
    size_t shmem;
    template <class... A> void operator()(A... a) const {
        kiln_simt_run(grid, block, shmem, [&] { k(a...); });
    }
};
template <class... P>
kiln_simt_launcher<P...> kiln_simt_launch(void (*k)(P...), dim3 grid, dim3 block, size_t shmem = 0, const void *stream = 0) {
    (void)stream;
    return kiln_simt_launcher<P...>{k, grid, block, shmem};
}
#define KLAUNCH(k, ...) kiln_simt_launch(k, __VA_ARGS__)

#endif
