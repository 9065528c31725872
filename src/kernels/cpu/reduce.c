/* Sum to a scalar and its backward (a fill), float. The sum is taken in
 * fixed chunks, each in double in order, then the chunks in order: the same
 * bits for any thread count. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

#define CHUNK 16384

double kiln_cpu_sum(int64_t n, const float *x) {
    int64_t nchunks = (n + CHUNK - 1) / CHUNK;
    double total = 0;
    for (int64_t g = 0; g < nchunks; g += 256) {
        double partial[256];
        int64_t m = nchunks - g < 256 ? nchunks - g : 256;
#pragma omp parallel for schedule(static) if (m > 1)
        for (int64_t c = 0; c < m; c++) {
            int64_t b = (g + c) * CHUNK, e = b + CHUNK < n ? b + CHUNK : n;
            double s = 0;
            for (int64_t i = b; i < e; i++) s += x[i];
            partial[c] = s;
        }
        for (int64_t c = 0; c < m; c++) total += partial[c];
    }
    return total;
}

void kiln_cpu_fill(int64_t n, float v, float *dx, int acc) {
    if (acc) {
#pragma omp parallel for simd schedule(static) if (n >= KILN_CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) dx[i] += v;
    } else {
#pragma omp parallel for simd schedule(static) if (n >= KILN_CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) dx[i] = v;
    }
}
