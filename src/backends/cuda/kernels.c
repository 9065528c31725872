/* The CUDA backend's kernel table: for each op, the launch that runs it
 * (cuDNN and cuBLASLt through conv.c and linear.c, kiln's kernels in *.cu),
 * and what it works out at compile. Plain NCHW layouts, and channels last (KILN_LAYOUT_NHWC) for the
 * convolutions, batch norm, the reorders and the elementwise ops under KILN_CUDA_LAYOUT=nhwc. */
#include <stdlib.h>
#include <string.h>
#include "backends/cuda/internal/cuda.h"

#define F(t) ((float *)(t).data)
#define I(t) ((const int32_t *)(t).data)
#define ACC(k) kiln_step_acc(s, rc, (k))
#define ST kiln_cuda_stream()
#define DONE(what) return kiln_cuda_launched(what)
#define HK(k) kiln_cuda_half_kind(&s->out[k])
/* the 16 bits a step rounds its outputs to (kiln_step.round_out), as a kiln_cuda_half_kind: 1 bf16, 2 fp16 */
static int round_kind(const kiln_step *s) { return s->precision == KILN_PRECISION_FP16 ? 2 : 1; }
/* a 16-bit output is never added to (the half-storage pass marks no accumulated value): refused, not overrun */
#define NO_HALF_ACC(what)                                                                                             \
    if (ACC(0) && HK(0)) return kiln_fail(KILN_ERR_BACKEND, "%s: %s would add into a 16-bit tensor", s->name, what)

/* KILN_CUDA_STORE=half: activations read only as 16-bit matmul operands are stored so by their writers (the
 * half-storage pass, src/graph/pass_half_store.c): the same numbers in half the bytes, and no conversion before
 * the product. Not the default until a GPU has timed it (docs/backends.md) */
int kiln_cuda_store_half(void) {
    const char *e = getenv("KILN_CUDA_STORE");
    return e && !strcmp(e, "half");
}
/* KILN_CUDA_LAYOUT=nhwc: the layout pass keeps a 16-bit plan's conv chains channels last (KILN_LAYOUT_NHWC), so
 * cuDNN reads and writes them as they are (conv.c) and batch norm runs on rows of channels (rows.cu); not the
 * default until a GPU has timed it */
int kiln_cuda_layout_nhwc(void) {
    const char *e = getenv("KILN_CUDA_LAYOUT");
    return e && !strcmp(e, "nhwc");
}
kiln_status kiln_cuda_passes(kiln_graph *g, const kiln_compile_opts *o, const kiln_kernel *table) {
    int half = o->precision == KILN_PRECISION_BF16 || o->precision == KILN_PRECISION_FP16 || o->precision == KILN_PRECISION_AUTO;
    if (!o->layout || !half || !kiln_cuda_layout_nhwc()) return KILN_OK;
    if (kiln_pass_layout(g, &(kiln_layout_spec){table, KILN_LAYOUT_NHWC, 1}) < 0)
        return kiln_fail(KILN_ERR_NOMEM, "layout pass: out of memory");
    return KILN_OK;
}
/* a node's 16-bit slots under KILN_CUDA_STORE=half, the same for every node of the op */
#define SLOTS(name, mask)                     \
    unsigned name(int nin, int nout) {        \
        (void)nin, (void)nout;                \
        return kiln_cuda_store_half() ? (mask) : 0; \
    }
/* the writers: layer norm's and a gradient copy's first output */
static SLOTS(half_out0, KILN_TIE_OUT(0))
/* GELU's x and output (both ways), cross-entropy backward's logits and their gradient: x, a rounded product's output,
 * read widened */
static SLOTS(half_x_out0, 1u | KILN_TIE_OUT(0))
/* an add's operands (read widened: values their writers rounded) and its sum (rounded where both are) */
static SLOTS(half_add, 3u | KILN_TIE_OUT(0))
/* causal attention's q, k and v (forward and backward): a rounded linear's output, read as it is by the tensor-core
 * kernels, widened for the fp32 ones */
static SLOTS(half_qkv, 7u)
/* the readers (linear.c; simt's stand-ins too): x (forward), dy (backward-data), each only a product's operand */
SLOTS(kiln_cuda_half_in0, 1u)
/* a forward's x and its output, which it writes rounded (round_out) */
SLOTS(kiln_cuda_half_linear, 1u | KILN_TIE_OUT(0))
/* backward-weight: x and dy (its bias gradient sums dy as the product reads it, rounded: linear.c) */
SLOTS(kiln_cuda_half_bwd_weight, 3u)
/* batch norm's x, backward's x and dy, relu backward's y and dy: read widened, values their writer rounds; batch
 * norm's output, which it rounds after a 16-bit convolution (round_out); backward's dx, where only a 16-bit
 * convolution's backward reads it (as its dy). Max-pool's x and y too (the maximum of 16-bit numbers), and its
 * backward's x (kiln_cuda_half_in0) */
SLOTS(kiln_cuda_half_bn, 1u | KILN_TIE_OUT(0))
SLOTS(kiln_cuda_half_bn_bwd, 3u | KILN_TIE_OUT(0))
SLOTS(kiln_cuda_half_relu_bwd, 3u)
/* a fused group reads any input and writes any output in 16 bits (the pass stores only what holds 16-bit numbers,
 * or what only 16-bit operands read) */
static unsigned half_fused(int nin, int nout) {
    return kiln_cuda_store_half() ? ((1u << nin) - 1) | (((1u << nout) - 1) << 8) : 0;
}
/* a convolution's x, which it rounds (conv.c), and its output (a bias is added in fp32 after the rounding);
 * backward's dy and x, which it rounds */
unsigned kiln_cuda_half_conv_out(int nin, int nout) {
    (void)nout;
    return kiln_cuda_store_half() ? 1u | (nin == 2 ? KILN_TIE_OUT(0) : 0) : 0;
}
SLOTS(kiln_cuda_half_conv_bwd_data, 1u | KILN_TIE_OUT(0))
SLOTS(kiln_cuda_half_conv_bwd_weight, 3u)

