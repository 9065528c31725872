/* max_pool2d: square window, -inf padding up to half the window, floor mode; ties go to the first
 * element of the window in row-major order, as PyTorch. Backward reads x.
 * avg_pool2d (square window, zero padding up to half the window,
 * count_include_pad) and adaptive_avg_pool2d (out_h x out_w bins; 1x1 is the
 * global average pool), floor mode: one backward op, reading only dy. */
#include "graph/internal/graph.h"

/* a pooling's output: X's batch and channels, h x w, f32 */
static int pooled_out(kiln_infer *ix, const kiln_val *X, int64_t h, int64_t w) {
    kiln_out_spec *y = &ix->out[0];
    y->dtype = KILN_F32;
    y->ndim = 4;
    y->batched = X->batched;
    y->shape[0] = X->shape[0];
    y->shape[1] = X->shape[1];
    y->shape[2] = h;
    y->shape[3] = w;
    return 0;
}

static int pool_infer(kiln_infer *ix) {
    const kiln_val *X = ix->in[0];
    const kiln_pool_attrs *a = &ix->attr->pool;
    char s[96];
    if (X->ndim != 4 || X->dtype != KILN_F32 || a->kernel < 1 || a->stride < 1 || a->pad < 0 || 2 * a->pad > a->kernel ||
        X->shape[2] + 2 * a->pad < a->kernel || X->shape[3] + 2 * a->pad < a->kernel)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "input %s, kernel %lld, stride %lld, pad %lld (at most half the kernel)",
                               kiln_infer_shape(X, s), (long long)a->kernel, (long long)a->stride, (long long)a->pad);
    return pooled_out(ix, X, (X->shape[2] + 2 * a->pad - a->kernel) / a->stride + 1,
                      (X->shape[3] + 2 * a->pad - a->kernel) / a->stride + 1);
}

static int pool_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value x = f->in[0];
    if (!kiln_ad_needs(ad, x)) return 0;
    kiln_value in[2] = {x, kiln_ad_dout(ad, 0)};
    return kiln_ad_emit(ad, KILN_OP_MAX_POOL2D_BWD, in, 2, &x, 1) < 0 ? -1 : 0;
}

static const kiln_attr_spec pool_attrs[] = {KILN_ATTR("kernel", KILN_ATTR_I64, pool.kernel),
                                            KILN_ATTR("stride", KILN_ATTR_I64, pool.stride),
                                            KILN_ATTR("pad", KILN_ATTR_I64, pool.pad), {0}};

const kiln_op_def kiln_op_max_pool2d = {
    .name = "max_pool2d", .min_in = 1, .max_in = 1, .nout = 1, .flags = KILN_OPF_RECOMPUTE, .attrs = pool_attrs,
    .infer = pool_infer, .backward = pool_backward,
};
const kiln_op_def kiln_op_max_pool2d_bwd = {
    .name = "max_pool2d_bwd", .min_in = 2, .max_in = 2, .epilogues = KILN_EPI_RELU_BWD_MASK, .attrs = pool_attrs,
};

static int avg_infer(kiln_infer *ix) {
    const kiln_val *X = ix->in[0];
    const kiln_avg_pool_attrs *a = &ix->attr->avg_pool;
    char s[96];
    int ok = X->ndim == 4 && X->dtype == KILN_F32;
    if (a->adaptive) ok = ok && a->out_h >= 1 && a->out_w >= 1;
    else ok = ok && a->kernel >= 1 && a->stride >= 1 && a->pad >= 0 && 2 * a->pad <= a->kernel &&
              X->shape[2] + 2 * a->pad >= a->kernel && X->shape[3] + 2 * a->pad >= a->kernel;
    if (!ok && a->adaptive)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "input %s (want [N,C,H,W] f32), output %lldx%lld", kiln_infer_shape(X, s),
                               (long long)a->out_h, (long long)a->out_w);
    if (!ok)
        return kiln_infer_fail(ix, KILN_ERR_SHAPE, "input %s (want [N,C,H,W] f32), kernel %lld, stride %lld, pad %lld (at most half the kernel)",
                               kiln_infer_shape(X, s), (long long)a->kernel, (long long)a->stride, (long long)a->pad);
    return pooled_out(ix, X, a->adaptive ? a->out_h : (X->shape[2] + 2 * a->pad - a->kernel) / a->stride + 1,
                      a->adaptive ? a->out_w : (X->shape[3] + 2 * a->pad - a->kernel) / a->stride + 1);
}

static int avg_backward(kiln_ad *ad, const kiln_node *f) {
    kiln_value x = f->in[0], dy = kiln_ad_dout(ad, 0);
    if (!kiln_ad_needs(ad, x)) return 0;
    return kiln_ad_emit(ad, KILN_OP_AVG_POOL2D_BWD, &dy, 1, &x, 1) < 0 ? -1 : 0;
}

static const kiln_attr_spec avg_attrs[] = {KILN_ATTR("kernel", KILN_ATTR_I64, avg_pool.kernel),
                                           KILN_ATTR("stride", KILN_ATTR_I64, avg_pool.stride),
                                           KILN_ATTR("pad", KILN_ATTR_I64, avg_pool.pad),
                                           KILN_ATTR("count_include_pad", KILN_ATTR_INT, avg_pool.count_include_pad), {0}};
static const kiln_attr_spec adaptive_attrs[] = {KILN_ATTR("out_h", KILN_ATTR_I64, avg_pool.out_h),
                                                KILN_ATTR("out_w", KILN_ATTR_I64, avg_pool.out_w), {0}};

const kiln_op_def kiln_op_avg_pool2d = {
    .name = "avg_pool2d", .min_in = 1, .max_in = 1, .nout = 1, .flags = KILN_OPF_RECOMPUTE, .attrs = avg_attrs, .infer = avg_infer,
    .backward = avg_backward,
};
const kiln_op_def kiln_op_adaptive_avg_pool2d = {
    .name = "adaptive_avg_pool2d", .min_in = 1, .max_in = 1, .nout = 1, .attrs = adaptive_attrs, .infer = avg_infer,
    .backward = avg_backward,
};
const kiln_op_def kiln_op_avg_pool2d_bwd = {.name = "avg_pool2d_bwd", .min_in = 1, .max_in = 1, .attrs = avg_attrs};
