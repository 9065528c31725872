/* Sum of squares and scaling over a flat buffer (gradient clipping). The sum
 * is split into fixed chunks, each summed in double in a fixed order, then the
 * chunks are added in order: the result does not depend on the thread count,
 * so clipped runs stay bit-reproducible and resumable. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

#define CHUNK 16384

double kiln_cpu_sumsq(int64_t n, const float *x) {
    int64_t nchunks = (n + CHUNK - 1) / CHUNK;
    if (nchunks <= 1) {
        double s = 0;
        for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
        return s;
    }
    double partial[256];
    double total = 0;
    /* chunks in groups of 256 keep the partial sums on the stack */
    for (int64_t g = 0; g < nchunks; g += 256) {
        int64_t m = nchunks - g < 256 ? nchunks - g : 256;
#pragma omp parallel for schedule(static) if (m > 1)
        for (int64_t c = 0; c < m; c++) {
            int64_t b = (g + c) * CHUNK, e = b + CHUNK < n ? b + CHUNK : n;
            double s = 0;
            for (int64_t i = b; i < e; i++) s += (double)x[i] * x[i];
            partial[c] = s;
        }
        for (int64_t c = 0; c < m; c++) total += partial[c];
    }
    return total;
}

void kiln_cpu_scale(int64_t n, float *x, float s) {
#pragma omp parallel for simd schedule(static) if (n >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}
