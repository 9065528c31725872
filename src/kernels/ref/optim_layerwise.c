/* Reference layer-wise optimizers, double: LAMB, LARS and NovoGrad written
 * from their papers, one parameter tensor at a time. Phase 0 computes each
 * tensor's sums of squares, phase 1 the update; a zero norm makes the trust
 * ratio 1 (APEX FusedLAMB, LARC). */
#include <math.h>
#include "kernels/internal/kernels.h"

#define FOR_TENSORS(a) for (int64_t k = 0; k < (a)->nseg; k++)
#define BEGIN(a, k) ((a)->seg[3 * (k)] - (a)->seg[0])
#define NUMEL(a, k) ((a)->seg[3 * (k) + 1])
#define DECAY(a, k) ((a)->seg[3 * (k) + 2] ? (a)->weight_decay : 0.0)

/* Adam's bias-corrected step direction plus decoupled decay: LAMB's update */
static double lamb_update(const kiln_layerwise_args *a, double m, double v, double p, double wd) {
    double bc1 = 1.0 - pow(a->beta1, (double)a->step), bc2 = 1.0 - pow(a->beta2, (double)a->step);
    return (m / bc1) / (sqrt(v / bc2) + a->eps) + wd * p;
}

/* ||w|| / ||update|| from their sums of squares */
static double ratio(double sp, double su) { return sp > 0 && su > 0 ? sqrt(sp) / sqrt(su) : 1.0; }

void kiln_ref_lamb(const kiln_layerwise_args *a, int phase, double *p, const double *g, double *m, double *v, double *norms) {
    FOR_TENSORS(a) {
        int64_t b = BEGIN(a, k), e = b + NUMEL(a, k);
        double wd = DECAY(a, k), sp = 0, su = 0;
        if (phase == 0) {
            for (int64_t i = b; i < e; i++) {
                m[i] = a->beta1 * m[i] + (1.0 - a->beta1) * g[i];
                v[i] = a->beta2 * v[i] + (1.0 - a->beta2) * g[i] * g[i];
                double u = lamb_update(a, m[i], v[i], p[i], wd);
                sp += p[i] * p[i];
                su += u * u;
            }
            norms[2 * k] = sp;
            norms[2 * k + 1] = su;
            continue;
        }
        double trust = ratio(norms[2 * k], norms[2 * k + 1]);
        for (int64_t i = b; i < e; i++) p[i] -= a->lr * trust * lamb_update(a, m[i], v[i], p[i], wd);
    }
}

void kiln_ref_lars(const kiln_layerwise_args *a, int phase, double *p, const double *g, double *buf, double *norms) {
    FOR_TENSORS(a) {
        int64_t b = BEGIN(a, k), e = b + NUMEL(a, k);
        double wd = DECAY(a, k), sp = 0, sg = 0;
        if (phase == 0) {
            for (int64_t i = b; i < e; i++) {
                sp += p[i] * p[i];
                sg += g[i] * g[i];
            }
            norms[2 * k] = sp;
            norms[2 * k + 1] = sg;
            continue;
        }
        double pn = sqrt(norms[2 * k]), gn = sqrt(norms[2 * k + 1]);
        double local = pn > 0 && gn > 0 ? a->trust * pn / (gn + wd * pn) : 1.0;
        for (int64_t i = b; i < e; i++) {
            buf[i] = a->momentum * buf[i] + a->lr * local * (g[i] + wd * p[i]);
            p[i] -= buf[i];
        }
    }
}

/* the per-tensor second moment: ||g||^2 on its first update (v still 0), then an average */
static double novograd_v(double v, double n2, double beta2) { return v == 0 ? n2 : beta2 * v + (1.0 - beta2) * n2; }

void kiln_ref_novograd(const kiln_layerwise_args *a, int phase, double *p, const double *g, double *m, double *v,
                       double *norms) {
    FOR_TENSORS(a) {
        int64_t b = BEGIN(a, k), e = b + NUMEL(a, k);
        if (phase == 0) {
            double sg = 0;
            for (int64_t i = b; i < e; i++) sg += g[i] * g[i];
            norms[2 * k] = sg;
            norms[2 * k + 1] = 0;
            continue;
        }
        v[k] = novograd_v(v[k], norms[2 * k], a->beta2);
        double denom = sqrt(v[k]) + a->eps, wd = DECAY(a, k);
        for (int64_t i = b; i < e; i++) {
            m[i] = a->beta1 * m[i] + (g[i] / denom + wd * p[i]);
            p[i] -= a->lr * m[i];
        }
    }
}
