/* linear: y[...,O] = x[...,I] . w[O,I]^T (+ b[O]), PyTorch's nn.Linear, and
 * matmul: y[...,N] = x[...,K] . w[K,N] (+ b[N]), the layout of HF GPT-2's
 * Conv1D weights; backward data and weight (with the bias) nodes. */
#include "graph/internal/graph.h"

/* x [..., I] times a weight, leading dims kept (PyTorch's rule): the weight
 * is [O, I] for linear (in_dim 1) and [I, O] for matmul (in_dim 0, HF GPT-2's
 * Conv1D layout) */
static int weighted_infer(kiln_infer *ix, int in_dim, const char *want) {
    const kiln_val *X = ix->in[0], *W = ix->in[1], *B = ix->nin > 2 ? ix->in[2] : NULL;
    char s1[96], s2[96];
    if (X->ndim < 2 || W->ndim != 2 || X->shape[X->ndim - 1] != W->shape[in_dim] || X->dtype != KILN_F32 ||
        W->dtype != KILN_F32)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "input %s and weight %s do not match (want %s)",
                               kiln_infer_shape(X, s1), kiln_infer_shape(W, s2), want);
    if (B && (B->ndim != 1 || B->shape[0] != W->shape[1 - in_dim]))
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "bias %s does not match weight %s", kiln_infer_shape(B, s1),
                               kiln_infer_shape(W, s2));
    kiln_out_spec *y = &ix->out[0];
    y->dtype = KILN_F32;
    y->ndim = X->ndim;
    y->batched = X->batched;
    for (int d = 0; d < X->ndim; d++) y->shape[d] = X->shape[d];
    y->shape[X->ndim - 1] = W->shape[1 - in_dim];
    return 0;
}

static int linear_infer(kiln_infer *ix) { return weighted_infer(ix, 1, "[...,I] and [O,I]"); }
static int matmul_infer(kiln_infer *ix) { return weighted_infer(ix, 0, "[...,K] and [K,N]"); }

/* each output element is a dot product over the weight's K (input) dim */
static double matmul_flops(const kiln_graph *g, const kiln_node *n, int64_t batch) {
    const kiln_node *f = n->fwd >= 0 ? &g->nodes[n->fwd] : n;
    const kiln_val *y = &g->vals[f->out[0]], *w = &g->vals[f->in[1]];
    return 2.0 * (double)kiln_val_numel(y, batch) * (double)w->shape[0];
}

static int linear_backward(kiln_ad *ad, const kiln_node *f) {
    return kiln_ops_weighted_backward(ad, f, KILN_OP_LINEAR_BWD_DATA, KILN_OP_LINEAR_BWD_WEIGHT, 1);
}

static int matmul_backward(kiln_ad *ad, const kiln_node *f) {
    return kiln_ops_weighted_backward(ad, f, KILN_OP_MATMUL_BWD_DATA, KILN_OP_MATMUL_BWD_WEIGHT, 1);
}

const kiln_op_def kiln_op_linear = {
    .name = "linear", .min_in = 2, .max_in = 3, .nout = 1, .flags = KILN_OPF_LAYER | KILN_OPF_CHANNEL_BIAS,
    .epilogues = KILN_EPI_RELU,
    .infer = linear_infer, .backward = linear_backward, .flops = kiln_ops_weighted_flops, .bf16_in = 3,
};
const kiln_op_def kiln_op_linear_bwd_data = {.name = "linear_bwd_data", .min_in = 2, .max_in = 2, .flops = kiln_ops_weighted_flops,
                                             .bf16_in = 3};
const kiln_op_def kiln_op_linear_bwd_weight = {.name = "linear_bwd_weight", .min_in = 2, .max_in = 2,
                                               .flops = kiln_ops_weighted_flops, .bf16_in = 3};
/* x @ w + b with w [K, N]: not CHANNEL_BIAS (its filters run along dim 1) */
const kiln_op_def kiln_op_matmul = {
    .name = "matmul", .min_in = 2, .max_in = 3, .nout = 1, .flags = KILN_OPF_LAYER, .infer = matmul_infer,
    .backward = matmul_backward, .flops = matmul_flops, .bf16_in = 3,
};
const kiln_op_def kiln_op_matmul_bwd_data = {.name = "matmul_bwd_data", .min_in = 2, .max_in = 2, .flops = matmul_flops,
                                             .bf16_in = 3};
const kiln_op_def kiln_op_matmul_bwd_weight = {.name = "matmul_bwd_weight", .min_in = 2, .max_in = 2,
                                               .flops = matmul_flops, .bf16_in = 3};
