/* Kernel signatures. Every op has two implementations with the same shape of
 * arguments:
 *   kiln_ref_*  naive reference in double (src/kernels/ref/): the oracle for
 *               tests and the engine of the double-precision reference plan;
 *   kiln_cpu_*  fast float kernels (src/kernels/cpu/), OpenMP over the one
 *               compute team; conv and linear go to oneDNN (src/kernels/dnnl/).
 * Layout is NCHW, row-major. `acc` is the grad = None rule: 0 writes the
 * gradient (first contribution), 1 adds to what is there. Element counts are
 * int64_t. Backward kernels take what forward saved (y for relu/log_softmax,
 * x for max_pool) and recompute the rest (dropout's mask from its RNG counter).
 */
#ifndef KILN_KERNELS_H
#define KILN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#define KILN_KERNEL_MAX_DIMS 6 /* = KILN_MAX_DIMS */

typedef struct kiln_conv_shape {
    int64_t n, c, h, w;   /* input  [n, c, h, w] */
    int64_t k, r, s;      /* weight [k, c / groups, r, s] */
    int64_t stride, pad;  /* same in both spatial dims */
    int64_t dilation;     /* 1: dense kernel (0 is taken as 1) */
    int64_t groups;       /* c and k split into groups (c == groups: depthwise); 0 is taken as 1 */
    int64_t oh, ow;       /* output [n, k, oh, ow] */
} kiln_conv_shape;
/* fills oh, ow (and dilation, groups when 0); returns 0, or -1 when the output
 * would be empty or the groups do not divide c and k */
int kiln_conv_shape_infer(kiln_conv_shape *cs);

typedef struct kiln_pool_shape {
    int64_t n, c, h, w;   /* input  [n, c, h, w] */
    int64_t k, stride;    /* square window (floor mode) */
    int64_t oh, ow;
    int64_t pad;          /* implicit -inf padding, at most k / 2 (last: positional initialisers stay valid) */
} kiln_pool_shape;
/* the valid rows (or columns) [*lo, *hi) of window o: padding never wins */
static inline void kiln_pool_window(const kiln_pool_shape *ps, int64_t o, int64_t in, int64_t *lo, int64_t *hi) {
    int64_t s = o * ps->stride - ps->pad, e = s + ps->k;
    *lo = s < 0 ? 0 : s;
    *hi = e > in ? in : e;
}
int kiln_pool_shape_infer(kiln_pool_shape *ps);

/* Average pooling, PyTorch's floor mode: avg_pool2d (square window k, stride,
 * zero padding; count_include_pad divides by the window including padding, as
 * PyTorch's default) or adaptive_avg_pool2d (bins [floor(i*h/oh), ceil((i+1)*h/oh))). */
typedef struct kiln_avg_pool_shape {
    int64_t n, c, h, w;   /* input  [n, c, h, w] */
    int64_t k, stride, pad;
    int include_pad, adaptive;
    int64_t oh, ow;       /* given when adaptive, else filled by infer */
} kiln_avg_pool_shape;
int kiln_avg_pool_shape_infer(kiln_avg_pool_shape *ps);
/* the window of output row (or column) o over an input dim of `in` and an
 * output dim of `out`: input [*lo, *hi), and the count it divides by */
static inline void kiln_avg_pool_window(const kiln_avg_pool_shape *ps, int64_t o, int64_t in, int64_t out, int64_t *lo,
                                        int64_t *hi, int64_t *count) {
    if (ps->adaptive) {
        *lo = o * in / out;
        *hi = ((o + 1) * in + out - 1) / out;
        *count = *hi - *lo;
        return;
    }
    int64_t start = o * ps->stride - ps->pad, end = start + ps->k;
    if (end > in + ps->pad) end = in + ps->pad;
    *count = end - start;
    *lo = start < 0 ? 0 : start;
    *hi = end > in ? in : end;
    if (!ps->include_pad) *count = *hi - *lo;
}

/* Batched matrix product y[..., m, n] = a[..., m, k] @ b[..., k, n] over `nbatch`
 * leading dims; a and b are read through strides (elements, nbatch + 2 of them:
 * views such as a transposed k), y, dy, da and db are contiguous. */
typedef struct kiln_bmm_shape {
    int nbatch;
    int64_t batch[KILN_KERNEL_MAX_DIMS];
    int64_t m, k, n;
    int64_t a_stride[KILN_KERNEL_MAX_DIMS], b_stride[KILN_KERNEL_MAX_DIMS];
} kiln_bmm_shape;

/* Causal multi-head self-attention over q, k, v [b, t, c]: heads of d = c / heads
 * columns (head h is columns h*d..(h+1)*d), scale 1/sqrt(d). Rows are contiguous and
 * the strides of (batch, time) are given, so q, k and v may be column slices of one
 * [b, t, 3c] tensor; y and dy are contiguous [b, t, c]; dq, dk, dv have the strides
 * d_stride ({t c, c}, or {3 t c, 3 c} when they are the thirds of one [b, t, 3c]
 * gradient); lse [b, heads, t] is the logsumexp of each row of scaled, masked scores
 * (forward saves it for backward). */
