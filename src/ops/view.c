/* Views share their input's storage: reshape (contiguous input), transpose
 * and slice (strided views, with a step), and contiguous, the copy that materialises a
 * strided view for ops that need packed rows. The builder inserts that copy
 * itself in front of any input slot that does not take strided views. The
 * batch dimension stays outermost in every view, so no stride depends on the
 * batch size. */
#include "graph/internal/graph.h"

static void view_of(kiln_out_spec *y, const kiln_val *X) {
    y->dtype = X->dtype;
    y->ndim = X->ndim;
    y->batched = X->batched;
    y->offset = X->offset;
    for (int d = 0; d < X->ndim; d++) {
        y->shape[d] = X->shape[d];
        y->stride[d] = X->stride[d];
    }
}

static int reshape_infer(kiln_infer *ix) {
    const kiln_val *X = ix->in[0];
    const kiln_reshape_attrs *a = &ix->attr->reshape;
    char s1[96], s2[96];
    if (a->ndim < 1 || a->ndim > KILN_MAX_DIMS) return kiln_infer_fail(ix, KILN_ERR_SHAPE, "%d dims", a->ndim);
    int batched = a->shape[0] == KILN_BATCH;
    if (batched != X->batched)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "the batch dimension must stay first (%s to %s)", kiln_infer_shape(X, s1),
                               kiln_shape_str(a->ndim, a->shape, s2, sizeof s2));
    int64_t n0 = 1, n1 = 1;
    for (int d = batched; d < X->ndim; d++) n0 *= X->shape[d];
    for (int d = batched; d < a->ndim; d++) {
        if (a->shape[d] <= 0) return kiln_infer_fail(ix, KILN_ERR_SHAPE, "dim %d is %lld", d, (long long)a->shape[d]);
        n1 *= a->shape[d];
    }
    if (n0 != n1)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "%s and %s differ in size", kiln_infer_shape(X, s1),
                               kiln_shape_str(a->ndim, a->shape, s2, sizeof s2));
    kiln_out_spec *y = &ix->out[0];
    y->dtype = X->dtype;
    y->ndim = a->ndim;
    y->batched = batched;
    y->offset = X->offset;
    for (int d = 0; d < a->ndim; d++) y->shape[d] = a->shape[d];
    kiln_contiguous_strides(y->ndim, y->shape, y->stride);
    return 0;
}

static int transpose_infer(kiln_infer *ix) {
    const kiln_val *X = ix->in[0];
    int d0 = ix->attr->transpose.dim0, d1 = ix->attr->transpose.dim1;
    char s[96];
    if (d0 < 0 || d1 < 0 || d0 >= X->ndim || d1 >= X->ndim)
        return kiln_infer_fail(ix, KILN_ERR_INVALID_ARG, "dims %d and %d of %s", d0, d1, kiln_infer_shape(X, s));
    if (X->batched && (d0 == 0 || d1 == 0))
        return kiln_infer_fail(ix, KILN_ERR_INVALID_ARG, "cannot move the batch dimension of %s", kiln_infer_shape(X, s));
    kiln_out_spec *y = &ix->out[0];
    view_of(y, X);
    y->shape[d0] = X->shape[d1];
    y->shape[d1] = X->shape[d0];
    y->stride[d0] = X->stride[d1];
    y->stride[d1] = X->stride[d0];
    return 0;
}

static int slice_infer(kiln_infer *ix) {
    const kiln_val *X = ix->in[0];
    const kiln_slice_attrs *a = &ix->attr->slice;
    char s[96];
    if (a->dim < 0 || a->dim >= X->ndim || (X->batched && a->dim == 0))
        return kiln_infer_fail(ix, KILN_ERR_INVALID_ARG, "dim %d of %s (the batch dimension cannot be sliced)", a->dim,
                               kiln_infer_shape(X, s));
    if (a->start < 0 || a->end <= a->start || a->end > X->shape[a->dim] || a->step < 1)
        return kiln_infer_fail(ix, KILN_ERR_INVALID_ARG, "[%lld:%lld:%lld] outside dim %d of %s", (long long)a->start,
                               (long long)a->end, (long long)a->step, a->dim, kiln_infer_shape(X, s));
    kiln_out_spec *y = &ix->out[0];
    view_of(y, X);
    y->shape[a->dim] = (a->end - a->start + a->step - 1) / a->step;
    y->offset = X->offset + a->start * X->stride[a->dim];
    y->stride[a->dim] = X->stride[a->dim] * a->step;
    return 0;
}

/* pad: a copy with zeros around it along one dim; its backward is a slice view of dy */
static int pad_infer(kiln_infer *ix) {
    const kiln_val *X = ix->in[0];
    const kiln_pad_attrs *a = &ix->attr->pad;
    char s[96];
    if (a->dim < 0 || a->dim >= X->ndim || (X->batched && a->dim == 0) || a->before < 0 || a->after < 0 ||
        X->dtype != KILN_F32)
        return kiln_infer_fail(ix, KILN_ERR_INVALID_ARG, "dim %d (%lld before, %lld after) of %s (f32, not the batch dim)",
                               a->dim, (long long)a->before, (long long)a->after, kiln_infer_shape(X, s));
    kiln_out_spec *y = &ix->out[0];
    y->dtype = X->dtype;
    y->ndim = X->ndim;
    y->batched = X->batched;
    for (int d = 0; d < X->ndim; d++) y->shape[d] = X->shape[d];
    y->shape[a->dim] += a->before + a->after;
    return 0;
}

