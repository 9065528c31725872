/* Reference layer norm over the last dim, double, two passes per row (mean,
 * then the biased variance), as nn.LayerNorm defines it. */
#include <math.h>
#include "kernels/internal/kernels.h"

void kiln_ref_layer_norm_fwd(int64_t rows, int64_t C, const double *x, const double *w, const double *b, double eps,
                             double *y, double *mean, double *rstd) {
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * C;
        double m = 0, v = 0;
        for (int64_t c = 0; c < C; c++) m += xr[c];
        m /= (double)C;
        for (int64_t c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
        double rs = 1.0 / sqrt(v / (double)C + eps);
        for (int64_t c = 0; c < C; c++) y[r * C + c] = (xr[c] - m) * rs * w[c] + b[c];
        mean[r] = m;
        rstd[r] = rs;
    }
}

/* with g = dy * w and xhat = (x - mean) * rstd:
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  dw = sum over rows of dy * xhat,  db = sum of dy */
void kiln_ref_layer_norm_bwd(int64_t rows, int64_t C, const double *x, const double *dy, const double *w,
                             const double *mean, const double *rstd, double *dx, double *dw, double *db, int acc_dx,
                             int acc_dw, int acc_db) {
    for (int64_t c = 0; c < C; c++) {
        if (dw && !acc_dw) dw[c] = 0;
        if (db && !acc_db) db[c] = 0;
    }
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * C, *gr = dy + r * C;
        double sg = 0, sgx = 0;
        for (int64_t c = 0; c < C; c++) {
            double xh = (xr[c] - mean[r]) * rstd[r];
            sg += gr[c] * w[c];
            sgx += gr[c] * w[c] * xh;
            if (dw) dw[c] += gr[c] * xh;
            if (db) db[c] += gr[c];
        }
        for (int64_t c = 0; dx && c < C; c++) {
            double xh = (xr[c] - mean[r]) * rstd[r];
            double v = rstd[r] * (gr[c] * w[c] - sg / (double)C - xh * sgx / (double)C);
            dx[r * C + c] = acc_dx ? dx[r * C + c] + v : v;
        }
    }
}
