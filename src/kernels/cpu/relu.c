/* Fast ReLU, float. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

void kiln_cpu_relu_fwd(int64_t n, const float *restrict x, float *restrict y) {
#pragma omp parallel for simd schedule(static) if (n >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void kiln_cpu_relu_bwd(int64_t n, const float *restrict y, const float *restrict dy, float *restrict dx, int acc) {
    if (acc) {
#pragma omp parallel for simd schedule(static) if (n >= KILN_CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float g = dy[i]; /* unconditional load lets the select vectorise */
            dx[i] += y[i] > 0.0f ? g : 0.0f;
        }
    } else {
#pragma omp parallel for simd schedule(static) if (n >= KILN_CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float g = dy[i];
            dx[i] = y[i] > 0.0f ? g : 0.0f;
        }
    }
}
