/* Reference causal multi-head self-attention, double: the textbook formulas,
 * each score s_ij = q_i . k_j / sqrt(d) recomputed wherever it is needed (no
 * buffer), a row's softmax from its max and sum. Backward from the definitions:
 *   P_ij = exp(s_ij - lse_i),  dP_ij = dy_i . v_j,  D_i = sum_j P_ij dP_ij,
 *   dS_ij = P_ij (dP_ij - D_i),  dq_i = sum_j dS_ij k_j / sqrt(d),
 *   dk_j = sum_i dS_ij q_i / sqrt(d),  dv_j = sum_i P_ij dy_i   (j <= i). */
#include <math.h>
#include "kernels/internal/kernels.h"

typedef struct {
    const kiln_attn_shape *s;
    int64_t b, h, d;
    double scale;
} head;

static const double *row(const double *x, const int64_t *stride, const head *hd, int64_t i) {
    return x + hd->b * stride[0] + i * stride[1] + hd->h * hd->d;
}

/* row i of a contiguous [b, t, c] tensor, head columns */
static const double *crow(const double *x, const head *hd, int64_t i) {
    return x + (hd->b * hd->s->t + i) * hd->s->c + hd->h * hd->d;
}

/* row i of dq, dk or dv (d_stride), head columns */
static double *drow(double *x, const head *hd, int64_t i) {
    return x ? x + hd->b * hd->s->d_stride[0] + i * hd->s->d_stride[1] + hd->h * hd->d : NULL;
}

static double score(const head *hd, const double *q, const double *k, int64_t i, int64_t j) {
    const double *qi = row(q, hd->s->q_stride, hd, i), *kj = row(k, hd->s->k_stride, hd, j);
    double sum = 0;
    for (int64_t c = 0; c < hd->d; c++) sum += qi[c] * kj[c];
    return sum * hd->scale;
}

static head head_of(const kiln_attn_shape *s, int64_t b, int64_t h) {
    int64_t d = s->c / s->heads;
    return (head){s, b, h, d, 1.0 / sqrt((double)d)};
}

void kiln_ref_causal_attention_fwd(const kiln_attn_shape *s, const double *q, const double *k, const double *v,
                                   double *y, double *lse) {
    for (int64_t b = 0; b < s->b; b++)
        for (int64_t h = 0; h < s->heads; h++) {
            head hd = head_of(s, b, h);
            for (int64_t i = 0; i < s->t; i++) {
                double m = -INFINITY, l = 0;
                for (int64_t j = 0; j <= i; j++) m = fmax(m, score(&hd, q, k, i, j));
                for (int64_t j = 0; j <= i; j++) l += exp(score(&hd, q, k, i, j) - m);
                double *yi = (double *)crow(y, &hd, i);
                for (int64_t c = 0; c < hd.d; c++) yi[c] = 0;
                for (int64_t j = 0; j <= i; j++) {
                    double p = exp(score(&hd, q, k, i, j) - m) / l;
                    const double *vj = row(v, s->v_stride, &hd, j);
                    for (int64_t c = 0; c < hd.d; c++) yi[c] += p * vj[c];
                }
                lse[(b * s->heads + h) * s->t + i] = m + log(l);
            }
        }
}

static double dot(const double *a, const double *b, int64_t n) {
    double sum = 0;
    for (int64_t c = 0; c < n; c++) sum += a[c] * b[c];
    return sum;
}

/* one head's gradients, added into dq, dk, dv (any of them NULL) */
static void head_bwd(const head *hd, const double *q, const double *k, const double *v, const double *lse,
                     const double *dy, double *dq, double *dk, double *dv) {
    const kiln_attn_shape *s = hd->s;
    const double *L = lse + (hd->b * s->heads + hd->h) * s->t;
    for (int64_t i = 0; i < s->t; i++) {
        const double *dyi = crow(dy, hd, i), *qi = row(q, s->q_stride, hd, i);
        double D = 0;
        for (int64_t j = 0; j <= i; j++)
            D += exp(score(hd, q, k, i, j) - L[i]) * dot(dyi, row(v, s->v_stride, hd, j), hd->d);
        for (int64_t j = 0; j <= i; j++) {
            const double *kj = row(k, s->k_stride, hd, j);
            double p = exp(score(hd, q, k, i, j) - L[i]), ds = p * (dot(dyi, row(v, s->v_stride, hd, j), hd->d) - D);
            double *dqi = drow(dq, hd, i), *dkj = drow(dk, hd, j), *dvj = drow(dv, hd, j);
            for (int64_t c = 0; c < hd->d; c++) {
                if (dqi) dqi[c] += ds * kj[c] * hd->scale;
                if (dkj) dkj[c] += ds * qi[c] * hd->scale;
                if (dvj) dvj[c] += p * dyi[c];
            }
        }
    }
}

void kiln_ref_causal_attention_bwd(const kiln_attn_shape *s, const double *q, const double *k, const double *v,
                                   const double *lse, const double *dy, double *dq, double *dk, double *dv, int acc_q,
                                   int acc_k, int acc_v) {
    /* zero what is written before anything is added: when q, k, v are one value their
     * gradients are one buffer (only the first writes), and every part simply adds */
    double *out[3] = {dq, dk, dv};
    int acc[3] = {acc_q, acc_k, acc_v};
    for (int o = 0; o < 3; o++)
        for (int64_t r = 0; out[o] && !acc[o] && r < s->b * s->t; r++)
            for (int64_t c = 0; c < s->c; c++) out[o][(r / s->t) * s->d_stride[0] + (r % s->t) * s->d_stride[1] + c] = 0;
    for (int64_t b = 0; b < s->b; b++)
        for (int64_t h = 0; h < s->heads; h++) {
            head hd = head_of(s, b, h);
            head_bwd(&hd, q, k, v, lse, dy, dq, dk, dv);
        }
}
