// fp32 to bf16 or fp16 (round to nearest even, as cuda_bf16.h and
// cuda_fp16.h round): the 16-bit operands linear.c gives cuBLASLt under
// KILN_CUDA_GEMM=half, two elements a thread; and the channels-last 16-bit
// copies conv.c gives cuDNN's tensor cores under --precision bf16/fp16, with
// the way back (its 16-bit outputs widened into the plan's NCHW fp32 tensors).
// Reference: the cpu's own rounding (src/backends/cpu/precision.c), checked on
// simt by test_simt; the layouts by test_ops' bf16 cases on simt.
#include <string.h>
#include "backends/cuda/internal/cuda.h"
#include "backends/cuda/internal/block.h"
#include "backends/cuda/internal/mma.h"
#include "backends/cuda/internal/half_out.h"

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

/* [imgs, ch, hw] <-> [imgs, hw, ch] through a TT x TT tile of shared memory, so both sides read and write whole
 * rows of consecutive elements; images along the grid's z (the planes of a batch, or the K filters) */
#define TT 32
__global__ void k_to_nhwc(int kind, int64_t imgs, int64_t ch, int64_t hw, const void *x, int xk, void *y, int acc) {
    __shared__ float t[TT][TT + 1];
    int64_t c0 = (int64_t)blockIdx.y * TT, p0 = (int64_t)blockIdx.x * TT;
    for (int64_t img = blockIdx.z; img < imgs; img += gridDim.z) {
        int64_t base = img * ch * hw;
        __syncthreads(); /* the previous image's tile is written out */
        for (int r = threadIdx.y; r < TT; r += blockDim.y)
            if (c0 + r < ch && p0 + threadIdx.x < hw) t[r][threadIdx.x] = get_kind(x, xk, base + (c0 + r) * hw + p0 + threadIdx.x);
        __syncthreads();
        for (int r = threadIdx.y; r < TT; r += blockDim.y)
            if (p0 + r < hw && c0 + threadIdx.x < ch) put_or_add(y, kind, base + (p0 + r) * ch + c0 + threadIdx.x, t[threadIdx.x][r], acc);
    }
}

__global__ void k_from_nhwc(int kind, int64_t imgs, int64_t ch, int64_t hw, const void *y, void *x, int xk, int acc, int relu) {
    __shared__ float t[TT][TT + 1];
    int64_t c0 = (int64_t)blockIdx.y * TT, p0 = (int64_t)blockIdx.x * TT;
    for (int64_t img = blockIdx.z; img < imgs; img += gridDim.z) {
        int64_t base = img * ch * hw;
        __syncthreads();
        for (int r = threadIdx.y; r < TT; r += blockDim.y)
            if (p0 + r < hw && c0 + threadIdx.x < ch) t[r][threadIdx.x] = get_kind(y, kind, base + (p0 + r) * ch + c0 + threadIdx.x);
        __syncthreads();
        for (int r = threadIdx.y; r < TT; r += blockDim.y) {
            if (c0 + r >= ch || p0 + threadIdx.x >= hw) continue;
            int64_t i = base + (c0 + r) * hw + p0 + threadIdx.x;
            put_or_add(x, xk, i, relu ? fmaxf(t[threadIdx.x][r], 0.f) : t[threadIdx.x][r], acc);
        }
    }
}

/* a transpose with one side of one element (a 1x1 filter, a single channel) moves nothing: element by element */
__global__ void k_widen(int64_t n, int kind, const void *y, void *x, int xk, int acc, int relu) {
    FOR_N {
        float v = get_kind(y, kind, i);
        put_or_add(x, xk, i, relu ? fmaxf(v, 0.f) : v, acc);
    }
}

static dim3 tiles(int64_t imgs, int64_t ch, int64_t hw) {
    return dim3((unsigned)((hw + TT - 1) / TT), (unsigned)((ch + TT - 1) / TT), (unsigned)(imgs < 65535 ? imgs : 65535));
}

extern "C" void kiln_cuda_to_nhwc(kcs st, int kind, int64_t imgs, int64_t ch, int64_t hw, const void *x, int xk, void *y) {
    int64_t n = imgs * ch * hw;
    if ((ch == 1 || hw == 1) && !xk) kiln_cuda_to_half(st, kind == 2, n, (const float *)x, y);
    else if (ch == 1 || hw == 1) KLAUNCH(k_widen, GO(n))(n, xk, x, y, kind, 0, 0); /* 16 bits as they are */
    else KLAUNCH(k_to_nhwc, tiles(imgs, ch, hw), dim3(TT, 8), 0, st)(kind, imgs, ch, hw, x, xk, y, 0);
}

extern "C" void kiln_cuda_from_nhwc(kcs st, int kind, int64_t imgs, int64_t ch, int64_t hw, const void *y, void *x, int xk, int acc,
                                    int relu) {
    int64_t n = imgs * ch * hw;
    if (ch == 1 || hw == 1) KLAUNCH(k_widen, GO(n))(n, kind, y, x, xk, acc, relu);
    else KLAUNCH(k_from_nhwc, tiles(imgs, ch, hw), dim3(TT, 8), 0, st)(kind, imgs, ch, hw, y, x, xk, acc, relu);
}

extern "C" void kiln_cuda_widen(kcs st, int kind, int64_t n, const void *y, float *x) {
    KLAUNCH(k_widen, GO(n))(n, kind, y, x, 0, 0, 0);
}

extern "C" void kiln_cuda_reorder(kcs st, int to_nhwc, int64_t imgs, int64_t ch, int64_t hw, const void *x, int xk, void *y,
                                  int yk, int acc) {
    int64_t n = imgs * ch * hw;
    if (ch == 1 || hw == 1) KLAUNCH(k_widen, GO(n))(n, xk, x, y, yk, acc, 0); /* nothing moves */
    else if (to_nhwc) KLAUNCH(k_to_nhwc, tiles(imgs, ch, hw), dim3(TT, 8), 0, st)(yk, imgs, ch, hw, x, xk, y, acc);
    else KLAUNCH(k_from_nhwc, tiles(imgs, ch, hw), dim3(TT, 8), 0, st)(xk, imgs, ch, hw, x, y, yk, acc, 0);
}