typedef struct kiln_attn_shape {
    int64_t b, t, c, heads;
    int64_t q_stride[2], k_stride[2], v_stride[2], d_stride[2];
} kiln_attn_shape;

/* ---- reference kernels, double ---- */
void kiln_ref_conv2d_fwd(const kiln_conv_shape *cs, const double *x, const double *w, const double *b, double *y);
void kiln_ref_conv2d_bwd_data(const kiln_conv_shape *cs, const double *dy, const double *w, double *dx, int acc);
/* db may be NULL (no bias) */
void kiln_ref_conv2d_bwd_weight(const kiln_conv_shape *cs, const double *x, const double *dy, double *dw, double *db, int acc);

/* y[n, out] = x[n, in] * w[out, in]^T + b[out]   (b may be NULL) */
void kiln_ref_linear_fwd(int64_t n, int64_t in, int64_t out, const double *x, const double *w, const double *b, double *y);
void kiln_ref_linear_bwd_data(int64_t n, int64_t in, int64_t out, const double *dy, const double *w, double *dx, int acc);
void kiln_ref_linear_bwd_weight(int64_t n, int64_t in, int64_t out, const double *x, const double *dy, double *dw, double *db, int acc);
void kiln_ref_matmul_fwd(int64_t n, int64_t in, int64_t out, const double *x, const double *w, const double *b, double *y);
void kiln_ref_matmul_bwd_data(int64_t n, int64_t in, int64_t out, const double *dy, const double *w, double *dx, int acc);
void kiln_ref_matmul_bwd_weight(int64_t n, int64_t in, int64_t out, const double *x, const double *dy, double *dw, int acc);

void kiln_ref_bmm_fwd(const kiln_bmm_shape *s, const double *a, const double *b, double *y);
/* da = dy @ b^T, db = a^T @ dy; either may be NULL (and they may be one buffer: da is done first) */
void kiln_ref_bmm_bwd(const kiln_bmm_shape *s, const double *a, const double *b, const double *dy, double *da, double *db,
                      int acc_a, int acc_b);

/* the textbook formulas (the oracle); backward forms D_i = sum_j P_ij dP_ij from its
 * definition; dq, dk, dv may each be NULL, or one buffer (q, k, v one value) */
void kiln_ref_causal_attention_fwd(const kiln_attn_shape *s, const double *q, const double *k, const double *v,
                                   double *y, double *lse);
void kiln_ref_causal_attention_bwd(const kiln_attn_shape *s, const double *q, const double *k, const double *v,
                                   const double *lse, const double *dy, double *dq, double *dk, double *dv, int acc_q,
                                   int acc_k, int acc_v);

void kiln_ref_relu_fwd(int64_t n, const double *x, double *y);
void kiln_ref_relu_bwd(int64_t n, const double *y, const double *dy, double *dx, int acc);

/* max over each window; ties go to the first element in row-major window order (as PyTorch) */
void kiln_ref_max_pool2d_fwd(const kiln_pool_shape *ps, const double *x, double *y);
void kiln_ref_max_pool2d_bwd(const kiln_pool_shape *ps, const double *x, const double *dy, double *dx, int acc);

void kiln_ref_avg_pool2d_fwd(const kiln_avg_pool_shape *ps, const double *x, double *y);
void kiln_ref_avg_pool2d_bwd(const kiln_avg_pool_shape *ps, const double *dy, double *dx, int acc);

/* the fused max-pool + relu backward: max_pool2d_bwd, then relu_bwd with y = x */
void kiln_ref_max_pool2d_relu_bwd(const kiln_pool_shape *ps, const double *x, const double *dy, double *dx, int acc);

/* Element i is kept iff kiln_philox4x32(key, counter, i / 4).v[i % 4] >= kiln_dropout_threshold(p),
 * and kept elements are scaled by 1 / (1 - p). */
void kiln_ref_dropout_fwd(int64_t n, float p, uint64_t key, uint64_t counter, const double *x, double *y);
void kiln_ref_dropout_bwd(int64_t n, float p, uint64_t key, uint64_t counter, const double *dy, double *dx, int acc);

/* over the last dim: x[rows, cols] */
void kiln_ref_log_softmax_fwd(int64_t rows, int64_t cols, const double *x, double *y);
void kiln_ref_log_softmax_bwd(int64_t rows, int64_t cols, const double *y, const double *dy, double *dx, int acc);

/* mean reduction, as PyTorch's default; *loss is a scalar; dloss is d(out)/d(loss) */
/* F.mse_loss(x, target) over n elements (mean); backward dx = 2 (x - target) dloss / n */
void kiln_ref_mse_loss_fwd(int64_t n, const double *x, const double *target, double *loss);
/* relu_mask: relu's backward folded in (x is a relu's output: the gradient passes where x > 0) */
void kiln_ref_mse_loss_bwd(int64_t n, const double *x, const double *target, const double *dloss, double *dx, int acc,
                           int relu_mask);
