/* The reference backend's kernel table: each op on the double kernels of
 * src/kernels/ref/, plain layouts only. Epilogues the fusion pass folds in
 * (relu after conv and linear, relu's backward into max-pool's) are applied
 * here too, so reference plans can check fused fast plans step for step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backends/ref/internal/ref.h"

#define D(t) ((double *)(t).data)
#define I(t) ((const int32_t *)(t).data)
#define ACC(k) kiln_step_acc(s, rc, (k))
#define UNUSED (void)rc

static void epilogue_relu(const kiln_step *s) {
    if (s->epilogue == KILN_EPI_ADD_RELU) { /* batch norm's fused residual add (input 6), then relu */
        double *y = D(s->out[0]);
        const double *r = D(s->in[6]);
        for (int64_t i = 0; i < s->out[0].numel; i++) y[i] += r[i];
    }
    if (s->epilogue == KILN_EPI_RELU || s->epilogue == KILN_EPI_ADD_RELU)
        kiln_ref_relu_fwd(s->out[0].numel, D(s->out[0]), D(s->out[0]));
}

/* ---- conv2d and linear ---- */

static kiln_status conv_prepare(kiln_step *s, kiln_prep *p) {
    (void)p;
    const kiln_tdesc *x = &s->in[0], *w = &s->in[1];
    s->sz.conv = (kiln_conv_shape){.n = x->shape[0], .c = x->shape[1], .h = x->shape[2], .w = x->shape[3],
                                   .k = w->shape[0], .r = w->shape[2], .s = w->shape[3],
                                   .stride = s->attr.conv.stride, .pad = s->attr.conv.pad,
                                   .dilation = s->attr.conv.dilation, .groups = s->attr.conv.groups};
    kiln_conv_shape_infer(&s->sz.conv);
    return KILN_OK;
}

static kiln_status from_fwd(kiln_step *s, kiln_prep *p) {
    if (s->fwd_step < 0) return kiln_fail(KILN_ERR_INVALID_ARG, "no forward step to differentiate");
    s->sz = p->steps[s->fwd_step].sz;
    return KILN_OK;
}

/* A backend's 16-bit convolution output (kiln_step.round_out, the cuda backend's cuDNN): the convolution's sum is
 * rounded to the step's 16 bits, then the bias (and residual, epilogue) added in full precision; a rounded
 * gradient is added as rounded where it accumulates. A batch norm the backend runs in 16 bits after such a
 * convolution (autocast follows) rounds its output, after the fused relu; an add of two 16-bit values rounds the
 * sum (in a fused group: kiln_ref_round_tile per member). Relu and max-pool of 16-bit numbers are exact */
static int rounds(const kiln_step *s) { return s->round_out & 1; }

static void conv_bias(const kiln_conv_shape *cs, const double *b, double *y) {
    int64_t ohw = cs->oh * cs->ow;
    for (int64_t i = 0; b && i < cs->n * cs->k * ohw; i++) y[i] += b[i / ohw % cs->k];
}

/* the convolution into y, its sum rounded where the step rounds, then the bias */
static void conv_sum(const kiln_step *s, const double *b, double *y) {
    kiln_ref_conv2d_fwd(&s->sz.conv, D(s->in[0]), D(s->in[1]), rounds(s) ? NULL : b, y);
    if (!rounds(s)) return;
    kiln_ref_round_reduced(s, y, s->out[0].numel);
    conv_bias(&s->sz.conv, b, y);
}

static kiln_status conv(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    conv_sum(s, s->nin > 2 ? D(s->in[2]) : NULL, D(s->out[0]));
    epilogue_relu(s);
    return KILN_OK;
}

/* conv2d_add: the convolution, then the residual added (in place when y took r's storage), then the epilogue */
static kiln_status conv_add(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    int64_t n = s->out[0].numel;
    double *y = D(s->out[0]), *r = D(s->in[3]), *t = y;
    if (r == y && !(t = malloc((size_t)n * sizeof *t))) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", s->name);
    conv_sum(s, D(s->in[2]), t);
    for (int64_t i = 0; i < n; i++) y[i] = t[i] + r[i];
    if (t != y) free(t);
    epilogue_relu(s);
    return KILN_OK;
}

/* a rounded gradient's values t into out: written, or added where the step accumulates */
static void put_rounded(const kiln_step *s, double *t, int64_t n, double *out, int acc) {
    kiln_ref_round_reduced(s, t, n);
    for (int64_t i = 0; i < n; i++) out[i] = acc ? out[i] + t[i] : t[i];
}

static kiln_status conv_bwd_data(const kiln_step *s, const kiln_run_ctx *rc) {
    int64_t n = s->out[0].numel;
    double *t = rounds(s) ? calloc((size_t)n, sizeof *t) : NULL;
    if (rounds(s) && !t) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", s->name);
    kiln_ref_conv2d_bwd_data(&s->sz.conv, D(s->in[0]), D(s->in[1]), t ? t : D(s->out[0]), t ? 0 : ACC(0));
    if (t) put_rounded(s, t, n, D(s->out[0]), ACC(0));
    free(t);
    return KILN_OK;
}

