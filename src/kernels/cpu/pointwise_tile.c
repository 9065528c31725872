/* The elementwise ops on one tile, one thread: what a fused kernel (and an op
 * run tile by tile) calls. The whole-tensor kernels (relu.c, pointwise.c,
 * dropout.c, gelu.c) hold an OpenMP region each, and a region, even one its
 * `if` keeps serial, costs a team's start inside the fused kernel's own
 * region: per tile and per instruction, that was most of the time. Same
 * arithmetic as those kernels, so the same bits; AVX-512 clones where the
 * CPU has it (KILN_CPU_HOT). */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

KILN_CPU_HOT void kiln_cpu_tile_relu(int64_t n, const float *restrict x, float *restrict y) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

KILN_CPU_HOT void kiln_cpu_tile_relu_bwd(int64_t n, const float *restrict y, const float *restrict dy, float *restrict dx,
                                         int acc) {
    if (acc) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            float g = dy[i];
            dx[i] += y[i] > 0.0f ? g : 0.0f;
        }
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            float g = dy[i];
            dx[i] = y[i] > 0.0f ? g : 0.0f;
        }
    }
}

KILN_CPU_HOT void kiln_cpu_tile_add(int64_t n, const float *restrict a, const float *restrict b, float *restrict y) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

KILN_CPU_HOT void kiln_cpu_tile_mul(int64_t n, const float *restrict a, const float *restrict b, float *restrict y) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i];
}

/* da (=|+=) dy * b */
KILN_CPU_HOT void kiln_cpu_tile_mul_bwd(int64_t n, const float *restrict dy, const float *restrict b, float *restrict da,
                                        int acc) {
    if (acc) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) da[i] += dy[i] * b[i];
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) da[i] = dy[i] * b[i];
    }
}

/* dx (=|+=) dy */
KILN_CPU_HOT void kiln_cpu_tile_copy(int64_t n, const float *restrict dy, float *restrict dx, int acc) {
    if (acc) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) dx[i] += dy[i];
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) dx[i] = dy[i];
    }
}
