/* Row-wise ops over the last dimension: log_softmax, softmax, and the
 * mean-reduced losses nll_loss and cross_entropy (PyTorch's defaults) with
 * int32 targets, one per row (cross_entropy with attr ignore: targets of -1
 * are padding, left out of the mean, as ignore_index=-1) (rows: every leading dim, e.g. [B, T] tokens of
 * [B, T, V]); and mse_loss, the mean squared error against f32 targets of x's
 * shape. */
#include "graph/internal/graph.h"

/* log_softmax and softmax: rows are every dim but the last (PyTorch's [B, T, V]
 * logits with [B, T] targets) */
static int rows_infer(kiln_infer *ix) {
    const kiln_val *X = ix->in[0];
    char s[96];
    if (X->ndim < 2) return kiln_infer_fail(ix, KILN_ERR_SHAPE, "input %s (want [...,C])", kiln_infer_shape(X, s));
    if (X->dtype != KILN_F32)
        return kiln_infer_fail(ix, KILN_ERR_INVALID_ARG, "input '%s' is %s, not f32", X->name, kiln_dtype_name(X->dtype));
    kiln_out_spec *y = &ix->out[0];
    y->dtype = KILN_F32;
    y->ndim = X->ndim;
    y->batched = X->batched;
    for (int d = 0; d < X->ndim; d++) y->shape[d] = X->shape[d];
    return 0;
}

static int loss_infer(kiln_infer *ix) {
    const kiln_val *X = ix->in[0], *T = ix->in[1];
    char s1[96], s2[96];
    int ok = X->ndim >= 2 && X->dtype == KILN_F32 && T->ndim == X->ndim - 1 && T->dtype == KILN_I32 &&
             X->batched == T->batched;
    for (int d = X->batched; ok && d < T->ndim; d++) ok = X->shape[d] == T->shape[d];
    if (!ok)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "input %s and target %s (want [...,C] f32 and [...] i32)",
                               kiln_infer_shape(X, s1), kiln_infer_shape(T, s2));
    ix->out[0].dtype = KILN_F32; /* a scalar */
    return 0;
}

/* log_softmax and softmax: backward reads the output y and dy (softmax: dx = y (dy - sum(dy y))) */
static int from_output_backward(kiln_ad *ad, const kiln_node *f, kiln_op bwd) {
    kiln_value x = f->in[0];
    if (!kiln_ad_needs(ad, x)) return 0;
    kiln_value in[2] = {f->out[0], kiln_ad_dout(ad, 0)};
    return kiln_ad_emit(ad, bwd, in, 2, &x, 1) < 0 ? -1 : 0;
}

static int log_softmax_backward(kiln_ad *ad, const kiln_node *f) {
    return from_output_backward(ad, f, KILN_OP_LOG_SOFTMAX_BWD);
}

static int softmax_backward(kiln_ad *ad, const kiln_node *f) { return from_output_backward(ad, f, KILN_OP_SOFTMAX_BWD); }

static int nll_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value x = f->in[0];
    if (!kiln_ad_needs(ad, x)) return 0;
    kiln_value in[2] = {f->in[1], kiln_ad_dout(ad, 0)};
    return kiln_ad_emit(ad, KILN_OP_NLL_LOSS_BWD, in, 2, &x, 1) < 0 ? -1 : 0;
}

static int cross_entropy_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value x = f->in[0];
    if (!kiln_ad_needs(ad, x)) return 0;
    kiln_value in[3] = {x, f->in[1], kiln_ad_dout(ad, 0)};
    return kiln_ad_emit(ad, KILN_OP_CROSS_ENTROPY_BWD, in, 3, &x, 1) < 0 ? -1 : 0;
}

const kiln_op_def kiln_op_log_softmax = {
    .name = "log_softmax", .min_in = 1, .max_in = 1, .nout = 1, .infer = rows_infer,
    .backward = log_softmax_backward,
};
const kiln_op_def kiln_op_log_softmax_bwd = {.name = "log_softmax_bwd", .min_in = 2, .max_in = 2};
const kiln_op_def kiln_op_softmax = {
    .name = "softmax", .min_in = 1, .max_in = 1, .nout = 1, .infer = rows_infer, .backward = softmax_backward,
};
const kiln_op_def kiln_op_softmax_bwd = {.name = "softmax_bwd", .min_in = 2, .max_in = 2};
const kiln_op_def kiln_op_nll_loss = {
    .name = "nll_loss", .min_in = 2, .max_in = 2, .nout = 1, .flags = KILN_OPF_LOSS, .infer = loss_infer,
    .backward = nll_backward,
};
const kiln_op_def kiln_op_nll_loss_bwd = {.name = "nll_loss_bwd", .min_in = 2, .max_in = 2};
static const kiln_attr_spec ce_attrs[] = {KILN_ATTR("ignore", KILN_ATTR_INT, loss.ignore), {0}};
const kiln_op_def kiln_op_cross_entropy = {
    .name = "cross_entropy", .min_in = 2, .max_in = 2, .nout = 1, .flags = KILN_OPF_LOSS, .attrs = ce_attrs,
    .infer = loss_infer, .backward = cross_entropy_backward,
};
const kiln_op_def kiln_op_cross_entropy_bwd = {.name = "cross_entropy_bwd", .min_in = 3, .max_in = 3, .attrs = ce_attrs};

static int mse_infer(kiln_infer *ix) {
    const kiln_val *X = ix->in[0], *T = ix->in[1];
    char s1[96], s2[96];
    int ok = X->dtype == KILN_F32 && T->dtype == KILN_F32 && X->ndim == T->ndim && X->batched == T->batched;
    for (int d = 0; ok && d < X->ndim; d++) ok = X->shape[d] == T->shape[d];
    if (!ok)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "input %s and target %s (want f32 of one shape)",
                               kiln_infer_shape(X, s1), kiln_infer_shape(T, s2));
    ix->out[0].dtype = KILN_F32; /* a scalar */
    return 0;
}

/* symmetric: d/dtarget is the same node with x and target swapped */
static int mse_backward(kiln_ad *ad, const kiln_node *f) {
    for (int k = 0; k < 2; k++) {
        kiln_value in[3] = {f->in[k], f->in[1 - k], kiln_ad_dout(ad, 0)};
        if (kiln_ad_needs(ad, f->in[k]) && kiln_ad_emit(ad, KILN_OP_MSE_LOSS_BWD, in, 3, &f->in[k], 1) < 0) return -1;
    }
    return 0;
}

const kiln_op_def kiln_op_mse_loss = {
    .name = "mse_loss", .min_in = 2, .max_in = 2, .nout = 1, .infer = mse_infer, .backward = mse_backward,
};
/* takes relu's backward as an epilogue when x is a relu's output (a regression head ending in relu):
 * the gradient is written once, and x dies here, so the cpu may write it over x */
const kiln_op_def kiln_op_mse_loss_bwd = {.name = "mse_loss_bwd", .min_in = 3, .max_in = 3,
                                          .epilogues = KILN_EPI_RELU_BWD_MASK};