/* dw rounded (the bias gradient, summed from the rounded dy, is not): both into fresh sums first */
static kiln_status conv_bwd_weight_rounded(const kiln_step *s, const kiln_run_ctx *rc) {
    int64_t n = s->out[0].numel, k = s->sz.conv.k;
    double *db = s->nout > 1 ? D(s->out[1]) : NULL, *t = calloc((size_t)(n + k), sizeof *t);
    if (!t) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", s->name);
    kiln_ref_conv2d_bwd_weight(&s->sz.conv, D(s->in[0]), D(s->in[1]), t, db ? t + n : NULL, 0);
    put_rounded(s, t, n, D(s->out[0]), ACC(0));
    for (int64_t i = 0; db && i < k; i++) db[i] = ACC(1) ? db[i] + t[n + i] : t[n + i];
    free(t);
    return KILN_OK;
}

static kiln_status conv_bwd_weight(const kiln_step *s, const kiln_run_ctx *rc) {
    if (rounds(s)) return conv_bwd_weight_rounded(s, rc);
    const kiln_conv_shape *cs = &s->sz.conv;
    double *db = s->nout > 1 ? D(s->out[1]) : NULL;
    if (db && ACC(1) != ACC(0)) {
        /* one kernel call computes both; when only one output accumulates, stage the bias */
        double tmp[4096];
        if (cs->k > 4096) return kiln_fail(KILN_ERR_INVALID_ARG, "too many channels");
        kiln_ref_conv2d_bwd_weight(cs, D(s->in[0]), D(s->in[1]), D(s->out[0]), tmp, ACC(0));
        for (int64_t i = 0; i < cs->k; i++) db[i] = ACC(1) ? db[i] + tmp[i] : tmp[i];
    } else {
        kiln_ref_conv2d_bwd_weight(cs, D(s->in[0]), D(s->in[1]), D(s->out[0]), db, ACC(0));
    }
    return KILN_OK;
}

/* A backend's 16-bit product (kiln_step.round_out, the cuda backend's cuBLASLt, as PyTorch's autocast linear): its
 * bias rounded as an operand (*b: a copy in *copy, which product_end frees), the relu, then the output rounded */
static kiln_status product_bias(const kiln_step *s, int64_t n, const double **b, double **copy) {
    *b = s->nin > 2 ? D(s->in[2]) : NULL;
    *copy = NULL;
    if (!*b || !rounds(s)) return KILN_OK;
    if (!(*copy = malloc((size_t)n * sizeof **copy))) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", s->name);
    memcpy(*copy, *b, (size_t)n * sizeof **copy);
    kiln_ref_round_reduced(s, *copy, n);
    *b = *copy;
    return KILN_OK;
}
static kiln_status product_end(const kiln_step *s, double *copy) {
    free(copy);
    epilogue_relu(s);
    if (rounds(s)) kiln_ref_round_reduced(s, D(s->out[0]), s->out[0].numel);
    return KILN_OK;
}

/* linear (w [O,I]) and matmul (w [I,O]) over x [..., I]: rows are all leading dims */
static kiln_status linear(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    const kiln_tdesc *x = &s->in[0], *w = &s->in[1];
    int64_t in = w->shape[1], out = w->shape[0];
    const double *b;
    double *copy;
    kiln_status st = product_bias(s, out, &b, &copy);
    if (st != KILN_OK) return st;
    kiln_ref_linear_fwd(x->numel / in, in, out, D(*x), D(*w), b, D(s->out[0]));
    return product_end(s, copy);
}

static kiln_status matmul(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    const kiln_tdesc *x = &s->in[0], *w = &s->in[1];
    int64_t in = w->shape[0], out = w->shape[1];
    const double *b;
    double *copy;
    kiln_status st = product_bias(s, out, &b, &copy);
    if (st != KILN_OK) return st;
    kiln_ref_matmul_fwd(x->numel / in, in, out, D(*x), D(*w), b, D(s->out[0]));
    return product_end(s, copy);
}

static kiln_status linear_bwd_data(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_tdesc *dy = &s->in[0], *w = &s->in[1];
    kiln_ref_linear_bwd_data(dy->numel / w->shape[0], w->shape[1], w->shape[0], D(*dy), D(*w), D(s->out[0]), ACC(0));
    return KILN_OK;
}

static kiln_status matmul_bwd_data(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_tdesc *dy = &s->in[0], *w = &s->in[1];
    kiln_ref_matmul_bwd_data(dy->numel / w->shape[1], w->shape[0], w->shape[1], D(*dy), D(*w), D(s->out[0]), ACC(0));
    return KILN_OK;
}

/* the bias gradient: column sums of dy [rows, out] */
static void bias_grad(const kiln_step *s, const kiln_run_ctx *rc, int64_t rows, int64_t out) {
    double *db = s->nout > 1 ? D(s->out[1]) : NULL;
    for (int64_t o = 0; db && o < out; o++) {
        double sum = 0;
        for (int64_t r = 0; r < rows; r++) sum += D(s->in[1])[r * out + o];
        db[o] = ACC(1) ? db[o] + sum : sum;
    }
}

