/* Batch norm folded into the layer before it, float (the reference is
 * src/kernels/ref/bn_fold.c): each channel's scale gamma / sqrt(var + eps)
 * and the new bias in double, then one multiply per weight. Runs once per
 * inference run on the weights alone (a few thousand to a few million
 * values): one thread streams them at memory speed, so only the largest
 * (resnet18's 512x512x3x3) split channels across the team, whose start-up
 * would otherwise cost more than the work. */
#include <math.h>
#include "kernels/internal/kernels.h"

void kiln_cpu_bn_fold(int64_t k, int64_t per, const float *w, const float *b, const float *gamma, const float *beta,
                      const float *mean, const float *var, float eps, float *w_out, float *b_out) {
#pragma omp parallel for schedule(static) if (k * per >= (int64_t)1 << 20)
    for (int64_t c = 0; c < k; c++) {
        double s = (double)gamma[c] / sqrt((double)var[c] + (double)eps);
        float sf = (float)s;
        const float *wc = w + c * per;
        float *oc = w_out + c * per;
        for (int64_t j = 0; j < per; j++) oc[j] = wc[j] * sf;
        b_out[c] = (float)(((b ? (double)b[c] : 0.0) - (double)mean[c]) * s + (double)beta[c]);
    }
}