static kiln_status relu(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_relu(ST, s->out[0].numel, F(s->in[0]), F(s->out[0]));
    DONE("relu");
}
static kiln_status relu_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cuda_relu_bwd(ST, s->out[0].numel, s->in[0].data, kiln_cuda_half_kind(&s->in[0]), s->in[1].data,
                       kiln_cuda_half_kind(&s->in[1]), F(s->out[0]), ACC(0));
    DONE("relu backward");
}

/* ---- pooling ---- */
/* the window and the layout (x's: y and the gradients share it, kiln_kernel.tied) */
static void pool_dims(const kiln_pool_shape *p, const kiln_tdesc *x, int64_t d[9]) {
    d[0] = p->h, d[1] = p->w, d[2] = p->oh, d[3] = p->ow, d[4] = p->k, d[5] = p->stride, d[6] = p->pad;
    d[7] = p->c, d[8] = KILN_NHWC(*x);
}
static kiln_status pool(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    int64_t d[9];
    pool_dims(&s->sz.pool, &s->in[0], d);
    kiln_cuda_max_pool(ST, s->sz.pool.n * s->sz.pool.c, d, s->in[0].data, kiln_cuda_half_kind(&s->in[0]), s->out[0].data, HK(0));
    DONE("max-pool");
}
/* the windows' argmax in the workspace: found once, read by each input element of the window */
static kiln_status pool_bwd_prepare(kiln_step *s, kiln_prep *p) {
    kiln_status st = kiln_prepare_pool(s, p);
    int64_t d[9];
    pool_dims(&s->sz.pool, &s->in[0], d);
    size_t need = kiln_cuda_max_pool_bwd_workspace(s->sz.pool.n * s->sz.pool.c, d);
    if (st == KILN_OK && p && need > p->workspace) p->workspace = need;
    return st;
}
static kiln_status pool_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    int64_t d[9];
    pool_dims(&s->sz.pool, &s->in[0], d);
    kiln_cuda_max_pool_bwd(ST, s->sz.pool.n * s->sz.pool.c, d, s->epilogue == KILN_EPI_RELU_BWD_MASK, s->in[0].data,
                           kiln_cuda_half_kind(&s->in[0]), F(s->in[1]), F(s->out[0]), ACC(0), rc->workspace);
    DONE("max-pool backward");
}
/* the windows and x's layout (backward's dx's; y and dy are plain) */
static void avg_dims(const kiln_avg_pool_shape *p, const kiln_tdesc *x, int64_t d[11]) {
    d[0] = p->h, d[1] = p->w, d[2] = p->oh, d[3] = p->ow, d[4] = p->k, d[5] = p->stride, d[6] = p->pad;
    d[7] = p->include_pad, d[8] = p->adaptive, d[9] = p->c, d[10] = KILN_NHWC(*x);
}
static kiln_status avg_pool(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    int64_t d[11];
    avg_dims(&s->sz.avg_pool, &s->in[0], d);
    kiln_cuda_avg_pool(ST, s->sz.avg_pool.n * s->sz.avg_pool.c, d, s->in[0].data, kiln_cuda_half_kind(&s->in[0]), F(s->out[0]));
    DONE("average pool");
}
static kiln_status avg_pool_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    int64_t d[11];
    avg_dims(&s->sz.avg_pool, &s->out[0], d);
    kiln_cuda_avg_pool_bwd(ST, s->sz.avg_pool.n * s->sz.avg_pool.c, d, F(s->in[0]), F(s->out[0]), ACC(0));
    DONE("average pool backward");
}
/* the option-A shortcut: x's shape (the forward's input, the backward's output) and the attributes */
static void subsample_dims(const kiln_step *s, const kiln_tdesc *x, int64_t d[7]) {
    const kiln_subsample_attrs *a = &s->attr.subsample;
    d[0] = x->shape[0], d[1] = x->shape[1], d[2] = x->shape[2], d[3] = x->shape[3];
    d[4] = a->stride, d[5] = a->before, d[6] = a->after;
}
static kiln_status subsample_pad(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    int64_t d[7];
    subsample_dims(s, &s->in[0], d);
    kiln_cuda_subsample_pad(ST, d, F(s->in[0]), F(s->out[0]));
    DONE("subsample pad");
}
static kiln_status subsample_pad_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    int64_t d[7];
    subsample_dims(s, &s->out[0], d);
    kiln_cuda_subsample_pad_bwd(ST, d, F(s->in[0]), F(s->out[0]), ACC(0));
    DONE("subsample pad backward");
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
    kiln_cuda_cross_entropy_rows(ST, RC, s->in[0].data, kiln_cuda_half_kind(&s->in[0]), I(s->in[1]), s->attr.loss.ignore,
                                 kiln_cuda_flags_dev(), rc->workspace, F(s->out[0]));
    DONE("cross entropy");
}
/* the count of rows the mean is over, in the workspace */
static kiln_status rows_of_out_count(kiln_step *s, kiln_prep *p) {
    kiln_prepare_rows_of_out(s, p);
    if (p && p->workspace < sizeof(double)) p->workspace = sizeof(double);
    return KILN_OK;
}
/* a -1 target reaching backward is padding: forward refused it otherwise */
static kiln_status cross_entropy_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    NO_HALF_ACC("cross entropy backward");
    kiln_cuda_cross_entropy_bwd(ST, RC, s->in[0].data, kiln_cuda_half_kind(&s->in[0]), I(s->in[1]), 1, F(s->in[2]), rc->workspace,
                                s->out[0].data, HK(0), ACC(0));
    DONE("cross entropy backward");
}