static kiln_status linear_bwd_weight(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_tdesc *x = &s->in[0], *dy = &s->in[1];
    int64_t in = x->shape[x->ndim - 1], out = dy->shape[dy->ndim - 1], rows = x->numel / in;
    kiln_ref_linear_bwd_weight(rows, in, out, D(*x), D(*dy), D(s->out[0]), NULL, ACC(0));
    bias_grad(s, rc, rows, out);
    return KILN_OK;
}

static kiln_status matmul_bwd_weight(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_tdesc *x = &s->in[0], *dy = &s->in[1];
    int64_t in = x->shape[x->ndim - 1], out = dy->shape[dy->ndim - 1], rows = x->numel / in;
    kiln_ref_matmul_bwd_weight(rows, in, out, D(*x), D(*dy), D(s->out[0]), ACC(0));
    bias_grad(s, rc, rows, out);
    return KILN_OK;
}

/* ---- bmm and causal attention (strided operands read in place) ---- */

static kiln_status bmm(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_ref_bmm_fwd(&s->sz.bmm, D(s->in[0]), D(s->in[1]), D(s->out[0]));
    return KILN_OK;
}

static kiln_status bmm_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_ref_bmm_bwd(&s->sz.bmm, D(s->in[0]), D(s->in[1]), D(s->in[2]), D(s->out[0]), D(s->out[1]), ACC(0), ACC(1));
    return KILN_OK;
}

static kiln_status attention(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_ref_causal_attention_fwd(&s->sz.attn.shape, D(s->in[0]), D(s->in[1]), D(s->in[2]), D(s->out[0]), D(s->out[1]));
    return KILN_OK;
}

/* in: q, k, v, y (unused: D_i from its definition), lse, dy */
static kiln_status attention_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    void *d[3];
    int acc[3];
    kiln_attention_grads(s, rc, d, acc);
    kiln_ref_causal_attention_bwd(&s->sz.attn.shape, D(s->in[0]), D(s->in[1]), D(s->in[2]), D(s->in[4]), D(s->in[5]), d[0],
                                  d[1], d[2], acc[0], acc[1], acc[2]);
    return KILN_OK;
}

/* ---- pointwise, pooling, dropout ---- */

static kiln_status relu(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_ref_relu_fwd(s->out[0].numel, D(s->in[0]), D(s->out[0]));
    return KILN_OK;
}

static kiln_status relu_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_ref_relu_bwd(s->out[0].numel, D(s->in[0]), D(s->in[1]), D(s->out[0]), ACC(0));
    return KILN_OK;
}

static kiln_status pool(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_ref_max_pool2d_fwd(&s->sz.pool, D(s->in[0]), D(s->out[0]));
    return KILN_OK;
}

static kiln_status pool_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    if (s->epilogue == KILN_EPI_RELU_BWD_MASK)
        kiln_ref_max_pool2d_relu_bwd(&s->sz.pool, D(s->in[0]), D(s->in[1]), D(s->out[0]), ACC(0));
    else kiln_ref_max_pool2d_bwd(&s->sz.pool, D(s->in[0]), D(s->in[1]), D(s->out[0]), ACC(0));
    return KILN_OK;
}

static kiln_status dropout(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_ref_dropout_fwd(s->out[0].numel, s->attr.dropout.p, s->key, rc->counter, D(s->in[0]), D(s->out[0]));
    return KILN_OK;
}

static kiln_status dropout_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_ref_dropout_bwd(s->out[0].numel, s->attr.dropout.p, s->key, rc->counter, D(s->in[0]), D(s->out[0]), ACC(0));
    return KILN_OK;
}

static kiln_status add(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_ref_add_fwd(s->out[0].numel, D(s->in[0]), D(s->in[1]), D(s->out[0]));
    if (rounds(s)) kiln_ref_round_reduced(s, D(s->out[0]), s->out[0].numel); /* a backend's add of 16-bit operands */
    return KILN_OK;
}

static kiln_status mul(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_ref_mul_fwd(s->out[0].numel, D(s->in[0]), D(s->in[1]), D(s->out[0]));
    return KILN_OK;
}

static kiln_status mul_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_ref_mul_bwd(s->out[0].numel, D(s->in[0]), D(s->in[1]), D(s->out[0]), ACC(0));
    return KILN_OK;
}

/* backward's seed, times the gradient scaler's scale when there is one */
static kiln_status ones(const kiln_step *s, const kiln_run_ctx *rc) {
    D(s->out[0])[0] = rc->loss_scale * (rc->amp ? (double)rc->amp->scale : 1.0);
    return KILN_OK;
}

static kiln_status grad_copy(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_tdesc *x = &s->in[0];
    if (x->contiguous) kiln_ref_grad_copy(s->out[0].numel, D(*x), D(s->out[0]), ACC(0));
    else kiln_ref_copy_strided(x->ndim, x->shape, D(*x), x->stride, D(s->out[0]), ACC(0));
    return KILN_OK;
}

static kiln_status contiguous(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    const kiln_tdesc *x = &s->in[0];
    kiln_ref_copy_strided(x->ndim, x->shape, D(*x), x->stride, D(s->out[0]), 0);
    return KILN_OK;
}