void kiln_ref_nll_loss_fwd(int64_t rows, int64_t cols, const double *logp, const int32_t *target, double *loss);
void kiln_ref_nll_loss_bwd(int64_t rows, int64_t cols, const int32_t *target, const double *dloss, double *dlogp, int acc);
void kiln_ref_cross_entropy_fwd(int64_t rows, int64_t cols, const double *logits, const int32_t *target, double *loss);
void kiln_ref_cross_entropy_bwd(int64_t rows, int64_t cols, const double *logits, const int32_t *target, const double *dloss, double *dlogits, int acc);

void kiln_ref_add_fwd(int64_t n, const double *a, const double *b, double *y);
void kiln_ref_mul_fwd(int64_t n, const double *a, const double *b, double *y);
/* dx (=|+=) scale * dy: add's backward and any pass-through gradient */
void kiln_ref_grad_copy(int64_t n, const double *dy, double *dx, int acc);
/* da (=|+=) dy * b */
void kiln_ref_mul_bwd(int64_t n, const double *dy, const double *b, double *da, int acc);

/* views: dst (packed, `shape`) (=|+=) src read through `stride` (elements) */
void kiln_ref_copy_strided(int ndim, const int64_t *shape, const double *src, const int64_t *stride, double *dst, int acc);
/* slice's backward: dx[outer, dim, inner] gets dy[outer, len, inner] at start, start + step, ...
 * (len of them) along dim, and zero elsewhere when writing (acc = 0); acc = 1 adds inside the
 * slice only. With step 1 and acc 0 it is also pad's forward. */
void kiln_ref_slice_bwd(int64_t outer, int64_t dim, int64_t inner, int64_t start, int64_t len, int64_t step,
                        const double *dy, double *dx, int acc);
/* sum of all elements; its backward fills dx with the scalar gradient */
double kiln_ref_sum(int64_t n, const double *x);
void kiln_ref_fill(int64_t n, double v, double *dx, int acc);

/* Sync batch norm (--sync-bn, PyTorch's SyncBatchNorm): the batch statistics
 * of every process of a data-parallel job. `allreduce` sums n doubles in place
 * over the processes and returns 0, or -1 with the message set; NULL is a
 * world of one. Kernels given a collective (even one with a NULL allreduce)
 * reduce their per-channel sums through it; kernels given NULL are plain batch
 * norm. The kernels know nothing of MPI: the trainer sets the run context's
 * collective from its process group (kiln_plan_set_collective). */
typedef struct kiln_collective {
    int (*allreduce)(void *user, double *buf, int64_t n);
    void *user;
} kiln_collective;
static inline int kiln_collective_sum(const kiln_collective *co, double *buf, int64_t n) {
    return co && co->allreduce ? co->allreduce(co->user, buf, n) : 0;
}

/* Batch norm over x[n, c, hw] (NCHW), PyTorch's BatchNorm2d: training
 * normalises with the batch's mean and biased variance, saves mean and invstd,
 * and moves the running statistics by `momentum` towards the mean and the
 * unbiased variance; evaluation normalises with the running statistics.
 * co (training only): the statistics over every process's batch (count, sums,
 * then squared deviations from the global mean: two reductions), the unbiased
 * variance over the global count. Returns -1 (nothing written) when training
 * sees one value per channel, -2 when the collective failed. */
int kiln_ref_batch_norm_fwd(int64_t n, int64_t c, int64_t hw, const double *x, const double *w, const double *b,
                            double *rmean, double *rvar, double momentum, double eps, int training, double *y,
                            double *save_mean, double *save_invstd, const kiln_collective *co);
/* training-mode backward from the saved statistics; dx, dw, db may each be NULL.
 * co: dx from the sums of dy and dy * xhat over every process (one reduction);
 * dw and db stay this process's (data parallel sums them with the other
 * gradients). Returns 0, or -2 when the collective failed. */
int kiln_ref_batch_norm_bwd(int64_t n, int64_t c, int64_t hw, const double *x, const double *dy, const double *w,
                            const double *mean, const double *invstd, double *dx, double *dw, double *db, int acc_dx,
                            int acc_dw, int acc_db, const kiln_collective *co);

/* kiln_ref_batch_norm_bwd of relu(batch_norm(x)): dy taken where the forward's
 * y = (x - mean) * invstd * w + b (recomputed as the forward computes it) is > 0 */
int kiln_ref_batch_norm_relu_bwd(int64_t n, int64_t c, int64_t hw, const double *x, const double *dy, const double *w,
                                 const double *b, const double *mean, const double *invstd, double *dx, double *dw,
                                 double *db, int acc_dx, int acc_dw, int acc_db, const kiln_collective *co);

