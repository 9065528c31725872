// kiln's own CUDA kernels for the layer-wise optimizers, LAMB, LARS and
// NovoGrad, over a run of parameter tensors (the optimizer's table: offset,
// numel, decays per tensor, in device memory): a block per tensor, phase 0
// summing each tensor's squares in double in a fixed order (LAMB updating
// its moments there too), phase 1 updating with the tensor's trust ratio.
// The float arithmetic is the cpu kernels' (src/kernels/cpu/optim_layerwise.c);
// references in src/kernels/ref/optim_layerwise.c.
#include "backends/cuda/internal/cuda.h"
#include "backends/cuda/internal/block.h"

struct lw {
    float b1, b2, eps, wd, mom, trust;
};

// tensor blockIdx.x: elements [b, e) of the run, and its decay
#define TENSOR                                                                                 \
    int64_t k = blockIdx.x, b = seg[3 * k] - seg[0], e = b + seg[3 * k + 1];                  \
    float wd = seg[3 * k + 2] ? c.wd : 0.f
#define FOR_T for (int64_t i = b + threadIdx.x; i < e; i += RT)

__device__ inline float lamb_u(float m, float v, float p, float wd, float bc1, float bc2, float eps) {
    return (m / bc1) / (sqrtf(v / bc2) + eps) + wd * p;
}
__device__ inline void bias_corrections(const lw &c, const kiln_cuda_rc *rc, float *bc1, float *bc2) {
    double step = (double)kiln_optim_t(rc);
    *bc1 = step > 0 ? (float)(1.0 - pow((double)c.b1, step)) : 1.f;
    *bc2 = step > 0 ? (float)(1.0 - pow((double)c.b2, step)) : 1.f;
}
__device__ inline void put_norms(double *norms, int64_t k, double a, double b) {
    if (threadIdx.x == 0) norms[2 * k] = a, norms[2 * k + 1] = b;
}

__global__ void k_lamb(int phase, lw c, const int64_t *seg, float *p, const float *g, float *m, float *v, double *norms,
                       const kiln_cuda_rc *rc) {
    if (kiln_amp_skip(rc)) return; // uniform: the whole block leaves
    TENSOR;
    float bc1, bc2;
    bias_corrections(c, rc, &bc1, &bc2);
    if (phase == 1) {
        double sp = norms[2 * k], su = norms[2 * k + 1];
        float step = (float)(rc->lr * (sp > 0 && su > 0 ? sqrt(sp) / sqrt(su) : 1.0));
        FOR_T p[i] -= step * lamb_u(m[i], v[i], p[i], wd, bc1, bc2, c.eps);
        return;
    }
    double sp = 0, su = 0;
    FOR_T {
        float mi = c.b1 * m[i] + (1.f - c.b1) * g[i], vi = c.b2 * v[i] + (1.f - c.b2) * g[i] * g[i];
        m[i] = mi;
        v[i] = vi;
        float u = lamb_u(mi, vi, p[i], wd, bc1, bc2, c.eps);
        sp += (double)p[i] * p[i];
        su += (double)u * u;
    }
    sp = block_sum(sp);
    su = block_sum(su);
    put_norms(norms, k, sp, su);
}

__global__ void k_lars(int phase, lw c, const int64_t *seg, float *p, const float *g, float *buf, double *norms,
                       const kiln_cuda_rc *rc) {
    if (kiln_amp_skip(rc)) return; // uniform: the whole block leaves
    TENSOR;
    if (phase == 1) {
        double pn = sqrt(norms[2 * k]), gn = sqrt(norms[2 * k + 1]);
        double local = pn > 0 && gn > 0 ? c.trust * pn / (gn + (double)wd * pn) : 1.0;
        float step = (float)(rc->lr * local);
        FOR_T {
            float d = buf[i] * c.mom + step * (g[i] + wd * p[i]);
            buf[i] = d;
            p[i] -= d;
        }
        return;
    }
    double sp = 0, sg = 0;
    FOR_T {
        sp += (double)p[i] * p[i];
        sg += (double)g[i] * g[i];
    }
    sp = block_sum(sp);
    sg = block_sum(sg);
    put_norms(norms, k, sp, sg);
}

// v holds one second moment per tensor: ||g||^2 on the first update (v still 0), then an average
__global__ void k_novograd(int phase, lw c, const int64_t *seg, float *p, const float *g, float *m, float *v, double *norms,
                           const kiln_cuda_rc *rc) {
    if (kiln_amp_skip(rc)) return; // uniform: the whole block leaves
    TENSOR;
    if (phase == 0) {
        double sg = 0;
        FOR_T sg += (double)g[i] * g[i];
        sg = block_sum(sg);
        put_norms(norms, k, sg, 0.0);
        return;
    }
    double n2 = norms[2 * k];
    float vk = (float)(v[k] == 0 ? n2 : c.b2 * (double)v[k] + (1.0 - c.b2) * n2);
    float denom = (float)(sqrt((double)vk) + c.eps), lr = (float)rc->lr;
    __syncthreads(); // every thread has read v[k]
    if (threadIdx.x == 0) v[k] = vk;
    FOR_T {
        float mi = c.b1 * m[i] + (g[i] / denom + wd * p[i]);
        m[i] = mi;
        p[i] -= lr * mi;
    }
}

static lw lw_of(const float *h) { return lw{h[0], h[1], h[2], h[3], h[4], h[5]}; }

extern "C" {
void kiln_cuda_lamb(kcs st, int phase, int64_t nseg, const int64_t *seg, const float *h, float *p, const float *g, float *m,
                    float *v, double *norms, const kiln_cuda_rc *rc) {
    KLAUNCH(k_lamb, (unsigned)nseg, RT, 0, st)(phase, lw_of(h), seg, p, g, m, v, norms, rc);
}
void kiln_cuda_lars(kcs st, int phase, int64_t nseg, const int64_t *seg, const float *h, float *p, const float *g, float *buf,
                    double *norms, const kiln_cuda_rc *rc) {
    KLAUNCH(k_lars, (unsigned)nseg, RT, 0, st)(phase, lw_of(h), seg, p, g, buf, norms, rc);
}
void kiln_cuda_novograd(kcs st, int phase, int64_t nseg, const int64_t *seg, const float *h, float *p, const float *g, float *m,
                        float *v, double *norms, const kiln_cuda_rc *rc) {
    KLAUNCH(k_novograd, (unsigned)nseg, RT, 0, st)(phase, lw_of(h), seg, p, g, m, v, norms, rc);
}
}
