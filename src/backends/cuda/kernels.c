/* The CUDA backend's kernel table: for each op, the launch that runs it
 * (cuDNN and cuBLASLt through conv.c and linear.c, kiln's kernels in *.cu),
 * and what it works out at compile. Plain NCHW layouts only. */
#include "backends/cuda/internal/cuda.h"

#define F(t) ((float *)(t).data)
#define I(t) ((const int32_t *)(t).data)
#define ACC(k) kiln_step_acc(s, rc, (k))
#define ST kiln_cuda_stream()
#define DONE(what) return kiln_cuda_launched(what)

static kiln_status relu(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_relu(ST, s->out[0].numel, F(s->in[0]), F(s->out[0]));
    DONE("relu");
}
static kiln_status relu_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cuda_relu_bwd(ST, s->out[0].numel, F(s->in[0]), F(s->in[1]), F(s->out[0]), ACC(0));
    DONE("relu backward");
}

/* ---- max-pool ---- */
/* the GPU kernel knows unpadded windows only: padding is refused by name */
static kiln_status pool_prepare(kiln_step *s, kiln_prep *p) {
    if (s->attr.pool.pad != 0)
        return kiln_fail(KILN_ERR_BACKEND, "%s: the cuda backend has no max_pool2d kernel with padding yet", s->name);
    return kiln_prepare_pool(s, p);
}
static kiln_status pool(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    const kiln_pool_shape *p = &s->sz.pool;
    kiln_cuda_max_pool(ST, p->n * p->c, p->h, p->w, p->oh, p->ow, p->k, p->stride, F(s->in[0]), F(s->out[0]));
    DONE("max-pool");
}
static kiln_status pool_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_pool_shape *p = &s->sz.pool;
    kiln_cuda_max_pool_bwd(ST, p->n * p->c, p->h, p->w, p->oh, p->ow, p->k, p->stride, s->epilogue == KILN_EPI_RELU_BWD_MASK,
                           F(s->in[0]), F(s->in[1]), F(s->out[0]), ACC(0));
    DONE("max-pool backward");
}

/* ---- dropout: the mask from (key, step counter), as on the cpu ---- */
static kiln_status dropout(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_dropout(ST, s->out[0].numel, s->attr.dropout.p, s->key, kiln_cuda_rc_dev(), F(s->in[0]), F(s->out[0]), 0);
    DONE("dropout");
}
static kiln_status dropout_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cuda_dropout(ST, s->out[0].numel, s->attr.dropout.p, s->key, kiln_cuda_rc_dev(), F(s->in[0]), F(s->out[0]), ACC(0));
    DONE("dropout backward");
}

/* ---- row-wise ---- */
/* the losses: rows as every backend, and cross entropy's per-row terms in the workspace */
static kiln_status rows_of_in(kiln_step *s, kiln_prep *p) {
    kiln_prepare_rows_of_in(s, p);
    size_t need = (size_t)s->sz.rc.rows * sizeof(double);
    if (p && need > p->workspace) p->workspace = need;
    return KILN_OK;
}
#define RC s->sz.rc.rows, s->sz.rc.cols
static kiln_status log_softmax(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_log_softmax(ST, RC, F(s->in[0]), F(s->out[0]));
    DONE("log-softmax");
}
static kiln_status log_softmax_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cuda_log_softmax_bwd(ST, RC, F(s->in[0]), F(s->in[1]), F(s->out[0]), ACC(0));
    DONE("log-softmax backward");
}
static kiln_status nll(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_nll(ST, RC, F(s->in[0]), I(s->in[1]), kiln_cuda_flags_dev(), F(s->out[0]));
    DONE("nll loss");
}
static kiln_status nll_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cuda_nll_bwd(ST, RC, I(s->in[0]), F(s->in[1]), F(s->out[0]), ACC(0));
    DONE("nll loss backward");
}
static kiln_status cross_entropy(const kiln_step *s, const kiln_run_ctx *rc) {
    if (s->attr.loss.ignore)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s: the cuda backend has no masked cross entropy (ignored -1 targets) yet; "
                         "--device cpu has one", s->name);
    kiln_cuda_cross_entropy_rows(ST, RC, F(s->in[0]), I(s->in[1]), kiln_cuda_flags_dev(), rc->workspace, F(s->out[0]));
    DONE("cross entropy");
}
static kiln_status cross_entropy_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cuda_cross_entropy_bwd(ST, RC, F(s->in[0]), I(s->in[1]), F(s->in[2]), F(s->out[0]), ACC(0));
    DONE("cross entropy backward");
}

