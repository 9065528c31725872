/* linear: y[N,O] = x[N,I] . w[O,I]^T (+ b[O]), PyTorch's nn.Linear; backward
 * data and weight (with the bias) nodes. */
#include "graph/internal/graph.h"

static int linear_infer(kiln_infer *ix) {
    const kiln_val *X = ix->in[0], *W = ix->in[1], *B = ix->nin > 2 ? ix->in[2] : NULL;
    char s1[96], s2[96];
    if (X->ndim != 2 || W->ndim != 2 || X->shape[1] != W->shape[1] || X->dtype != KILN_F32 || W->dtype != KILN_F32)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "input %s and weight %s do not match (want [N,I] and [O,I])",
                               kiln_infer_shape(X, s1), kiln_infer_shape(W, s2));
    if (B && (B->ndim != 1 || B->shape[0] != W->shape[0]))
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "bias %s does not match weight %s", kiln_infer_shape(B, s1),
                               kiln_infer_shape(W, s2));
    kiln_out_spec *y = &ix->out[0];
    y->dtype = KILN_F32;
    y->ndim = 2;
    y->batched = X->batched;
    y->shape[0] = X->shape[0];
    y->shape[1] = W->shape[0];
    return 0;
}

static int linear_backward(kiln_ad *ad, const kiln_node *f) {
    return kiln_ops_weighted_backward(ad, f, KILN_OP_LINEAR_BWD_DATA, KILN_OP_LINEAR_BWD_WEIGHT);
}

const kiln_op_def kiln_op_linear = {
    .name = "linear", .min_in = 2, .max_in = 3, .nout = 1, .flags = KILN_OPF_LAYER | KILN_OPF_CHANNEL_BIAS,
    .epilogues = KILN_EPI_RELU,
    .infer = linear_infer, .backward = linear_backward, .flops = kiln_ops_weighted_flops,
};
const kiln_op_def kiln_op_linear_bwd_data = {.name = "linear_bwd_data", .min_in = 2, .max_in = 2, .flops = kiln_ops_weighted_flops};
const kiln_op_def kiln_op_linear_bwd_weight = {.name = "linear_bwd_weight", .min_in = 2, .max_in = 2,
                                               .flops = kiln_ops_weighted_flops};
