/* Pointwise arithmetic: affine (y = x * scale + shift: multiplying, dividing
 * or adding a scalar), erf and tanh, with their backward ops. Written as
 * separate nodes they are what the pointwise fusion pass joins: the guide's
 * GELU, x * 0.5 * (1 + erf(x / 1.41421)), is five of them (scale, erf,
 * add_scalar, scale, mul). */
#include "graph/internal/graph.h"

static int unary_f32(kiln_infer *ix) {
    const kiln_val *X = ix->in[0];
    if (X->dtype != KILN_F32)
        return kiln_infer_fail(ix, KILN_ERR_INVALID_ARG, "input '%s' is %s, not f32", X->name, kiln_dtype_name(X->dtype));
    kiln_out_spec *y = &ix->out[0];
    y->dtype = KILN_F32;
    y->ndim = X->ndim;
    y->batched = X->batched;
    for (int d = 0; d < X->ndim; d++) y->shape[d] = X->shape[d];
    return 0;
}

/* dx = scale * dy: the shift does not flow back */
static int affine_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value x = f->in[0], dy = kiln_ad_dout(ad, 0);
    if (!kiln_ad_needs(ad, x)) return 0;
    return kiln_ad_emit(ad, KILN_OP_AFFINE_BWD, &dy, 1, &x, 1) < 0 ? -1 : 0;
}

/* erf's derivative needs x */
static int erf_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value x = f->in[0];
    if (!kiln_ad_needs(ad, x)) return 0;
    kiln_value in[2] = {x, kiln_ad_dout(ad, 0)};
    return kiln_ad_emit(ad, KILN_OP_ERF_BWD, in, 2, &x, 1) < 0 ? -1 : 0;
}

/* tanh's reads y: 1 - y^2 */
static int tanh_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value x = f->in[0];
    if (!kiln_ad_needs(ad, x)) return 0;
    kiln_value in[2] = {f->out[0], kiln_ad_dout(ad, 0)};
    return kiln_ad_emit(ad, KILN_OP_TANH_BWD, in, 2, &x, 1) < 0 ? -1 : 0;
}

static const kiln_attr_spec affine_attrs[] = {
    KILN_ATTR("scale", KILN_ATTR_F32, affine.scale), KILN_ATTR("shift", KILN_ATTR_F32, affine.shift), {0}};
#define EW (KILN_OPF_POINTWISE | KILN_OPF_ELEMENTWISE_LAYOUT)

const kiln_op_def kiln_op_affine = {
    .name = "affine", .min_in = 1, .max_in = 1, .nout = 1, .flags = EW, .attrs = affine_attrs, .infer = unary_f32,
    .backward = affine_backward,
};
const kiln_op_def kiln_op_affine_bwd = {.name = "affine_bwd", .min_in = 1, .max_in = 1, .flags = EW, .attrs = affine_attrs};
const kiln_op_def kiln_op_erf = {
    .name = "erf", .min_in = 1, .max_in = 1, .nout = 1, .flags = EW, .infer = unary_f32, .backward = erf_backward,
};
const kiln_op_def kiln_op_erf_bwd = {.name = "erf_bwd", .min_in = 2, .max_in = 2, .flags = EW};
const kiln_op_def kiln_op_tanh = {
    .name = "tanh", .min_in = 1, .max_in = 1, .nout = 1, .flags = EW, .infer = unary_f32, .backward = tanh_backward,
};
const kiln_op_def kiln_op_tanh_bwd = {.name = "tanh_bwd", .min_in = 2, .max_in = 2, .flags = EW};

static const kiln_attr_spec fused_attrs[] = {{"holds", KILN_ATTR_FUSED, offsetof(kiln_attrs, fused)}, {0}};
/* made by the pass, never by the builder. A group whose members all work on any
 * layout their operands share is one too (a residual add and relu between blocked
 * convolutions); a group holding dropout is not: its mask follows row-major order */
const kiln_op_def kiln_op_fused = {
    .name = "fused", .min_in = 1, .max_in = KILN_OP_MAX_IN, .flags = KILN_OPF_ELEMENTWISE_LAYOUT, .attrs = fused_attrs,
};
const kiln_op_def kiln_op_fused_plain = {.name = "fused", .min_in = 1, .max_in = KILN_OP_MAX_IN, .attrs = fused_attrs};