/* ---- elementwise ---- */
static kiln_status add(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_add(ST, s->out[0].numel, F(s->in[0]), F(s->in[1]), F(s->out[0]));
    DONE("add");
}
static kiln_status mul(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_mul(ST, s->out[0].numel, F(s->in[0]), F(s->in[1]), F(s->out[0]));
    DONE("mul");
}
static kiln_status mul_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cuda_mul_bwd(ST, s->out[0].numel, F(s->in[0]), F(s->in[1]), F(s->out[0]), ACC(0));
    DONE("mul backward");
}
static kiln_status ones(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_ones(ST, kiln_cuda_rc_dev(), F(s->out[0]));
    DONE("ones");
}
static kiln_status grad_copy(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_tdesc *x = &s->in[0];
    if (x->contiguous) kiln_cuda_copy(ST, s->out[0].numel, F(*x), F(s->out[0]), ACC(0));
    else kiln_cuda_copy_strided(ST, x->ndim, x->shape, x->stride, F(*x), F(s->out[0]), ACC(0));
    DONE("gradient copy");
}
static kiln_status contiguous(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    const kiln_tdesc *x = &s->in[0];
    kiln_cuda_copy_strided(ST, x->ndim, x->shape, x->stride, F(*x), F(s->out[0]), 0);
    DONE("contiguous");
}
/* the GPU kernel knows unit steps only: a strided slice's backward is refused by name */
static kiln_status slice_prepare(kiln_step *s, kiln_prep *p) {
    if (s->attr.slice.step != 1)
        return kiln_fail(KILN_ERR_BACKEND, "%s: the cuda backend has no slice_bwd kernel for step %lld yet", s->name,
                         (long long)s->attr.slice.step);
    return kiln_prepare_slice(s, p);
}

static kiln_status slice_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cuda_slice_bwd(ST, s->sz.slice.outer, s->sz.slice.dim, s->sz.slice.inner, s->attr.slice.start,
                        s->attr.slice.end - s->attr.slice.start, F(s->in[0]), F(s->out[0]), ACC(0));
    DONE("slice backward");
}
static kiln_status sum(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_sum(ST, s->in[0].numel, F(s->in[0]), F(s->out[0]));
    DONE("sum");
}
static kiln_status sum_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cuda_fill(ST, s->out[0].numel, F(s->in[0]), F(s->out[0]), ACC(0));
    DONE("sum backward");
}

/* ---- batch norm ---- */
/* batch statistics need two values per channel: refused at compile, as the cpu refuses at run */
static kiln_status bn_prepare(kiln_step *s, kiln_prep *p) {
    kiln_prepare_nchw(s, p);
    const kiln_tdesc *x = &s->in[0];
    if (s->attr.bn.sync) return kiln_fail(KILN_ERR_INVALID_ARG, "%s: sync batch norm (--sync-bn) runs on the cpu only", s->name);
    if (s->op == KILN_OP_BATCH_NORM2D && s->attr.bn.training && s->sz.nchw.n * s->sz.nchw.hw < 2)
        return kiln_fail(KILN_ERR_INVALID_ARG, "training needs more than one value per channel (batch %lld of %lldx%lld images)",
                         (long long)s->sz.nchw.n, (long long)x->shape[2], (long long)x->shape[3]);
    return KILN_OK;
}
#define NCHW s->sz.nchw.n, s->sz.nchw.c, s->sz.nchw.hw
static kiln_status bn(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    const kiln_bn_attrs *a = &s->attr.bn;
    kiln_cuda_batch_norm(ST, NCHW, F(s->in[0]), F(s->in[1]), F(s->in[2]), F(s->in[3]), F(s->in[4]), a->momentum, a->eps,
                         a->training, F(s->out[0]), s->nout > 1 ? F(s->out[1]) : NULL, s->nout > 2 ? F(s->out[2]) : NULL,
                         (int64_t *)s->in[5].data);
    if (s->epilogue == KILN_EPI_RELU) /* the fused relu, as a second kernel on the output */
        kiln_cuda_relu(ST, s->out[0].numel, F(s->out[0]), F(s->out[0]));
    DONE("batch norm");
}
static kiln_status bn_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cuda_batch_norm_bwd(ST, NCHW, F(s->in[0]), F(s->in[1]), F(s->in[2]), F(s->in[3]), F(s->in[4]), F(s->out[0]),
                             F(s->out[1]), F(s->out[2]), ACC(0), ACC(1), ACC(2));
    DONE("batch norm backward");
}

/* ---- steps outside the graph ---- */
kiln_status kiln_cuda_flag_error(const kiln_cuda_flags *f) {
    if (f->bad_target)
        return kiln_fail(KILN_ERR_INVALID_ARG, "target %d is %d, outside [0, %d)", f->bad_target - 1, f->target_value, f->classes);
    if (f->nonfinite_norm) return kiln_fail(KILN_ERR_NUMERIC, "clip_grad_norm: the gradient norm is not finite");
    return KILN_OK;
}

