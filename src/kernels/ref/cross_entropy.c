/* Reference cross entropy = nll_loss(log_softmax(logits)), mean over rows,
 * double. A negative target is an ignored row (the backend lets only -1
 * through, and only for a masked loss): the mean is over the other rows. */
#include <math.h>
#include "kernels/internal/kernels.h"

static double row_lse(int64_t cols, const double *x) {
    double m = x[0];
    for (int64_t j = 1; j < cols; j++) m = x[j] > m ? x[j] : m;
    double s = 0.0;
    for (int64_t j = 0; j < cols; j++) s += exp(x[j] - m);
    return m + log(s);
}

void kiln_ref_cross_entropy_fwd(int64_t rows, int64_t cols, const double *logits, const int32_t *target,
                                double *loss) {
    double s = 0.0;
    int64_t n = 0;
    for (int64_t i = 0; i < rows; i++)
        if (target[i] >= 0) {
            s += row_lse(cols, logits + i * cols) - logits[i * cols + target[i]];
            n++;
        }
    *loss = n ? s / (double)n : 0.0;
}

/* dlogits = dloss / rows * (softmax - onehot(target)) */
void kiln_ref_cross_entropy_bwd(int64_t rows, int64_t cols, const double *logits, const int32_t *target,
                                const double *dloss, double *dlogits, int acc) {
    int64_t n = 0;
    for (int64_t i = 0; i < rows; i++) n += target[i] >= 0;
    double g = n ? *dloss / (double)n : 0.0;
    for (int64_t i = 0; i < rows; i++) {
        double lse = row_lse(cols, logits + i * cols);
        for (int64_t j = 0; j < cols; j++) {
            double v = target[i] < 0 ? 0.0 : g * (exp(logits[i * cols + j] - lse) - (j == target[i] ? 1.0 : 0.0));
            dlogits[i * cols + j] = acc ? dlogits[i * cols + j] + v : v;
        }
    }
}
