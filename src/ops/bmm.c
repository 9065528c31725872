/* bmm: batched matrix product, torch.matmul of two tensors of equal rank,
 *     y[..., M, N] = a[..., M, K] @ b[..., K, N],
 * over the same leading dims (the batch among them). a and b may be strided
 * views (a transposed k: q @ k.transpose(-2, -1)); one backward node writes
 * da = dy @ b^T and db = a^T @ dy (those wanted). */
#include "graph/internal/graph.h"

static int bmm_infer(kiln_infer *ix) {
    const kiln_val *A = ix->in[0], *B = ix->in[1];
    char s1[96], s2[96];
    int nd = A->ndim, ok = nd >= 2 && B->ndim == nd && A->batched == B->batched && A->dtype == KILN_F32 &&
                           B->dtype == KILN_F32 && A->shape[nd - 1] == B->shape[nd - 2];
    for (int d = 0; ok && d < nd - 2; d++) ok = A->shape[d] == B->shape[d];
    if (!ok)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "a %s and b %s do not match (want [...,M,K] and [...,K,N] f32)",
                               kiln_infer_shape(A, s1), kiln_infer_shape(B, s2));
    kiln_out_spec *y = &ix->out[0];
    y->dtype = KILN_F32;
    y->ndim = nd;
    y->batched = A->batched;
    for (int d = 0; d < nd - 1; d++) y->shape[d] = A->shape[d];
    y->shape[nd - 1] = B->shape[nd - 1];
    return 0;
}

static int bmm_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value t[2];
    if (!kiln_ad_targets(ad, f, 2, t)) return 0;
    kiln_value in[3] = {f->in[0], f->in[1], kiln_ad_dout(ad, 0)};
    return kiln_ad_emit(ad, KILN_OP_BMM_BWD, in, 3, t, 2) < 0 ? -1 : 0;
}

/* 2 x M x N x K per matrix; backward once per gradient it writes */
static double bmm_flops(const kiln_graph *g, const kiln_node *n, int64_t batch) {
    const kiln_node *f = n->fwd >= 0 ? &g->nodes[n->fwd] : n;
    const kiln_val *A = &g->vals[f->in[0]], *Y = &g->vals[f->out[0]];
    double once = 2.0 * (double)kiln_val_numel(Y, batch) * (double)A->shape[A->ndim - 1];
    if (n->fwd < 0) return once;
    return once * ((n->nout > 0 && n->out[0] >= 0) + (n->nout > 1 && n->out[1] >= 0));
}

const kiln_op_def kiln_op_bmm = {
    .name = "bmm", .min_in = 2, .max_in = 2, .nout = 1, .strided_in = 3, .infer = bmm_infer,
    .backward = bmm_backward, .flops = bmm_flops, .bf16_in = 3,
};
const kiln_op_def kiln_op_bmm_bwd = {.name = "bmm_bwd", .min_in = 3, .max_in = 3, .strided_in = 3, .flops = bmm_flops,
                                    .bf16_in = 7};
