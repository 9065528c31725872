/* Reference batch normalisation over x[n, c, hw] (NCHW), double, following
 * PyTorch's BatchNorm2d: biased variance to normalise, unbiased variance for
 * the running estimate. With a collective (sync batch norm) each channel's
 * count and sum, then its squared deviations from the global mean, and in
 * backward its sums of dy and dy * xhat, are summed over the processes, one
 * channel at a time: slow, and obviously the same arithmetic as one process
 * holding every process's batch. */
#include <math.h>
#include "kernels/internal/kernels.h"

#define AT(a, i, ch, j) (a)[((i) * c + (ch)) * hw + (j)]

/* the channel's mean and biased variance over every process's batch, and the global count */
static int channel_stats(int64_t n, int64_t c, int64_t hw, const double *x, int64_t ch, const kiln_collective *co,
                         double *mean, double *var, double *count) {
    double sm[2] = {0, (double)(n * hw)}, q = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < hw; j++) sm[0] += AT(x, i, ch, j);
    if (kiln_collective_sum(co, sm, 2)) return -2;
    *mean = sm[0] / sm[1];
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < hw; j++) q += (AT(x, i, ch, j) - *mean) * (AT(x, i, ch, j) - *mean);
    if (kiln_collective_sum(co, &q, 1)) return -2;
    *var = q / sm[1];
    *count = sm[1];
    return 0;
}

int kiln_ref_batch_norm_fwd(int64_t n, int64_t c, int64_t hw, const double *x, const double *w, const double *b,
                            double *rmean, double *rvar, double momentum, double eps, int training, double *y,
                            double *save_mean, double *save_invstd, const kiln_collective *co) {
    if (training && n * hw < 2) return -1;
    for (int64_t ch = 0; ch < c; ch++) {
        double mean = rmean[ch], var = rvar[ch], m;
        if (training) {
            if (channel_stats(n, c, hw, x, ch, co, &mean, &var, &m)) return -2;
            rmean[ch] = (1 - momentum) * rmean[ch] + momentum * mean;
            rvar[ch] = (1 - momentum) * rvar[ch] + momentum * var * m / (m - 1);
        }
        double invstd = 1.0 / sqrt(var + eps);
        if (save_mean) save_mean[ch] = mean;
        if (save_invstd) save_invstd[ch] = invstd;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < hw; j++) AT(y, i, ch, j) = (AT(x, i, ch, j) - mean) * invstd * w[ch] + b[ch];
    }
    return 0;
}

/* dy, or 0 where relu cut the forward's y off (b given: the fused relu's backward),
 * y recomputed by the forward's formula */
static double masked_dy(const double *x, const double *dy, const double *w, const double *b, const double *mean,
                        const double *invstd, int64_t c, int64_t hw, int64_t i, int64_t ch, int64_t j) {
    if (b && !((AT(x, i, ch, j) - mean[ch]) * invstd[ch] * w[ch] + b[ch] > 0.0)) return 0.0;
    return AT(dy, i, ch, j);
}

int kiln_ref_batch_norm_relu_bwd(int64_t n, int64_t c, int64_t hw, const double *x, const double *dy, const double *w,
                                 const double *b, const double *mean, const double *invstd, double *dx, double *dw,
                                 double *db, int acc_dx, int acc_dw, int acc_db, const kiln_collective *co) {
    for (int64_t ch = 0; ch < c; ch++) {
        double sdy = 0, sdyx = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < hw; j++) {
                double xh = (AT(x, i, ch, j) - mean[ch]) * invstd[ch], d = masked_dy(x, dy, w, b, mean, invstd, c, hw, i, ch, j);
                sdy += d;
                sdyx += d * xh;
            }
        if (dw) dw[ch] = acc_dw ? dw[ch] + sdyx : sdyx;
        if (db) db[ch] = acc_db ? db[ch] + sdy : sdy;
        if (!dx) continue; /* every process's graph is the same: all skip alike */
        double g3[3] = {sdy, sdyx, (double)(n * hw)}; /* this process's sums, then everyone's */
        if (kiln_collective_sum(co, g3, 3)) return -2;
        double m = g3[2], k = w[ch] * invstd[ch] / m;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < hw; j++) {
                double xh = (AT(x, i, ch, j) - mean[ch]) * invstd[ch];
                double g = k * (m * masked_dy(x, dy, w, b, mean, invstd, c, hw, i, ch, j) - g3[0] - xh * g3[1]);
                AT(dx, i, ch, j) = acc_dx ? AT(dx, i, ch, j) + g : g;
            }
    }
    return 0;
}

int kiln_ref_batch_norm_bwd(int64_t n, int64_t c, int64_t hw, const double *x, const double *dy, const double *w,
                            const double *mean, const double *invstd, double *dx, double *dw, double *db, int acc_dx,
                            int acc_dw, int acc_db, const kiln_collective *co) {
    return kiln_ref_batch_norm_relu_bwd(n, c, hw, x, dy, w, NULL, mean, invstd, dx, dw, db, acc_dx, acc_dw, acc_db, co);
}
