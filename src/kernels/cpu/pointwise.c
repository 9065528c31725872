/* Fast elementwise ops, float. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

void kiln_cpu_add_fwd(int64_t n, const float *restrict a, const float *restrict b, float *restrict y) {
    KILN_CPU_EACH(n, i, y[i] = a[i] + b[i]);
}

void kiln_cpu_mul_fwd(int64_t n, const float *restrict a, const float *restrict b, float *restrict y) {
    KILN_CPU_EACH(n, i, y[i] = a[i] * b[i]);
}

void kiln_cpu_grad_copy(int64_t n, const float *restrict dy, float *restrict dx, int acc) {
    if (acc) {
        KILN_CPU_EACH(n, i, dx[i] += dy[i]);
    } else {
        KILN_CPU_EACH(n, i, dx[i] = dy[i]);
    }
}

void kiln_cpu_mul_bwd(int64_t n, const float *restrict dy, const float *restrict b, float *restrict da, int acc) {
    if (acc) {
        KILN_CPU_EACH(n, i, da[i] += dy[i] * b[i]);
    } else {
        KILN_CPU_EACH(n, i, da[i] = dy[i] * b[i]);
    }
}

/* y[r, j] = a[r, j] + b[j]: b (positions [T, C]) added to each row of a ([B, T, C]) */
void kiln_cpu_add_bcast_fwd(int64_t rows, int64_t inner, const float *restrict a, const float *restrict b,
                            float *restrict y) {
#pragma omp parallel for schedule(static) if (rows * inner >= KILN_CPU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *ar = a + r * inner;
        float *yr = y + r * inner;
#pragma omp simd
        for (int64_t j = 0; j < inner; j++) yr[j] = ar[j] + b[j];
    }
}
