/* The cpu backend's kernel table: for each op of the table, the float kernel
 * that runs it (src/kernels/cpu/, oneDNN through dnnl.c), what it works out
 * at compile, and which of its slots take the blocked nChw16c layout. Views
 * (reshape, transpose, slice) have no kernel: they are never steps. */
#include <math.h>
#include "backends/cpu/internal/cpu.h"
#include "kernels/cpu/pointwise_vec.h"

#define F(t) ((float *)(t).data)
#define I(t) ((const int32_t *)(t).data)
#define ACC(k) kiln_step_acc(s, rc, (k))
#define UNUSED (void)rc

static kiln_status relu(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_cpu_relu_fwd(s->out[0].numel, F(s->in[0]), F(s->out[0]));
    return KILN_OK;
}

static kiln_status relu_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cpu_relu_bwd(s->out[0].numel, F(s->in[0]), F(s->in[1]), F(s->out[0]), ACC(0));
    return KILN_OK;
}

/* ---- max-pool ---- */

static kiln_status pool(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_cpu_max_pool2d_fwd_layout(&s->sz.pool, s->in[0].layout, s->out[0].layout, F(s->in[0]), F(s->out[0]));
    return KILN_OK;
}

static kiln_status pool_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cpu_max_pool2d_bwd_layout(&s->sz.pool, s->in[0].layout, s->in[1].layout, s->epilogue == KILN_EPI_RELU_BWD_MASK, F(s->in[0]),
                                   F(s->in[1]), F(s->out[0]), ACC(0));
    return KILN_OK;
}

/* ---- dropout: the mask is recomputed from (key, step counter), never stored ---- */

static kiln_status dropout(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cpu_dropout_fwd(s->out[0].numel, s->attr.dropout.p, s->key, rc->counter, F(s->in[0]), F(s->out[0]));
    return KILN_OK;
}

static kiln_status dropout_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cpu_dropout_bwd(s->out[0].numel, s->attr.dropout.p, s->key, rc->counter, F(s->in[0]), F(s->out[0]), ACC(0));
    return KILN_OK;
}

/* ---- row-wise ops: [rows, cols] over the last dim of the given tensor ---- */


/* targets in [0, classes), or -1 (padding) for a masked cross entropy */
static kiln_status check_targets(const kiln_step *s, const int32_t *t) {
    int low = s->op == KILN_OP_CROSS_ENTROPY && s->attr.loss.ignore ? -1 : 0;
    for (int64_t i = 0; i < s->sz.rc.rows; i++)
        if (t[i] < low || t[i] >= s->sz.rc.cols)
            return kiln_fail(KILN_ERR_INVALID_ARG, "target %lld is %d, outside [0, %lld)", (long long)i, t[i],
                             (long long)s->sz.rc.cols);
    return KILN_OK;
}

static kiln_status log_softmax(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_cpu_log_softmax_fwd(s->sz.rc.rows, s->sz.rc.cols, F(s->in[0]), F(s->out[0]));
    return KILN_OK;
}

static kiln_status log_softmax_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cpu_log_softmax_bwd(s->sz.rc.rows, s->sz.rc.cols, F(s->in[0]), F(s->in[1]), F(s->out[0]), ACC(0));
    return KILN_OK;
}

static kiln_status nll(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_status st = check_targets(s, I(s->in[1]));
    if (st == KILN_OK) kiln_cpu_nll_loss_fwd(s->sz.rc.rows, s->sz.rc.cols, F(s->in[0]), I(s->in[1]), F(s->out[0]));
    return st;
}

static kiln_status nll_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cpu_nll_loss_bwd(s->sz.rc.rows, s->sz.rc.cols, I(s->in[0]), F(s->in[1]), F(s->out[0]), ACC(0));
    return KILN_OK;
}

static kiln_status cross_entropy(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_status st = check_targets(s, I(s->in[1]));
    if (st == KILN_OK) kiln_cpu_cross_entropy_fwd(s->sz.rc.rows, s->sz.rc.cols, F(s->in[0]), I(s->in[1]), F(s->out[0]));
    return st;
}

static kiln_status mse(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_cpu_mse_loss_fwd(s->in[0].numel, F(s->in[0]), F(s->in[1]), F(s->out[0]));
    return KILN_OK;
}

static kiln_status mse_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_cpu_mse_loss_bwd(s->out[0].numel, F(s->in[0]), F(s->in[1]), F(s->in[2]), F(s->out[0]), ACC(0),
                          s->epilogue == KILN_EPI_RELU_BWD_MASK);
    return KILN_OK;
}

