/* Reference average pooling (avg_pool2d and adaptive_avg_pool2d), double,
 * NCHW: each output is the sum of its window over the window's count. */
#include <string.h>
#include "kernels/internal/kernels.h"

int kiln_avg_pool_shape_infer(kiln_avg_pool_shape *ps) {
    if (ps->n <= 0 || ps->c <= 0 || ps->h <= 0 || ps->w <= 0) return -1;
    if (ps->adaptive) return ps->oh > 0 && ps->ow > 0 ? 0 : -1;
    /* PyTorch: padding at most half the window, so no window lies wholly in the padding */
    if (ps->k <= 0 || ps->stride <= 0 || ps->pad < 0 || 2 * ps->pad > ps->k) return -1;
    if (ps->h + 2 * ps->pad < ps->k || ps->w + 2 * ps->pad < ps->k) return -1;
    ps->oh = (ps->h + 2 * ps->pad - ps->k) / ps->stride + 1;
    ps->ow = (ps->w + 2 * ps->pad - ps->k) / ps->stride + 1;
    return 0;
}

void kiln_ref_avg_pool2d_fwd(const kiln_avg_pool_shape *ps, const double *x, double *y) {
    for (int64_t p = 0; p < ps->n * ps->c; p++)
        for (int64_t oh = 0; oh < ps->oh; oh++)
            for (int64_t ow = 0; ow < ps->ow; ow++) {
                int64_t h0, h1, ch, w0, w1, cw;
                kiln_avg_pool_window(ps, oh, ps->h, ps->oh, &h0, &h1, &ch);
                kiln_avg_pool_window(ps, ow, ps->w, ps->ow, &w0, &w1, &cw);
                double s = 0;
                for (int64_t i = h0; i < h1; i++)
                    for (int64_t j = w0; j < w1; j++) s += x[(p * ps->h + i) * ps->w + j];
                y[(p * ps->oh + oh) * ps->ow + ow] = s / (double)(ch * cw);
            }
}

void kiln_ref_avg_pool2d_bwd(const kiln_avg_pool_shape *ps, const double *dy, double *dx, int acc) {
    if (!acc) memset(dx, 0, (size_t)(ps->n * ps->c * ps->h * ps->w) * sizeof *dx);
    for (int64_t p = 0; p < ps->n * ps->c; p++)
        for (int64_t oh = 0; oh < ps->oh; oh++)
            for (int64_t ow = 0; ow < ps->ow; ow++) {
                int64_t h0, h1, ch, w0, w1, cw;
                kiln_avg_pool_window(ps, oh, ps->h, ps->oh, &h0, &h1, &ch);
                kiln_avg_pool_window(ps, ow, ps->w, ps->ow, &w0, &w1, &cw);
                double g = dy[(p * ps->oh + oh) * ps->ow + ow] / (double)(ch * cw);
                for (int64_t i = h0; i < h1; i++)
                    for (int64_t j = w0; j < w1; j++) dx[(p * ps->h + i) * ps->w + j] += g;
            }
}