/* He et al.'s option-A shortcut as one op (src/graph/pass_subsample_pad.c):
 * x [n, c, h, w] -> y [n, before + c + after, ceil(h / s), ceil(w / s)],
 * y = x[:, :, ::s, ::s] with `before` zero channels in front and `after` behind */
typedef struct { int64_t n, c, h, w, s, before, after; } kiln_subsample_shape;
void kiln_ref_subsample_pad(const kiln_subsample_shape *S, const double *x, double *y);
void kiln_ref_subsample_pad_bwd(const kiln_subsample_shape *S, const double *dy, double *dx, int acc);
/* kiln's Winograd F(4x4, 3x3) convolution (winograd_avx2.c): 3x3, stride 1, pad 0-2, no groups or
 * dilation, x and y in nChw8c (c and k multiples of 8), AVX2 CPUs. Backward-data of such a
 * convolution is one too: dy as x, k and c swapped, pad 2 - p, the filters flipped (flip = 1) */
typedef struct {
    int64_t n, c, h, w, k, oh, ow, pad;
    int threads; /* the team its workspace is sized for (0: omp_get_max_threads() now); runs take at most that many */
    const float *scale; /* forward: output channel o's filters times scale[o] as they are read, the product rounded
                           as kiln_cpu_bn_fold's (a batch norm folded in at no pass over w); NULL: none */
    int stream;         /* y written with streaming stores, past the caches (where y is too large to be read back
                           from them; not when adding into y) */
} kiln_wino_shape;
int kiln_cpu_wino_supported(const kiln_wino_shape *s);
/* the bytes of ws kiln_cpu_wino_conv needs (the transformed filters and the threads' buffers) */
size_t kiln_cpu_wino_workspace(const kiln_wino_shape *s);
/* y (=, or += when acc) relu?(conv(x) + bias (NULL: none) [+ y]); w is [k][c][3][3], or with flip the
 * forward's [c][k][3][3] (backward-data) */
void kiln_cpu_wino_conv(const kiln_wino_shape *s, const float *x, const float *w, int flip, const float *bias, int relu,
                        int acc, float *y, void *ws);
/* tests: the forward's loop order (0: by size; 1 tiles first; 2 outputs first) */
void kiln_cpu_wino_force_fwd_path(int path);
/* backward-weights of the forward shape s: dw [k][c][3][3] (=, or += when acc) from x and dy, both nChw8c */
size_t kiln_cpu_wino_bwd_weight_workspace(const kiln_wino_shape *s);
void kiln_cpu_wino_bwd_weight(const kiln_wino_shape *s, const float *x, const float *dy, float *dw, int acc, void *ws);
/* tests: backward-weights takes its tiles `tiles` at a time (0: as many as fit its chunk budget) */
void kiln_cpu_wino_force_bw_chunk(int64_t tiles);

/* each side plain NCHW (0) or nChw16c / nChw8c (16 / 8: its channels a multiple of it;
 * both sides blocked take the same block) */
void kiln_cpu_subsample_pad(const kiln_subsample_shape *S, int x_blocked, int y_blocked, const float *x, float *y);
void kiln_cpu_subsample_pad_bwd(const kiln_subsample_shape *S, int dy_blocked, int dx_blocked, const float *dy, float *dx,
                                int acc);

/* batch norm in evaluation folded into the layer before it (per output channel k
 * of w [k, per]): s = gamma / sqrt(var + eps), w_out = w * s, b_out = (b - mean) * s
 * + beta; b may be NULL (zero) */
void kiln_ref_bn_fold(int64_t k, int64_t per, const double *w, const double *b, const double *gamma, const double *beta,
                      const double *mean, const double *var, double eps, double *w_out, double *b_out);

/* ---- transformer ops (reference) ----
 * Embedding ids come as i32 (idi) or as f32 values holding integers (idf; f64
 * in the reference backend): exactly one of the two is given. check returns
 * the first position whose id is outside [0, V) (or no integer), or -1. */
int64_t kiln_ref_embedding_check(int64_t n, const double *idf, const int32_t *idi, int64_t V);
void kiln_ref_embedding_fwd(int64_t n, int64_t C, const double *idf, const int32_t *idi, const double *w, double *y);
/* dw[V, C] (=|+=) the scatter-add of dy's n rows at their ids */
void kiln_ref_embedding_bwd(int64_t n, int64_t V, int64_t C, const double *idf, const int32_t *idi, const double *dy,
                            double *dw, int acc);
/* over rows of x[rows, C]; mean and rstd [rows] saved for backward; dx, dw, db may each be NULL */
void kiln_ref_layer_norm_fwd(int64_t rows, int64_t C, const double *x, const double *w, const double *b, double eps,
                             double *y, double *mean, double *rstd);
void kiln_ref_layer_norm_bwd(int64_t rows, int64_t C, const double *x, const double *dy, const double *w,
                             const double *mean, const double *rstd, double *dx, double *dw, double *db, int acc_dx,
                             int acc_dw, int acc_db);
