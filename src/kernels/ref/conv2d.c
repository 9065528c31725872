/* Reference 2-D convolution (cross-correlation, as PyTorch), NCHW, double,
 * with stride, zero padding, dilation and groups: output channel k of group
 * g = k / (K / groups) reads input channels [g * C/groups, (g + 1) * C/groups)
 * through weight [k, c / groups, r, s]. */
#include <string.h>
#include "kernels/internal/kernels.h"

int kiln_conv_shape_infer(kiln_conv_shape *cs) {
    if (cs->dilation == 0) cs->dilation = 1;
    if (cs->groups == 0) cs->groups = 1;
    if (cs->n <= 0 || cs->c <= 0 || cs->h <= 0 || cs->w <= 0 || cs->k <= 0 || cs->r <= 0 || cs->s <= 0 ||
        cs->stride <= 0 || cs->pad < 0 || cs->dilation < 1 || cs->groups < 1 || cs->c % cs->groups || cs->k % cs->groups)
        return -1;
    int64_t eh = cs->h + 2 * cs->pad - cs->dilation * (cs->r - 1) - 1, ew = cs->w + 2 * cs->pad - cs->dilation * (cs->s - 1) - 1;
    if (eh < 0 || ew < 0) return -1;
    cs->oh = eh / cs->stride + 1;
    cs->ow = ew / cs->stride + 1;
    return 0;
}

/* runs BODY for every (input xi, weight wi, output yi) element triple that
 * meets, in a fixed order: the three directions are this loop; OPEN and CLOSE
 * run around each output element's triples (the forward sums in a local, so
 * the sum stays in a register: y may alias x as far as the compiler knows) */
#define CONV_FOR_EACH_OUT(cs, OPEN, BODY, CLOSE)                                                         \
    do {                                                                                                 \
        int64_t cg_ = (cs)->c / (cs)->groups, kg_ = (cs)->k / (cs)->groups;                              \
        for (int64_t n = 0; n < (cs)->n; n++)                                                            \
            for (int64_t k = 0; k < (cs)->k; k++)                                                        \
                for (int64_t oh = 0; oh < (cs)->oh; oh++)                                                \
                    for (int64_t ow = 0; ow < (cs)->ow; ow++) {                                          \
                        int64_t yi = ((n * (cs)->k + k) * (cs)->oh + oh) * (cs)->ow + ow;                \
                        OPEN;                                                                            \
                        for (int64_t cc = 0; cc < cg_; cc++) {                                           \
                            int64_t c = k / kg_ * cg_ + cc;                                              \
                            for (int64_t r = 0; r < (cs)->r; r++) {                                      \
                                int64_t ih = oh * (cs)->stride - (cs)->pad + r * (cs)->dilation;         \
                                if (ih < 0 || ih >= (cs)->h) continue;                                   \
                                for (int64_t q = 0; q < (cs)->s; q++) {                                  \
                                    int64_t iw = ow * (cs)->stride - (cs)->pad + q * (cs)->dilation;     \
                                    if (iw < 0 || iw >= (cs)->w) continue;                               \
                                    int64_t xi = ((n * (cs)->c + c) * (cs)->h + ih) * (cs)->w + iw;      \
                                    int64_t wi = ((k * cg_ + cc) * (cs)->r + r) * (cs)->s + q;           \
                                    BODY;                                                                \
                                }                                                                        \
                            }                                                                            \
                        }                                                                                \
                        CLOSE;                                                                           \
                    }                                                                                    \
    } while (0)
#define CONV_FOR_EACH(cs, BODY) CONV_FOR_EACH_OUT(cs, (void)0, BODY, (void)0)

void kiln_ref_conv2d_fwd(const kiln_conv_shape *cs, const double *x, const double *w, const double *b, double *y) {
    double sum;
    CONV_FOR_EACH_OUT(cs, sum = b ? b[k] : 0.0, sum += x[xi] * w[wi], y[yi] = sum);
}

void kiln_ref_conv2d_bwd_data(const kiln_conv_shape *cs, const double *dy, const double *w, double *dx, int acc) {
    /* scatter each output gradient back through the window it read */
    if (!acc) memset(dx, 0, (size_t)(cs->n * cs->c * cs->h * cs->w) * sizeof *dx);
    CONV_FOR_EACH(cs, dx[xi] += dy[yi] * w[wi]);
}

void kiln_ref_conv2d_bwd_weight(const kiln_conv_shape *cs, const double *x, const double *dy, double *dw, double *db,
                                int acc) {
    int64_t nw = cs->k * (cs->c / cs->groups) * cs->r * cs->s;
    if (!acc) memset(dw, 0, (size_t)nw * sizeof *dw);
    CONV_FOR_EACH(cs, dw[wi] += x[xi] * dy[yi]);
    if (!db) return;
    for (int64_t k = 0; k < cs->k; k++) {
        double s = 0.0;
        for (int64_t n = 0; n < cs->n; n++)
            for (int64_t i = 0; i < cs->oh * cs->ow; i++) s += dy[(n * cs->k + k) * cs->oh * cs->ow + i];
        db[k] = acc ? db[k] + s : s;
    }
}
