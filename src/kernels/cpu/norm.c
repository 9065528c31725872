/* Sum of squares and scaling over a flat buffer (gradient clipping). The sum
 * is split into fixed chunks, each summed in double in a fixed order (16
 * lanes, then the tail), then the chunks are added in order: the result does
 * not depend on the thread count, so clipped runs stay bit-reproducible and
 * resumable. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

#define CHUNK 16384
#define LANES 16

/* sum of x[i]^2 over [0, n) in double: 16 lanes of registers, folded in lane order, then the tail (one running
 * double is an add's latency per element: 1.3 ms of a GPT step's clipping) */
KILN_CPU_HOT static double chunk_sumsq(int64_t n, const float *restrict x) {
    double s[LANES] = {0}, t = 0;
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
#pragma GCC unroll 16
        for (int l = 0; l < LANES; l++) s[l] += (double)x[i + l] * x[i + l];
    for (; i < n; i++) t += (double)x[i] * x[i];
    for (int l = 0; l < LANES; l++) t += s[l];
    return t;
}

double kiln_cpu_sumsq(int64_t n, const float *x) {
    int64_t nchunks = (n + CHUNK - 1) / CHUNK;
    if (nchunks <= 1) return chunk_sumsq(n, x);
    double partial[256];
    double total = 0;
    /* chunks in groups of 256 keep the partial sums on the stack */
    for (int64_t g = 0; g < nchunks; g += 256) {
        int64_t m = nchunks - g < 256 ? nchunks - g : 256;
#pragma omp parallel for schedule(static) if (m > 1)
        for (int64_t c = 0; c < m; c++) {
            int64_t b = (g + c) * CHUNK, e = b + CHUNK < n ? b + CHUNK : n;
            partial[c] = chunk_sumsq(e - b, x + b);
        }
        for (int64_t c = 0; c < m; c++) total += partial[c];
    }
    return total;
}

void kiln_cpu_scale(int64_t n, float *x, float s) {
#pragma omp parallel for simd schedule(static) if (n >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}
