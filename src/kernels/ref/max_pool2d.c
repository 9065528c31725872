/* Reference max pooling (square window, -inf padding, floor mode), double. */
#include <stdlib.h>
#include <string.h>
#include "kernels/internal/kernels.h"

int kiln_pool_shape_infer(kiln_pool_shape *ps) {
    if (ps->n <= 0 || ps->c <= 0 || ps->h <= 0 || ps->w <= 0 || ps->k <= 0 || ps->stride <= 0) return -1;
    if (ps->pad < 0 || 2 * ps->pad > ps->k || ps->h + 2 * ps->pad < ps->k || ps->w + 2 * ps->pad < ps->k) return -1;
    ps->oh = (ps->h + 2 * ps->pad - ps->k) / ps->stride + 1;
    ps->ow = (ps->w + 2 * ps->pad - ps->k) / ps->stride + 1;
    return 0;
}

/* offset within the plane of the window's max; strict > keeps the first of ties */
static int64_t argmax(const kiln_pool_shape *ps, const double *plane, int64_t oh, int64_t ow) {
    int64_t h0, h1, w0, w1;
    kiln_pool_window(ps, oh, ps->h, &h0, &h1);
    kiln_pool_window(ps, ow, ps->w, &w0, &w1);
    int64_t best = h0 * ps->w + w0;
    for (int64_t r = h0; r < h1; r++)
        for (int64_t q = w0; q < w1; q++) {
            int64_t at = r * ps->w + q;
            if (plane[at] > plane[best]) best = at;
        }
    return best;
}

void kiln_ref_max_pool2d_fwd(const kiln_pool_shape *ps, const double *x, double *y) {
    for (int64_t p = 0; p < ps->n * ps->c; p++) {
        const double *plane = x + p * ps->h * ps->w;
        for (int64_t oh = 0; oh < ps->oh; oh++)
            for (int64_t ow = 0; ow < ps->ow; ow++)
                y[(p * ps->oh + oh) * ps->ow + ow] = plane[argmax(ps, plane, oh, ow)];
    }
}

void kiln_ref_max_pool2d_bwd(const kiln_pool_shape *ps, const double *x, const double *dy, double *dx, int acc) {
    if (!acc) memset(dx, 0, (size_t)(ps->n * ps->c * ps->h * ps->w) * sizeof *dx);
    for (int64_t p = 0; p < ps->n * ps->c; p++) {
        const double *plane = x + p * ps->h * ps->w;
        for (int64_t oh = 0; oh < ps->oh; oh++)
            for (int64_t ow = 0; ow < ps->ow; ow++)
                dx[p * ps->h * ps->w + argmax(ps, plane, oh, ow)] += dy[(p * ps->oh + oh) * ps->ow + ow];
    }
}

void kiln_ref_max_pool2d_relu_bwd(const kiln_pool_shape *ps, const double *x, const double *dy, double *dx, int acc) {
    int64_t n = ps->n * ps->c * ps->h * ps->w;
    double *t = malloc((size_t)n * sizeof *t);
    if (!t) return;
    kiln_ref_max_pool2d_bwd(ps, x, dy, t, 0);
    kiln_ref_relu_bwd(n, x, t, dx, acc);
    free(t);
}