/* ---- elementwise ---- */
static kiln_status add(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    /* two 16-bit values' sum written rounded (autocast follows: round_out) */
    kiln_cuda_add(ST, s->out[0].numel, s->in[0].data, kiln_cuda_half_kind(&s->in[0]), s->in[1].data, kiln_cuda_half_kind(&s->in[1]),
                  s->out[0].data, HK(0), s->round_out & 1 ? round_kind(s) : 0);
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
/* a copy between the layouts (the layout pass's reorders): x [n, c, h, w] plain or channels last into y's */
static int reorder(const kiln_step *s, int acc) {
    const kiln_tdesc *x = &s->in[0], *y = &s->out[0];
    if (x->layout == y->layout || x->ndim != 4) return 0;
    kiln_cuda_reorder(ST, KILN_NHWC(*y), x->shape[0], x->shape[1], x->shape[2] * x->shape[3], x->data, kiln_cuda_half_kind(x),
                      y->data, kiln_cuda_half_kind(y), acc);
    return 1;
}
static kiln_status grad_copy(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_tdesc *x = &s->in[0];
    NO_HALF_ACC("gradient copy");
    if (reorder(s, ACC(0))) DONE("reorder");
    if (x->contiguous) kiln_cuda_copy(ST, s->out[0].numel, F(*x), s->out[0].data, HK(0), ACC(0));
    else kiln_cuda_copy_strided(ST, x->ndim, x->shape, x->stride, F(*x), s->out[0].data, HK(0), ACC(0));
    DONE("gradient copy");
}
static kiln_status contiguous(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    const kiln_tdesc *x = &s->in[0];
    if (reorder(s, 0)) DONE("reorder");
    kiln_cuda_copy_strided(ST, x->ndim, x->shape, x->stride, F(*x), F(s->out[0]), 0, 0);
    DONE("contiguous");
}
static kiln_status slice_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_slice_attrs *a = &s->attr.slice;
    kiln_cuda_slice_bwd(ST, s->sz.slice.outer, s->sz.slice.dim, s->sz.slice.inner, a->start,
                        (a->end - a->start + a->step - 1) / a->step, a->step, F(s->in[0]), F(s->out[0]), ACC(0));
    DONE("slice backward");
}
/* pad's forward is slice's backward from the other side: the input lands at `before`, zeros around */
static kiln_status pad(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_slice_bwd(ST, s->sz.slice.outer, s->sz.slice.dim, s->sz.slice.inner, s->attr.pad.before,
                        s->in[0].shape[s->attr.pad.dim], 1, F(s->in[0]), F(s->out[0]), 0);
    DONE("pad");
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
    /* the fused relu in the same pass as the normalisation (before 2026-11-30, a second kernel over the output); the
     * output rounded to 16 bits after a 16-bit convolution (autocast follows: round_out), as PyTorch's is */
    int rk = s->round_out & 1 ? round_kind(s) : 0;
    kiln_cuda_batch_norm(ST, NCHW, KILN_NHWC(s->in[0]), s->in[0].data, kiln_cuda_half_kind(&s->in[0]), F(s->in[1]), F(s->in[2]),
                         F(s->in[3]), F(s->in[4]), a->momentum, a->eps, a->training, s->out[0].data, HK(0), rk,
                         s->nout > 1 ? F(s->out[1]) : NULL, s->nout > 2 ? F(s->out[2]) : NULL, (int64_t *)s->in[5].data,
                         s->epilogue == KILN_EPI_RELU);
    DONE("batch norm");
}
static kiln_status bn_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    NO_HALF_ACC("batch norm backward");
    kiln_cuda_batch_norm_bwd(ST, NCHW, KILN_NHWC(s->in[0]), s->in[0].data, kiln_cuda_half_kind(&s->in[0]), s->in[1].data,
                             kiln_cuda_half_kind(&s->in[1]), F(s->in[2]), F(s->in[3]), F(s->in[4]), s->out[0].data, HK(0),
                             F(s->out[1]), F(s->out[2]), ACC(0), ACC(1), ACC(2));
    DONE("batch norm backward");
}

