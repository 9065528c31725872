// A fused group of pointwise ops (the fusion pass's program) as one CUDA
// kernel: a thread per element reads the group's inputs once, runs every
// member's arithmetic on values in its registers, and writes the group's
// outputs once. The program is translated at compile (kernels.c: each op's
// table entry names its code here, kiln_kernel.fusable) and passed by value,
// so a captured CUDA graph keeps it. The registers are a thread's own: an
// array indexed by the program at run time would live in local memory (ptxas
// gave the one-size kernel a 64-byte stack frame), so each is read and written
// through a chain of selects, unrolled over the R registers the program uses
// (a kernel for R = 2, 4, 8 and 16). Inputs and outputs may be stored in 16
// bits (the half-storage pass), and a member that follows autocast (an add of
// two 16-bit values) rounds its value as its own kernel would. Each code computes what the op's own
// kernel does (pointwise.cu, transformer.cu); dropout draws the same mask word
// for the same element index, so a group holding it gives the cpu's mask.
#include "backends/cuda/internal/cuda.h"
#include "backends/cuda/internal/block.h"
#include "backends/cuda/internal/pointwise_math.h"
#include "backends/cuda/internal/half_out.h"

__device__ inline float dropped(const kiln_cuda_pw &I, float x, int64_t i, uint64_t counter) {
    if (I.a <= 0.f) return x;
    if (I.a >= 1.f) return 0.f;
    return philox_word(I.key, counter, (uint64_t)i / 4, (int)(i % 4)) >= I.thr ? x * I.b : 0.f;
}

// one member's value at element i from its sources a, b (the interpreter of the translated program)
__device__ inline float member(const kiln_cuda_pw &I, float a, float b, int64_t i, uint64_t counter) {
    switch (I.code) {
    case KILN_CUDA_PW_RELU: return a > 0.f ? a : 0.f;
    case KILN_CUDA_PW_RELU_BWD: return a > 0.f ? b : 0.f;
    case KILN_CUDA_PW_ADD: return a + b;
    case KILN_CUDA_PW_MUL:
    case KILN_CUDA_PW_MUL_BWD: return a * b;
    case KILN_CUDA_PW_COPY: return a;
    case KILN_CUDA_PW_DROPOUT: return dropped(I, a, i, counter);
    case KILN_CUDA_PW_AFFINE: return fmaf(a, I.a, I.b);
    case KILN_CUDA_PW_SCALE: return I.a * a;
    case KILN_CUDA_PW_ERF: return erff(a);
    case KILN_CUDA_PW_ERF_BWD: return b * (1.1283791671f * expf(-a * a));
    case KILN_CUDA_PW_TANH: return tanhf(a);
    case KILN_CUDA_PW_TANH_BWD: return b * (1.f - a * a);
    case KILN_CUDA_PW_GELU: return gelu_f(a, I.form);
    case KILN_CUDA_PW_GELU_BWD: return b * gelu_grad(a, I.form);
    }
    return 0.f;
}

// register k of r[R], and r[k] = v, by selects over every register (constant indices: no local memory)
template <int R> __device__ inline float get(const float (&r)[R], int k) {
    float v = r[0];
    KILN_UNROLL for (int j = 1; j < R; j++) v = k == j ? r[j] : v;
    return v;
}
template <int R> __device__ inline void set(float (&r)[R], int k, float v) {
    KILN_UNROLL for (int j = 0; j < R; j++) r[j] = k == j ? v : r[j];
}

template <int R> __global__ void k_fused(int64_t n, kiln_cuda_prog P, const kiln_cuda_rc *rc) {
    uint64_t counter = rc->counter;
    FOR_N {
        float r[R];
        const int nio = R < KILN_CUDA_PW_IO ? R : KILN_CUDA_PW_IO; /* inputs are the first registers */
        KILN_UNROLL for (int k = 0; k < R; k++) r[k] = 0.f;
        KILN_UNROLL for (int k = 0; k < nio; k++) if (k < P.nin) r[k] = get_kind(P.in[k], P.in_kind[k], i);
        for (int j = 0; j < P.ninstr; j++) {
            const kiln_cuda_pw &I = P.ins[j];
            float v = round_kind(member(I, get(r, I.src[0]), I.nsrc > 1 ? get(r, I.src[1]) : 0.f, i, counter), I.round);
            set(r, I.dst, I.acc ? get(r, I.dst) + v : v);
        }
        for (int k = 0; k < P.nout; k++) put_or_add(P.out[k], P.out_kind[k], i, get(r, P.out_reg[k]), P.out_acc[k]);
    }
}

/* the registers the program names: its inputs', its members' sources and destinations, its outputs' */
static int regs_used(const kiln_cuda_prog *P) {
    int m = P->nin;
    for (int j = 0; j < P->ninstr; j++) {
        const kiln_cuda_pw *I = &P->ins[j];
        int top = I->dst;
        for (int s = 0; s < I->nsrc; s++) top = I->src[s] > top ? I->src[s] : top;
        m = top + 1 > m ? top + 1 : m;
    }
    for (int k = 0; k < P->nout; k++) m = P->out_reg[k] + 1 > m ? P->out_reg[k] + 1 : m;
    return m;
}

extern "C" void kiln_cuda_fused(kcs st, int64_t n, const kiln_cuda_prog *P, const kiln_cuda_rc *rc) {
    int r = regs_used(P);
    if (r <= 2) KLAUNCH(k_fused<2>, GO(n))(n, *P, rc);
    else if (r <= 4) KLAUNCH(k_fused<4>, GO(n))(n, *P, rc);
    else if (r <= 8) KLAUNCH(k_fused<8>, GO(n))(n, *P, rc);
    else KLAUNCH(k_fused<KILN_CUDA_PW_REGS>, GO(n))(n, *P, rc);
}
