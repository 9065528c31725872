/* Reference softmax over the last dimension, double. */
#include <math.h>
#include "kernels/internal/kernels.h"

void kiln_ref_softmax_fwd(int64_t rows, int64_t cols, const double *x, double *y) {
    for (int64_t i = 0; i < rows; i++) {
        const double *xr = x + i * cols;
        double m = xr[0], s = 0;
        for (int64_t j = 1; j < cols; j++) m = xr[j] > m ? xr[j] : m;
        for (int64_t j = 0; j < cols; j++) s += exp(xr[j] - m);
        for (int64_t j = 0; j < cols; j++) y[i * cols + j] = exp(xr[j] - m) / s;
    }
}

/* dx = y * (dy - sum(dy * y)) */
void kiln_ref_softmax_bwd(int64_t rows, int64_t cols, const double *y, const double *dy, double *dx, int acc) {
    for (int64_t i = 0; i < rows; i++) {
        const double *yr = y + i * cols, *gr = dy + i * cols;
        double s = 0;
        for (int64_t j = 0; j < cols; j++) s += gr[j] * yr[j];
        for (int64_t j = 0; j < cols; j++) {
            double g = yr[j] * (gr[j] - s);
            dx[i * cols + j] = acc ? dx[i * cols + j] + g : g;
        }
    }
}