/* ---- transformer ops (transformer.cu) ---- */
#define N s->out[0].numel
static kiln_status gelu(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_gelu(ST, N, s->attr.gelu.tanh_form, s->in[0].data, kiln_cuda_half_kind(&s->in[0]), s->out[0].data, HK(0));
    DONE("gelu");
}
static kiln_status gelu_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    NO_HALF_ACC("gelu backward");
    kiln_cuda_gelu_bwd(ST, N, s->attr.gelu.tanh_form, s->in[0].data, kiln_cuda_half_kind(&s->in[0]), F(s->in[1]), s->out[0].data,
                       HK(0), ACC(0));
    DONE("gelu backward");
}
static kiln_status affine(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_affine(ST, N, s->attr.affine.scale, s->attr.affine.shift, F(s->in[0]), F(s->out[0]));
    DONE("affine");
}
static kiln_status affine_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cuda_scale(ST, N, s->attr.affine.scale, F(s->in[0]), F(s->out[0]), ACC(0));
    DONE("affine backward");
}
static kiln_status erf_fwd(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_erf(ST, N, F(s->in[0]), F(s->out[0]));
    DONE("erf");
}
static kiln_status erf_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cuda_erf_bwd(ST, N, F(s->in[0]), F(s->in[1]), F(s->out[0]), ACC(0));
    DONE("erf backward");
}
static kiln_status tanh_fwd(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_tanh(ST, N, F(s->in[0]), F(s->out[0]));
    DONE("tanh");
}
static kiln_status tanh_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cuda_tanh_bwd(ST, N, F(s->in[0]), F(s->in[1]), F(s->out[0]), ACC(0));
    DONE("tanh backward");
}
static kiln_status add_bcast(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_add_bcast(ST, N, s->in[1].numel, F(s->in[0]), F(s->in[1]), F(s->out[0]));
    DONE("broadcast add");
}
/* db = dy summed over the broadcast dims: column sums */
static kiln_status add_bcast_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    int64_t inner = s->out[0].numel;
    kiln_cuda_col_sums(ST, s->in[0].numel / inner, inner, F(s->in[0]), 0, 0, F(s->out[0]), ACC(0));
    DONE("broadcast add backward");
}
static kiln_status mse(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_mse(ST, s->in[0].numel, F(s->in[0]), F(s->in[1]), F(s->out[0]));
    DONE("mse loss");
}
static kiln_status mse_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cuda_mse_bwd(ST, N, F(s->in[0]), F(s->in[1]), F(s->in[2]), s->epilogue == KILN_EPI_RELU_BWD_MASK, F(s->out[0]), ACC(0));
    DONE("mse loss backward");
}
static kiln_status softmax(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_softmax(ST, RC, F(s->in[0]), F(s->out[0]));
    DONE("softmax");
}
static kiln_status softmax_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cuda_softmax_bwd(ST, RC, F(s->in[0]), F(s->in[1]), F(s->out[0]), ACC(0));
    DONE("softmax backward");
}
static kiln_status layer_norm(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_layer_norm(ST, RC, F(s->in[0]), F(s->in[1]), F(s->in[2]), (float)s->attr.ln.eps, s->out[0].data, HK(0), F(s->out[1]),
                         F(s->out[2]));
    DONE("layer norm");
}
static kiln_status layer_norm_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cuda_layer_norm_bwd(ST, RC, F(s->in[0]), F(s->in[1]), F(s->in[2]), F(s->in[3]), F(s->in[4]), F(s->out[0]),
                             F(s->out[1]), F(s->out[2]), ACC(0), ACC(1), ACC(2));
    DONE("layer norm backward");
}
#define IDF(t) ((t).dtype == KILN_F32 ? (const float *)(t).data : NULL)
static kiln_status embedding(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    const kiln_tdesc *idx = &s->in[0], *w = &s->in[1];
    kiln_cuda_embedding(ST, idx->numel, w->shape[1], w->shape[0], IDF(*idx), IDF(*idx) ? NULL : I(*idx), F(*w), F(s->out[0]),
                        s->name, kiln_cuda_flags_dev());
    DONE("embedding");
}
static kiln_status embedding_bwd_prepare(kiln_step *s, kiln_prep *p) {
    size_t need = kiln_cuda_embedding_bwd_workspace(kiln_tdesc_span(&s->in[0]), s->out[0].shape[0]);
    if (p && need > p->workspace) p->workspace = need;
    return KILN_OK;
}
static kiln_status embedding_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_tdesc *idx = &s->in[0], *dw = &s->out[0];
    kiln_cuda_embedding_bwd(ST, idx->numel, dw->shape[1], dw->shape[0], IDF(*idx), IDF(*idx) ? NULL : I(*idx), F(s->in[1]),
                            F(*dw), ACC(0), rc->workspace);
    DONE("embedding backward");
}
/* ---- bmm (bmm.cu): a and b read through their strides ---- */
static kiln_status bmm_prepare(kiln_step *s, kiln_prep *p) {
    kiln_prepare_bmm(s, p);
    if (s->sz.bmm.nbatch > kiln_cuda_bmm_max_batch_dims())
        return kiln_fail(KILN_ERR_BACKEND, "%s: the cuda backend's bmm takes at most %d batch dims", s->name,
                         kiln_cuda_bmm_max_batch_dims());
    return KILN_OK;
}
/* the autocast pass's steps round their operands: fp16 under --precision fp16, else bf16 (auto too, as linear) */
static int bmm_round(const kiln_step *s) {
    return s->precision == KILN_PRECISION_FP16 ? 2 : s->precision != KILN_PRECISION_FP32 ? 1 : 0;
}
#define BMM(z) (z)->nbatch, (z)->batch, (z)->m, (z)->k, (z)->n, (z)->a_stride, (z)->b_stride
static kiln_status bmm(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_bmm(ST, bmm_round(s), BMM(&s->sz.bmm), F(s->in[0]), F(s->in[1]), F(s->out[0]));
    DONE("bmm");
}
/* in: a, b, dy; out: da?, db? */
static kiln_status bmm_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cuda_bmm_bwd(ST, bmm_round(s), BMM(&s->sz.bmm), F(s->in[0]), F(s->in[1]), F(s->in[2]), F(s->out[0]), s->nout > 1 ? F(s->out[1]) : NULL,
                      ACC(0), s->nout > 1 ? ACC(1) : 0);
    DONE("bmm backward");
}
#undef BMM

/* heads up to kiln_cuda_flash_max_head() run in tiles (flash.cu); wider ones a query row per thread, which holds
 * its head's row of the output: up to kiln_cuda_attention_max_head() (transformer.cu). With the plan's precision
 * bf16, fp16 or auto, heads flash_tc.cu takes run on tensor cores with bf16 operands (fp16 under fp16), as
 * PyTorch's autocast runs attention: the step's precision says so (kiln inspect), forward and backward agree */
/* KILN_CUDA_FLASH=mma: flash_mma.cu's kernels (the tiles in registers) for the tensor-core attention; else
 * flash_tc.cu's, the default until flash_mma.cu's have run on a GPU (docs/attention.md) */
static int flash_mma_on(void) {
    const char *e = getenv("KILN_CUDA_FLASH");
    return e && !strcmp(e, "mma");
}
/* q, k and v may be stored in 16 bits (the half-storage pass: c_attn's output, which its linear rounds). The
 * tensor-core kernels read them as they are; the fp32 kernels (heads flash_tc.cu does not take, an fp32 plan) take
 * fp32 copies widened into the workspace after backward's D_i, each over its span, strides kept */
