/* Fast softmax over the last dim, float: rows in parallel, each row in three
 * sweeps that stay in L1 (max; exp and its sum; the scale), vectorised through
 * vec_math.h's exp. The sum's order is fixed by the row's length, never by
 * the thread count. Backward: dx = y * (dy - sum(dy * y)). */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/internal/kernels.h"

#define L 16

/* max, exp and sum in 16 lanes of registers (an `omp simd` reduction keeps its
 * partials in memory, a store and a load per vector), folded in lane order */
KILN_CPU_HOT static void softmax_row(int64_t n, const float *restrict x, float *restrict y) {
    float sv[L], m = kiln_row_max16(n, x), s = 0;
    int64_t j;
    for (int l = 0; l < L; l++) sv[l] = 0;
    for (j = 0; j + L <= n; j += L)
        for (int l = 0; l < L; l++) {
            float e = kiln_vexpf(x[j + l] - m);
            y[j + l] = e;
            sv[l] += e;
        }
    for (; j < n; j++) {
        y[j] = kiln_vexpf(x[j] - m);
        s += y[j];
    }
    for (int l = 0; l < L; l++) s += sv[l];
    float inv = 1.0f / s;
#pragma omp simd
    for (j = 0; j < n; j++) y[j] *= inv;
}

KILN_CPU_HOT static void softmax_bwd_row(int64_t n, const float *restrict y, const float *restrict dy, float *restrict dx,
                                         int acc) {
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; j++) s += dy[j] * y[j];
    if (acc) {
#pragma omp simd
        for (int64_t j = 0; j < n; j++) dx[j] += y[j] * (dy[j] - s);
    } else {
#pragma omp simd
        for (int64_t j = 0; j < n; j++) dx[j] = y[j] * (dy[j] - s);
    }
}

void kiln_cpu_softmax_fwd(int64_t rows, int64_t cols, const float *x, float *y) {
#pragma omp parallel for schedule(static) if (rows * cols >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < rows; i++) softmax_row(cols, x + i * cols, y + i * cols);
}

void kiln_cpu_softmax_bwd(int64_t rows, int64_t cols, const float *y, const float *dy, float *dx, int acc) {
#pragma omp parallel for schedule(static) if (rows * cols >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < rows; i++) softmax_bwd_row(cols, y + i * cols, dy + i * cols, dx + i * cols, acc);
}