static kiln_status sumsq(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_sumsq(ST, s->in[0].numel, F(s->in[0]), s->out[0].data, s->acc[0]);
    DONE("sum of squares");
}
static kiln_status clip_scale(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_scale_by_norm(ST, s->out[0].numel, s->in[0].data, s->attr.clip.max_norm, kiln_cuda_flags_dev(), F(s->out[0]));
    DONE("clip");
}
static kiln_status sgd(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    const kiln_sgd_attrs *a = &s->attr.sgd;
    kiln_cuda_sgd(ST, s->in[0].numel, F(s->out[0]), F(s->in[0]), s->nout > 1 ? F(s->out[1]) : NULL, kiln_cuda_rc_dev(),
                  a->momentum, a->dampening, a->weight_decay, a->nesterov);
    DONE("sgd");
}
static kiln_status adamw(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    const kiln_adamw_attrs *a = &s->attr.adamw;
    kiln_cuda_adamw(ST, s->in[0].numel, F(s->out[0]), F(s->in[0]), F(s->out[1]), F(s->out[2]), kiln_cuda_rc_dev(), a->beta1,
                    a->beta2, a->eps, a->weight_decay);
    DONE("adamw");
}
static kiln_status adadelta(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    const kiln_adadelta_attrs *a = &s->attr.adadelta;
    kiln_cuda_adadelta(ST, s->in[0].numel, F(s->out[0]), F(s->in[0]), F(s->out[1]), F(s->out[2]), kiln_cuda_rc_dev(), a->rho,
                       a->eps, a->weight_decay);
    DONE("adadelta");
}

const kiln_kernel kiln_cuda_kernels[KILN_OP_COUNT] = {
#ifndef KILN_SIMT /* cuDNN and cuBLASLt need the GPU: the host build (tests/simt/) has kiln's own kernels only */
    [KILN_OP_CONV2D] = {kiln_cuda_conv_fwd, kiln_cuda_conv_prepare, kiln_cuda_conv_release},
    [KILN_OP_CONV2D_BWD_DATA] = {kiln_cuda_conv_bwd_data, kiln_cuda_conv_bwd_prepare},
    [KILN_OP_CONV2D_BWD_WEIGHT] = {kiln_cuda_conv_bwd_weight, kiln_cuda_conv_bwd_prepare},
    [KILN_OP_LINEAR] = {kiln_cuda_linear_fwd, kiln_cuda_linear_prepare, kiln_cuda_linear_release},
    [KILN_OP_LINEAR_BWD_DATA] = {kiln_cuda_linear_bwd_data, kiln_cuda_linear_prepare, kiln_cuda_linear_release},
    [KILN_OP_LINEAR_BWD_WEIGHT] = {kiln_cuda_linear_bwd_weight, kiln_cuda_linear_prepare, kiln_cuda_linear_release},
#endif
    [KILN_OP_RELU] = {relu, NULL},
    [KILN_OP_RELU_BWD] = {relu_bwd, NULL},
    [KILN_OP_MAX_POOL2D] = {pool, pool_prepare},
    [KILN_OP_MAX_POOL2D_BWD] = {pool_bwd, pool_prepare},
    [KILN_OP_DROPOUT] = {dropout, NULL},
    [KILN_OP_DROPOUT_BWD] = {dropout_bwd, NULL},
    [KILN_OP_LOG_SOFTMAX] = {log_softmax, kiln_prepare_rows_of_out},
    [KILN_OP_LOG_SOFTMAX_BWD] = {log_softmax_bwd, kiln_prepare_rows_of_out},
    [KILN_OP_NLL_LOSS] = {nll, rows_of_in},
    [KILN_OP_NLL_LOSS_BWD] = {nll_bwd, kiln_prepare_rows_of_out},
    [KILN_OP_CROSS_ENTROPY] = {cross_entropy, rows_of_in},
    [KILN_OP_CROSS_ENTROPY_BWD] = {cross_entropy_bwd, kiln_prepare_rows_of_out},
    [KILN_OP_ADD] = {add, NULL},
    [KILN_OP_MUL] = {mul, NULL},
    [KILN_OP_MUL_BWD] = {mul_bwd, NULL},
    [KILN_OP_ONES] = {ones, NULL},
    [KILN_OP_GRAD_COPY] = {grad_copy, NULL},
    [KILN_OP_CONTIGUOUS] = {contiguous, NULL},
    [KILN_OP_SLICE_BWD] = {slice_bwd, slice_prepare},
    [KILN_OP_SUM] = {sum, NULL},
    [KILN_OP_SUM_BWD] = {sum_bwd, NULL},
    [KILN_OP_BATCH_NORM2D] = {bn, bn_prepare},
    [KILN_OP_BATCH_NORM2D_BWD] = {bn_bwd, bn_prepare},
    [KILN_OP_READOUT] = {kiln_cuda_readout, NULL},
    [KILN_OP_SUMSQ] = {sumsq, NULL},
    [KILN_OP_CLIP_SCALE] = {clip_scale, NULL},
    [KILN_OP_SGD_UPDATE] = {sgd, NULL},
    [KILN_OP_ADAMW_UPDATE] = {adamw, NULL},
    [KILN_OP_ADADELTA_UPDATE] = {adadelta, NULL},
};