static kiln_status cross_entropy_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cpu_cross_entropy_bwd(s->sz.rc.rows, s->sz.rc.cols, F(s->in[0]), I(s->in[1]), F(s->in[2]), F(s->out[0]), ACC(0));
    return KILN_OK;
}

/* ---- elementwise ---- */

static kiln_status add(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_cpu_add_fwd(s->out[0].numel, F(s->in[0]), F(s->in[1]), F(s->out[0]));
    return KILN_OK;
}

static kiln_status mul(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_cpu_mul_fwd(s->out[0].numel, F(s->in[0]), F(s->in[1]), F(s->out[0]));
    return KILN_OK;
}

static kiln_status mul_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cpu_mul_bwd(s->out[0].numel, F(s->in[0]), F(s->in[1]), F(s->out[0]), ACC(0));
    return KILN_OK;
}

/* backward's seed, times the gradient scaler's scale when there is one */
static kiln_status ones(const kiln_step *s, const kiln_run_ctx *rc) {
    F(s->out[0])[0] = (float)(rc->loss_scale * (rc->amp ? rc->amp->scale : 1.0f));
    return KILN_OK;
}

/* a strided input (a transposed gradient) is gathered; packed rows are a plain copy */
/* a copy between the plain and blocked layouts of one [N, C, H, W] tensor (the layout pass's reorders) */
static int reorder(const kiln_step *s, int acc) {
    const kiln_tdesc *x = &s->in[0], *y = &s->out[0];
    if (x->layout == y->layout) return 0;
    int block = x->layout ? x->layout : y->layout;
    kiln_cpu_reorder_nchw(x->shape[0], x->shape[1], x->shape[2] * x->shape[3], block, x->layout != 0, F(*x), F(*y), acc);
    return 1;
}

static kiln_status grad_copy(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_tdesc *x = &s->in[0];
    if (reorder(s, ACC(0))) return KILN_OK;
    if (x->contiguous) kiln_cpu_grad_copy(s->out[0].numel, F(*x), F(s->out[0]), ACC(0));
    else kiln_cpu_copy_strided(x->ndim, x->shape, F(*x), x->stride, F(s->out[0]), ACC(0));
    return KILN_OK;
}

static kiln_status contiguous(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    const kiln_tdesc *x = &s->in[0];
    if (reorder(s, 0)) return KILN_OK;
    if (x->layout) kiln_cpu_grad_copy(s->out[0].numel, F(*x), F(s->out[0]), 0); /* blocked to blocked: whole */
    else kiln_cpu_copy_strided(x->ndim, x->shape, F(*x), x->stride, F(s->out[0]), 0);
    return KILN_OK;
}

static kiln_status slice_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_slice_attrs *a = &s->attr.slice;
    kiln_cpu_slice_bwd(s->sz.slice.outer, s->sz.slice.dim, s->sz.slice.inner, a->start,
                       (a->end - a->start + a->step - 1) / a->step, a->step, F(s->in[0]), F(s->out[0]), ACC(0));
    return KILN_OK;
}

/* pad's forward is slice's backward from the other side: the input lands at `before`, zeros around */
static kiln_status pad(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_cpu_slice_bwd(s->sz.slice.outer, s->sz.slice.dim, s->sz.slice.inner, s->attr.pad.before,
                       s->in[0].shape[s->attr.pad.dim], 1, F(s->in[0]), F(s->out[0]), 0);
    return KILN_OK;
}

/* ---- the option-A shortcut: x and y each NCHW or nChw16c ---- */

/* x's shape (the forward's input; the backward's output) and the attributes */
static kiln_subsample_shape subsample_shape(const kiln_step *s, const kiln_tdesc *x) {
    const kiln_subsample_attrs *a = &s->attr.subsample;
    return (kiln_subsample_shape){x->shape[0], x->shape[1], x->shape[2], x->shape[3], a->stride, a->before, a->after};
}

static kiln_status subsample_pad(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_subsample_shape S = subsample_shape(s, &s->in[0]);
    kiln_cpu_subsample_pad(&S, s->in[0].layout, s->out[0].layout, F(s->in[0]), F(s->out[0]));
    return KILN_OK;
}

static kiln_status subsample_pad_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_subsample_shape S = subsample_shape(s, &s->out[0]);
    kiln_cpu_subsample_pad_bwd(&S, s->in[0].layout, s->out[0].layout, F(s->in[0]), F(s->out[0]), ACC(0));
    return KILN_OK;
}

/* ---- average pooling: x (and dx) NCHW or nChw16c ---- */

static kiln_status avg_pool(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_cpu_avg_pool2d_fwd(&s->sz.avg_pool, s->in[0].layout, F(s->in[0]), F(s->out[0]));
    return KILN_OK;
}

