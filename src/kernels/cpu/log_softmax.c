/* Fast log-softmax over the last dimension, float; rows in parallel. The
 * rows' exps are vec_math.h's in 16 lanes of registers (libm's expf is a call
 * per element); each row's sums are folded in lane order, so the bits do not
 * depend on the thread count. kiln_cpu_row_lse serves cross entropy too. */
#include <math.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/internal/kernels.h"

#define L 16

KILN_CPU_HOT double kiln_cpu_row_lse(int64_t n, const float *restrict x) {
    float sv[L], m = kiln_row_max16(n, x), s = 0;
    int64_t j;
    for (int l = 0; l < L; l++) sv[l] = 0;
    for (j = 0; j + L <= n; j += L)
        for (int l = 0; l < L; l++) sv[l] += kiln_vexpf(x[j + l] - m);
    for (; j < n; j++) s += kiln_vexpf(x[j] - m);
    double sum = s;
    for (int l = 0; l < L; l++) sum += sv[l];
    return (double)m + log(sum);
}

KILN_CPU_HOT static void fwd_row(int64_t n, const float *restrict x, float *restrict y) {
    float lse = (float)kiln_cpu_row_lse(n, x);
#pragma omp simd
    for (int64_t j = 0; j < n; j++) y[j] = x[j] - lse;
}

/* dx (=|+=) dy - exp(y) sum(dy) */
KILN_CPU_HOT static void bwd_row(int64_t n, const float *restrict y, const float *restrict dy, float *restrict dx, int acc) {
    float sv[L], s = 0;
    int64_t j = 0;
    for (int l = 0; l < L; l++) sv[l] = 0;
    for (; j + L <= n; j += L)
        for (int l = 0; l < L; l++) sv[l] += dy[j + l];
    for (; j < n; j++) s += dy[j];
    for (int l = 0; l < L; l++) s += sv[l];
    if (acc) {
#pragma omp simd
        for (j = 0; j < n; j++) dx[j] += dy[j] - kiln_vexpf(y[j]) * s;
    } else {
#pragma omp simd
        for (j = 0; j < n; j++) dx[j] = dy[j] - kiln_vexpf(y[j]) * s;
    }
}

void kiln_cpu_log_softmax_fwd(int64_t rows, int64_t cols, const float *restrict x, float *restrict y) {
#pragma omp parallel for schedule(static) if (rows * cols >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < rows; i++) fwd_row(cols, x + i * cols, y + i * cols);
}

void kiln_cpu_log_softmax_bwd(int64_t rows, int64_t cols, const float *restrict y, const float *restrict dy,
                              float *restrict dx, int acc) {
#pragma omp parallel for schedule(static) if (rows * cols >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < rows; i++) bwd_row(cols, y + i * cols, dy + i * cols, dx + i * cols, acc);
}
