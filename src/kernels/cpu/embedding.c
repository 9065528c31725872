/* Fast embedding, float. Forward gathers weight rows (a copy of C floats per
 * position, positions in parallel). Backward scatter-adds dy's rows into the
 * weight's gradient deterministically: each thread owns a range of columns
 * (whole 64-byte blocks of 16 floats) of every vocabulary row and walks all
 * positions in order, adding its columns of dy's row into the row of that
 * position's id. Every gradient element is then summed in position order,
 * so the bits do not depend on the thread count; no two threads write the
 * same cache line (no atomics); and the work is even however skewed the ids
 * are (text repeats a few tokens; owning vocabulary rows would leave the
 * thread owning ' ' and 'e' with most of it). Ids are validated before
 * (the step fails before a kernel reads a bad one). */
#include <math.h>
#include <omp.h>
#include <string.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

static inline int64_t id_at(const float *idf, const int32_t *idi, int64_t i) { return idf ? (int64_t)idf[i] : idi[i]; }

int64_t kiln_cpu_embedding_check(int64_t n, const float *idf, const int32_t *idi, int64_t V) {
    for (int64_t i = 0; i < n; i++) {
        if (idf && !(idf[i] >= 0 && idf[i] < (float)V && idf[i] == floorf(idf[i]))) return i;
        if (!idf && (idi[i] < 0 || idi[i] >= V)) return i;
    }
    return -1;
}

void kiln_cpu_embedding_fwd(int64_t n, int64_t C, const float *idf, const int32_t *idi, const float *w, float *y) {
#pragma omp parallel for schedule(static) if (n * C >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) memcpy(y + i * C, w + id_at(idf, idi, i) * C, (size_t)C * sizeof *y);
}

#define BLOCK 16

KILN_CPU_HOT static void add_cols(int64_t len, const float *restrict src, float *restrict dst) {
#pragma omp simd
    for (int64_t c = 0; c < len; c++) dst[c] += src[c];
}

/* columns [c0, c1) of every row: zeroed (acc = 0), then every position's dy added at its id, in order */
static void scatter_cols(int64_t n, int64_t V, int64_t C, int64_t c0, int64_t c1, const float *idf, const int32_t *idi,
                         const float *dy, float *dw, int acc) {
    if (c1 <= c0) return;
    for (int64_t v = 0; !acc && v < V; v++) memset(dw + v * C + c0, 0, (size_t)(c1 - c0) * sizeof *dw);
    for (int64_t i = 0; i < n; i++) add_cols(c1 - c0, dy + i * C + c0, dw + id_at(idf, idi, i) * C + c0);
}

void kiln_cpu_embedding_bwd(int64_t n, int64_t V, int64_t C, const float *idf, const int32_t *idi, const float *dy,
                            float *dw, int acc) {
    int64_t nb = (C + BLOCK - 1) / BLOCK;
#pragma omp parallel if ((n + V) * C >= KILN_CPU_PAR_MIN && nb > 1)
    {
        int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
        int64_t c0 = nb * t / nt * BLOCK, c1 = nb * (t + 1) / nt * BLOCK;
        scatter_cols(n, V, C, c0, c1 < C ? c1 : C, idf, idi, dy, dw, acc);
    }
}