/* tanh_form 0: x * Phi(x) (erf); 1: PyTorch's approximate='tanh' */
void kiln_ref_gelu_fwd(int64_t n, int tanh_form, const double *x, double *y);
void kiln_ref_gelu_bwd(int64_t n, int tanh_form, const double *x, const double *dy, double *dx, int acc);
/* over the last dim: x[rows, cols]; backward from y */
void kiln_ref_softmax_fwd(int64_t rows, int64_t cols, const double *x, double *y);
void kiln_ref_softmax_bwd(int64_t rows, int64_t cols, const double *y, const double *dy, double *dx, int acc);
/* y[r, j] = a[r, j] + b[j]; the backward of b is kiln_ref_bias_grad_rows */
void kiln_ref_add_bcast_fwd(int64_t rows, int64_t inner, const double *a, const double *b, double *y);
/* db[cols] (=|+=) sum over rows of dy[rows, cols] */
void kiln_ref_bias_grad_rows(int64_t rows, int64_t cols, const double *dy, double *db, int acc);

/* optimizers over a flat buffer (PyTorch 1.13 semantics; `step` counts from 1) */
void kiln_ref_sgd(int64_t n, double *p, const double *g, double *mom, double lr, double momentum,
                  double dampening, double weight_decay, int nesterov, int first_step);
void kiln_ref_adamw(int64_t n, double *p, const double *g, double *m, double *v, double lr, double beta1,
                    double beta2, double eps, double weight_decay, int64_t step);
void kiln_ref_adadelta(int64_t n, double *p, const double *g, double *square_avg, double *acc_delta,
                       double lr, double rho, double eps, double weight_decay);

/* Layer-wise optimizers over a run of parameter tensors: tensor k holds
 * elements [seg[3k] - seg[0], + seg[3k+1]) of the run's buffers and takes weight
 * decay when seg[3k+2] is 1. Phase 0 writes norms[2k], norms[2k+1] (sums of
 * squares: LAMB ||p||, ||update||; LARS ||p||, ||g||; NovoGrad ||g||), phase 1
 * updates with them. Hyperparameters as the kiln_layerwise_attrs of ops.h. */
typedef struct kiln_layerwise_args {
    int64_t nseg;
    const int64_t *seg;
    double lr, beta1, beta2, eps, weight_decay, momentum, trust;
    int64_t step; /* updates done, this one included */
    double dampening, rho; /* the element-wise sgd and adadelta over such a run (*_tensors) */
    int nesterov;
} kiln_layerwise_args;
/* LAMB (You et al. 2019; APEX FusedLAMB with adam_w_mode, bias correction, use_nvlamb) */
void kiln_ref_lamb(const kiln_layerwise_args *a, int phase, double *p, const double *g, double *m, double *v, double *norms);
/* LARS (You et al. 2017) with momentum: buf = momentum*buf + lr*local_lr*(g + wd*p); p -= buf */
void kiln_ref_lars(const kiln_layerwise_args *a, int phase, double *p, const double *g, double *buf, double *norms);
/* NovoGrad (Ginsburg et al. 2019): v (one per tensor) of ||g||^2, m of g/(sqrt(v)+eps) + wd*p */
void kiln_ref_novograd(const kiln_layerwise_args *a, int phase, double *p, const double *g, double *m, double *v,
                       double *norms);
/* pointwise arithmetic: y = x*scale + shift, erf, tanh and their backward
 * ops (dx = scale*dy; dy * 2/sqrt(pi) * exp(-x^2); dy * (1 - y^2)) */
void kiln_ref_affine(int64_t n, const double *x, double scale, double shift, double *y);
void kiln_ref_erf(int64_t n, const double *x, double *y);
void kiln_ref_tanh(int64_t n, const double *x, double *y);
void kiln_ref_affine_bwd(int64_t n, const double *dy, double scale, double *dx, int acc);
void kiln_ref_erf_bwd(int64_t n, const double *x, const double *dy, double *dx, int acc);
void kiln_ref_tanh_bwd(int64_t n, const double *y, const double *dy, double *dx, int acc);
/* dropout over elements [start, start + n) of a tensor (start a multiple of 4):
 * the same mask words as the whole tensor's, for a fused kernel's tiles */
void kiln_ref_dropout_range(int64_t start, int64_t n, float p, uint64_t key, uint64_t counter, const double *x, double *y,
                            int acc);

/* SGD, AdamW, Adadelta over a run of tensors (seg as above): each tensor's
 * elements with its own weight decay, the padding between them untouched */
void kiln_ref_sgd_tensors(const kiln_layerwise_args *a, double *p, const double *g, double *mom);
void kiln_ref_adamw_tensors(const kiln_layerwise_args *a, double *p, const double *g, double *m, double *v);
void kiln_ref_adadelta_tensors(const kiln_layerwise_args *a, double *p, const double *g, double *square_avg, double *acc_delta);

/* sum of squares (the squared L2 norm) and in-place scaling: gradient clipping */
double kiln_ref_sumsq(int64_t n, const double *x);
void kiln_ref_scale(int64_t n, double *x, double s);

