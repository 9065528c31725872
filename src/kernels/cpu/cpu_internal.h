/* Shared knobs and AVX-512 entry points of the fast CPU kernels. */
#ifndef KILN_KERNELS_CPU_INTERNAL_H
#define KILN_KERNELS_CPU_INTERNAL_H

#include <stdint.h>

/* Below this many elements a parallel region costs more than it saves. */
#define KILN_CPU_PAR_MIN 32768

/* 1 when the running CPU has AVX-512F (the *_avx512.c files need it). */
static inline int kiln_cpu_has_avx512(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    return __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

/* Dropout over the first `blocks` * 64 elements (16 Philox calls per vector);
 * bit-identical to the portable path. add: y += ..., else y = ... */
void kiln_cpu_dropout_blocks_avx512(int64_t blocks, float scale, uint32_t thr, uint64_t key, uint64_t counter,
                                    const float *x, float *y, int add);

/* Fused optimizer passes with vector sqrt (the portable loops cannot vectorise
 * sqrtf under -fmath-errno); same operation order, so bit-identical results. */
void kiln_cpu_adadelta_avx512(int64_t n, float *p, const float *g, float *square_avg, float *acc_delta, float lr,
                              float rho, float eps, float weight_decay);
void kiln_cpu_adamw_avx512(int64_t n, float *p, const float *g, float *m, float *v, float decay, float beta1,
                           float beta2, float eps, float step_size, float bc2_sqrt);

/* 2x2 stride-2 max-pool over one [h, w, 16] nChw16c block; y0/dy0 point at the
 * block's first NCHW plane. Blocks must be 64-byte aligned. */
void kiln_cpu_pool2_blocked_fwd_avx512(int64_t w, int64_t oh, int64_t ow, const float *xb, float *y0);
void kiln_cpu_pool2_blocked_bwd_avx512(int64_t w, int64_t oh, int64_t ow, int relu_mask, const float *xb,
                                       const float *dy0, float *db, int acc);

#endif
