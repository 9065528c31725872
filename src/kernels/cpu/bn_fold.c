/* Batch norm folded into the layer before it, float (the reference is
 * src/kernels/ref/bn_fold.c): each channel's scale gamma / sqrt(var + eps)
 * and the new bias in double, then one multiply per weight. Runs once per
 * inference run on the weights alone (a few thousand to a few million
 * values): one thread streams them at memory speed, so only the largest
 * (resnet18's 512x512x3x3) split channels across the team, whose start-up
 * would otherwise cost more than the work. */
#include <math.h>
#include "kernels/internal/kernels.h"

/* channel c's scale, and its new bias into b_out[c] */
static float channel(int64_t c, const float *b, const float *gamma, const float *beta, const float *mean, const float *var,
                     float eps, float *b_out) {
    double s = (double)gamma[c] / sqrt((double)var[c] + (double)eps);
    b_out[c] = (float)(((b ? (double)b[c] : 0.0) - (double)mean[c]) * s + (double)beta[c]);
    return (float)s;
}

void kiln_cpu_bn_fold(int64_t k, int64_t per, const float *w, const float *b, const float *gamma, const float *beta,
                      const float *mean, const float *var, float eps, float *w_out, float *b_out) {
#pragma omp parallel for schedule(static) if (k * per >= (int64_t)1 << 20)
    for (int64_t c = 0; c < k; c++) {
        float sf = channel(c, b, gamma, beta, mean, var, eps, b_out);
        const float *wc = w + c * per;
        float *oc = w_out + c * per;
        for (int64_t j = 0; j < per; j++) oc[j] = wc[j] * sf;
    }
}

/* for a layer whose kernel multiplies its weights as it reads them (kiln's Winograd): no pass over w at all */
void kiln_cpu_bn_fold_scale(int64_t k, const float *b, const float *gamma, const float *beta, const float *mean,
                            const float *var, float eps, float *scale, float *b_out) {
    for (int64_t c = 0; c < k; c++) scale[c] = channel(c, b, gamma, beta, mean, var, eps, b_out);
}
