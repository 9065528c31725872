/* Reference 2-D convolution (cross-correlation, as PyTorch), NCHW, double. */
#include <string.h>
#include "kernels/internal/kernels.h"

int kiln_conv_shape_infer(kiln_conv_shape *cs) {
    if (cs->n <= 0 || cs->c <= 0 || cs->h <= 0 || cs->w <= 0 || cs->k <= 0 || cs->r <= 0 || cs->s <= 0 ||
        cs->stride <= 0 || cs->pad < 0)
        return -1;
    int64_t eh = cs->h + 2 * cs->pad - cs->r, ew = cs->w + 2 * cs->pad - cs->s;
    if (eh < 0 || ew < 0) return -1;
    cs->oh = eh / cs->stride + 1;
    cs->ow = ew / cs->stride + 1;
    return 0;
}

void kiln_ref_conv2d_fwd(const kiln_conv_shape *cs, const double *x, const double *w, const double *b, double *y) {
    for (int64_t n = 0; n < cs->n; n++)
        for (int64_t k = 0; k < cs->k; k++)
            for (int64_t oh = 0; oh < cs->oh; oh++)
                for (int64_t ow = 0; ow < cs->ow; ow++) {
                    double s = b ? b[k] : 0.0;
                    for (int64_t c = 0; c < cs->c; c++)
                        for (int64_t r = 0; r < cs->r; r++) {
                            int64_t ih = oh * cs->stride - cs->pad + r;
                            if (ih < 0 || ih >= cs->h) continue;
                            for (int64_t q = 0; q < cs->s; q++) {
                                int64_t iw = ow * cs->stride - cs->pad + q;
                                if (iw < 0 || iw >= cs->w) continue;
                                s += x[((n * cs->c + c) * cs->h + ih) * cs->w + iw] *
                                     w[((k * cs->c + c) * cs->r + r) * cs->s + q];
                            }
                        }
                    y[((n * cs->k + k) * cs->oh + oh) * cs->ow + ow] = s;
                }
}

void kiln_ref_conv2d_bwd_data(const kiln_conv_shape *cs, const double *dy, const double *w, double *dx, int acc) {
    /* scatter each output gradient back through the window it read */
    if (!acc) memset(dx, 0, (size_t)(cs->n * cs->c * cs->h * cs->w) * sizeof *dx);
    for (int64_t n = 0; n < cs->n; n++)
        for (int64_t k = 0; k < cs->k; k++)
            for (int64_t oh = 0; oh < cs->oh; oh++)
                for (int64_t ow = 0; ow < cs->ow; ow++) {
                    double g = dy[((n * cs->k + k) * cs->oh + oh) * cs->ow + ow];
                    for (int64_t c = 0; c < cs->c; c++)
                        for (int64_t r = 0; r < cs->r; r++) {
                            int64_t ih = oh * cs->stride - cs->pad + r;
                            if (ih < 0 || ih >= cs->h) continue;
                            for (int64_t q = 0; q < cs->s; q++) {
                                int64_t iw = ow * cs->stride - cs->pad + q;
                                if (iw < 0 || iw >= cs->w) continue;
                                dx[((n * cs->c + c) * cs->h + ih) * cs->w + iw] +=
                                    g * w[((k * cs->c + c) * cs->r + r) * cs->s + q];
                            }
                        }
                }
}

void kiln_ref_conv2d_bwd_weight(const kiln_conv_shape *cs, const double *x, const double *dy, double *dw, double *db,
                                int acc) {
    for (int64_t k = 0; k < cs->k; k++)
        for (int64_t c = 0; c < cs->c; c++)
            for (int64_t r = 0; r < cs->r; r++)
                for (int64_t q = 0; q < cs->s; q++) {
                    double s = 0.0;
                    for (int64_t n = 0; n < cs->n; n++)
                        for (int64_t oh = 0; oh < cs->oh; oh++) {
                            int64_t ih = oh * cs->stride - cs->pad + r;
                            if (ih < 0 || ih >= cs->h) continue;
                            for (int64_t ow = 0; ow < cs->ow; ow++) {
                                int64_t iw = ow * cs->stride - cs->pad + q;
                                if (iw < 0 || iw >= cs->w) continue;
                                s += x[((n * cs->c + c) * cs->h + ih) * cs->w + iw] *
                                     dy[((n * cs->k + k) * cs->oh + oh) * cs->ow + ow];
                            }
                        }
                    double *d = &dw[((k * cs->c + c) * cs->r + r) * cs->s + q];
                    *d = acc ? *d + s : s;
                }
    if (!db) return;
    for (int64_t k = 0; k < cs->k; k++) {
        double s = 0.0;
        for (int64_t n = 0; n < cs->n; n++)
            for (int64_t i = 0; i < cs->oh * cs->ow; i++) s += dy[(n * cs->k + k) * cs->oh * cs->ow + i];
        db[k] = acc ? db[k] + s : s;
    }
}
