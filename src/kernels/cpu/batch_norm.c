/* Batch normalisation, float, over x[n, c, hw] in plain NCHW (blocked = 0) or
 * oneDNN's nChw16c (blocked = 16: [n, c/16, hw, 16]), so a conv chain kept
 * blocked by the layout pass needs no reorder around its norms. Statistics
 * are summed in double, two passes (mean, then squared deviations), per
 * channel in a fixed order: the same bits for any thread count. Channels
 * (plain) or blocks of 16 channels (blocked, 16 lanes at once) are split
 * across the team. */
#include <math.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

#define L 16

/* the channels [ch, ch + lanes) as `lanes` interleaved streams: plain NCHW is
 * one channel (lanes 1, stride 1), a 16-channel block is 16 lanes */
typedef struct {
    int64_t n, hw, lanes;
    int64_t img; /* elements between images for this channel group */
    int64_t base;
} group;

static group group_of(int64_t n, int64_t c, int64_t hw, int blocked, int64_t g) {
    group G = {n, hw, blocked ? L : 1, c * hw, blocked ? g * hw * L : g * hw};
    return G;
}

static void group_stats(const group *G, const float *x, double *mean, double *var) {
    double s[L] = {0}, q[L] = {0}, m = (double)(G->n * G->hw);
    for (int64_t i = 0; i < G->n; i++) {
        const float *p = x + G->base + i * G->img;
        for (int64_t j = 0; j < G->hw; j++)
            for (int64_t l = 0; l < G->lanes; l++) s[l] += p[j * G->lanes + l];
    }
    for (int64_t l = 0; l < G->lanes; l++) mean[l] = s[l] / m;
    for (int64_t i = 0; i < G->n; i++) {
        const float *p = x + G->base + i * G->img;
        for (int64_t j = 0; j < G->hw; j++)
            for (int64_t l = 0; l < G->lanes; l++) {
                double d = p[j * G->lanes + l] - mean[l];
                q[l] += d * d;
            }
    }
    for (int64_t l = 0; l < G->lanes; l++) var[l] = q[l] / m;
}

int kiln_cpu_batch_norm_fwd(int64_t n, int64_t c, int64_t hw, int blocked, const float *x, const float *w, const float *b,
                            float *rmean, float *rvar, float momentum, float eps, int training, float *y,
                            float *save_mean, float *save_invstd) {
    int64_t m = n * hw, ngroups = blocked ? c / L : c;
    if (training && m < 2) return -1;
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < ngroups; g++) {
        group G = group_of(n, c, hw, blocked, g);
        int64_t c0 = g * G.lanes;
        double mean[L], var[L];
        float scale[L], shift[L];
        if (training) group_stats(&G, x, mean, var);
        for (int64_t l = 0; l < G.lanes; l++) {
            int64_t ch = c0 + l;
            if (training) {
                rmean[ch] = (float)((1.0 - momentum) * rmean[ch] + momentum * mean[l]);
                rvar[ch] = (float)((1.0 - momentum) * rvar[ch] + momentum * var[l] * (double)m / (double)(m - 1));
            } else {
                mean[l] = rmean[ch];
                var[l] = rvar[ch];
            }
            double invstd = 1.0 / sqrt(var[l] + eps);
            if (save_mean) save_mean[ch] = (float)mean[l];
            if (save_invstd) save_invstd[ch] = (float)invstd;
            scale[l] = (float)(invstd * w[ch]);
            shift[l] = (float)(b[ch] - mean[l] * invstd * w[ch]);
        }
        for (int64_t i = 0; i < n; i++) {
            const float *p = x + G.base + i * G.img;
            float *q = y + G.base + i * G.img;
            for (int64_t j = 0; j < hw; j++)
                for (int64_t l = 0; l < G.lanes; l++) q[j * G.lanes + l] = p[j * G.lanes + l] * scale[l] + shift[l];
        }
    }
    return 0;
}

void kiln_cpu_batch_norm_bwd(int64_t n, int64_t c, int64_t hw, int blocked, const float *x, const float *dy,
                             const float *w, const float *mean, const float *invstd, float *dx, float *dw, float *db,
                             int acc_dx, int acc_dw, int acc_db) {
    double m = (double)(n * hw);
    int64_t ngroups = blocked ? c / L : c;
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < ngroups; g++) {
        group G = group_of(n, c, hw, blocked, g);
        int64_t c0 = g * G.lanes;
        double sdy[L] = {0}, sdyx[L] = {0};
        for (int64_t i = 0; i < n; i++) {
            const float *px = x + G.base + i * G.img, *pd = dy + G.base + i * G.img;
            for (int64_t j = 0; j < hw; j++)
                for (int64_t l = 0; l < G.lanes; l++) {
                    double d = pd[j * G.lanes + l];
                    sdy[l] += d;
                    sdyx[l] += d * ((px[j * G.lanes + l] - mean[c0 + l]) * invstd[c0 + l]);
                }
        }
        /* dx = k (m dy - sum dy - xhat sum dy xhat), k = w invstd / m, as a dy + bx x + cc */
        float a[L], bx[L], cc[L];
        for (int64_t l = 0; l < G.lanes; l++) {
            int64_t ch = c0 + l;
            if (dw) dw[ch] = acc_dw ? dw[ch] + (float)sdyx[l] : (float)sdyx[l];
            if (db) db[ch] = acc_db ? db[ch] + (float)sdy[l] : (float)sdy[l];
            double k = w[ch] * (double)invstd[ch] / m, is = invstd[ch];
            a[l] = (float)(k * m);
            bx[l] = (float)(-k * sdyx[l] * is);
            cc[l] = (float)(k * (sdyx[l] * is * mean[ch] - sdy[l]));
        }
        if (!dx) continue;
        for (int64_t i = 0; i < n; i++) {
            const float *px = x + G.base + i * G.img, *pd = dy + G.base + i * G.img;
            float *po = dx + G.base + i * G.img;
            for (int64_t j = 0; j < hw; j++)
                for (int64_t l = 0; l < G.lanes; l++) {
                    int64_t o = j * G.lanes + l;
                    float v = a[l] * pd[o] + bx[l] * px[o] + cc[l];
                    po[o] = acc_dx ? po[o] + v : v;
                }
        }
    }
}