static size_t floats256(int64_t n) { return ((size_t)n * sizeof(float) + 255) / 256 * 256; }
static size_t attn_d_bytes(const kiln_attn_shape *z) { return floats256(z->b * z->heads * z->t); }
static size_t attn_wide_bytes(const kiln_step *s) {
    size_t n = 0;
    for (int k = 0; k < 3 && s->precision == KILN_PRECISION_FP32; k++)
        if (kiln_cuda_half_kind(&s->in[k])) n += floats256(kiln_tdesc_span(&s->in[k]));
    return n;
}
static void attn_inputs(const kiln_step *s, const kiln_run_ctx *rc, int kinds[3], const void *in[3]) {
    const kiln_attn_shape *z = &s->sz.attn.shape;
    char *w = (char *)rc->workspace + attn_d_bytes(z);
    for (int k = 0; k < 3; k++) {
        kinds[k] = kiln_cuda_half_kind(&s->in[k]), in[k] = s->in[k].data;
        if (!kinds[k] || s->precision != KILN_PRECISION_FP32) continue; /* the tensor-core kernels read 16 bits */
        int64_t n = kiln_tdesc_span(&s->in[k]);
        kiln_cuda_widen(ST, kinds[k], n, in[k], (float *)w);
        in[k] = w, kinds[k] = 0;
        w += floats256(n);
    }
}
static kiln_status attention_prepare(kiln_step *s, kiln_prep *p) {
    kiln_prepare_attention(s, p);
    const kiln_attn_shape *z = &s->sz.attn.shape;
    int64_t d = z->c / z->heads;
    if (d > kiln_cuda_attention_max_head())
        return kiln_fail(KILN_ERR_BACKEND, "%s: the cuda backend has no causal_attention kernel for heads of %lld (at most %d)",
                         s->name, (long long)d, kiln_cuda_attention_max_head());
    s->precision = KILN_PRECISION_FP32;
    if (p && p->o->precision != KILN_PRECISION_FP32 && kiln_cuda_flash_tc_ok(d)) {
        static int warned; /* a GPU with less shared memory a block than Hopper's: the fp32 tiles, said once */
        int fp16 = p->o->precision == KILN_PRECISION_FP16;
        s->sz.attn.mma = flash_mma_on();
        int err = s->sz.attn.mma ? kiln_cuda_flash_mma_setup(d, fp16) : kiln_cuda_flash_tc_setup(d, fp16);
        if (err == 0) s->precision = fp16 ? KILN_PRECISION_FP16 : KILN_PRECISION_BF16;
        else if (!warned++)
            kiln_log(KILN_LOG_WARN, "%s: this GPU cannot give the tensor-core attention the shared memory it needs for heads "
                     "of %lld; attention keeps fp32 math", s->name, (long long)d);
    }
    size_t need = attn_d_bytes(z) + attn_wide_bytes(s); /* backward's D_i, and widened q, k, v */
    if (p && need > p->workspace) p->workspace = need;
    return KILN_OK;
}
static void attn_strides(const kiln_attn_shape *z, int64_t st[8]) {
    for (int i = 0; i < 2; i++) {
        st[i] = z->q_stride[i];
        st[2 + i] = z->k_stride[i];
        st[4 + i] = z->v_stride[i];
        st[6 + i] = z->d_stride[i];
    }
}
static kiln_status attention(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_attn_shape *z = &s->sz.attn.shape;
    int64_t st[8];
    attn_strides(z, st);
    int kind[3], f16 = s->precision == KILN_PRECISION_FP16;
    const void *in[3];
    attn_inputs(s, rc, kind, in);
    const float *q = in[0], *k = in[1], *v = in[2];
    if (s->precision != KILN_PRECISION_FP32 && s->sz.attn.mma)
        kiln_cuda_flash_mma(ST, f16, z->b, z->t, z->c, z->heads, st, kind, q, k, v, F(s->out[0]), F(s->out[1]));
    else if (s->precision != KILN_PRECISION_FP32)
        kiln_cuda_flash_tc(ST, f16, z->b, z->t, z->c, z->heads, st, kind, q, k, v, F(s->out[0]), F(s->out[1]));
    else if (z->c / z->heads <= kiln_cuda_flash_max_head())
        kiln_cuda_flash(ST, z->b, z->t, z->c, z->heads, st, q, k, v, F(s->out[0]), F(s->out[1]));
    else
        kiln_cuda_attention(ST, z->b, z->t, z->c, z->heads, st, q, k, v, F(s->out[0]), F(s->out[1]));
    DONE("causal attention");
}
static kiln_status attention_bwd(const kiln_step *s, const kiln_run_ctx *rc) {
    const kiln_attn_shape *z = &s->sz.attn.shape;
    int64_t st[8];
    attn_strides(z, st);
    void *d[3];
    int acc[3], kind[3], f16 = s->precision == KILN_PRECISION_FP16;
    const void *in[3];
    kiln_attention_grads(s, rc, d, acc);
    attn_inputs(s, rc, kind, in);
    const float *q = in[0], *k = in[1], *v = in[2], *y = F(s->in[3]), *lse = F(s->in[4]), *dy = F(s->in[5]);
    if (s->precision != KILN_PRECISION_FP32 && s->sz.attn.mma)
        kiln_cuda_flash_mma_bwd(ST, f16, z->b, z->t, z->c, z->heads, st, kind, q, k, v, y, lse, dy, rc->workspace, d[0], d[1], d[2],
                                acc[0], acc[1], acc[2]);
    else if (s->precision != KILN_PRECISION_FP32)
        kiln_cuda_flash_tc_bwd(ST, f16, z->b, z->t, z->c, z->heads, st, kind, q, k, v, y, lse, dy, rc->workspace, d[0], d[1], d[2],
                               acc[0], acc[1], acc[2]);
    else if (z->c / z->heads <= kiln_cuda_flash_max_head())
        kiln_cuda_flash_bwd(ST, z->b, z->t, z->c, z->heads, st, q, k, v, y, lse, dy, rc->workspace, d[0], d[1], d[2], acc[0], acc[1],
                            acc[2]);
    else
        kiln_cuda_attention_bwd(ST, z->b, z->t, z->c, z->heads, st, q, k, v, y, lse, dy, rc->workspace, d[0], d[1], d[2], acc[0],
                                acc[1], acc[2]);
    DONE("causal attention backward");
}
#undef N

