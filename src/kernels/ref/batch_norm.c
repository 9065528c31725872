/* Reference batch normalisation over x[n, c, hw] (NCHW), double, following
 * PyTorch's BatchNorm2d: biased variance to normalise, unbiased variance for
 * the running estimate. */
#include <math.h>
#include "kernels/internal/kernels.h"

#define AT(a, i, ch, j) (a)[((i) * c + (ch)) * hw + (j)]

int kiln_ref_batch_norm_fwd(int64_t n, int64_t c, int64_t hw, const double *x, const double *w, const double *b,
                            double *rmean, double *rvar, double momentum, double eps, int training, double *y,
                            double *save_mean, double *save_invstd) {
    int64_t m = n * hw;
    if (training && m < 2) return -1;
    for (int64_t ch = 0; ch < c; ch++) {
        double mean, var;
        if (training) {
            double s = 0, q = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < hw; j++) s += AT(x, i, ch, j);
            mean = s / (double)m;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < hw; j++) q += (AT(x, i, ch, j) - mean) * (AT(x, i, ch, j) - mean);
            var = q / (double)m;
            rmean[ch] = (1 - momentum) * rmean[ch] + momentum * mean;
            rvar[ch] = (1 - momentum) * rvar[ch] + momentum * var * (double)m / (double)(m - 1);
        } else {
            mean = rmean[ch];
            var = rvar[ch];
        }
        double invstd = 1.0 / sqrt(var + eps);
        if (save_mean) save_mean[ch] = mean;
        if (save_invstd) save_invstd[ch] = invstd;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < hw; j++) AT(y, i, ch, j) = (AT(x, i, ch, j) - mean) * invstd * w[ch] + b[ch];
    }
    return 0;
}

void kiln_ref_batch_norm_bwd(int64_t n, int64_t c, int64_t hw, const double *x, const double *dy, const double *w,
                             const double *mean, const double *invstd, double *dx, double *dw, double *db, int acc_dx,
                             int acc_dw, int acc_db) {
    double m = (double)(n * hw);
    for (int64_t ch = 0; ch < c; ch++) {
        double sdy = 0, sdyx = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < hw; j++) {
                double xh = (AT(x, i, ch, j) - mean[ch]) * invstd[ch];
                sdy += AT(dy, i, ch, j);
                sdyx += AT(dy, i, ch, j) * xh;
            }
        if (dw) dw[ch] = acc_dw ? dw[ch] + sdyx : sdyx;
        if (db) db[ch] = acc_db ? db[ch] + sdy : sdy;
        if (!dx) continue;
        double k = w[ch] * invstd[ch] / m;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < hw; j++) {
                double xh = (AT(x, i, ch, j) - mean[ch]) * invstd[ch];
                double g = k * (m * AT(dy, i, ch, j) - sdy - xh * sdyx);
                AT(dx, i, ch, j) = acc_dx ? AT(dx, i, ch, j) + g : g;
            }
    }
}
