/* One parallel pass over a run of parameter tensors (the layer-wise
 * optimizers): every tensor is cut into chunks of CHUNK elements, the chunks
 * of all tensors are shared among the threads, and a chunk's two sums are
 * added per tensor in chunk order afterwards, so each tensor's norms have the
 * same bits for any thread count. */
#include <stdlib.h>
#include "kernels/cpu/cpu_internal.h"

#define CHUNK 16384
/* the element-wise optimizers call their whole-buffer kernels on one chunk: those stay serial */
_Static_assert(CHUNK < KILN_CPU_PAR_MIN, "a chunk must not open a parallel region of its own");

typedef struct {
    int64_t seg, begin, end;
} chunk;

static int64_t chunk_count(int64_t nseg, const int64_t *seg) {
    int64_t n = 0;
    for (int64_t k = 0; k < nseg; k++) n += (seg[3 * k + 1] + CHUNK - 1) / CHUNK;
    return n;
}

static void fill_chunks(int64_t nseg, const int64_t *seg, chunk *c) {
    int64_t n = 0;
    for (int64_t k = 0; k < nseg; k++) {
        int64_t b = seg[3 * k] - seg[0], e = b + seg[3 * k + 1];
        for (int64_t i = b; i < e; i += CHUNK) c[n++] = (chunk){k, i, i + CHUNK < e ? i + CHUNK : e};
    }
}

int kiln_cpu_for_segments(int64_t nseg, const int64_t *seg, kiln_cpu_chunk_fn fn, const void *ctx, double *sums) {
    int64_t n = chunk_count(nseg, seg), total = 0;
    chunk *c = malloc((size_t)(n ? n : 1) * sizeof *c);
    double *part = sums ? malloc((size_t)(n ? n : 1) * 2 * sizeof *part) : NULL;
    if (!c || (sums && !part)) {
        free(c);
        free(part);
        return -1;
    }
    fill_chunks(nseg, seg, c);
    for (int64_t k = 0; k < nseg; k++) total += seg[3 * k + 1];
#pragma omp parallel for schedule(static) if (total >= KILN_CPU_PAR_MIN && n > 1)
    for (int64_t i = 0; i < n; i++) {
        double acc[2] = {0, 0};
        fn(ctx, c[i].seg, c[i].begin, c[i].end, acc);
        if (part) part[2 * i] = acc[0], part[2 * i + 1] = acc[1];
    }
    for (int64_t k = 0; sums && k < 2 * nseg; k++) sums[k] = 0;
    for (int64_t i = 0; sums && i < n; i++) {
        sums[2 * c[i].seg] += part[2 * i];
        sums[2 * c[i].seg + 1] += part[2 * i + 1];
    }
    free(c);
    free(part);
    return 0;
}
