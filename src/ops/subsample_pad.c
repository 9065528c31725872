/* subsample_pad, He et al.'s option-A shortcut as one op: x [N, C, H, W] ->
 * y [N, before + C + after, ceil(H / s), ceil(W / s)], y = x[:, :, ::s, ::s]
 * with zero channels `before` and `after` (F.pad(x[:, :, ::2, ::2], (0, 0, 0,
 * 0, p, p)) in the CIFAR ResNets). The graph pass that finds that chain
 * (src/graph/pass_subsample_pad.c) makes it; its backward puts dy's middle
 * channels back on every s-th pixel and zeros between. */
#include "graph/internal/graph.h"

static int sp_infer(kiln_infer *ix) {
    const kiln_val *X = ix->in[0];
    const kiln_subsample_attrs *a = &ix->attr->subsample;
    char s[96];
    if (X->ndim != 4 || X->dtype != KILN_F32)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "input %s (want [N,C,H,W] f32)", kiln_infer_shape(X, s));
    if (a->stride < 1 || a->before < 0 || a->after < 0)
        return kiln_infer_fail(ix, KILN_ERR_INVALID_ARG, "stride %lld, %lld channels before, %lld after", (long long)a->stride,
                               (long long)a->before, (long long)a->after);
    kiln_out_spec *y = &ix->out[0];
    y->dtype = KILN_F32;
    y->ndim = 4;
    y->batched = X->batched;
    y->shape[0] = X->shape[0];
    y->shape[1] = X->shape[1] + a->before + a->after;
    y->shape[2] = (X->shape[2] + a->stride - 1) / a->stride;
    y->shape[3] = (X->shape[3] + a->stride - 1) / a->stride;
    return 0;
}

static int sp_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value x = f->in[0], dy = kiln_ad_dout(ad, 0);
    if (!kiln_ad_needs(ad, x)) return 0;
    return kiln_ad_emit(ad, KILN_OP_SUBSAMPLE_PAD_BWD, &dy, 1, &x, 1) < 0 ? -1 : 0;
}

static const kiln_attr_spec sp_attrs[] = {KILN_ATTR("stride", KILN_ATTR_I64, subsample.stride),
                                          KILN_ATTR("before", KILN_ATTR_I64, subsample.before),
                                          KILN_ATTR("after", KILN_ATTR_I64, subsample.after), {0}};

const kiln_op_def kiln_op_subsample_pad = {
    .name = "subsample_pad", .min_in = 1, .max_in = 1, .nout = 1, .attrs = sp_attrs, .infer = sp_infer,
    .backward = sp_backward,
};
const kiln_op_def kiln_op_subsample_pad_bwd = {.name = "subsample_pad_bwd", .min_in = 1, .max_in = 1, .attrs = sp_attrs};
