/* Reference fold of an evaluation-mode batch norm into the weights and bias
 * of the layer before it: bn(layer(x, w, b)) = layer(x, w', b') with, per
 * output channel k, s = gamma / sqrt(var + eps), w'[k] = w[k] * s and
 * b'[k] = (b[k] - mean[k]) * s + beta[k]. */
#include <math.h>
#include "kernels/internal/kernels.h"

void kiln_ref_bn_fold(int64_t k, int64_t per, const double *w, const double *b, const double *gamma, const double *beta,
                      const double *mean, const double *var, double eps, double *w_out, double *b_out) {
    for (int64_t c = 0; c < k; c++) {
        double s = gamma[c] / sqrt(var[c] + eps);
        for (int64_t j = 0; j < per; j++) w_out[c * per + j] = w[c * per + j] * s;
        b_out[c] = ((b ? b[c] : 0.0) - mean[c]) * s + beta[c];
    }
}
