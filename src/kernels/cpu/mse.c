/* Mean squared error, float: the sum runs in double over fixed 4096-element
 * chunks added in order, so the loss does not depend on the thread count. */
#include <stdlib.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

#define CHUNK 4096

static double chunk_sumsq(const float *x, const float *t, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)x[i] - (double)t[i];
        s += d * d;
    }
    return s;
}

void kiln_cpu_mse_loss_fwd(int64_t n, const float *x, const float *target, float *loss) {
    int64_t chunks = (n + CHUNK - 1) / CHUNK;
    double *part = malloc((size_t)(chunks ? chunks : 1) * sizeof *part), s = 0.0;
    if (!part) { /* serially, in the same chunks */
        for (int64_t c = 0; c < chunks; c++) s += chunk_sumsq(x + c * CHUNK, target + c * CHUNK, n - c * CHUNK < CHUNK ? n - c * CHUNK : CHUNK);
    } else {
#pragma omp parallel for schedule(static) if (n >= KILN_CPU_PAR_MIN)
        for (int64_t c = 0; c < chunks; c++)
            part[c] = chunk_sumsq(x + c * CHUNK, target + c * CHUNK, n - c * CHUNK < CHUNK ? n - c * CHUNK : CHUNK);
        for (int64_t c = 0; c < chunks; c++) s += part[c];
        free(part);
    }
    *loss = (float)(s / (double)n);
}

/* dx = 2 (x - target) dloss / n, times relu's mask (x > 0) when folded in;
 * dx may be x: each element is read before it is written */
void kiln_cpu_mse_loss_bwd(int64_t n, const float *x, const float *target, const float *dloss, float *dx, int acc,
                           int relu_mask) {
    float g = (float)(2.0 * (double)*dloss / (double)n);
#pragma omp parallel for schedule(static) if (n >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float xi = x[i], v = g * (xi - target[i]);
        if (relu_mask) v = xi > 0.0f ? v : 0.0f;
        dx[i] = acc ? dx[i] + v : v;
    }
}