static kiln_status avg_pool_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cpu_avg_pool2d_bwd(&s->sz.avg_pool, s->out[0].layout, F(s->in[0]), F(s->out[0]), ACC(0));
    return KILN_OK;
}

static kiln_status sum(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    F(s->out[0])[0] = (float)kiln_cpu_sum(s->in[0].numel, F(s->in[0]));
    return KILN_OK;
}

static kiln_status sum_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cpu_fill(s->out[0].numel, F(s->in[0])[0], F(s->out[0]), ACC(0));
    return KILN_OK;
}

/* ---- batch norm: x [N, C, H, W] in NCHW or nChw16c ---- */

/* sync batch norm's per-channel buffers live in the workspace */
static kiln_status bn_prepare(kiln_step *s, kiln_prep *p) {
    kiln_prepare_nchw(s, p);
    size_t need = kiln_cpu_batch_norm_scratch(s->sz.nchw.n, s->sz.nchw.c, s->in[0].layout);
    if (s->attr.bn.sync && need > p->workspace) p->workspace = need;
    return KILN_OK;
}

/* the collective of a sync node (sync batch norm), NULL for a plain one */
#define SYNC_CO(s, rc) ((s)->attr.bn.sync ? &(rc)->collective : NULL)

static kiln_status bn(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_bn_attrs *a = &s->attr.bn;
    float *save_mean = s->nout > 1 ? F(s->out[1]) : NULL, *save_invstd = s->nout > 2 ? F(s->out[2]) : NULL;
    const float *res = s->epilogue == KILN_EPI_ADD_RELU ? F(s->in[6]) : NULL; /* a fused residual add */
    int r = kiln_cpu_batch_norm_add_fwd(s->sz.nchw.n, s->sz.nchw.c, s->sz.nchw.hw, s->in[0].layout, F(s->in[0]),
                                        F(s->in[1]), F(s->in[2]), F(s->in[3]), F(s->in[4]), a->momentum, a->eps,
                                        a->training, res, s->epilogue == KILN_EPI_RELU || res, F(s->out[0]), save_mean,
                                        save_invstd, SYNC_CO(s, rc), rc->workspace);
    if (r == -2) return kiln_fail_context(KILN_ERR_BACKEND, "%s: sync batch norm", s->name);
    if (r)
        return kiln_fail(KILN_ERR_INVALID_ARG, "training needs more than one value per channel (batch %lld of %lldx%lld images)",
                         (long long)s->sz.nchw.n, (long long)s->in[0].shape[2], (long long)s->in[0].shape[3]);
    if (a->training) (*(int64_t *)s->in[5].data)++;
    return KILN_OK;
}

static kiln_status bn_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    const float *relu_b = s->epilogue == KILN_EPI_RELU_BWD_MASK ? F(s->in[5]) : NULL; /* the fused relu's bias */
    if (kiln_cpu_batch_norm_relu_bwd(s->sz.nchw.n, s->sz.nchw.c, s->sz.nchw.hw, s->in[0].layout, F(s->in[0]),
                                     F(s->in[1]), F(s->in[2]), relu_b, F(s->in[3]), F(s->in[4]), F(s->out[0]),
                                     F(s->out[1]), F(s->out[2]), ACC(0), ACC(1), ACC(2), SYNC_CO(s, rc), rc->workspace))
        return kiln_fail_context(KILN_ERR_BACKEND, "%s: sync batch norm backward", s->name);
    return KILN_OK;
}

/* batch norm folded into the layer before it: in w, gamma, beta, mean, var, b?; out w', b' */
static kiln_status bn_fold(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    int64_t k = s->out[1].numel;
    kiln_cpu_bn_fold(k, s->out[0].numel / k, F(s->in[0]), s->nin > 5 ? F(s->in[5]) : NULL, F(s->in[1]), F(s->in[2]),
                     F(s->in[3]), F(s->in[4]), s->attr.bn.eps, F(s->out[0]), F(s->out[1]));
    return KILN_OK;
}

/* ---- transformer ops: rows are the leading dims, the last dim is C ---- */

/* token ids: f32 holding integers, or i32 */
#define IDF(t) ((t).dtype == KILN_F32 ? F(t) : NULL)
#define IDI(t) ((t).dtype == KILN_I32 ? I(t) : NULL)

static kiln_status embedding(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    const kiln_tdesc *idx = &s->in[0], *w = &s->in[1];
    int64_t bad = kiln_cpu_embedding_check(idx->numel, IDF(*idx), IDI(*idx), w->shape[0]);
    if (bad >= 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "token id %.9g at position %lld is outside [0, %lld)",
                         IDF(*idx) ? (double)IDF(*idx)[bad] : (double)IDI(*idx)[bad], (long long)bad, (long long)w->shape[0]);
    kiln_cpu_embedding_fwd(idx->numel, w->shape[1], IDF(*idx), IDI(*idx), F(*w), F(s->out[0]));
    return KILN_OK;
}

