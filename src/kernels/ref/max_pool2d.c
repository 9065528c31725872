/* Reference max pooling (square window, no padding, floor mode), double. */
#include <stdlib.h>
#include <string.h>
#include "kernels/internal/kernels.h"

int kiln_pool_shape_infer(kiln_pool_shape *ps) {
    if (ps->n <= 0 || ps->c <= 0 || ps->h <= 0 || ps->w <= 0 || ps->k <= 0 || ps->stride <= 0) return -1;
    if (ps->h < ps->k || ps->w < ps->k) return -1;
    ps->oh = (ps->h - ps->k) / ps->stride + 1;
    ps->ow = (ps->w - ps->k) / ps->stride + 1;
    return 0;
}

/* offset within the plane of the window's max; strict > keeps the first of ties */
static int64_t argmax(const kiln_pool_shape *ps, const double *plane, int64_t oh, int64_t ow) {
    int64_t best = oh * ps->stride * ps->w + ow * ps->stride;
    for (int64_t r = 0; r < ps->k; r++)
        for (int64_t q = 0; q < ps->k; q++) {
            int64_t at = (oh * ps->stride + r) * ps->w + ow * ps->stride + q;
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