static kiln_status slice_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_tdesc *x = &s->out[0];
    int d = s->attr.slice.dim;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < d; i++) outer *= x->shape[i];
    for (int i = d + 1; i < x->ndim; i++) inner *= x->shape[i];
    const kiln_slice_attrs *a = &s->attr.slice;
    kiln_ref_slice_bwd(outer, x->shape[d], inner, a->start, (a->end - a->start + a->step - 1) / a->step, a->step,
                       D(s->in[0]), D(s->out[0]), ACC(0));
    return KILN_OK;
}

/* pad's forward is slice's backward from the other side: the input lands at `before`, zeros around */
static kiln_status pad(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_ref_slice_bwd(s->sz.slice.outer, s->sz.slice.dim, s->sz.slice.inner, s->attr.pad.before,
                       s->in[0].shape[s->attr.pad.dim], 1, D(s->in[0]), D(s->out[0]), 0);
    return KILN_OK;
}

/* the option-A shortcut: x's shape (the forward's input; the backward's output) and the attributes */
static kiln_subsample_shape subsample_shape(const kiln_step *s, const kiln_tdesc *x) {
    const kiln_subsample_attrs *a = &s->attr.subsample;
    return (kiln_subsample_shape){x->shape[0], x->shape[1], x->shape[2], x->shape[3], a->stride, a->before, a->after};
}

static kiln_status subsample_pad(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_subsample_shape S = subsample_shape(s, &s->in[0]);
    kiln_ref_subsample_pad(&S, D(s->in[0]), D(s->out[0]));
    return KILN_OK;
}

static kiln_status subsample_pad_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_subsample_shape S = subsample_shape(s, &s->out[0]);
    kiln_ref_subsample_pad_bwd(&S, D(s->in[0]), D(s->out[0]), ACC(0));
    return KILN_OK;
}

static kiln_status avg_pool(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_ref_avg_pool2d_fwd(&s->sz.avg_pool, D(s->in[0]), D(s->out[0]));
    return KILN_OK;
}

static kiln_status avg_pool_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_ref_avg_pool2d_bwd(&s->sz.avg_pool, D(s->in[0]), D(s->out[0]), ACC(0));
    return KILN_OK;
}

static kiln_status sum(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    D(s->out[0])[0] = kiln_ref_sum(s->in[0].numel, D(s->in[0]));
    return KILN_OK;
}

static kiln_status sum_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_ref_fill(s->out[0].numel, D(s->in[0])[0], D(s->out[0]), ACC(0));
    return KILN_OK;
}

/* ---- row-wise: log-softmax and the losses ---- */

static void rows_cols(const kiln_tdesc *t, int64_t *rows, int64_t *cols) {
    *cols = t->shape[t->ndim - 1];
    *rows = t->numel / *cols;
}

/* targets in [0, cols), or -1 (padding) where low is -1 (a masked cross entropy) */
static kiln_status check_targets(const int32_t *t, int64_t rows, int64_t cols, int low) {
    for (int64_t i = 0; i < rows; i++)
        if (t[i] < low || t[i] >= cols)
            return kiln_fail(KILN_ERR_INVALID_ARG, "target %lld is %d, outside [0, %lld)", (long long)i, t[i], (long long)cols);
    return KILN_OK;
}

static kiln_status log_softmax(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    int64_t rows, cols;
    rows_cols(&s->out[0], &rows, &cols);
    kiln_ref_log_softmax_fwd(rows, cols, D(s->in[0]), D(s->out[0]));
    return KILN_OK;
}

static kiln_status log_softmax_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    int64_t rows, cols;
    rows_cols(&s->out[0], &rows, &cols);
    kiln_ref_log_softmax_bwd(rows, cols, D(s->in[0]), D(s->in[1]), D(s->out[0]), ACC(0));
    return KILN_OK;
}

static kiln_status nll(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    int64_t rows, cols;
    rows_cols(&s->in[0], &rows, &cols);
    kiln_status st = check_targets(I(s->in[1]), rows, cols, 0);
    if (st == KILN_OK) kiln_ref_nll_loss_fwd(rows, cols, D(s->in[0]), I(s->in[1]), D(s->out[0]));
    return st;
}

static kiln_status nll_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    int64_t rows, cols;
    rows_cols(&s->out[0], &rows, &cols);
    kiln_ref_nll_loss_bwd(rows, cols, I(s->in[0]), D(s->in[1]), D(s->out[0]), ACC(0));
    return KILN_OK;
}

static kiln_status cross_entropy(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    int64_t rows, cols;
    rows_cols(&s->in[0], &rows, &cols);
    kiln_status st = check_targets(I(s->in[1]), rows, cols, s->attr.loss.ignore ? -1 : 0);
    if (st == KILN_OK) kiln_ref_cross_entropy_fwd(rows, cols, D(s->in[0]), I(s->in[1]), D(s->out[0]));
    return st;
}

static kiln_status mse(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_ref_mse_loss_fwd(s->in[0].numel, D(s->in[0]), D(s->in[1]), D(s->out[0]));
    return KILN_OK;
}

static kiln_status mse_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_ref_mse_loss_bwd(s->out[0].numel, D(s->in[0]), D(s->in[1]), D(s->in[2]), D(s->out[0]), ACC(0),
                          s->epilogue == KILN_EPI_RELU_BWD_MASK);
    return KILN_OK;
}

