/* batch_norm2d, PyTorch's nn.BatchNorm2d (affine, track_running_stats):
 *   training:   y = (x - mean) * invstd * weight + bias over (N, H, W) per
 *               channel, biased variance; the running statistics move by
 *               momentum (0.1) towards the batch's mean and *unbiased*
 *               variance, and num_batches_tracked counts the batches;
 *   evaluation: the running statistics take the batch's place, nothing changes.
 * Inputs: x [N,C,H,W], weight [C], bias [C], running_mean [C], running_var [C]
 * (buffers, f32) and num_batches_tracked [] (buffer, i64). Outputs: y and, saved
 * for backward, the batch's mean and invstd [C]. */
#include "graph/internal/graph.h"

static int bn_infer(kiln_infer *ix) {
    const kiln_val *X = ix->in[0];
    char s1[96], s2[96];
    if (X->ndim != 4 || X->dtype != KILN_F32)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "input %s (want [N,C,H,W] f32)", kiln_infer_shape(X, s1));
    int64_t C = X->shape[1];
    static const char *what[4] = {"weight", "bias", "running_mean", "running_var"};
    for (int k = 1; k <= 4; k++) {
        const kiln_val *V = ix->in[k];
        if (V->ndim != 1 || V->shape[0] != C || V->dtype != KILN_F32)
            return kiln_infer_fail(ix, KILN_ERR_SHAPE, "%s '%s' %s does not match input %s (want [%lld] f32)", what[k - 1],
                                   V->name, kiln_infer_shape(V, s1), kiln_infer_shape(X, s2), (long long)C);
    }
    if (ix->in[3]->kind != KILN_VAL_BUFFER || ix->in[4]->kind != KILN_VAL_BUFFER || ix->in[5]->kind != KILN_VAL_BUFFER ||
        ix->in[5]->ndim != 0 || ix->in[5]->dtype != KILN_I64)
        return kiln_infer_fail(ix, KILN_ERR_INVALID_ARG, "the running statistics must be buffers (and num_batches_tracked an i64 scalar)");
    if (!(ix->attr->bn.eps > 0) || !(ix->attr->bn.momentum >= 0 && ix->attr->bn.momentum <= 1))
        return kiln_infer_fail(ix, KILN_ERR_INVALID_ARG, "eps %g, momentum %g", (double)ix->attr->bn.eps,
                               (double)ix->attr->bn.momentum);
    kiln_out_spec *y = &ix->out[0];
    y->dtype = KILN_F32;
    y->ndim = 4;
    y->batched = X->batched;
    for (int d = 0; d < 4; d++) y->shape[d] = X->shape[d];
    for (int k = 1; k <= 2; k++) { /* saved mean and invstd */
        ix->out[k].dtype = KILN_F32;
        ix->out[k].ndim = 1;
        ix->out[k].shape[0] = C;
    }
    return 0;
}

/* both norms' rule: one backward node (x, dy, w, and the two saved statistics)
 * writing the gradients of x, w and b that are wanted */
static int norm_backward(kiln_ad *ad, const kiln_node *f, kiln_op bwd) {
    kiln_value t[3];
    int any = 0;
    for (int k = 0; k < 3; k++) {
        t[k] = kiln_ad_needs(ad, f->in[k]) ? f->in[k] : -1;
        any |= t[k] >= 0;
    }
    if (!any) return 0;
    kiln_value in[5] = {f->in[0], kiln_ad_dout(ad, 0), f->in[1], f->out[1], f->out[2]};
    return kiln_ad_emit(ad, bwd, in, 5, t, 3) < 0 ? -1 : 0;
}

static int bn_backward(kiln_ad *ad, const kiln_node *f) { return norm_backward(ad, f, KILN_OP_BATCH_NORM2D_BWD); }

static void bn_specialize(kiln_graph *g, int i, const kiln_compile_opts *o) {
    g->nodes[i].attr.bn.training = o->training;
    g->nodes[i].attr.bn.sync = o->training && o->sync_bn;
}

static const kiln_attr_spec bn_attrs[] = {KILN_ATTR("momentum", KILN_ATTR_F32, bn.momentum),
                                          KILN_ATTR("eps", KILN_ATTR_F32, bn.eps),
                                          KILN_ATTR("training", KILN_ATTR_INT, bn.training),
                                          KILN_ATTR("sync", KILN_ATTR_INT, bn.sync), {0}};

/* input 6, the residual of a fused add and relu (pass_fuse.c), joins after autodiff */
const kiln_op_def kiln_op_batch_norm2d = {
    .name = "batch_norm2d", .min_in = 6, .max_in = 7, .nout = 3, .flags = KILN_OPF_LAYER | KILN_OPF_CHANNEL_NORM,
    .attrs = bn_attrs, .epilogues = KILN_EPI_RELU, /* a relu after it is applied as y is written */
    .infer = bn_infer, .backward = bn_backward, .specialize = bn_specialize,
};
/* in: x, dy, w, mean, invstd, and with the fused relu's backward (pass_fuse.c) the bias */
const kiln_op_def kiln_op_batch_norm2d_bwd = {.name = "batch_norm2d_bwd", .min_in = 5, .max_in = 6, .attrs = bn_attrs};

