/* Reference of He et al.'s option-A shortcut as one op, double, NCHW:
 * y[i, k, p, q] = x[i, k - before, p * s, q * s] for before <= k < before + c,
 * else 0 (x[:, :, ::s, ::s] with zero channels padded around it); the
 * backward puts dy's middle channels back on every s-th pixel, zeros between. */
#include "kernels/internal/kernels.h"

void kiln_ref_subsample_pad(const kiln_subsample_shape *S, const double *x, double *y) {
    int64_t oc = S->c + S->before + S->after, oh = (S->h + S->s - 1) / S->s, ow = (S->w + S->s - 1) / S->s;
    for (int64_t i = 0; i < S->n; i++)
        for (int64_t k = 0; k < oc; k++)
            for (int64_t p = 0; p < oh; p++)
                for (int64_t q = 0; q < ow; q++) {
                    int64_t c = k - S->before;
                    double v = c >= 0 && c < S->c ? x[((i * S->c + c) * S->h + p * S->s) * S->w + q * S->s] : 0.0;
                    y[((i * oc + k) * oh + p) * ow + q] = v;
                }
}

void kiln_ref_subsample_pad_bwd(const kiln_subsample_shape *S, const double *dy, double *dx, int acc) {
    int64_t oc = S->c + S->before + S->after, oh = (S->h + S->s - 1) / S->s, ow = (S->w + S->s - 1) / S->s;
    for (int64_t i = 0; i < S->n; i++)
        for (int64_t c = 0; c < S->c; c++)
            for (int64_t h = 0; h < S->h; h++)
                for (int64_t w = 0; w < S->w; w++) {
                    int on = h % S->s == 0 && w % S->s == 0;
                    double g = on ? dy[((i * oc + c + S->before) * oh + h / S->s) * ow + w / S->s] : 0.0;
                    double *d = &dx[((i * S->c + c) * S->h + h) * S->w + w];
                    *d = acc ? *d + g : g;
                }
}
