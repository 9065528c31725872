/* Pointwise ops: relu, gelu, dropout, add, mul (same shapes), and the
 * pointwise backward helpers (grad_copy, mul_bwd, ones), plus sum (a
 * reduction to a scalar whose backward is pointwise) and add_bcast (b added
 * to every row of a: b's shape is a's trailing dims, as positions [T, C]
 * added to [B, T, C]; not pointwise, its backward sums over the rows). */
#include "graph/internal/graph.h"

static int f32_input(kiln_infer *ix, int k) {
    const kiln_val *X = ix->in[k];
    if (X->dtype != KILN_F32)
        return kiln_infer_fail(ix, KILN_ERR_INVALID_ARG, "input '%s' is %s, not f32", X->name, kiln_dtype_name(X->dtype));
    return 0;
}

static void like(kiln_out_spec *y, const kiln_val *X) {
    y->dtype = KILN_F32;
    y->ndim = X->ndim;
    y->batched = X->batched;
    for (int d = 0; d < X->ndim; d++) y->shape[d] = X->shape[d];
}

static int unary_infer(kiln_infer *ix) {
    if (f32_input(ix, 0)) return -1;
    like(&ix->out[0], ix->in[0]);
    return 0;
}

static int binary_infer(kiln_infer *ix) {
    const kiln_val *A = ix->in[0], *B = ix->in[1];
    int same = A->ndim == B->ndim && A->batched == B->batched && A->dtype == KILN_F32 && B->dtype == KILN_F32;
    for (int d = 0; same && d < A->ndim; d++) same = A->shape[d] == B->shape[d];
    char s1[96], s2[96];
    if (!same)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "shapes %s and %s differ (no broadcasting)", kiln_infer_shape(A, s1),
                               kiln_infer_shape(B, s2));
    like(&ix->out[0], A);
    return 0;
}

/* b [S...] equals a's trailing dims and is not batched */
static int bcast_infer(kiln_infer *ix) {
    const kiln_val *A = ix->in[0], *B = ix->in[1];
    int fits = A->dtype == KILN_F32 && B->dtype == KILN_F32 && !B->batched && B->ndim >= 1 && B->ndim < A->ndim;
    for (int d = 0; fits && d < B->ndim; d++) fits = B->shape[d] == A->shape[A->ndim - B->ndim + d];
    char s1[96], s2[96];
    if (!fits)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "shapes %s and %s: b must be a's trailing dims, not batched",
                               kiln_infer_shape(A, s1), kiln_infer_shape(B, s2));
    like(&ix->out[0], A);
    return 0;
}

static int gelu_infer(kiln_infer *ix) {
    int t = ix->attr->gelu.tanh_form;
    if (t != 0 && t != 1) return kiln_infer_fail(ix, KILN_ERR_INVALID_ARG, "tanh_form %d (want 0: erf, 1: tanh)", t);
    return unary_infer(ix);
}

static int dropout_infer(kiln_infer *ix) {
    float p = ix->attr->dropout.p;
    if (!(p >= 0.0f && p < 1.0f)) return kiln_infer_fail(ix, KILN_ERR_INVALID_ARG, "p = %g (want 0 <= p < 1)", (double)p);
    return unary_infer(ix);
}

static int sum_infer(kiln_infer *ix) {
    if (f32_input(ix, 0)) return -1;
    ix->out[0].dtype = KILN_F32; /* a scalar */
    return 0;
}

/* relu's backward reads y, not x: y is what the fusion pass keeps */
static int relu_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value x = f->in[0];
    if (!kiln_ad_needs(ad, x)) return 0;
    kiln_value in[2] = {f->out[0], kiln_ad_dout(ad, 0)};
    return kiln_ad_emit(ad, KILN_OP_RELU_BWD, in, 2, &x, 1) < 0 ? -1 : 0;
}

/* gelu's backward reads x (and dy): a plain pointwise op of two inputs */
static int gelu_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value x = f->in[0];
    if (!kiln_ad_needs(ad, x)) return 0;
    kiln_value in[2] = {x, kiln_ad_dout(ad, 0)};
    return kiln_ad_emit(ad, KILN_OP_GELU_BWD, in, 2, &x, 1) < 0 ? -1 : 0;
}

static int bcast_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value dy = kiln_ad_dout(ad, 0);
    if (kiln_ad_needs(ad, f->in[0]) && kiln_ad_emit(ad, KILN_OP_GRAD_COPY, &dy, 1, &f->in[0], 1) < 0) return -1;
    if (kiln_ad_needs(ad, f->in[1]) && kiln_ad_emit(ad, KILN_OP_ADD_BCAST_BWD, &dy, 1, &f->in[1], 1) < 0) return -1;
    return 0;
}

static int dropout_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value x = f->in[0], dy = kiln_ad_dout(ad, 0);
    if (!kiln_ad_needs(ad, x)) return 0;
    return kiln_ad_emit(ad, KILN_OP_DROPOUT_BWD, &dy, 1, &x, 1) < 0 ? -1 : 0;
}

static int add_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value dy = kiln_ad_dout(ad, 0);
    for (int k = 0; k < 2; k++)
        if (kiln_ad_needs(ad, f->in[k]) && kiln_ad_emit(ad, KILN_OP_GRAD_COPY, &dy, 1, &f->in[k], 1) < 0) return -1;
    return 0;
}