static kiln_status cross_entropy_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    int64_t rows, cols;
    rows_cols(&s->out[0], &rows, &cols);
    kiln_ref_cross_entropy_bwd(rows, cols, D(s->in[0]), I(s->in[1]), D(s->in[2]), D(s->out[0]), ACC(0));
    return KILN_OK;
}

/* ---- batch norm ---- */

/* the collective of a sync node (sync batch norm), NULL for a plain one */
#define SYNC_CO(s, rc) ((s)->attr.bn.sync ? &(rc)->collective : NULL)

static kiln_status bn(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_tdesc *x = &s->in[0];
    const kiln_bn_attrs *a = &s->attr.bn;
    int r = kiln_ref_batch_norm_fwd(x->shape[0], x->shape[1], x->shape[2] * x->shape[3], D(*x), D(s->in[1]), D(s->in[2]),
                                    D(s->in[3]), D(s->in[4]), a->momentum, a->eps, a->training, D(s->out[0]),
                                    s->nout > 1 ? D(s->out[1]) : NULL, s->nout > 2 ? D(s->out[2]) : NULL, SYNC_CO(s, rc));
    if (r == -2) return kiln_fail_context(KILN_ERR_BACKEND, "%s: sync batch norm", s->name);
    if (r) return kiln_fail(KILN_ERR_INVALID_ARG, "training needs more than one value per channel");
    if (a->training) (*(int64_t *)s->in[5].data)++;
    epilogue_relu(s);
    if (rounds(s)) kiln_ref_round_reduced(s, D(s->out[0]), s->out[0].numel); /* a backend's 16-bit batch norm */
    return KILN_OK;
}

static kiln_status bn_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_tdesc *x = &s->in[0];
    const double *relu_b = s->epilogue == KILN_EPI_RELU_BWD_MASK ? D(s->in[5]) : NULL; /* the fused relu's bias */
    if (kiln_ref_batch_norm_relu_bwd(x->shape[0], x->shape[1], x->shape[2] * x->shape[3], D(*x), D(s->in[1]),
                                     D(s->in[2]), relu_b, D(s->in[3]), D(s->in[4]), D(s->out[0]), D(s->out[1]),
                                     D(s->out[2]), ACC(0), ACC(1), ACC(2), SYNC_CO(s, rc)))
        return kiln_fail_context(KILN_ERR_BACKEND, "%s: sync batch norm backward", s->name);
    return KILN_OK;
}

/* batch norm folded into the layer before it: in w, gamma, beta, mean, var, b?; out w', b' */
static kiln_status bn_fold(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    int64_t k = s->out[1].numel;
    kiln_ref_bn_fold(k, s->out[0].numel / k, D(s->in[0]), s->nin > 5 ? D(s->in[5]) : NULL, D(s->in[1]), D(s->in[2]),
                     D(s->in[3]), D(s->in[4]), s->attr.bn.eps, D(s->out[0]), D(s->out[1]));
    return KILN_OK;
}

/* ---- transformer ops: rows are the leading dims, the last dim is C ---- */

/* token ids: f32 inputs are staged as f64 here; i32 stay i32 */
#define IDF(t) ((t).dtype == KILN_F64 ? D(t) : NULL)
#define IDI(t) ((t).dtype == KILN_I32 ? I(t) : NULL)

static kiln_status embedding(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    const kiln_tdesc *idx = &s->in[0], *w = &s->in[1];
    int64_t bad = kiln_ref_embedding_check(idx->numel, IDF(*idx), IDI(*idx), w->shape[0]);
    if (bad >= 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "token id %.9g at position %lld is outside [0, %lld)",
                         IDF(*idx) ? IDF(*idx)[bad] : (double)IDI(*idx)[bad], (long long)bad, (long long)w->shape[0]);
    kiln_ref_embedding_fwd(idx->numel, w->shape[1], IDF(*idx), IDI(*idx), D(*w), D(s->out[0]));
    return KILN_OK;
}

static kiln_status embedding_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_tdesc *idx = &s->in[0], *dw = &s->out[0];
    kiln_ref_embedding_bwd(idx->numel, dw->shape[0], dw->shape[1], IDF(*idx), IDI(*idx), D(s->in[1]), D(*dw), ACC(0));
    return KILN_OK;
}

static kiln_status layer_norm(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    int64_t rows, cols;
    rows_cols(&s->in[0], &rows, &cols);
    kiln_ref_layer_norm_fwd(rows, cols, D(s->in[0]), D(s->in[1]), D(s->in[2]), s->attr.ln.eps, D(s->out[0]),
                            D(s->out[1]), D(s->out[2]));
    return KILN_OK;
}

static kiln_status layer_norm_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    int64_t rows, cols;
    rows_cols(&s->in[0], &rows, &cols);
    kiln_ref_layer_norm_bwd(rows, cols, D(s->in[0]), D(s->in[1]), D(s->in[2]), D(s->in[3]), D(s->in[4]), D(s->out[0]),
                            D(s->out[1]), D(s->out[2]), ACC(0), ACC(1), ACC(2));
    return KILN_OK;
}

static kiln_status gelu(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_ref_gelu_fwd(s->out[0].numel, s->attr.gelu.tanh_form, D(s->in[0]), D(s->out[0]));
    return KILN_OK;
}

