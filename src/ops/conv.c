/* conv2d: y[N,K,OH,OW] = x[N,C,H,W] * w[K,C/groups,R,S] (+ b[K]), square
 * stride, zero padding and dilation, groups (C == groups: depthwise), as
 * PyTorch's F.conv2d; backward-data and backward-weight (with the bias) nodes;
 * conv2d_add, y = conv2d(x, w, b) + r, which only the residual fusion pass
 * makes (inference plans: src/graph/pass_fuse_residual.c). */
#include "graph/internal/graph.h"

static int conv_infer(kiln_infer *ix) {
    const kiln_val *X = ix->in[0], *W = ix->in[1], *B = ix->nin > 2 ? ix->in[2] : NULL;
    const kiln_conv_attrs *a = &ix->attr->conv;
    char s1[96], s2[96];
    if (a->stride < 1 || a->pad < 0 || a->dilation < 1 || a->groups < 1)
        return kiln_infer_fail(ix, KILN_ERR_INVALID_ARG, "stride %lld, pad %lld, dilation %lld, groups %lld",
                               (long long)a->stride, (long long)a->pad, (long long)a->dilation, (long long)a->groups);
    if (X->ndim != 4 || W->ndim != 4 || X->shape[1] != W->shape[1] * a->groups || W->shape[0] % a->groups ||
        X->dtype != KILN_F32 || W->dtype != KILN_F32)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE,
                               "input %s and weight %s do not match (want [N,C,H,W] and [K,C/groups,R,S], groups %lld "
                               "dividing C and K)",
                               kiln_infer_shape(X, s1), kiln_infer_shape(W, s2), (long long)a->groups);
    if (B && (B->ndim != 1 || B->shape[0] != W->shape[0]))
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "bias %s does not match weight %s", kiln_infer_shape(B, s1),
                               kiln_infer_shape(W, s2));
    int64_t eh = X->shape[2] + 2 * a->pad - a->dilation * (W->shape[2] - 1) - 1;
    int64_t ew = X->shape[3] + 2 * a->pad - a->dilation * (W->shape[3] - 1) - 1;
    if (eh < 0 || ew < 0)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "kernel %s (dilation %lld) larger than padded input %s",
                               kiln_infer_shape(W, s2), (long long)a->dilation, kiln_infer_shape(X, s1));
    kiln_out_spec *y = &ix->out[0];
    y->dtype = KILN_F32;
    y->ndim = 4;
    y->batched = X->batched;
    y->shape[0] = X->shape[0];
    y->shape[1] = W->shape[0];
    y->shape[2] = eh / a->stride + 1;
    y->shape[3] = ew / a->stride + 1;
    return 0;
}

/* x, w, b as conv2d; r (input 3) has y's shape */
static int conv_add_infer(kiln_infer *ix) {
    if (conv_infer(ix) < 0) return -1;
    const kiln_val *R = ix->in[3];
    const kiln_out_spec *y = &ix->out[0];
    int same = R->ndim == 4 && R->dtype == KILN_F32;
    for (int d = 0; d < 4 && same; d++) same = R->shape[d] == y->shape[d];
    char s1[96];
    if (!same || R->batched != y->batched)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "the residual %s does not have the output's shape",
                               kiln_infer_shape(R, s1));
    return 0;
}

static int conv_backward(kiln_ad *ad, const kiln_node *f) {
    return kiln_ops_weighted_backward(ad, f, KILN_OP_CONV2D_BWD_DATA, KILN_OP_CONV2D_BWD_WEIGHT, 0);
}

static const kiln_attr_spec conv_attrs[] = {KILN_ATTR("stride", KILN_ATTR_I64, conv.stride),
                                            KILN_ATTR("pad", KILN_ATTR_I64, conv.pad),
                                            KILN_ATTR("dilation", KILN_ATTR_I64, conv.dilation),
                                            KILN_ATTR("groups", KILN_ATTR_I64, conv.groups), {0}};

const kiln_op_def kiln_op_conv2d = {
    .name = "conv2d", .min_in = 2, .max_in = 3, .nout = 1, .flags = KILN_OPF_LAYER | KILN_OPF_CHANNEL_BIAS,
    .epilogues = KILN_EPI_RELU,
    .attrs = conv_attrs, .infer = conv_infer, .backward = conv_backward, .flops = kiln_ops_weighted_flops, .bf16_in = 3,
};
const kiln_op_def kiln_op_conv2d_bwd_data = {.name = "conv2d_bwd_data", .min_in = 2, .max_in = 2, .attrs = conv_attrs,
                                             .flops = kiln_ops_weighted_flops, .bf16_in = 3};
const kiln_op_def kiln_op_conv2d_bwd_weight = {.name = "conv2d_bwd_weight", .min_in = 2, .max_in = 2, .attrs = conv_attrs,
                                               .flops = kiln_ops_weighted_flops, .bf16_in = 3};
/* no backward: the pass makes it in inference plans only */
const kiln_op_def kiln_op_conv2d_add = {
    .name = "conv2d_add", .min_in = 4, .max_in = 4, .nout = 1, .flags = KILN_OPF_LAYER | KILN_OPF_CHANNEL_BIAS,
    .epilogues = KILN_EPI_RELU, .attrs = conv_attrs, .infer = conv_add_infer, .flops = kiln_ops_weighted_flops, .bf16_in = 3,
};
