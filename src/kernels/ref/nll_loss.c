/* Reference negative log-likelihood loss, mean over rows, double. Targets are
 * class indices in [0, cols). */
#include "kernels/internal/kernels.h"

void kiln_ref_nll_loss_fwd(int64_t rows, int64_t cols, const double *logp, const int32_t *target, double *loss) {
    double s = 0.0;
    for (int64_t i = 0; i < rows; i++) s -= logp[i * cols + target[i]];
    *loss = s / (double)rows;
}

void kiln_ref_nll_loss_bwd(int64_t rows, int64_t cols, const int32_t *target, const double *dloss, double *dlogp,
                           int acc) {
    double g = -*dloss / (double)rows;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            double v = j == target[i] ? g : 0.0;
            dlogp[i * cols + j] = acc ? dlogp[i * cols + j] + v : v;
        }
}