static kiln_status gelu_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_ref_gelu_bwd(s->out[0].numel, s->attr.gelu.tanh_form, D(s->in[0]), D(s->in[1]), D(s->out[0]), ACC(0));
    return KILN_OK;
}

static kiln_status softmax(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    int64_t rows, cols;
    rows_cols(&s->out[0], &rows, &cols);
    kiln_ref_softmax_fwd(rows, cols, D(s->in[0]), D(s->out[0]));
    return KILN_OK;
}

static kiln_status softmax_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    int64_t rows, cols;
    rows_cols(&s->out[0], &rows, &cols);
    kiln_ref_softmax_bwd(rows, cols, D(s->in[0]), D(s->in[1]), D(s->out[0]), ACC(0));
    return KILN_OK;
}

static kiln_status add_bcast(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    int64_t inner = s->in[1].numel;
    kiln_ref_add_bcast_fwd(s->out[0].numel / inner, inner, D(s->in[0]), D(s->in[1]), D(s->out[0]));
    return KILN_OK;
}

static kiln_status add_bcast_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    int64_t inner = s->out[0].numel;
    kiln_ref_bias_grad_rows(s->in[0].numel / inner, inner, D(s->in[0]), D(s->out[0]), ACC(0));
    return KILN_OK;
}

/* ---- steps outside the graph ---- */

static kiln_status readout(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    *(double *)s->out[0].data = D(s->in[0])[0];
    return KILN_OK;
}

static kiln_status sumsq(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    double v = kiln_ref_sumsq(s->in[0].numel, D(s->in[0])), *acc = s->out[0].data;
    *acc = s->acc[0] ? *acc + v : v;
    return KILN_OK;
}

static kiln_status clip_scale(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    double norm = sqrt(*(const double *)s->in[0].data);
    if (!isfinite(norm)) return kiln_fail(KILN_ERR_NUMERIC, "clip_grad_norm: the gradient norm is %g", norm);
    double coef = s->attr.clip.max_norm / (norm + 1e-6);
    if (coef < 1.0) kiln_ref_scale(s->out[0].numel, D(s->out[0]), coef);
    return KILN_OK;
}

/* the gradient scaler (src/optim/grad_scaler.c) */
static kiln_status amp_unscale(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_amp_state *a = s->out[1].data;
    int found = !isfinite(*(const double *)s->in[0].data);
    if (s->attr.amp.first) a->found_inf = found;
    if (!found) kiln_ref_scale(s->out[0].numel, D(s->out[0]), 1.0 / a->scale);
    return KILN_OK;
}

static kiln_status amp_update(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_amp_update(s->out[0].data, s->attr.amp.growth, s->attr.amp.backoff, s->attr.amp.interval);
    return KILN_OK;
}

/* with a second input (the tensor table): each tensor with its own weight decay */
static kiln_layerwise_args tensors_of(const kiln_step *s, const kiln_run_ctx *rc) {
    return (kiln_layerwise_args){.nseg = s->in[1].numel / 3, .seg = s->in[1].data, .lr = rc->lr, .step = rc->optim_step};
}
#define TENSORS(call) \
    call;             \
    return KILN_OK

static kiln_status sgd(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_sgd_attrs *a = &s->attr.sgd;
    if (s->nin > 1) {
        kiln_layerwise_args t = tensors_of(s, rc);
        t.momentum = a->momentum, t.dampening = a->dampening, t.weight_decay = a->weight_decay, t.nesterov = a->nesterov;
        TENSORS(kiln_ref_sgd_tensors(&t, D(s->out[0]), D(s->in[0]), s->nout > 1 ? D(s->out[1]) : NULL));
    }
    kiln_ref_sgd(s->in[0].numel, D(s->out[0]), D(s->in[0]), s->nout > 1 ? D(s->out[1]) : NULL, rc->lr, a->momentum,
                 a->dampening, a->weight_decay, a->nesterov, rc->optim_step == 1);
    return KILN_OK;
}

static kiln_status adamw(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_adamw_attrs *a = &s->attr.adamw;
    if (s->nin > 1) {
        kiln_layerwise_args t = tensors_of(s, rc);
        t.beta1 = a->beta1, t.beta2 = a->beta2, t.eps = a->eps, t.weight_decay = a->weight_decay;
        TENSORS(kiln_ref_adamw_tensors(&t, D(s->out[0]), D(s->in[0]), D(s->out[1]), D(s->out[2])));
    }
    kiln_ref_adamw(s->in[0].numel, D(s->out[0]), D(s->in[0]), D(s->out[1]), D(s->out[2]), rc->lr, a->beta1, a->beta2,
                   a->eps, a->weight_decay, rc->optim_step);
    return KILN_OK;
}

static kiln_status adadelta(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_adadelta_attrs *a = &s->attr.adadelta;
    if (s->nin > 1) {
        kiln_layerwise_args t = tensors_of(s, rc);
        t.rho = a->rho, t.eps = a->eps, t.weight_decay = a->weight_decay;
        TENSORS(kiln_ref_adadelta_tensors(&t, D(s->out[0]), D(s->in[0]), D(s->out[1]), D(s->out[2])));
    }
    kiln_ref_adadelta(s->in[0].numel, D(s->out[0]), D(s->in[0]), D(s->out[1]), D(s->out[2]), rc->lr, a->rho,
                      a->eps, a->weight_decay);
    return KILN_OK;
}

