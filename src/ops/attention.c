/* causal_attention: multi-head causal self-attention, as nanoGPT writes it,
 *     y = softmax(mask(q_h k_h^T / sqrt(D))) v_h   for each head h,
 * with q, k, v [B,T,C] split into heads of D = C/heads columns (head h is
 * columns h*D..(h+1)*D, and so in y: PyTorch's y.transpose(1,2).view(B,T,C)).
 * q, k and v may be strided views (the three slices of one [B,T,3C] matmul
 * output) with contiguous rows. Outputs: y and, saved for backward, the
 * logsumexp of each score row [B,heads,T]; backward recomputes the scores
 * from q, k and it (docs/attention.md). */
#include "graph/internal/graph.h"

static int attention_infer(kiln_infer *ix) {
    const kiln_val *Q = ix->in[0];
    char s1[96], s2[96];
    static const char *what[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        const kiln_val *V = ix->in[i];
        if (V->ndim != 3 || V->dtype != KILN_F32)
            return kiln_infer_fail(ix, KILN_ERR_SHAPE, "%s '%s' %s (want [B,T,C] f32)", what[i], V->name, kiln_infer_shape(V, s1));
        if (V->stride[2] != 1 && V->shape[2] > 1)
            return kiln_infer_fail(ix, KILN_ERR_SHAPE, "%s '%s' has strided columns (rows must be contiguous)", what[i], V->name);
        if (i && (V->batched != Q->batched || V->shape[0] != Q->shape[0] || V->shape[1] != Q->shape[1] ||
                  V->shape[2] != Q->shape[2]))
            return kiln_infer_fail(ix, KILN_ERR_SHAPE, "%s %s does not match q %s", what[i], kiln_infer_shape(V, s1),
                                   kiln_infer_shape(Q, s2));
    }
    int64_t heads = ix->attr->attn.heads;
    if (heads < 1 || Q->shape[2] % heads)
        return kiln_infer_fail(ix, KILN_ERR_INVALID_ARG, "%lld heads do not divide %lld channels", (long long)heads,
                               (long long)Q->shape[2]);
    kiln_out_spec *y = &ix->out[0], *lse = &ix->out[1];
    y->dtype = lse->dtype = KILN_F32;
    y->ndim = lse->ndim = 3;
    y->batched = lse->batched = Q->batched;
    for (int d = 0; d < 3; d++) y->shape[d] = Q->shape[d];
    lse->shape[0] = Q->shape[0];
    lse->shape[1] = heads;
    lse->shape[2] = Q->shape[1];
    return 0;
}

/* the value whose column thirds q, k, v are, in that order (GPT's c_attn output), else -1 */
static kiln_value thirds_of(const kiln_ad *ad, const kiln_node *f) {
    const kiln_val *Q = kiln_ad_value(ad, f->in[0]);
    kiln_value x = Q->alias_of;
    if (x < 0) return -1;
    const kiln_val *X = kiln_ad_value(ad, x);
    int ok = X->ndim == 3 && X->batched == Q->batched && X->stride[2] == 1 && X->shape[2] == 3 * Q->shape[2];
    for (int i = 0; i < 3 && ok; i++) {
        const kiln_val *V = kiln_ad_value(ad, f->in[i]);
        ok = V->alias_of == x && V->offset - X->offset == i * Q->shape[2];
        for (int d = 0; d < 3 && ok; d++) ok = V->stride[d] == X->stride[d] && (d == 2 || V->shape[d] == X->shape[d]);
    }
    return ok ? x : -1;
}

/* One node writes dq, dk and dv (those wanted), from the forward's y and logsumexp. When
 * q, k, v are the thirds of one value x, it writes dx whole instead: no dq, dk, dv
 * buffers, and no slice backward steps gathering them into dx. */
static int attention_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value t[3], in[6] = {f->in[0], f->in[1], f->in[2], f->out[0], f->out[1], kiln_ad_dout(ad, 0)};
    if (!kiln_ad_targets(ad, f, 3, t)) return 0;
    kiln_value x = thirds_of(ad, f);
    if (x >= 0) return kiln_ad_emit(ad, KILN_OP_CAUSAL_ATTENTION_BWD, in, 6, &x, 1) < 0 ? -1 : 0;
    return kiln_ad_emit(ad, KILN_OP_CAUSAL_ATTENTION_BWD, in, 6, t, 3) < 0 ? -1 : 0;
}

/* 2 x the multiply-adds over the causal half (T(T+1)/2 scores per head, D
 * each): forward does q k^T and p v; backward recomputes q k^T and does
 * dp = dy v^T, dv, dq and dk: 5 products against forward's 2 */
static double attention_flops(const kiln_graph *g, const kiln_node *n, int64_t batch) {
    const kiln_node *f = n->fwd >= 0 ? &g->nodes[n->fwd] : n;
    const kiln_val *Q = &g->vals[f->in[0]];
    double t = (double)Q->shape[1], pairs = t * (t + 1) / 2;
    double macs = (double)(Q->batched ? batch : Q->shape[0]) * pairs * (double)Q->shape[2];
    return 2.0 * macs * (n->fwd >= 0 ? 5 : 2);
}

static const kiln_attr_spec attn_attrs[] = {KILN_ATTR("heads", KILN_ATTR_I64, attn.heads), {0}};

const kiln_op_def kiln_op_causal_attention = {
    .name = "causal_attention", .min_in = 3, .max_in = 3, .nout = 2, .strided_in = 7, .attrs = attn_attrs,
    .infer = attention_infer, .backward = attention_backward, .flops = attention_flops,
};
const kiln_op_def kiln_op_causal_attention_bwd = {
    .name = "causal_attention_bwd", .min_in = 6, .max_in = 6, .strided_in = 7, .attrs = attn_attrs,
    .flops = attention_flops,
};