static int mul_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value dy = kiln_ad_dout(ad, 0);
    for (int k = 0; k < 2; k++) {
        kiln_value in[2] = {dy, f->in[1 - k]};
        if (kiln_ad_needs(ad, f->in[k]) && kiln_ad_emit(ad, KILN_OP_MUL_BWD, in, 2, &f->in[k], 1) < 0) return -1;
    }
    return 0;
}

static int sum_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value x = f->in[0], dy = kiln_ad_dout(ad, 0);
    if (!kiln_ad_needs(ad, x)) return 0;
    return kiln_ad_emit(ad, KILN_OP_SUM_BWD, &dy, 1, &x, 1) < 0 ? -1 : 0;
}

/* evaluation (or dropout switched off, or p = 0): the identity, as a view */
static void dropout_specialize(kiln_graph *g, int i, const kiln_compile_opts *o) {
    kiln_node *n = &g->nodes[i];
    if (o->training && !o->dropout_off && n->attr.dropout.p != 0.0f) return;
    n->op = KILN_OP_RESHAPE;
    kiln_val *y = &g->vals[n->out[0]];
    const kiln_val *x = &g->vals[n->in[0]];
    y->alias_of = n->in[0];
    y->offset = x->offset;
    for (int d = 0; d < y->ndim; d++) y->stride[d] = x->stride[d];
}

static const kiln_attr_spec dropout_attrs[] = {KILN_ATTR("p", KILN_ATTR_F32, dropout.p), {0}};
#define EW (KILN_OPF_POINTWISE | KILN_OPF_ELEMENTWISE_LAYOUT)

const kiln_op_def kiln_op_relu = {
    .name = "relu", .min_in = 1, .max_in = 1, .nout = 1, .flags = EW | KILN_OPF_RECOMPUTE, .as_epilogue = KILN_EPI_RELU, .infer = unary_infer, .backward = relu_backward,
};
const kiln_op_def kiln_op_relu_bwd = {
    .name = "relu_bwd", .min_in = 2, .max_in = 2, .flags = EW, .as_epilogue = KILN_EPI_RELU_BWD_MASK,
};
static const kiln_attr_spec gelu_attrs[] = {KILN_ATTR("tanh_form", KILN_ATTR_INT, gelu.tanh_form), {0}};
const kiln_op_def kiln_op_gelu = {
    .name = "gelu", .min_in = 1, .max_in = 1, .nout = 1, .flags = EW | KILN_OPF_RECOMPUTE, .attrs = gelu_attrs, .infer = gelu_infer,
    .backward = gelu_backward,
};
const kiln_op_def kiln_op_gelu_bwd = {.name = "gelu_bwd", .min_in = 2, .max_in = 2, .flags = EW, .attrs = gelu_attrs};
const kiln_op_def kiln_op_dropout = {
    .name = "dropout", .min_in = 1, .max_in = 1, .nout = 1, .flags = KILN_OPF_POINTWISE | KILN_OPF_RANDOM | KILN_OPF_RECOMPUTE,
    .attrs = dropout_attrs, .infer = dropout_infer, .backward = dropout_backward, .specialize = dropout_specialize,
};
const kiln_op_def kiln_op_dropout_bwd = {
    .name = "dropout_bwd", .min_in = 1, .max_in = 1, .flags = KILN_OPF_POINTWISE | KILN_OPF_RANDOM, .attrs = dropout_attrs,
};
const kiln_op_def kiln_op_add = {
    .name = "add", .min_in = 2, .max_in = 2, .nout = 1, .flags = EW | KILN_OPF_RECOMPUTE, .infer = binary_infer, .backward = add_backward,
};
const kiln_op_def kiln_op_add_bcast = {
    .name = "add_bcast", .min_in = 2, .max_in = 2, .nout = 1, .infer = bcast_infer, .backward = bcast_backward,
};
const kiln_op_def kiln_op_add_bcast_bwd = {.name = "add_bcast_bwd", .min_in = 1, .max_in = 1};
const kiln_op_def kiln_op_mul = {
    .name = "mul", .min_in = 2, .max_in = 2, .nout = 1, .flags = EW | KILN_OPF_RECOMPUTE, .infer = binary_infer, .backward = mul_backward,
};
const kiln_op_def kiln_op_mul_bwd = {.name = "mul_bwd", .min_in = 2, .max_in = 2, .flags = EW};
/* its input may be a strided view (a transposed gradient): it then gathers */
const kiln_op_def kiln_op_grad_copy = {.name = "grad_copy", .min_in = 1, .max_in = 1, .flags = KILN_OPF_POINTWISE, .strided_in = 1};
const kiln_op_def kiln_op_ones = {.name = "ones", .min_in = 0, .max_in = 0};
const kiln_op_def kiln_op_sum = {
    .name = "sum", .min_in = 1, .max_in = 1, .nout = 1, .infer = sum_infer, .backward = sum_backward,
};
const kiln_op_def kiln_op_sum_bwd = {.name = "sum_bwd", .min_in = 1, .max_in = 1};