static kiln_status embedding_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_tdesc *idx = &s->in[0], *dw = &s->out[0];
    kiln_cpu_embedding_bwd(idx->numel, dw->shape[0], dw->shape[1], IDF(*idx), IDI(*idx), F(s->in[1]), F(*dw), ACC(0));
    return KILN_OK;
}

static kiln_status layer_norm(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_cpu_layer_norm_fwd(s->sz.rc.rows, s->sz.rc.cols, F(s->in[0]), F(s->in[1]), F(s->in[2]), s->attr.ln.eps,
                            F(s->out[0]), F(s->out[1]), F(s->out[2]));
    return KILN_OK;
}

/* backward's per-chunk partial sums of dw and db live in the workspace */
static kiln_status layer_norm_bwd_prepare(kiln_step *s, kiln_prep *p) {
    kiln_prepare_rows_of_in(s, p);
    size_t need = kiln_cpu_layer_norm_scratch(s->sz.rc.rows, s->sz.rc.cols);
    if (need > p->workspace) p->workspace = need;
    return KILN_OK;
}

static kiln_status layer_norm_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cpu_layer_norm_bwd(s->sz.rc.rows, s->sz.rc.cols, F(s->in[0]), F(s->in[1]), F(s->in[2]), F(s->in[3]),
                            F(s->in[4]), F(s->out[0]), F(s->out[1]), F(s->out[2]), ACC(0), ACC(1), ACC(2), rc->workspace);
    return KILN_OK;
}

static kiln_status gelu(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_cpu_gelu_fwd(s->out[0].numel, s->attr.gelu.tanh_form, F(s->in[0]), F(s->out[0]));
    return KILN_OK;
}

static kiln_status gelu_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cpu_gelu_bwd(s->out[0].numel, s->attr.gelu.tanh_form, F(s->in[0]), F(s->in[1]), F(s->out[0]), ACC(0));
    return KILN_OK;
}

static kiln_status softmax(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_cpu_softmax_fwd(s->sz.rc.rows, s->sz.rc.cols, F(s->in[0]), F(s->out[0]));
    return KILN_OK;
}

static kiln_status softmax_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cpu_softmax_bwd(s->sz.rc.rows, s->sz.rc.cols, F(s->in[0]), F(s->in[1]), F(s->out[0]), ACC(0));
    return KILN_OK;
}

/* b [S] added to each of a's rows of S elements; b's gradient sums dy's rows */
static kiln_status add_bcast(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    int64_t inner = s->in[1].numel;
    kiln_cpu_add_bcast_fwd(s->out[0].numel / inner, inner, F(s->in[0]), F(s->in[1]), F(s->out[0]));
    return KILN_OK;
}

static kiln_status add_bcast_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    int64_t inner = s->out[0].numel;
    kiln_cpu_bias_grad_rows(s->in[0].numel / inner, inner, F(s->in[0]), F(s->out[0]), ACC(0));
    return KILN_OK;
}

/* ---- pointwise tiles: n elements from element `start` (a fused kernel's tile, or an op alone tile by tile) ---- */

#define TILE(nm) static void nm(const kiln_pw_instr *I, int64_t start, int64_t n, void *dst, const void *const *src, \
                                const kiln_run_ctx *rc)
#define S(k) ((const float *)src[k])
#define QUIET (void)I, (void)start, (void)rc

TILE(t_relu) { QUIET; kiln_cpu_tile_relu(n, S(0), dst); }
TILE(t_relu_bwd) { QUIET; kiln_cpu_tile_relu_bwd(n, S(0), S(1), dst, I->acc); }
TILE(t_add) { QUIET; kiln_cpu_tile_add(n, S(0), S(1), dst); }
TILE(t_mul) { QUIET; kiln_cpu_tile_mul(n, S(0), S(1), dst); }
TILE(t_mul_bwd) { QUIET; kiln_cpu_tile_mul_bwd(n, S(0), S(1), dst, I->acc); }
TILE(t_grad_copy) { QUIET; kiln_cpu_tile_copy(n, S(0), dst, I->acc); }
TILE(t_dropout) { kiln_cpu_dropout_range(start, n, I->attr.dropout.p, I->key, rc->counter, S(0), dst, I->acc); }
TILE(t_affine) { QUIET; kiln_cpu_affine(n, S(0), I->attr.affine.scale, I->attr.affine.shift, dst); }
TILE(t_affine_bwd) { QUIET; kiln_cpu_affine_bwd(n, S(0), I->attr.affine.scale, dst, I->acc); }
TILE(t_erf) { QUIET; kiln_cpu_erf(n, S(0), dst); }
TILE(t_erf_bwd) { QUIET; kiln_cpu_erf_bwd(n, S(0), S(1), dst, I->acc); }
TILE(t_tanh) { QUIET; kiln_cpu_tanh(n, S(0), dst); }
TILE(t_tanh_bwd) { QUIET; kiln_cpu_tanh_bwd(n, S(0), S(1), dst, I->acc); }
TILE(t_gelu) { QUIET; kiln_cpu_gelu_tile_fwd(n, I->attr.gelu.tanh_form, S(0), dst); }
TILE(t_gelu_bwd) { QUIET; kiln_cpu_gelu_tile_bwd(n, I->attr.gelu.tanh_form, S(0), S(1), dst, I->acc); }