/* ---- layer-wise optimizers (layerwise.cu): in grad, tensors; out param, state..., norms ---- */
static void hyper(const kiln_step *s, float h[6]) {
    const kiln_layerwise_attrs *a = &s->attr.layerwise;
    h[0] = a->beta1, h[1] = a->beta2, h[2] = a->eps, h[3] = a->weight_decay, h[4] = a->momentum, h[5] = a->trust;
}
#define SEGS s->in[1].numel / 3, (const int64_t *)s->in[1].data
static kiln_status lamb(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    float h[6];
    hyper(s, h);
    kiln_cuda_lamb(ST, s->attr.layerwise.phase, SEGS, h, F(s->out[0]), F(s->in[0]), F(s->out[1]), F(s->out[2]),
                   s->out[3].data, kiln_cuda_rc_dev());
    DONE("lamb");
}
static kiln_status lars(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    float h[6];
    hyper(s, h);
    kiln_cuda_lars(ST, s->attr.layerwise.phase, SEGS, h, F(s->out[0]), F(s->in[0]), F(s->out[1]), s->out[2].data,
                   kiln_cuda_rc_dev());
    DONE("lars");
}
static kiln_status novograd(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    float h[6];
    hyper(s, h);
    kiln_cuda_novograd(ST, s->attr.layerwise.phase, SEGS, h, F(s->out[0]), F(s->in[0]), F(s->out[1]), F(s->out[2]),
                       s->out[3].data, kiln_cuda_rc_dev());
    DONE("novograd");
}
#undef SEGS

/* ---- a fused group of pointwise ops: one kernel (fused.cu) ---- */
/* the program translated at compile, each member's code from its op's table entry (kiln_kernel.fusable) */
static kiln_status fused_prepare(kiln_step *s, kiln_prep *p) {
    (void)p;
    const kiln_fused_prog *F = s->attr.fused;
    if (F->ninstr > KILN_CUDA_PW_INSTR || F->nregs > KILN_CUDA_PW_REGS || F->nin > KILN_CUDA_PW_IO || F->nout > KILN_CUDA_PW_IO)
        return kiln_fail(KILN_ERR_BACKEND, "%s: a fused group too large for the cuda backend's kernel", s->name);
    kiln_cuda_prog *P = calloc(1, sizeof *P);
    if (!P) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", s->name);
    P->ninstr = F->ninstr, P->nin = F->nin, P->nout = F->nout;
    for (int k = 0; k < F->nout; k++) P->out_reg[k] = F->out_reg[k];
    for (int j = 0; j < F->ninstr; j++) {
        const kiln_pw_instr *I = &F->ins[j];
        kiln_cuda_pw *D = &P->ins[j];
        D->code = (uint8_t)kiln_cuda_kernels[I->op].fusable;
        if (!D->code) {
            free(P);
            return kiln_fail(KILN_ERR_BACKEND, "%s: the cuda backend's fused kernel has no %s", s->name, kiln_op_name(I->op));
        }
        D->dst = I->dst, D->nsrc = I->nsrc, D->acc = I->acc;
        D->round = (uint8_t)(I->round == KILN_PRECISION_FP16 ? 2 : I->round ? 1 : 0); /* a follower: kiln_cuda_half_kind's */
        for (int k = 0; k < I->nsrc && k < 3; k++) D->src[k] = I->src[k];
        if (I->op == KILN_OP_GELU || I->op == KILN_OP_GELU_BWD) D->form = (uint8_t)I->attr.gelu.tanh_form;
        if (I->op == KILN_OP_AFFINE || I->op == KILN_OP_AFFINE_BWD) D->a = I->attr.affine.scale, D->b = I->attr.affine.shift;
        if (I->op == KILN_OP_DROPOUT || I->op == KILN_OP_DROPOUT_BWD) {
            float q = I->attr.dropout.p;
            double t = (double)q * 4294967296.0; /* kiln_dropout_threshold */
            D->a = q, D->b = q < 1.f ? 1.f / (1.f - q) : 0.f, D->key = I->key;
            D->thr = t >= 4294967295.0 ? 0xffffffffu : (uint32_t)t;
        }
    }
    s->kobj = P;
    s->owns_kobj = 1;
    return KILN_OK;
}
static void fused_release(kiln_step *s) { free(s->kobj); }
static kiln_status fused(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_cuda_prog *P = s->kobj;
    for (int k = 0; k < P->nin; k++) P->in[k] = s->in[k].data, P->in_kind[k] = (uint8_t)kiln_cuda_half_kind(&s->in[k]);
    for (int k = 0; k < P->nout; k++)
        P->out[k] = s->out[k].data, P->out_kind[k] = (uint8_t)HK(k), P->out_acc[k] = (uint8_t)ACC(k);
    kiln_cuda_fused(ST, s->out[0].numel, P, kiln_cuda_rc_dev());
    DONE("fused pointwise group");
}