/* bn_fold, for inference plans (src/graph/pass_fold_bn.c): batch norm in
 * evaluation folded into the weighted layer before it,
 *     s[k] = gamma[k] / sqrt(var[k] + eps),
 *     w'[k, ...] = w[k, ...] * s[k],   b'[k] = (b[k] - mean[k]) * s[k] + beta[k]   (b = 0 when absent),
 * so that layer(x, w', b') = bn(layer(x, w, b)). Inputs w [K, ...], gamma,
 * beta, running_mean, running_var [K] and optionally b [K]; outputs w', b'.
 * Recomputed every run: the parameters change between evaluations. */
static int fold_infer(kiln_infer *ix) {
    const kiln_val *W = ix->in[0];
    char s1[96], s2[96];
    if (W->ndim < 1 || W->batched || W->dtype != KILN_F32)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "weight %s (want [K, ...] f32)", kiln_infer_shape(W, s1));
    for (int k = 1; k < ix->nin; k++) {
        const kiln_val *V = ix->in[k];
        if (V->ndim != 1 || V->shape[0] != W->shape[0] || V->dtype != KILN_F32)
            return kiln_infer_fail(ix, KILN_ERR_SHAPE, "input %d '%s' %s does not match weight %s (want [%lld] f32)", k,
                                   V->name, kiln_infer_shape(V, s1), kiln_infer_shape(W, s2), (long long)W->shape[0]);
    }
    if (!(ix->attr->bn.eps > 0)) return kiln_infer_fail(ix, KILN_ERR_INVALID_ARG, "eps %g", (double)ix->attr->bn.eps);
    ix->out[0].dtype = ix->out[1].dtype = KILN_F32;
    ix->out[0].ndim = W->ndim;
    for (int d = 0; d < W->ndim; d++) ix->out[0].shape[d] = W->shape[d];
    ix->out[1].ndim = 1;
    ix->out[1].shape[0] = W->shape[0];
    return 0;
}

static const kiln_attr_spec fold_attrs[] = {KILN_ATTR("eps", KILN_ATTR_F32, bn.eps), {0}};

const kiln_op_def kiln_op_bn_fold = {
    .name = "bn_fold", .min_in = 5, .max_in = 6, .nout = 2, .attrs = fold_attrs, .infer = fold_infer,
};

/* layer_norm, PyTorch's nn.LayerNorm(C) over the last dim:
 *     y = (x - mean) * rstd * w + b,   rstd = 1 / sqrt(var + eps) (biased variance),
 * each row (x's leading dims) on its own. Inputs x [..., C] (2 to 4 dims, the
 * batch first), w and b [C]. Outputs y and, saved for backward, each row's
 * mean and rstd [...] (x's shape without its last dim). */
static int ln_infer(kiln_infer *ix) {
    const kiln_val *X = ix->in[0];
    char s1[96], s2[96];
    if (X->ndim < 2 || X->dtype != KILN_F32)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "input %s (want [..., C] f32, at least 2 dims)", kiln_infer_shape(X, s1));
    int64_t C = X->shape[X->ndim - 1];
    static const char *what[2] = {"weight", "bias"};
    for (int k = 1; k <= 2; k++) {
        const kiln_val *V = ix->in[k];
        if (V->ndim != 1 || V->shape[0] != C || V->batched || V->dtype != KILN_F32)
            return kiln_infer_fail(ix, KILN_ERR_SHAPE, "%s '%s' %s does not match input %s (want [%lld] f32)", what[k - 1],
                                   V->name, kiln_infer_shape(V, s1), kiln_infer_shape(X, s2), (long long)C);
    }
    if (!(ix->attr->ln.eps > 0)) return kiln_infer_fail(ix, KILN_ERR_INVALID_ARG, "eps %g", (double)ix->attr->ln.eps);
    for (int k = 0; k < 3; k++) {
        kiln_out_spec *o = &ix->out[k];
        o->dtype = KILN_F32;
        o->ndim = k ? X->ndim - 1 : X->ndim;
        o->batched = X->batched;
        for (int d = 0; d < o->ndim; d++) o->shape[d] = X->shape[d];
    }
    return 0;
}

static int ln_backward(kiln_ad *ad, const kiln_node *f) {
    return norm_backward(ad, f, KILN_OP_LAYER_NORM_BWD);
}

static const kiln_attr_spec ln_attrs[] = {KILN_ATTR("eps", KILN_ATTR_F32, ln.eps), {0}};

const kiln_op_def kiln_op_layer_norm = {
    .name = "layer_norm", .min_in = 3, .max_in = 3, .nout = 3, .flags = KILN_OPF_LAYER | KILN_OPF_RECOMPUTE, /* "h.0.ln_1" */
    .attrs = ln_attrs, .infer = ln_infer, .backward = ln_backward,
};
const kiln_op_def kiln_op_layer_norm_bwd = {.name = "layer_norm_bwd", .min_in = 5, .max_in = 5, .attrs = ln_attrs};