/* an op that has no kernel of its own but its tile function */
static kiln_status tiled(const kiln_step *s, const kiln_run_ctx *rc) {
    return kiln_pointwise_run(s, rc, kiln_cpu_kernels[s->op].tile, 1);
}


/* ---- steps outside the graph ---- */

static kiln_status readout(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    *(double *)s->out[0].data = F(s->in[0])[0];
    return KILN_OK;
}

static kiln_status sumsq(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    double v = kiln_cpu_sumsq(s->in[0].numel, F(s->in[0])), *acc = s->out[0].data;
    *acc = s->acc[0] ? *acc + v : v;
    return KILN_OK;
}

static kiln_status clip_scale(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    double norm = sqrt(*(const double *)s->in[0].data);
    if (!isfinite(norm)) return kiln_fail(KILN_ERR_NUMERIC, "clip_grad_norm: the gradient norm is %g", norm);
    double coef = s->attr.clip.max_norm / (norm + 1e-6);
    if (coef < 1.0) kiln_cpu_scale(s->out[0].numel, F(s->out[0]), (float)coef);
    return KILN_OK;
}

/* the gradient scaler (src/optim/grad_scaler.c); a host backend's state is in host memory */
static kiln_status amp_unscale(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_amp_state *a = s->out[1].data;
    int found = !isfinite(*(const double *)s->in[0].data);
    if (s->attr.amp.first) a->found_inf = found;
    if (!found) kiln_cpu_scale(s->out[0].numel, F(s->out[0]), 1.0f / a->scale); /* a power of 2: exact */
    return KILN_OK;
}

static kiln_status amp_update(const kiln_step *s, const kiln_run_ctx *rc) {
    UNUSED;
    kiln_amp_update(s->out[0].data, s->attr.amp.growth, s->attr.amp.backoff, s->attr.amp.interval);
    return KILN_OK;
}

/* with a second input (the tensor table): each tensor with its own weight decay */
static kiln_layerwise_args tensors_of(const kiln_step *s, const kiln_run_ctx *rc) {
    return (kiln_layerwise_args){.nseg = s->in[1].numel / 3, .seg = s->in[1].data, .lr = rc->lr, .step = rc->optim_step};
}
#define TENSORS(call)                                                                  \
    if ((call) != 0) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", s->name); \
    return KILN_OK

static kiln_status sgd(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_sgd_attrs *a = &s->attr.sgd;
    if (s->nin > 1) {
        kiln_layerwise_args t = tensors_of(s, rc);
        t.momentum = a->momentum, t.dampening = a->dampening, t.weight_decay = a->weight_decay, t.nesterov = a->nesterov;
        TENSORS(kiln_cpu_sgd_tensors(&t, F(s->out[0]), F(s->in[0]), s->nout > 1 ? F(s->out[1]) : NULL));
    }
    kiln_cpu_sgd(s->in[0].numel, F(s->out[0]), F(s->in[0]), s->nout > 1 ? F(s->out[1]) : NULL, (float)rc->lr, a->momentum,
                 a->dampening, a->weight_decay, a->nesterov, rc->optim_step == 1);
    return KILN_OK;
}

static kiln_status adamw(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_adamw_attrs *a = &s->attr.adamw;
    if (s->nin > 1) {
        kiln_layerwise_args t = tensors_of(s, rc);
        t.beta1 = a->beta1, t.beta2 = a->beta2, t.eps = a->eps, t.weight_decay = a->weight_decay;
        TENSORS(kiln_cpu_adamw_tensors(&t, F(s->out[0]), F(s->in[0]), F(s->out[1]), F(s->out[2])));
    }
    kiln_cpu_adamw(s->in[0].numel, F(s->out[0]), F(s->in[0]), F(s->out[1]), F(s->out[2]), (float)rc->lr, a->beta1, a->beta2,
                   a->eps, a->weight_decay, rc->optim_step);
    return KILN_OK;
}