/* ---- fast float kernels (same semantics) ---- */
void kiln_cpu_relu_fwd(int64_t n, const float *x, float *y);
void kiln_cpu_relu_bwd(int64_t n, const float *y, const float *dy, float *dx, int acc); /* dx may be dy (acc 0) */
void kiln_cpu_max_pool2d_fwd(const kiln_pool_shape *ps, const float *x, float *y);
void kiln_cpu_max_pool2d_bwd(const kiln_pool_shape *ps, const float *x, const float *dy, float *dx, int acc);
/* the same with relu's backward folded in (plain NCHW; as kiln_ref_max_pool2d_relu_bwd) */
void kiln_cpu_max_pool2d_relu_bwd(const kiln_pool_shape *ps, const float *x, const float *dy, float *dx, int acc);
/* Max-pool whose input x (and dx) and output y (and dy) are each plain NCHW
 * (blocked = 0) or oneDNN's nChw16c or nChw8c (blocked = 16 or 8: [n, c/B, h,
 * w, B], c % B == 0; both sides blocked take the same B), so a conv chain kept in the blocked layout needs no reorder on either
 * side. relu_mask folds a preceding relu's backward in (x is the relu's
 * output): a window whose max is not > 0 passes no gradient. */
void kiln_cpu_max_pool2d_fwd_layout(const kiln_pool_shape *ps, int blocked, int y_blocked, const float *x, float *y);
void kiln_cpu_max_pool2d_bwd_layout(const kiln_pool_shape *ps, int blocked, int dy_blocked, int relu_mask,
                                    const float *x, const float *dy, float *dx, int acc);
/* x and dx plain NCHW (blocked = 0) or nChw16c / nChw8c (blocked = 16 / 8); y and dy NCHW */
void kiln_cpu_avg_pool2d_fwd(const kiln_avg_pool_shape *ps, int blocked, const float *x, float *y);
void kiln_cpu_avg_pool2d_bwd(const kiln_avg_pool_shape *ps, int blocked, const float *dy, float *dx, int acc);
void kiln_cpu_dropout_fwd(int64_t n, float p, uint64_t key, uint64_t counter, const float *x, float *y);
void kiln_cpu_dropout_bwd(int64_t n, float p, uint64_t key, uint64_t counter, const float *dy, float *dx, int acc);
/* one tile, one thread (pointwise_tile.c): a fused kernel's instructions; the same bits as the whole-tensor kernels */
void kiln_cpu_tile_relu(int64_t n, const float *x, float *y);
void kiln_cpu_tile_relu_bwd(int64_t n, const float *y, const float *dy, float *dx, int acc);
void kiln_cpu_tile_add(int64_t n, const float *a, const float *b, float *y);
void kiln_cpu_tile_mul(int64_t n, const float *a, const float *b, float *y);
void kiln_cpu_tile_mul_bwd(int64_t n, const float *dy, const float *b, float *da, int acc);
void kiln_cpu_tile_copy(int64_t n, const float *dy, float *dx, int acc);
void kiln_cpu_gelu_tile_fwd(int64_t n, int tanh_form, const float *x, float *y);
void kiln_cpu_gelu_tile_bwd(int64_t n, int tanh_form, const float *x, const float *dy, float *dx, int acc);
/* elements [start, start + n) (start a multiple of 64): one thread, for a fused kernel's tiles */
void kiln_cpu_dropout_range(int64_t start, int64_t n, float p, uint64_t key, uint64_t counter, const float *x, float *y,
                            int acc);
/* pointwise arithmetic, one thread (callers split the work into tiles); AVX-512 when the CPU has it.
 * erf and tanh: a few float ulps (erf within 2e-7 absolute) */
void kiln_cpu_affine(int64_t n, const float *x, float scale, float shift, float *y);
void kiln_cpu_erf(int64_t n, const float *x, float *y);
void kiln_cpu_tanh(int64_t n, const float *x, float *y);
void kiln_cpu_affine_bwd(int64_t n, const float *dy, float scale, float *dx, int acc);
void kiln_cpu_erf_bwd(int64_t n, const float *x, const float *dy, float *dx, int acc);
void kiln_cpu_tanh_bwd(int64_t n, const float *y, const float *dy, float *dx, int acc);
void kiln_cpu_log_softmax_fwd(int64_t rows, int64_t cols, const float *x, float *y);
void kiln_cpu_log_softmax_bwd(int64_t rows, int64_t cols, const float *y, const float *dy, float *dx, int acc);
void kiln_cpu_mse_loss_fwd(int64_t n, const float *x, const float *target, float *loss);
/* relu_mask: as the ref twin; dx may be x (elementwise, read before written) */
void kiln_cpu_mse_loss_bwd(int64_t n, const float *x, const float *target, const float *dloss, float *dx, int acc,
                           int relu_mask);
