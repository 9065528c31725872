/* embedding, PyTorch's nn.Embedding / F.embedding: y[..., :] = weight[idx[...], :].
 * Inputs: idx [...] (token ids: i32, or f32 holding exact integers, as the
 * token loader gives them) and weight [V, C] (a parameter). Output [..., C].
 * An id outside [0, V) (or an f32 that is no integer) fails the step with a
 * message naming the node. idx gets no gradient; the weight's is a
 * scatter-add of dy's rows (deterministic: the same bits for any thread
 * count, see src/kernels/cpu/embedding.c). */
#include "graph/internal/graph.h"

static int embedding_infer(kiln_infer *ix) {
    const kiln_val *I = ix->in[0], *W = ix->in[1];
    char s1[96], s2[96];
    if (I->dtype != KILN_F32 && I->dtype != KILN_I32)
        return kiln_infer_fail(ix, KILN_ERR_INVALID_ARG, "indices '%s' are %s (want i32, or f32 holding integers)", I->name,
                               kiln_dtype_name(I->dtype));
    if (I->ndim < 1 || I->ndim >= KILN_MAX_DIMS || W->ndim != 2 || W->batched || W->dtype != KILN_F32)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "indices %s and weight '%s' %s (want [...] and [V, C] f32)",
                               kiln_infer_shape(I, s1), W->name, kiln_infer_shape(W, s2));
    kiln_out_spec *y = &ix->out[0];
    y->dtype = KILN_F32;
    y->ndim = I->ndim + 1;
    y->batched = I->batched;
    for (int d = 0; d < I->ndim; d++) y->shape[d] = I->shape[d];
    y->shape[I->ndim] = W->shape[1];
    return 0;
}

static int embedding_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value w = f->in[1];
    if (!kiln_ad_needs(ad, w)) return 0;
    kiln_value in[2] = {f->in[0], kiln_ad_dout(ad, 0)};
    return kiln_ad_emit(ad, KILN_OP_EMBEDDING_BWD, in, 2, &w, 1) < 0 ? -1 : 0;
}

const kiln_op_def kiln_op_embedding = {
    .name = "embedding", .min_in = 2, .max_in = 2, .nout = 1, .flags = KILN_OPF_LAYER, /* "wte.weight" names it "wte" */
    .infer = embedding_infer, .backward = embedding_backward,
};
const kiln_op_def kiln_op_embedding_bwd = {.name = "embedding_bwd", .min_in = 2, .max_in = 2};