static kiln_status adadelta(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_adadelta_attrs *a = &s->attr.adadelta;
    if (s->nin > 1) {
        kiln_layerwise_args t = tensors_of(s, rc);
        t.rho = a->rho, t.eps = a->eps, t.weight_decay = a->weight_decay;
        TENSORS(kiln_cpu_adadelta_tensors(&t, F(s->out[0]), F(s->in[0]), F(s->out[1]), F(s->out[2])));
    }
    kiln_cpu_adadelta(s->in[0].numel, F(s->out[0]), F(s->in[0]), F(s->out[1]), F(s->out[2]), (float)rc->lr, a->rho,
                      a->eps, a->weight_decay);
    return KILN_OK;
}

/* layer-wise updates: in grad, tensors; out param, state..., norms */
static kiln_layerwise_args layerwise_args(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_layerwise_attrs *a = &s->attr.layerwise;
    kiln_layerwise_args t = tensors_of(s, rc);
    t.beta1 = a->beta1, t.beta2 = a->beta2, t.eps = a->eps, t.weight_decay = a->weight_decay;
    t.momentum = a->momentum, t.trust = a->trust;
    return t;
}

static kiln_status lamb(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_layerwise_args a = layerwise_args(s, rc);
    TENSORS(kiln_cpu_lamb(&a, s->attr.layerwise.phase, F(s->out[0]), F(s->in[0]), F(s->out[1]), F(s->out[2]), s->out[3].data));
}

static kiln_status lars(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_layerwise_args a = layerwise_args(s, rc);
    TENSORS(kiln_cpu_lars(&a, s->attr.layerwise.phase, F(s->out[0]), F(s->in[0]), F(s->out[1]), s->out[2].data));
}

static kiln_status novograd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_layerwise_args a = layerwise_args(s, rc);
    TENSORS(kiln_cpu_novograd(&a, s->attr.layerwise.phase, F(s->out[0]), F(s->in[0]), F(s->out[1]), F(s->out[2]),
                            s->out[3].data));
}

