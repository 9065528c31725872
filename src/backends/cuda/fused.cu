// A fused group of pointwise ops (the fusion pass's program) as one CUDA
// kernel: a thread per element reads the group's inputs once, runs every
// member's arithmetic on values in its registers, and writes the group's
// outputs once. The program is translated at compile (kernels.c: each op's
// table entry names its code here, kiln_kernel.fusable) and passed by value,
// so a captured CUDA graph keeps it. Each code computes what the op's own
// kernel does (pointwise.cu, transformer.cu); dropout draws the same mask word
// for the same element index, so a group holding it gives the cpu's mask.
#include "backends/cuda/internal/cuda.h"
#include "backends/cuda/internal/block.h"
#include "backends/cuda/internal/pointwise_math.h"

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

__global__ void k_fused(int64_t n, kiln_cuda_prog P, const kiln_cuda_rc *rc) {
    uint64_t counter = rc->counter;
    FOR_N {
        float r[KILN_CUDA_PW_REGS];
        for (int k = 0; k < P.nin; k++) r[k] = P.in[k][i];
        for (int j = 0; j < P.ninstr; j++) {
            const kiln_cuda_pw &I = P.ins[j];
            float v = member(I, r[I.src[0]], I.nsrc > 1 ? r[I.src[1]] : 0.f, i, counter);
            r[I.dst] = I.acc ? r[I.dst] + v : v;
        }
        for (int k = 0; k < P.nout; k++) {
            float *o = P.out[k];
            float v = r[P.out_reg[k]];
            o[i] = P.out_acc[k] ? o[i] + v : v;
        }
    }
}

extern "C" void kiln_cuda_fused(kcs st, int64_t n, const kiln_cuda_prog *P, const kiln_cuda_rc *rc) {
    KLAUNCH(k_fused, GO(n))(n, *P, rc);
}
