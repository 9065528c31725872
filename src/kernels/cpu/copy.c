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

void kiln_cpu_slice_bwd(int64_t outer, int64_t dim, int64_t inner, int64_t start, int64_t len, const float *dy,
                        float *dx, int acc) {
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