const kiln_kernel kiln_cpu_kernels[KILN_OP_COUNT] = {
    [KILN_OP_CONV2D] = {kiln_cpu_conv_fwd, kiln_cpu_conv_prepare, kiln_cpu_conv_release, 1, 1, 0, kiln_cpu_conv_describe_fwd,
                        1 | KILN_TIE_OUT(0)},
    /* the residual (slot 3) shares the output's layout: the sum post-op adds into y as stored */
    [KILN_OP_CONV2D_ADD] = {kiln_cpu_conv_add_fwd, kiln_cpu_conv_prepare, kiln_cpu_conv_release, 1 | 8, 1,
                            8 | KILN_TIE_OUT(0), kiln_cpu_conv_describe_fwd, 1 | KILN_TIE_OUT(0)},
    [KILN_OP_CONV2D_BWD_DATA] = {kiln_cpu_conv_bwd_data, kiln_cpu_conv_bwd_prepare, NULL, 1, 1, 0,
                                 kiln_cpu_conv_describe_bwd_data, 1 | KILN_TIE_OUT(0)},
    [KILN_OP_CONV2D_BWD_WEIGHT] = {kiln_cpu_conv_bwd_weight, kiln_cpu_conv_bwd_prepare, NULL, 3, 0, 0,
                                   kiln_cpu_conv_describe_bwd_weight, 3},
    [KILN_OP_LINEAR] = {kiln_cpu_linear_fwd, kiln_cpu_linear_prepare, kiln_cpu_linear_release, 0, 0, 0, kiln_cpu_linear_describe},
    [KILN_OP_LINEAR_BWD_DATA] = {kiln_cpu_linear_bwd_data, kiln_cpu_linear_bwd_prepare, NULL, 0, 0, 0, kiln_cpu_linear_describe},
    [KILN_OP_LINEAR_BWD_WEIGHT] = {kiln_cpu_linear_bwd_weight, kiln_cpu_linear_bwd_prepare, NULL, 0, 0, 0,
                                   kiln_cpu_linear_describe},
    [KILN_OP_MATMUL] = {kiln_cpu_linear_fwd, kiln_cpu_matmul_prepare, kiln_cpu_linear_release, 0, 0, 0, kiln_cpu_linear_describe},
    [KILN_OP_MATMUL_BWD_DATA] = {kiln_cpu_linear_bwd_data, kiln_cpu_linear_bwd_prepare, NULL, 0, 0, 0, kiln_cpu_linear_describe},
    [KILN_OP_MATMUL_BWD_WEIGHT] = {kiln_cpu_linear_bwd_weight, kiln_cpu_linear_bwd_prepare, NULL, 0, 0, 0,
                                   kiln_cpu_linear_describe},
    [KILN_OP_RELU] = {relu, NULL, NULL, 0, 0, .tile = t_relu, .vec = &kiln_cpu_vform_relu},
    [KILN_OP_RELU_BWD] = {relu_bwd, NULL, NULL, 0, 0, .tile = t_relu_bwd, .vec = &kiln_cpu_vform_relu_bwd},
    [KILN_OP_MAX_POOL2D] = {pool, kiln_prepare_pool, NULL, 1, 1},
    [KILN_OP_MAX_POOL2D_BWD] = {pool_bwd, kiln_prepare_pool, NULL, 1 | 2, 1, 1 | KILN_TIE_OUT(0)},
    [KILN_OP_DROPOUT] = {dropout, NULL, NULL, 0, 0, .tile = t_dropout},
    [KILN_OP_DROPOUT_BWD] = {dropout_bwd, NULL, NULL, 0, 0, .tile = t_dropout},
    [KILN_OP_LOG_SOFTMAX] = {log_softmax, kiln_prepare_rows_of_out, NULL, 0, 0},
    [KILN_OP_LOG_SOFTMAX_BWD] = {log_softmax_bwd, kiln_prepare_rows_of_out, NULL, 0, 0},
    [KILN_OP_NLL_LOSS] = {nll, kiln_prepare_rows_of_in, NULL, 0, 0},
    [KILN_OP_NLL_LOSS_BWD] = {nll_bwd, kiln_prepare_rows_of_out, NULL, 0, 0},
    [KILN_OP_CROSS_ENTROPY] = {cross_entropy, kiln_prepare_rows_of_in, NULL, 0, 0},
    [KILN_OP_CROSS_ENTROPY_BWD] = {cross_entropy_bwd, kiln_prepare_rows_of_out, NULL, 0, 0},
    [KILN_OP_MSE_LOSS] = {mse},
    [KILN_OP_MSE_LOSS_BWD] = {mse_bwd},
    [KILN_OP_ADD] = {add, NULL, NULL, 0, 0, .tile = t_add, .vec = &kiln_cpu_vform_add},
    [KILN_OP_MUL] = {mul, NULL, NULL, 0, 0, .tile = t_mul, .vec = &kiln_cpu_vform_mul},
    [KILN_OP_MUL_BWD] = {mul_bwd, NULL, NULL, 0, 0, .tile = t_mul_bwd, .vec = &kiln_cpu_vform_mul_bwd},
    [KILN_OP_ONES] = {ones, NULL, NULL, 0, 0},
    [KILN_OP_GRAD_COPY] = {grad_copy, NULL, NULL, 1, 1, .tile = t_grad_copy, .vec = &kiln_cpu_vform_copy},   /* also a reorder: layouts in and out may differ */
    [KILN_OP_CONTIGUOUS] = {contiguous, NULL, NULL, 1, 1},
    [KILN_OP_SLICE_BWD] = {slice_bwd, kiln_prepare_slice, NULL, 0, 0},
    [KILN_OP_PAD] = {pad, kiln_prepare_pad, NULL, 0, 0},
    [KILN_OP_AVG_POOL2D] = {avg_pool, kiln_prepare_avg_pool, NULL, 1, 0},
    [KILN_OP_ADAPTIVE_AVG_POOL2D] = {avg_pool, kiln_prepare_avg_pool, NULL, 1, 0},
    [KILN_OP_AVG_POOL2D_BWD] = {avg_pool_bwd, kiln_prepare_avg_pool, NULL, 0, 1},
    [KILN_OP_SUM] = {sum, NULL, NULL, 1, 0},         /* layout-blind: the same elements in any order */
    [KILN_OP_SUM_BWD] = {sum_bwd, NULL, NULL, 0, 1}, /* a fill */
    [KILN_OP_BATCH_NORM2D] = {bn, bn_prepare, NULL, 1 | 1u << 6, 1, 1 | 1u << 6 | KILN_TIE_OUT(0), .add_relu = 1},
    [KILN_OP_BATCH_NORM2D_BWD] = {bn_bwd, bn_prepare, NULL, 3, 1, 3 | KILN_TIE_OUT(0), .relu_bwd_mask = 1},
    [KILN_OP_BN_FOLD] = {bn_fold, NULL, NULL, 0, 0},
    [KILN_OP_SUBSAMPLE_PAD] = {subsample_pad, NULL, NULL, 1, 1},
    [KILN_OP_SUBSAMPLE_PAD_BWD] = {subsample_pad_bwd, NULL, NULL, 1, 1},
    [KILN_OP_BMM] = {kiln_cpu_bmm_fwd, kiln_cpu_bmm_prepare, kiln_cpu_bmm_release, 0, 0, 0, kiln_cpu_bmm_describe},
    [KILN_OP_BMM_BWD] = {kiln_cpu_bmm_bwd, kiln_cpu_bmm_bwd_prepare, kiln_cpu_bmm_release, 0, 0, 0, kiln_cpu_bmm_describe},
    [KILN_OP_CAUSAL_ATTENTION] = {kiln_cpu_attention_fwd, kiln_cpu_attention_prepare, NULL, 0, 0},
    [KILN_OP_CAUSAL_ATTENTION_BWD] = {kiln_cpu_attention_bwd, kiln_cpu_attention_prepare, NULL, 0, 0},
    [KILN_OP_EMBEDDING] = {embedding, NULL, NULL, 0, 0},
    [KILN_OP_EMBEDDING_BWD] = {embedding_bwd, NULL, NULL, 0, 0},
    [KILN_OP_LAYER_NORM] = {layer_norm, kiln_prepare_rows_of_in, NULL, 0, 0},
    [KILN_OP_LAYER_NORM_BWD] = {layer_norm_bwd, layer_norm_bwd_prepare, NULL, 0, 0},
    [KILN_OP_GELU] = {gelu, NULL, NULL, 0, 0, .tile = t_gelu},
    [KILN_OP_GELU_BWD] = {gelu_bwd, NULL, NULL, 0, 0, .tile = t_gelu_bwd},
    [KILN_OP_SOFTMAX] = {softmax, kiln_prepare_rows_of_out, NULL, 0, 0},
    [KILN_OP_SOFTMAX_BWD] = {softmax_bwd, kiln_prepare_rows_of_out, NULL, 0, 0},
    [KILN_OP_ADD_BCAST] = {add_bcast, NULL, NULL, 0, 0},
    [KILN_OP_ADD_BCAST_BWD] = {add_bcast_bwd, NULL, NULL, 0, 0},
    [KILN_OP_AFFINE] = {tiled, NULL, NULL, 0, 0, .tile = t_affine, .vec = &kiln_cpu_vform_affine},
    [KILN_OP_AFFINE_BWD] = {tiled, NULL, NULL, 0, 0, .tile = t_affine_bwd, .vec = &kiln_cpu_vform_affine_bwd},
    [KILN_OP_ERF] = {tiled, NULL, NULL, 0, 0, .tile = t_erf, .vec = &kiln_cpu_vform_erf},
    [KILN_OP_ERF_BWD] = {tiled, NULL, NULL, 0, 0, .tile = t_erf_bwd, .vec = &kiln_cpu_vform_erf_bwd},
    [KILN_OP_TANH] = {tiled, NULL, NULL, 0, 0, .tile = t_tanh, .vec = &kiln_cpu_vform_tanh},
    [KILN_OP_TANH_BWD] = {tiled, NULL, NULL, 0, 0, .tile = t_tanh_bwd, .vec = &kiln_cpu_vform_tanh_bwd},
    [KILN_OP_FUSED] = {kiln_cpu_fused_run, kiln_cpu_fused_prepare, kiln_cpu_fused_release, 0, 0, .describe = kiln_cpu_fused_describe},
    [KILN_OP_FUSED_PLAIN] = {kiln_cpu_fused_run, kiln_cpu_fused_prepare, kiln_cpu_fused_release, 0, 0, .describe = kiln_cpu_fused_describe},
    [KILN_OP_READOUT] = {readout, NULL, NULL, 0, 0},
    [KILN_OP_SUMSQ] = {sumsq, NULL, NULL, 0, 0},
    [KILN_OP_CLIP_SCALE] = {clip_scale, NULL, NULL, 0, 0},
    [KILN_OP_SGD_UPDATE] = {sgd, NULL, NULL, 0, 0},
    [KILN_OP_ADAMW_UPDATE] = {adamw, NULL, NULL, 0, 0},
    [KILN_OP_ADADELTA_UPDATE] = {adadelta, NULL, NULL, 0, 0},
    [KILN_OP_LAMB_UPDATE] = {lamb, NULL, NULL, 0, 0},
    [KILN_OP_LARS_UPDATE] = {lars, NULL, NULL, 0, 0},
    [KILN_OP_NOVOGRAD_UPDATE] = {novograd, NULL, NULL, 0, 0},
    [KILN_OP_AMP_UNSCALE] = {amp_unscale, NULL, NULL, 0, 0},
    [KILN_OP_AMP_UPDATE] = {amp_update, NULL, NULL, 0, 0},
};
