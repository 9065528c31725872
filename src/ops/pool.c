/* max_pool2d: square window, no padding, floor mode; ties go to the first
 * element of the window in row-major order, as PyTorch. Backward reads x. */
#include "graph/internal/graph.h"

static int pool_infer(kiln_infer *ix) {
    const kiln_val *X = ix->in[0];
    const kiln_pool_attrs *a = &ix->attr->pool;
    char s[96];
    if (X->ndim != 4 || X->dtype != KILN_F32 || a->kernel < 1 || a->stride < 1 || X->shape[2] < a->kernel ||
        X->shape[3] < a->kernel)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "input %s, kernel %lld, stride %lld", kiln_infer_shape(X, s),
                               (long long)a->kernel, (long long)a->stride);
    kiln_out_spec *y = &ix->out[0];
    y->dtype = KILN_F32;
    y->ndim = 4;
    y->batched = X->batched;
    y->shape[0] = X->shape[0];
    y->shape[1] = X->shape[1];
    y->shape[2] = (X->shape[2] - a->kernel) / a->stride + 1;
    y->shape[3] = (X->shape[3] - a->kernel) / a->stride + 1;
    return 0;
}

static int pool_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value x = f->in[0];
    if (!kiln_ad_needs(ad, x)) return 0;
    kiln_value in[2] = {x, kiln_ad_dout(ad, 0)};
    return kiln_ad_emit(ad, KILN_OP_MAX_POOL2D_BWD, in, 2, &x, 1) < 0 ? -1 : 0;
}

static const kiln_attr_spec pool_attrs[] = {KILN_ATTR("kernel", KILN_ATTR_I64, pool.kernel),
                                            KILN_ATTR("stride", KILN_ATTR_I64, pool.stride), {0}};

const kiln_op_def kiln_op_max_pool2d = {
    .name = "max_pool2d", .min_in = 1, .max_in = 1, .nout = 1, .attrs = pool_attrs,
    .infer = pool_infer, .backward = pool_backward,
};
const kiln_op_def kiln_op_max_pool2d_bwd = {
    .name = "max_pool2d_bwd", .min_in = 2, .max_in = 2, .epilogues = KILN_EPI_RELU_BWD_MASK, .attrs = pool_attrs,
};