/* ---- steps outside the graph ---- */
kiln_status kiln_cuda_flag_error(const kiln_cuda_flags *f) {
    if (f->bad_target)
        return kiln_fail(KILN_ERR_INVALID_ARG, "target %d is %d, outside [0, %d)", f->bad_target - 1, f->target_value, f->classes);
    if (f->bad_token)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s: token id %.9g at position %d is outside [0, %d)", f->node ? f->node : "embedding",
                         f->token_value, f->bad_token - 1, f->vocab);
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
    kiln_cuda_scale_by_norm(ST, s->out[0].numel, s->in[0].data, s->attr.clip.max_norm, kiln_cuda_flags_dev(), kiln_cuda_rc_dev(),
                            F(s->out[0]));
    DONE("clip");
}
static kiln_status amp_unscale(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_amp_unscale(ST, s->out[0].numel, s->in[0].data, s->attr.amp.first, s->out[1].data, F(s->out[0]));
    DONE("amp_unscale");
}
static kiln_status amp_update(const kiln_step *s, const kiln_run_ctx *rc) {
    (void)rc;
    kiln_cuda_amp_update(ST, s->out[0].data, s->attr.amp.growth, s->attr.amp.backoff, s->attr.amp.interval);
    DONE("amp_update");
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
#if !defined(KILN_SIMT) || defined(KILN_SIMT_CUDNN) /* simt: conv.c over a host cuDNN where it is built */
    /* autocast steps on 16-bit channels-last copies: cuDNN writes their output in 16 bits (conv.c) */
    /* channels last (KILN_CUDA_LAYOUT=nhwc): x and y as they are; a plain one is converted on every run */
    [KILN_OP_CONV2D] = {kiln_cuda_conv_fwd, kiln_cuda_conv_prepare, kiln_cuda_conv_release, .blocked_in = 1, .blocked_out = 1,
                        .describe = kiln_cuda_conv_describe, .reorders_plain = 1 | KILN_TIE_OUT(0),
                        .half = kiln_cuda_half_conv_out, .round_out = 1},
    /* (the release frees descriptors only a backward step cuDNN refused in 16 bits owns: conv.c) */
    [KILN_OP_CONV2D_BWD_DATA] = {kiln_cuda_conv_bwd_data, kiln_cuda_conv_bwd_prepare, kiln_cuda_conv_release,
                                 .blocked_in = 1, .blocked_out = 1, .describe = kiln_cuda_conv_describe,
                                 .reorders_plain = 1 | KILN_TIE_OUT(0), .half = kiln_cuda_half_conv_bwd_data, .round_out = 1},
    [KILN_OP_CONV2D_BWD_WEIGHT] = {kiln_cuda_conv_bwd_weight, kiln_cuda_conv_bwd_prepare, kiln_cuda_conv_release,
                                   .blocked_in = 3, .describe = kiln_cuda_conv_describe, .reorders_plain = 3,
                                   .half = kiln_cuda_half_conv_bwd_weight, .round_out = 1},
#endif
#if !defined(KILN_SIMT) || defined(KILN_SIMT_CUBLASLT) /* simt: linear.c over a host cuBLASLt where it is built */
    /* an autocast forward writes its output in 16 bits, bias and relu before the rounding (linear.c) */
    [KILN_OP_LINEAR] = {kiln_cuda_linear_fwd, kiln_cuda_linear_prepare, kiln_cuda_linear_release, .half = kiln_cuda_half_linear,
                        .round_out = 1 | KILN_ROUND_BIAS_IN},
    [KILN_OP_LINEAR_BWD_DATA] = {kiln_cuda_linear_bwd_data, kiln_cuda_linear_prepare, kiln_cuda_linear_release, .half = kiln_cuda_half_in0},
    [KILN_OP_LINEAR_BWD_WEIGHT] = {kiln_cuda_linear_bwd_weight, kiln_cuda_linear_prepare, kiln_cuda_linear_release,
                                   .half = kiln_cuda_half_bwd_weight},
    [KILN_OP_MATMUL] = {kiln_cuda_linear_fwd, kiln_cuda_matmul_prepare, kiln_cuda_linear_release, .half = kiln_cuda_half_linear,
                        .round_out = 1 | KILN_ROUND_BIAS_IN},
    [KILN_OP_MATMUL_BWD_DATA] = {kiln_cuda_linear_bwd_data, kiln_cuda_matmul_prepare, kiln_cuda_linear_release, .half = kiln_cuda_half_in0},
    [KILN_OP_MATMUL_BWD_WEIGHT] = {kiln_cuda_matmul_bwd_weight, kiln_cuda_matmul_prepare, kiln_cuda_linear_release,
                                   .half = kiln_cuda_half_bwd_weight},
#endif
    /* relu and max-pool of 16-bit numbers: 16-bit numbers (exact: marked, nothing to round) */
    [KILN_OP_RELU] = {relu, NULL, .fusable = KILN_CUDA_PW_RELU, .round_out = 1, .autocast_follows = KILN_FOLLOW_IN0},
    [KILN_OP_RELU_BWD] = {relu_bwd, NULL, .fusable = KILN_CUDA_PW_RELU_BWD, .half = kiln_cuda_half_relu_bwd},
    [KILN_OP_MAX_POOL2D] = {pool, kiln_prepare_pool, .blocked_in = 1, .blocked_out = 1, .tied = 1 | KILN_TIE_OUT(0),
                            .half = kiln_cuda_half_bn, .round_out = 1, .autocast_follows = KILN_FOLLOW_IN0},
    [KILN_OP_MAX_POOL2D_BWD] = {pool_bwd, pool_bwd_prepare, .blocked_in = 3, .blocked_out = 1, .tied = 3 | KILN_TIE_OUT(0),
                                .half = kiln_cuda_half_in0},
    /* x (and backward's dx) channels last or not, x read in 16 bits where stored so; y (and dy) plain fp32: a
     * classifier's flatten reads it (tying it to x would cut a channels-last trunk there), its linear rounds it */
    [KILN_OP_AVG_POOL2D] = {avg_pool, kiln_prepare_avg_pool, .blocked_in = 1, .half = kiln_cuda_half_in0},
    [KILN_OP_ADAPTIVE_AVG_POOL2D] = {avg_pool, kiln_prepare_avg_pool, .blocked_in = 1, .half = kiln_cuda_half_in0},
    [KILN_OP_AVG_POOL2D_BWD] = {avg_pool_bwd, kiln_prepare_avg_pool, .blocked_out = 1},
    [KILN_OP_SUBSAMPLE_PAD] = {subsample_pad, NULL},
    [KILN_OP_SUBSAMPLE_PAD_BWD] = {subsample_pad_bwd, NULL},
    [KILN_OP_PAD] = {pad, kiln_prepare_pad},
    [KILN_OP_DROPOUT] = {dropout, NULL, .fusable = KILN_CUDA_PW_DROPOUT},
    [KILN_OP_DROPOUT_BWD] = {dropout_bwd, NULL, .fusable = KILN_CUDA_PW_DROPOUT},
    [KILN_OP_LOG_SOFTMAX] = {log_softmax, kiln_prepare_rows_of_out},
    [KILN_OP_LOG_SOFTMAX_BWD] = {log_softmax_bwd, kiln_prepare_rows_of_out},
    [KILN_OP_NLL_LOSS] = {nll, rows_of_in},
    [KILN_OP_NLL_LOSS_BWD] = {nll_bwd, kiln_prepare_rows_of_out},
    [KILN_OP_CROSS_ENTROPY] = {cross_entropy, rows_of_in, .half = kiln_cuda_half_in0},
    [KILN_OP_CROSS_ENTROPY_BWD] = {cross_entropy_bwd, rows_of_out_count, .half = half_x_out0},
    [KILN_OP_ADD] = {add, NULL, .fusable = KILN_CUDA_PW_ADD, .round_out = 1, .autocast_follows = KILN_FOLLOW_ALL, .half = half_add},
    [KILN_OP_MUL] = {mul, NULL, .fusable = KILN_CUDA_PW_MUL},
    [KILN_OP_MUL_BWD] = {mul_bwd, NULL, .fusable = KILN_CUDA_PW_MUL_BWD},
    [KILN_OP_ONES] = {ones, NULL},
    [KILN_OP_AMP_UNSCALE] = {amp_unscale, NULL},
    [KILN_OP_AMP_UPDATE] = {amp_update, NULL},
    /* also the layout pass's reorders: layouts in and out may differ */
    [KILN_OP_GRAD_COPY] = {grad_copy, NULL, .blocked_in = 1, .blocked_out = 1, .fusable = KILN_CUDA_PW_COPY, .half = half_out0},
    [KILN_OP_CONTIGUOUS] = {contiguous, NULL, .blocked_in = 1, .blocked_out = 1},
    [KILN_OP_SLICE_BWD] = {slice_bwd, kiln_prepare_slice},
    [KILN_OP_SUM] = {sum, NULL},
    [KILN_OP_SUM_BWD] = {sum_bwd, NULL},
    [KILN_OP_BATCH_NORM2D] = {bn, bn_prepare, .blocked_in = 1, .blocked_out = 1, .tied = 1 | KILN_TIE_OUT(0),
                              .half = kiln_cuda_half_bn, .round_out = 1, .autocast_follows = KILN_FOLLOW_IN0},
    [KILN_OP_BATCH_NORM2D_BWD] = {bn_bwd, bn_prepare, .blocked_in = 3, .blocked_out = 1, .tied = 3 | KILN_TIE_OUT(0),
                                  .half = kiln_cuda_half_bn_bwd},
    [KILN_OP_GELU] = {gelu, NULL, .fusable = KILN_CUDA_PW_GELU, .half = half_x_out0},
    [KILN_OP_GELU_BWD] = {gelu_bwd, NULL, .fusable = KILN_CUDA_PW_GELU_BWD, .half = half_x_out0},
    [KILN_OP_AFFINE] = {affine, NULL, .fusable = KILN_CUDA_PW_AFFINE},
    [KILN_OP_AFFINE_BWD] = {affine_bwd, NULL, .fusable = KILN_CUDA_PW_SCALE},
    [KILN_OP_ERF] = {erf_fwd, NULL, .fusable = KILN_CUDA_PW_ERF},
    [KILN_OP_ERF_BWD] = {erf_bwd, NULL, .fusable = KILN_CUDA_PW_ERF_BWD},
    [KILN_OP_TANH] = {tanh_fwd, NULL, .fusable = KILN_CUDA_PW_TANH},
    [KILN_OP_TANH_BWD] = {tanh_bwd, NULL, .fusable = KILN_CUDA_PW_TANH_BWD},
    [KILN_OP_ADD_BCAST] = {add_bcast, NULL},
    [KILN_OP_ADD_BCAST_BWD] = {add_bcast_bwd, NULL},
    [KILN_OP_MSE_LOSS] = {mse, NULL},
    [KILN_OP_MSE_LOSS_BWD] = {mse_bwd, NULL},
    [KILN_OP_SOFTMAX] = {softmax, kiln_prepare_rows_of_out},
    [KILN_OP_SOFTMAX_BWD] = {softmax_bwd, kiln_prepare_rows_of_out},
    [KILN_OP_LAYER_NORM] = {layer_norm, kiln_prepare_rows_of_in, .half = half_out0},
    [KILN_OP_LAYER_NORM_BWD] = {layer_norm_bwd, kiln_prepare_rows_of_in},
    [KILN_OP_EMBEDDING] = {embedding, NULL},
    [KILN_OP_EMBEDDING_BWD] = {embedding_bwd, embedding_bwd_prepare},
    [KILN_OP_BMM] = {bmm, bmm_prepare},
    [KILN_OP_BMM_BWD] = {bmm_bwd, bmm_prepare},
    [KILN_OP_CAUSAL_ATTENTION] = {attention, attention_prepare, .half = half_qkv},
    [KILN_OP_CAUSAL_ATTENTION_BWD] = {attention_bwd, attention_prepare, .half = half_qkv},
    [KILN_OP_FUSED] = {fused, fused_prepare, fused_release, .half = half_fused},
    [KILN_OP_FUSED_PLAIN] = {fused, fused_prepare, fused_release, .half = half_fused},
    [KILN_OP_READOUT] = {kiln_cuda_readout, NULL},
    [KILN_OP_SUMSQ] = {sumsq, NULL},
    [KILN_OP_CLIP_SCALE] = {clip_scale, NULL},
    [KILN_OP_SGD_UPDATE] = {sgd, NULL},
    [KILN_OP_ADAMW_UPDATE] = {adamw, NULL},
    [KILN_OP_ADADELTA_UPDATE] = {adadelta, NULL},
    [KILN_OP_LAMB_UPDATE] = {lamb, NULL},
    [KILN_OP_LARS_UPDATE] = {lars, NULL},
    [KILN_OP_NOVOGRAD_UPDATE] = {novograd, NULL},
};