static int pad_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value x = f->in[0];
    if (!kiln_ad_needs(ad, x)) return 0;
    const kiln_pad_attrs *p = &f->attr.pad;
    const kiln_val *X = kiln_ad_value(ad, x);
    kiln_attrs a = {.slice = {p->dim, p->before, p->before + X->shape[p->dim], 1}};
    kiln_value v = kiln_ad_view(ad, KILN_OP_SLICE, kiln_ad_dout(ad, 0), &a);
    return v < 0 ? -1 : kiln_ad_flow(ad, v, x);
}

static int contiguous_infer(kiln_infer *ix) {
    const kiln_val *X = ix->in[0];
    kiln_out_spec *y = &ix->out[0];
    y->dtype = X->dtype;
    y->ndim = X->ndim;
    y->batched = X->batched;
    for (int d = 0; d < X->ndim; d++) y->shape[d] = X->shape[d];
    return 0;
}

/* reshape and transpose: the gradient is the same view of dy, taken back */
static int reshape_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value x = f->in[0];
    if (!kiln_ad_needs(ad, x)) return 0;
    const kiln_val *X = kiln_ad_value(ad, x);
    kiln_attrs a = {.reshape = {X->ndim, {0}}};
    for (int d = 0; d < X->ndim; d++) a.reshape.shape[d] = X->batched && d == 0 ? KILN_BATCH : X->shape[d];
    kiln_value v = kiln_ad_view(ad, KILN_OP_RESHAPE, kiln_ad_dout(ad, 0), &a);
    return v < 0 ? -1 : kiln_ad_flow(ad, v, x);
}

static int transpose_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value x = f->in[0];
    if (!kiln_ad_needs(ad, x)) return 0;
    kiln_value v = kiln_ad_view(ad, KILN_OP_TRANSPOSE, kiln_ad_dout(ad, 0), &f->attr);
    return v < 0 ? -1 : kiln_ad_flow(ad, v, x);
}

static int slice_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value x = f->in[0], dy = kiln_ad_dout(ad, 0);
    if (!kiln_ad_needs(ad, x)) return 0;
    return kiln_ad_emit(ad, KILN_OP_SLICE_BWD, &dy, 1, &x, 1) < 0 ? -1 : 0;
}

static int contiguous_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value x = f->in[0], dy = kiln_ad_dout(ad, 0);
    if (!kiln_ad_needs(ad, x)) return 0;
    return kiln_ad_emit(ad, KILN_OP_GRAD_COPY, &dy, 1, &x, 1) < 0 ? -1 : 0;
}

static const kiln_attr_spec transpose_attrs[] = {KILN_ATTR("dim0", KILN_ATTR_INT, transpose.dim0),
                                                 KILN_ATTR("dim1", KILN_ATTR_INT, transpose.dim1), {0}};
static const kiln_attr_spec slice_attrs[] = {KILN_ATTR("dim", KILN_ATTR_INT, slice.dim),
                                             KILN_ATTR("start", KILN_ATTR_I64, slice.start),
                                             KILN_ATTR("end", KILN_ATTR_I64, slice.end),
                                             KILN_ATTR("step", KILN_ATTR_I64, slice.step), {0}};
static const kiln_attr_spec pad_attrs[] = {KILN_ATTR("dim", KILN_ATTR_INT, pad.dim),
                                           KILN_ATTR("before", KILN_ATTR_I64, pad.before),
                                           KILN_ATTR("after", KILN_ATTR_I64, pad.after), {0}};

const kiln_op_def kiln_op_reshape = {
    .name = "reshape", .min_in = 1, .max_in = 1, .nout = 1, .flags = KILN_OPF_VIEW, .infer = reshape_infer,
    .backward = reshape_backward,
};
const kiln_op_def kiln_op_transpose = {
    .name = "transpose", .min_in = 1, .max_in = 1, .nout = 1, .flags = KILN_OPF_VIEW, .strided_in = 1,
    .attrs = transpose_attrs, .infer = transpose_infer, .backward = transpose_backward,
};
const kiln_op_def kiln_op_slice = {
    .name = "slice", .min_in = 1, .max_in = 1, .nout = 1, .flags = KILN_OPF_VIEW, .strided_in = 1,
    .attrs = slice_attrs, .infer = slice_infer, .backward = slice_backward,
};
const kiln_op_def kiln_op_slice_bwd = {.name = "slice_bwd", .min_in = 1, .max_in = 1, .attrs = slice_attrs};
const kiln_op_def kiln_op_contiguous = {
    .name = "contiguous", .min_in = 1, .max_in = 1, .nout = 1, .strided_in = 1, .infer = contiguous_infer,
    .backward = contiguous_backward,
};
const kiln_op_def kiln_op_pad = {
    .name = "pad", .min_in = 1, .max_in = 1, .nout = 1, .attrs = pad_attrs, .infer = pad_infer, .backward = pad_backward,
};
