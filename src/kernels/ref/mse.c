/* Reference mean squared error (F.mse_loss, reduction mean), double. */
#include "kernels/internal/kernels.h"

void kiln_ref_mse_loss_fwd(int64_t n, const double *x, const double *target, double *loss) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (x[i] - target[i]) * (x[i] - target[i]);
    *loss = s / (double)n;
}

void kiln_ref_mse_loss_bwd(int64_t n, const double *x, const double *target, const double *dloss, double *dx, int acc,
                           int relu_mask) {
    for (int64_t i = 0; i < n; i++) {
        double v = relu_mask && !(x[i] > 0.0) ? 0.0 : 2.0 * (x[i] - target[i]) * *dloss / (double)n;
        dx[i] = acc ? dx[i] + v : v;
    }
}
