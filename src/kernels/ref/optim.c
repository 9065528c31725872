/* Reference optimizers, double, following torch.optim (1.13, foreach=False,
 * maximize=False) operation by operation. */
#include <math.h>
#include "kernels/internal/kernels.h"

/* torch.optim.SGD: the momentum buffer starts as a copy of the (decayed)
 * gradient on the first step; later buf = momentum*buf + (1-dampening)*g. */
void kiln_ref_sgd(int64_t n, double *p, const double *g, double *mom, double lr, double momentum, double dampening,
                  double weight_decay, int nesterov, int first_step) {
    for (int64_t i = 0; i < n; i++) {
        double d = g[i];
        if (weight_decay != 0.0) d += weight_decay * p[i];
        if (momentum != 0.0) {
            double buf = first_step ? d : momentum * mom[i] + (1.0 - dampening) * d;
            mom[i] = buf;
            d = nesterov ? d + momentum * buf : buf;
        }
        p[i] -= lr * d;
    }
}

/* torch.optim.AdamW: decoupled decay, then bias-corrected Adam step. */
void kiln_ref_adamw(int64_t n, double *p, const double *g, double *m, double *v, double lr, double beta1,
                    double beta2, double eps, double weight_decay, int64_t step) {
    double bc1 = 1.0 - pow(beta1, (double)step);
    double bc2 = 1.0 - pow(beta2, (double)step);
    double step_size = lr / bc1;
    double bc2_sqrt = sqrt(bc2);
    for (int64_t i = 0; i < n; i++) {
        p[i] *= 1.0 - lr * weight_decay;
        m[i] = beta1 * m[i] + (1.0 - beta1) * g[i];
        v[i] = beta2 * v[i] + (1.0 - beta2) * g[i] * g[i];
        double denom = sqrt(v[i]) / bc2_sqrt + eps;
        p[i] -= step_size * m[i] / denom;
    }
}

/* torch.optim.Adadelta */
void kiln_ref_adadelta(int64_t n, double *p, const double *g, double *square_avg, double *acc_delta, double lr,
                       double rho, double eps, double weight_decay) {
    for (int64_t i = 0; i < n; i++) {
        double d = g[i];
        if (weight_decay != 0.0) d += weight_decay * p[i];
        square_avg[i] = rho * square_avg[i] + (1.0 - rho) * d * d;
        double std = sqrt(square_avg[i] + eps);
        double delta = sqrt(acc_delta[i] + eps) / std * d;
        acc_delta[i] = rho * acc_delta[i] + (1.0 - rho) * delta * delta;
        p[i] -= lr * delta;
    }
}

/* ---- the same over a run of tensors, each with its own weight decay ---- */
#define EACH_TENSOR(a, call)                                                                    \
    for (int64_t k = 0; k < (a)->nseg; k++) {                                                   \
        int64_t at = (a)->seg[3 * k] - (a)->seg[0], n = (a)->seg[3 * k + 1];                    \
        double wd = (a)->seg[3 * k + 2] ? (a)->weight_decay : 0.0;                              \
        call;                                                                                   \
    }

void kiln_ref_sgd_tensors(const kiln_layerwise_args *a, double *p, const double *g, double *mom) {
    EACH_TENSOR(a, kiln_ref_sgd(n, p + at, g + at, mom ? mom + at : NULL, a->lr, a->momentum, a->dampening, wd, a->nesterov,
                                a->step == 1))
}

void kiln_ref_adamw_tensors(const kiln_layerwise_args *a, double *p, const double *g, double *m, double *v) {
    EACH_TENSOR(a, kiln_ref_adamw(n, p + at, g + at, m + at, v + at, a->lr, a->beta1, a->beta2, a->eps, wd, a->step))
}

void kiln_ref_adadelta_tensors(const kiln_layerwise_args *a, double *p, const double *g, double *square_avg, double *acc_delta) {
    EACH_TENSOR(a, kiln_ref_adadelta(n, p + at, g + at, square_avg + at, acc_delta + at, a->lr, a->rho, a->eps, wd))
}