void kiln_cpu_nll_loss_fwd(int64_t rows, int64_t cols, const float *logp, const int32_t *target, float *loss);
void kiln_cpu_nll_loss_bwd(int64_t rows, int64_t cols, const int32_t *target, const float *dloss, float *dlogp, int acc);
void kiln_cpu_cross_entropy_fwd(int64_t rows, int64_t cols, const float *logits, const int32_t *target, float *loss);
void kiln_cpu_cross_entropy_bwd(int64_t rows, int64_t cols, const float *logits, const int32_t *target, const float *dloss, float *dlogits, int acc);
void kiln_cpu_add_fwd(int64_t n, const float *a, const float *b, float *y);
void kiln_cpu_mul_fwd(int64_t n, const float *a, const float *b, float *y);
void kiln_cpu_grad_copy(int64_t n, const float *dy, float *dx, int acc);
void kiln_cpu_mul_bwd(int64_t n, const float *dy, const float *b, float *da, int acc);
/* db[cols] (=|+=) sum over rows of dy[rows, cols]: linear's bias gradient */
void kiln_cpu_bias_grad_rows(int64_t rows, int64_t cols, const float *dy, float *db, int acc);
/* the same over dy rounded to bf16 first: a bf16 linear's bias gradient, from the same bf16 dy as its weight
 * gradient (as oneDNN's bf16 convolutions and the ref twin, src/backends/ref/reduced.c, take theirs) */
void kiln_cpu_bias_grad_rows_bf16(int64_t rows, int64_t cols, const float *dy, float *db, int acc);
/* db[c] (=|+=) sum over n and spatial of dy[n, c, hw]: conv's bias gradient */
void kiln_cpu_bias_grad_nchw(int64_t n, int64_t c, int64_t hw, const float *dy, float *db, int acc);

void kiln_cpu_copy_strided(int ndim, const int64_t *shape, const float *src, const int64_t *stride, float *dst, int acc);
/* [n, c, hw] between NCHW and nChw<block>c (block 16 or 8), from_blocked saying which way */
void kiln_cpu_reorder_nchw(int64_t n, int64_t c, int64_t hw, int block, int from_blocked, const float *src, float *dst,
                           int acc);
void kiln_cpu_slice_bwd(int64_t outer, int64_t dim, int64_t inner, int64_t start, int64_t len, int64_t step,
                        const float *dy, float *dx, int acc);
/* fixed-order chunks summed in double: the same bits for any thread count */
double kiln_cpu_sum(int64_t n, const float *x);
void kiln_cpu_fill(int64_t n, float v, float *dx, int acc);
/* batch norm in plain NCHW (blocked = 0) or nChw16c / nChw8c (blocked = 16 / 8, c a multiple of it);
 * relu = 1: relu applied to y as it is written (the fusion pass's epilogue);
 * co: sync batch norm as the ref kernels, in `scratch` (kiln_cpu_batch_norm_scratch
 * bytes; unused without co) */
int kiln_cpu_batch_norm_fwd(int64_t n, int64_t c, int64_t hw, int blocked, const float *x, const float *w, const float *b,
                            float *rmean, float *rvar, float momentum, float eps, int training, int relu, float *y,
                            float *save_mean, float *save_invstd, const kiln_collective *co, void *scratch);
int kiln_cpu_batch_norm_bwd(int64_t n, int64_t c, int64_t hw, int blocked, const float *x, const float *dy,
                            const float *w, const float *mean, const float *invstd, float *dx, float *dw, float *db,
                            int acc_dx, int acc_dw, int acc_db, const kiln_collective *co, void *scratch);
/* relu(batch_norm(x) + res) in one pass (the fusion pass: a ResNet block's second
 * norm, residual add and relu), res in y's layout, each step rounded as the three
 * ops round; relu 0: the sum alone */
int kiln_cpu_batch_norm_add_fwd(int64_t n, int64_t c, int64_t hw, int blocked, const float *x, const float *w,
                                const float *b, float *rmean, float *rvar, float momentum, float eps, int training,
                                const float *res, int relu, float *y, float *save_mean, float *save_invstd,
                                const kiln_collective *co, void *scratch);
/* the backward of relu(batch_norm(x)) fused with the norm's (the fusion pass): dy
 * where y > 0, else 0, then the norm's backward; y's sign recomputed from x with
 * the forward's own scale and shift (from the saved mean and invstd, w and b), so
 * the mask is bit for bit the forward relu's. b NULL: kiln_cpu_batch_norm_bwd */
int kiln_cpu_batch_norm_relu_bwd(int64_t n, int64_t c, int64_t hw, int blocked, const float *x, const float *dy,
                                 const float *w, const float *b, const float *mean, const float *invstd, float *dx,
                                 float *dw, float *db, int acc_dx, int acc_dw, int acc_db, const kiln_collective *co,
                                 void *scratch);
size_t kiln_cpu_batch_norm_scratch(int64_t n, int64_t c, int blocked);
/* kiln_ref_bn_fold in float, each channel's scale in double */
void kiln_cpu_bn_fold(int64_t k, int64_t per, const float *w, const float *b, const float *gamma, const float *beta,
                      const float *mean, const float *var, float eps, float *w_out, float *b_out);