/* layer-wise updates: in grad, tensors; out param, state..., norms */
static kiln_layerwise_args layerwise_args(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_layerwise_attrs *a = &s->attr.layerwise;
    kiln_layerwise_args t = tensors_of(s, rc);
    t.beta1 = a->beta1, t.beta2 = a->beta2, t.eps = a->eps, t.weight_decay = a->weight_decay;
    t.momentum = a->momentum, t.trust = a->trust;
    return t;
}

static kiln_status lamb(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_layerwise_args a = layerwise_args(s, rc);
    TENSORS(kiln_ref_lamb(&a, s->attr.layerwise.phase, D(s->out[0]), D(s->in[0]), D(s->out[1]), D(s->out[2]), s->out[3].data));
}

static kiln_status lars(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_layerwise_args a = layerwise_args(s, rc);
    TENSORS(kiln_ref_lars(&a, s->attr.layerwise.phase, D(s->out[0]), D(s->in[0]), D(s->out[1]), s->out[2].data));
}

static kiln_status novograd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_layerwise_args a = layerwise_args(s, rc);
    TENSORS(kiln_ref_novograd(&a, s->attr.layerwise.phase, D(s->out[0]), D(s->in[0]), D(s->out[1]), D(s->out[2]),
                            s->out[3].data));
}

/* ---- pointwise tiles: n elements from element `start` (a fused kernel's tile, or an op alone tile by tile) ---- */

#define TILE(nm) static void nm(const kiln_pw_instr *I, int64_t start, int64_t n, void *dst, const void *const *src, \
                                const kiln_run_ctx *rc)
#define S(k) ((const double *)src[k])
#define QUIET (void)I, (void)start, (void)rc

TILE(t_relu) { QUIET; kiln_ref_relu_fwd(n, S(0), dst); }
TILE(t_relu_bwd) { QUIET; kiln_ref_relu_bwd(n, S(0), S(1), dst, I->acc); }
TILE(t_add) { QUIET; kiln_ref_add_fwd(n, S(0), S(1), dst); }
TILE(t_mul) { QUIET; kiln_ref_mul_fwd(n, S(0), S(1), dst); }
TILE(t_mul_bwd) { QUIET; kiln_ref_mul_bwd(n, S(0), S(1), dst, I->acc); }
TILE(t_grad_copy) { QUIET; kiln_ref_grad_copy(n, S(0), dst, I->acc); }
TILE(t_dropout) { kiln_ref_dropout_range(start, n, I->attr.dropout.p, I->key, rc->counter, S(0), dst, I->acc); }
TILE(t_affine) { QUIET; kiln_ref_affine(n, S(0), I->attr.affine.scale, I->attr.affine.shift, dst); }
TILE(t_affine_bwd) { QUIET; kiln_ref_affine_bwd(n, S(0), I->attr.affine.scale, dst, I->acc); }
TILE(t_erf) { QUIET; kiln_ref_erf(n, S(0), dst); }
TILE(t_erf_bwd) { QUIET; kiln_ref_erf_bwd(n, S(0), S(1), dst, I->acc); }
TILE(t_tanh) { QUIET; kiln_ref_tanh(n, S(0), dst); }
TILE(t_tanh_bwd) { QUIET; kiln_ref_tanh_bwd(n, S(0), S(1), dst, I->acc); }
TILE(t_gelu) { QUIET; kiln_ref_gelu_fwd(n, I->attr.gelu.tanh_form, S(0), dst); }
TILE(t_gelu_bwd) { QUIET; kiln_ref_gelu_bwd(n, I->attr.gelu.tanh_form, S(0), S(1), dst, I->acc); }

/* an op that has no kernel of its own but its tile function */
static kiln_status tiled(const kiln_step *s, const kiln_run_ctx *rc) {
    return kiln_pointwise_run(s, rc, kiln_ref_kernels[s->op].tile, 0);
}

static kiln_status fused(const kiln_step *s, const kiln_run_ctx *rc) {
    return kiln_fused_run(s, rc, kiln_ref_kernels, sizeof(double), 0, kiln_ref_round_tile);
}

