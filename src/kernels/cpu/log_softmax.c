/* Fast log-softmax over the last dimension, float; rows in parallel. */
#include <math.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

void kiln_cpu_log_softmax_fwd(int64_t rows, int64_t cols, const float *restrict x, float *restrict y) {
#pragma omp parallel for schedule(static) if (rows * cols >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < rows; i++) {
        const float *xr = x + i * cols;
        float m = xr[0];
        for (int64_t j = 1; j < cols; j++) m = xr[j] > m ? xr[j] : m;
        double s = 0.0;
        for (int64_t j = 0; j < cols; j++) s += expf(xr[j] - m);
        float lse = m + (float)log(s);
        for (int64_t j = 0; j < cols; j++) y[i * cols + j] = xr[j] - lse;
    }
}

void kiln_cpu_log_softmax_bwd(int64_t rows, int64_t cols, const float *restrict y, const float *restrict dy,
                              float *restrict dx, int acc) {
#pragma omp parallel for schedule(static) if (rows * cols >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < rows; i++) {
        const float *yr = y + i * cols, *gr = dy + i * cols;
        float *dr = dx + i * cols;
        double s = 0.0;
        for (int64_t j = 0; j < cols; j++) s += gr[j];
        float sf = (float)s;
        for (int64_t j = 0; j < cols; j++) {
            float g = gr[j] - expf(yr[j]) * sf;
            dr[j] = acc ? dr[j] + g : g;
        }
    }
}