/* its scales and b_out alone: w_out[j] of kiln_cpu_bn_fold is w[j] * scale[j / per], the same float product */
void kiln_cpu_bn_fold_scale(int64_t k, const float *b, const float *gamma, const float *beta, const float *mean,
                            const float *var, float eps, float *scale, float *b_out);

/* FlashAttention-2 on the cpu (src/kernels/cpu/attention.c): blocked, online softmax,
 * backward recomputing the scores from q, k and lse. `scratch` holds `slots` areas of
 * kiln_cpu_attention_scratch bytes (64-byte aligned), one per thread: at most `slots`
 * threads run. The same bits for any thread count. */
size_t kiln_cpu_attention_scratch(const kiln_attn_shape *s);
void kiln_cpu_causal_attention_fwd(const kiln_attn_shape *s, const float *q, const float *k, const float *v, float *y,
                                   float *lse, void *scratch, int slots);
void kiln_cpu_causal_attention_bwd(const kiln_attn_shape *s, const float *q, const float *k, const float *v,
                                   const float *y, const float *lse, const float *dy, float *dq, float *dk, float *dv,
                                   int acc_q, int acc_k, int acc_v, void *scratch, int slots);
/* ---- transformer ops (fast, float; same semantics as the reference twins) ---- */
int64_t kiln_cpu_embedding_check(int64_t n, const float *idf, const int32_t *idi, int64_t V);
void kiln_cpu_embedding_fwd(int64_t n, int64_t C, const float *idf, const int32_t *idi, const float *w, float *y);
/* each thread owns a range of vocabulary rows and adds dy's rows in position
 * order: the same bits for any thread count */
void kiln_cpu_embedding_bwd(int64_t n, int64_t V, int64_t C, const float *idf, const int32_t *idi, const float *dy,
                            float *dw, int acc);
void kiln_cpu_layer_norm_fwd(int64_t rows, int64_t C, const float *x, const float *w, const float *b, float eps, float *y,
                             float *mean, float *rstd);
/* scratch: kiln_cpu_layer_norm_scratch(rows, C) bytes (the fixed chunks' partial dw and db) */
size_t kiln_cpu_layer_norm_scratch(int64_t rows, int64_t C);
void kiln_cpu_layer_norm_bwd(int64_t rows, int64_t C, const float *x, const float *dy, const float *w, const float *mean,
                             const float *rstd, float *dx, float *dw, float *db, int acc_dx, int acc_dw, int acc_db,
                             float *scratch);
void kiln_cpu_gelu_fwd(int64_t n, int tanh_form, const float *x, float *y);
void kiln_cpu_gelu_bwd(int64_t n, int tanh_form, const float *x, const float *dy, float *dx, int acc);
void kiln_cpu_softmax_fwd(int64_t rows, int64_t cols, const float *x, float *y);
void kiln_cpu_softmax_bwd(int64_t rows, int64_t cols, const float *y, const float *dy, float *dx, int acc);
void kiln_cpu_add_bcast_fwd(int64_t rows, int64_t inner, const float *a, const float *b, float *y);

/* accumulated in double over a fixed partition: the same bits for any thread count */
double kiln_cpu_sumsq(int64_t n, const float *x);
void kiln_cpu_scale(int64_t n, float *x, float s);

void kiln_cpu_sgd(int64_t n, float *p, const float *g, float *mom, float lr, float momentum, float dampening,
                  float weight_decay, int nesterov, int first_step);
void kiln_cpu_adamw(int64_t n, float *p, const float *g, float *m, float *v, float lr, float beta1, float beta2,
                    float eps, float weight_decay, int64_t step);
void kiln_cpu_adadelta(int64_t n, float *p, const float *g, float *square_avg, float *acc_delta, float lr,
                       float rho, float eps, float weight_decay);
/* the kiln_ref_ layer-wise optimizers in float, norms in double over a fixed
 * partition (the same bits for any thread count); 0, or -1 out of memory */
int kiln_cpu_lamb(const kiln_layerwise_args *a, int phase, float *p, const float *g, float *m, float *v, double *norms);
int kiln_cpu_lars(const kiln_layerwise_args *a, int phase, float *p, const float *g, float *buf, double *norms);
int kiln_cpu_novograd(const kiln_layerwise_args *a, int phase, float *p, const float *g, float *m, float *v, double *norms);
/* the kiln_ref_*_tensors in float: one parallel pass over the chunks of all the run's tensors */
int kiln_cpu_sgd_tensors(const kiln_layerwise_args *a, float *p, const float *g, float *mom);
int kiln_cpu_adamw_tensors(const kiln_layerwise_args *a, float *p, const float *g, float *m, float *v);
int kiln_cpu_adadelta_tensors(const kiln_layerwise_args *a, float *p, const float *g, float *square_avg, float *acc_delta);

#endif
