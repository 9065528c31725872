/* Reference log-softmax over the last dimension, double. */
#include <math.h>
#include "kernels/internal/kernels.h"

void kiln_ref_log_softmax_fwd(int64_t rows, int64_t cols, const double *x, double *y) {
    for (int64_t i = 0; i < rows; i++) {
        const double *xr = x + i * cols;
        double m = xr[0];
        for (int64_t j = 1; j < cols; j++) m = xr[j] > m ? xr[j] : m;
        double s = 0.0;
        for (int64_t j = 0; j < cols; j++) s += exp(xr[j] - m);
        double lse = m + log(s);
        for (int64_t j = 0; j < cols; j++) y[i * cols + j] = xr[j] - lse;
    }
}

/* dx = dy - softmax * sum(dy), with softmax = exp(y) */
void kiln_ref_log_softmax_bwd(int64_t rows, int64_t cols, const double *y, const double *dy, double *dx, int acc) {
    for (int64_t i = 0; i < rows; i++) {
        double s = 0.0;
        for (int64_t j = 0; j < cols; j++) s += dy[i * cols + j];
        for (int64_t j = 0; j < cols; j++) {
            double g = dy[i * cols + j] - exp(y[i * cols + j]) * s;
            dx[i * cols + j] = acc ? dx[i * cols + j] + g : g;
        }
    }
}