const kiln_kernel kiln_ref_kernels[KILN_OP_COUNT] = {
    [KILN_OP_CONV2D] = {conv, conv_prepare},
    [KILN_OP_CONV2D_ADD] = {conv_add, conv_prepare},
    [KILN_OP_CONV2D_BWD_DATA] = {conv_bwd_data, from_fwd},
    [KILN_OP_CONV2D_BWD_WEIGHT] = {conv_bwd_weight, from_fwd},
    [KILN_OP_LINEAR] = {linear},
    [KILN_OP_LINEAR_BWD_DATA] = {linear_bwd_data},
    [KILN_OP_LINEAR_BWD_WEIGHT] = {linear_bwd_weight},
    [KILN_OP_MATMUL] = {matmul},
    [KILN_OP_MATMUL_BWD_DATA] = {matmul_bwd_data},
    [KILN_OP_MATMUL_BWD_WEIGHT] = {matmul_bwd_weight},
    [KILN_OP_RELU] = {relu, .tile = t_relu},
    [KILN_OP_RELU_BWD] = {relu_bwd, .tile = t_relu_bwd},
    [KILN_OP_MAX_POOL2D] = {pool, kiln_prepare_pool},
    [KILN_OP_MAX_POOL2D_BWD] = {pool_bwd, kiln_prepare_pool},
    [KILN_OP_DROPOUT] = {dropout, .tile = t_dropout},
    [KILN_OP_DROPOUT_BWD] = {dropout_bwd, .tile = t_dropout},
    [KILN_OP_LOG_SOFTMAX] = {log_softmax},
    [KILN_OP_LOG_SOFTMAX_BWD] = {log_softmax_bwd},
    [KILN_OP_NLL_LOSS] = {nll},
    [KILN_OP_NLL_LOSS_BWD] = {nll_bwd},
    [KILN_OP_CROSS_ENTROPY] = {cross_entropy},
    [KILN_OP_CROSS_ENTROPY_BWD] = {cross_entropy_bwd},
    [KILN_OP_MSE_LOSS] = {mse},
    [KILN_OP_MSE_LOSS_BWD] = {mse_bwd},
    [KILN_OP_ADD] = {add, .tile = t_add},
    [KILN_OP_MUL] = {mul, .tile = t_mul},
    [KILN_OP_MUL_BWD] = {mul_bwd, .tile = t_mul_bwd},
    [KILN_OP_ONES] = {ones},
    [KILN_OP_GRAD_COPY] = {grad_copy, .tile = t_grad_copy},
    [KILN_OP_CONTIGUOUS] = {contiguous},
    [KILN_OP_SLICE_BWD] = {slice_bwd},
    [KILN_OP_PAD] = {pad, kiln_prepare_pad},
    [KILN_OP_AVG_POOL2D] = {avg_pool, kiln_prepare_avg_pool},
    [KILN_OP_ADAPTIVE_AVG_POOL2D] = {avg_pool, kiln_prepare_avg_pool},
    [KILN_OP_AVG_POOL2D_BWD] = {avg_pool_bwd, kiln_prepare_avg_pool},
    [KILN_OP_SUM] = {sum},
    [KILN_OP_SUM_BWD] = {sum_bwd},
    [KILN_OP_BATCH_NORM2D] = {bn, .add_relu = 1},
    [KILN_OP_BATCH_NORM2D_BWD] = {bn_bwd, .relu_bwd_mask = 1},
    [KILN_OP_BN_FOLD] = {bn_fold},
    [KILN_OP_SUBSAMPLE_PAD] = {subsample_pad},
    [KILN_OP_SUBSAMPLE_PAD_BWD] = {subsample_pad_bwd},
    [KILN_OP_BMM] = {bmm, kiln_prepare_bmm},
    [KILN_OP_BMM_BWD] = {bmm_bwd, kiln_prepare_bmm},
    [KILN_OP_CAUSAL_ATTENTION] = {attention, kiln_prepare_attention},
    [KILN_OP_CAUSAL_ATTENTION_BWD] = {attention_bwd, kiln_prepare_attention},
    [KILN_OP_EMBEDDING] = {embedding},
    [KILN_OP_EMBEDDING_BWD] = {embedding_bwd},
    [KILN_OP_LAYER_NORM] = {layer_norm},
    [KILN_OP_LAYER_NORM_BWD] = {layer_norm_bwd},
    [KILN_OP_GELU] = {gelu, .tile = t_gelu},
    [KILN_OP_GELU_BWD] = {gelu_bwd, .tile = t_gelu_bwd},
    [KILN_OP_SOFTMAX] = {softmax},
    [KILN_OP_SOFTMAX_BWD] = {softmax_bwd},
    [KILN_OP_ADD_BCAST] = {add_bcast},
    [KILN_OP_ADD_BCAST_BWD] = {add_bcast_bwd},
    [KILN_OP_AFFINE] = {tiled, .tile = t_affine},
    [KILN_OP_AFFINE_BWD] = {tiled, .tile = t_affine_bwd},
    [KILN_OP_ERF] = {tiled, .tile = t_erf},
    [KILN_OP_ERF_BWD] = {tiled, .tile = t_erf_bwd},
    [KILN_OP_TANH] = {tiled, .tile = t_tanh},
    [KILN_OP_TANH_BWD] = {tiled, .tile = t_tanh_bwd},
    [KILN_OP_FUSED] = {fused},
    [KILN_OP_FUSED_PLAIN] = {fused},
    [KILN_OP_READOUT] = {readout},
    [KILN_OP_SUMSQ] = {sumsq},
    [KILN_OP_CLIP_SCALE] = {clip_scale},
    [KILN_OP_SGD_UPDATE] = {sgd},
    [KILN_OP_ADAMW_UPDATE] = {adamw},
    [KILN_OP_ADADELTA_UPDATE] = {adadelta},
    [KILN_OP_LAMB_UPDATE] = {lamb},
    [KILN_OP_LARS_UPDATE] = {lars},
    [KILN_OP_NOVOGRAD_UPDATE] = {novograd},
    [KILN_OP_AMP_UNSCALE] = {amp_unscale},
    [KILN_OP_AMP_UPDATE] = {amp_update},
};
