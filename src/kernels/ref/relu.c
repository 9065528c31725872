/* Reference ReLU, double. The backward reads the saved output: y > 0 iff x > 0. */
#include "kernels/internal/kernels.h"

void kiln_ref_relu_fwd(int64_t n, const double *x, double *y) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0 ? x[i] : 0.0;
}

void kiln_ref_relu_bwd(int64_t n, const double *y, const double *dy, double *dx, int acc) {
    for (int64_t i = 0; i < n; i++) {
        double g = y[i] > 0.0 ? dy[i] : 0.0;
        dx[i] = acc ? dx[i] + g : g;
    }
}
