/* Copies for views, float: gathering a strided view into packed rows (a
 * transposed or sliced tensor reaching an op that needs rows), and slice's
 * backward. Rows are split across the team. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

void kiln_cpu_copy_strided(int ndim, const int64_t *shape, const float *src, const int64_t *stride, float *dst, int acc) {
    if (ndim == 0) {
        dst[0] = acc ? dst[0] + src[0] : src[0];
        return;
    }
    int64_t cols = shape[ndim - 1], cs = stride[ndim - 1], rows = 1;
    for (int d = 0; d < ndim - 1; d++) rows *= shape[d];
#pragma omp parallel for schedule(static) if (rows * cols >= KILN_CPU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0, rest = r;
        for (int d = ndim - 2; d >= 0; d--) {
            off += (rest % shape[d]) * stride[d];
            rest /= shape[d];
        }
        const float *s = src + off;
        float *o = dst + r * cols;
        if (acc)
            for (int64_t j = 0; j < cols; j++) o[j] += s[j * cs];
        else
            for (int64_t j = 0; j < cols; j++) o[j] = s[j * cs];
    }
}

/* one block of B channels of one image between [B][hw] (plain) and [hw][B]
 * (blocked), through B x 16 tiles (at most 1 KiB, in L1) so neither side is
 * walked with a stride of a whole plane; B a constant where it is inlined */
static inline __attribute__((always_inline)) void reorder_block(const float *s, float *d, int64_t hw, int B,
                                                                int from_blocked, int acc) {
    for (int64_t j0 = 0; j0 < hw; j0 += 16) {
        int64_t m = hw - j0 < 16 ? hw - j0 : 16;
        float tile[16][16];
        if (from_blocked) {
            for (int64_t j = 0; j < m; j++)
                for (int l = 0; l < B; l++) tile[l][j] = s[(j0 + j) * B + l];
            for (int l = 0; l < B; l++) {
                float *o = d + l * hw + j0;
                if (acc)
                    for (int64_t j = 0; j < m; j++) o[j] += tile[l][j];
                else
                    for (int64_t j = 0; j < m; j++) o[j] = tile[l][j];
            }
        } else {
            for (int l = 0; l < B; l++)
                for (int64_t j = 0; j < m; j++) tile[j][l] = s[l * hw + j0 + j];
            for (int64_t j = 0; j < m; j++) {
                float *o = d + (j0 + j) * B;
                if (acc)
                    for (int l = 0; l < B; l++) o[l] += tile[j][l];
                else
                    for (int l = 0; l < B; l++) o[l] = tile[j][l];
            }
        }
    }
}

/* [n, c, hw] between plain NCHW and nChw16c or nChw8c (block 16 or 8, c a
 * multiple of it), either way, written or (acc) added. Blocks by images split
 * across the team. */
void kiln_cpu_reorder_nchw(int64_t n, int64_t c, int64_t hw, int block, int from_blocked, const float *src, float *dst,
                           int acc) {
    int64_t nb = c / block;
#pragma omp parallel for schedule(static) if (n * c * hw >= KILN_CPU_PAR_MIN)
    for (int64_t t = 0; t < n * nb; t++) {
        const float *s = src + t * block * hw;
        float *d = dst + t * block * hw;
        if (block == 16) reorder_block(s, d, hw, 16, from_blocked, acc);
        else reorder_block(s, d, hw, 8, from_blocked, acc);
    }
}

/* a strided slice (step > 1): row j of dim gets dy's row (j - start) / step or zero */
static void slice_bwd_step(int64_t outer, int64_t dim, int64_t inner, int64_t start, int64_t len, int64_t step,
                           const float *dy, float *dx, int acc) {
#pragma omp parallel for schedule(static) if (outer * dim * inner >= KILN_CPU_PAR_MIN)
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < dim; j++) {
            float *d = dx + (o * dim + j) * inner;
            int in = j >= start && j < start + step * len && (j - start) % step == 0;
            const float *g = dy + (o * len + (j - start) / step) * inner;
            if (in && acc)
                for (int64_t i = 0; i < inner; i++) d[i] += g[i];
            else if (in)
                for (int64_t i = 0; i < inner; i++) d[i] = g[i];
            else if (!acc)
                for (int64_t i = 0; i < inner; i++) d[i] = 0;
        }
}

void kiln_cpu_slice_bwd(int64_t outer, int64_t dim, int64_t inner, int64_t start, int64_t len, int64_t step,
                        const float *dy, float *dx, int acc) {
    if (step != 1) {
        slice_bwd_step(outer, dim, inner, start, len, step, dy, dx, acc);
        return;
    }
#pragma omp parallel for schedule(static) if (outer * dim * inner >= KILN_CPU_PAR_MIN)
    for (int64_t o = 0; o < outer; o++) {
        float *d = dx + o * dim * inner;
        const float *g = dy + o * len * inner;
        if (!acc) {
            for (int64_t i = 0; i < start * inner; i++) d[i] = 0;
            for (int64_t i = (start + len) * inner; i < dim * inner; i++) d[i] = 0;
        }
        float *t = d + start * inner;
        if (acc)
            for (int64_t i = 0; i < len * inner; i++) t[i] += g[i];
        else
            for (int64_t i = 0; i < len * inner; i++) t[i] = g[i];
    }
}
