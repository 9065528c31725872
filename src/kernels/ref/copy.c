/* Reference copies for views, double: gathering a strided view into packed
 * rows, and slice's backward. */
#include "kernels/internal/kernels.h"

void kiln_ref_copy_strided(int ndim, const int64_t *shape, const double *src, const int64_t *stride, double *dst, int acc) {
    int64_t n = 1, idx[KILN_KERNEL_MAX_DIMS] = {0};
    for (int d = 0; d < ndim; d++) n *= shape[d];
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (int d = 0; d < ndim; d++) off += idx[d] * stride[d];
        dst[i] = acc ? dst[i] + src[off] : src[off];
        for (int d = ndim - 1; d >= 0 && ++idx[d] == shape[d]; d--) idx[d] = 0;
    }
}

void kiln_ref_slice_bwd(int64_t outer, int64_t dim, int64_t inner, int64_t start, int64_t len, int64_t step,
                        const double *dy, double *dx, int acc) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < dim; j++)
            for (int64_t i = 0; i < inner; i++) {
                double *d = &dx[(o * dim + j) * inner + i];
                int in = j >= start && j < start + step * len && (j - start) % step == 0;
                double g = in ? dy[(o * len + (j - start) / step) * inner + i] : 0.0;
                *d = acc ? *d + g : g;
            }
}
