/* The CUDA backend: what its files share.
 *
 * Host code is C11 (cuda.c: memory, streams, graphs; conv.c: cuDNN; linear.c:
 * cuBLASLt; kernels.c: the kernel table); kiln's own device kernels are CUDA
 * C++ in *.cu, reached through the kiln_cuda_* launchers declared here (C
 * linkage). Every launch goes on one compute stream; no launcher allocates or
 * synchronises, so a step list can be captured as one CUDA graph. Values that
 * change from run to run (learning rate, optimizer step, RNG counter, loss
 * scale) are read by kernels from a small device struct (kiln_cuda_rc),
 * written before each run, so a captured graph replays with new values. */
#ifndef KILN_BACKEND_CUDA_H
#define KILN_BACKEND_CUDA_H

#include <stdint.h>
#include "backends/internal/amp_state.h"

/* a launch: KLAUNCH(kernel, grid, block, shared bytes, stream)(arguments).
 * Built with KILN_SIMT (tests/simt/), the *.cu files are host C++ and every
 * launch runs on the CPU (internal/simt.h) */
#if defined(KILN_SIMT) && defined(__cplusplus)
#include "backends/cuda/internal/simt.h"
#elif defined(__CUDACC__)
#define KLAUNCH(k, ...) k<<<__VA_ARGS__>>>
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *kiln_cuda_stream_t;

/* what changes per run, in device memory */
typedef struct kiln_cuda_rc {
    double lr;
    double loss_scale;
    int64_t optim_step;
    uint64_t counter;
    const kiln_amp_state *amp; /* the gradient scaler's state, NULL: none (kiln_run_ctx.amp) */
} kiln_cuda_rc;

#ifdef __cplusplus
/* the gradient scaler found a non-finite gradient this step: clipping and the update skip themselves */
__device__ inline int kiln_amp_skip(const kiln_cuda_rc *rc) { return rc->amp && rc->amp->found_inf; }
/* the step the optimizers' bias corrections see (skipped updates not counted) */
__device__ inline int64_t kiln_optim_t(const kiln_cuda_rc *rc) { return kiln_amp_step(rc->amp, rc->optim_step); }
#endif

/* errors kernels find (a target outside the classes, a non-finite gradient
 * norm), in device memory, read at the next synchronisation */
typedef struct kiln_cuda_flags {
    int bad_target;       /* 1 + the row of the first target out of range, 0: none */
    int target_value;
    int classes;          /* of the bad target's loss */
    int nonfinite_norm;
    int bad_token;        /* 1 + the position of the first token id outside the vocabulary, 0: none */
    int vocab;
    double token_value;
    const char *node;     /* the embedding's name (host memory; the kernel only stores the pointer) */
} kiln_cuda_flags;

/* a fused group of pointwise ops (the fusion pass's program), as fused.cu
 * runs it: a thread per element, its registers in the thread's own */
#define KILN_CUDA_PW_REGS 16
#define KILN_CUDA_PW_INSTR 48
#define KILN_CUDA_PW_IO 8
enum {
    KILN_CUDA_PW_RELU = 1, KILN_CUDA_PW_RELU_BWD, KILN_CUDA_PW_ADD, KILN_CUDA_PW_MUL, KILN_CUDA_PW_MUL_BWD, KILN_CUDA_PW_COPY,
    KILN_CUDA_PW_DROPOUT, KILN_CUDA_PW_AFFINE, KILN_CUDA_PW_SCALE, KILN_CUDA_PW_ERF, KILN_CUDA_PW_ERF_BWD, KILN_CUDA_PW_TANH,
    KILN_CUDA_PW_TANH_BWD, KILN_CUDA_PW_GELU, KILN_CUDA_PW_GELU_BWD
};
typedef struct kiln_cuda_pw {
    uint8_t code, dst, nsrc, acc, src[3], form; /* form: gelu's tanh form */
    uint8_t round;                              /* the value rounded to 16 bits (1 bf16, 2 fp16): a follower */
    float a, b;                                 /* affine's scale and shift; dropout's p and scale */
    uint32_t thr;                               /* dropout: a mask word at or above it keeps */
    uint64_t key;                               /* dropout's RNG key */
} kiln_cuda_pw;
/* KILN_CUDA_PARTS doubles of device memory (2 MiB) for partial sums: a whole-tensor sum's, column sums'
 * (rows.cu, internal/block.h); one launch after another on the compute stream uses them */
#define KILN_CUDA_PARTS 262144
double *kiln_cuda_parts_dev(void);

typedef struct kiln_cuda_prog {
    int ninstr, nin, nout;
    uint8_t out_reg[KILN_CUDA_PW_IO], out_acc[KILN_CUDA_PW_IO];
    uint8_t in_kind[KILN_CUDA_PW_IO], out_kind[KILN_CUDA_PW_IO]; /* 16-bit storage (half storage): kiln_cuda_half_kind */
    const void *in[KILN_CUDA_PW_IO];
    void *out[KILN_CUDA_PW_IO];
    kiln_cuda_pw ins[KILN_CUDA_PW_INSTR];
} kiln_cuda_prog;

#ifndef __cplusplus
#include "backends/internal/backend.h"

extern const kiln_backend kiln_backend_cuda;
extern const kiln_coll_ops kiln_cuda_nccl; /* nccl.c: data parallel over several GPUs */
extern const kiln_kernel kiln_cuda_kernels[KILN_OP_COUNT];

/* cublaslt.c: NULL once cuBLASLt is opened with every function linear.c calls
 * (no GPU needed), else why not */
const char *kiln_cuda_open_blas(void);
/* cuda.c */
kiln_cuda_stream_t kiln_cuda_stream(void);
kiln_cuda_rc *kiln_cuda_rc_dev(void);
kiln_cuda_flags *kiln_cuda_flags_dev(void);
/* 1 when a GPU is usable; else 0 and why in buf */
int kiln_cuda_available(char *why, size_t len);
/* a failed CUDA runtime call as a kiln status naming what was being done */
kiln_status kiln_cuda_check(int err, const char *what);
/* the last launch error, as kiln_cuda_check */
kiln_status kiln_cuda_launched(const char *what);
/* the matmul precision of the plan being prepared: 0 highest (fp32), 1 high (tf32), 2 medium (bf16) */
int kiln_cuda_precision(void);
/* tests: 0 runs every step by its own launch (what graph replay is checked against), 1 captures graphs */
void kiln_cuda_set_graphs(int on);
/* the step's cached graph, if any, is dropped (the step list is being freed) */
void kiln_cuda_release(kiln_step *s);
kiln_status kiln_cuda_readout(const kiln_step *s, const kiln_run_ctx *rc);
/* copy_stream.c: a bound input's bytes to its place in device memory, through the copy stream when large */
kiln_status kiln_cuda_stage(void *dst, const void *host, size_t bytes);
/* tests: large inputs through the copy stream (1, the default) or the compute stream */
void kiln_cuda_set_copy_stream(int on);
/* kernels.c: the error a raised flag stands for (KILN_OK: none raised) */
kiln_status kiln_cuda_flag_error(const kiln_cuda_flags *f);

/* conv.c: cuDNN convolutions, algorithms timed on the real shape at compile */
kiln_status kiln_cuda_conv_prepare(kiln_step *s, kiln_prep *p);
kiln_status kiln_cuda_conv_bwd_prepare(kiln_step *s, kiln_prep *p);
void kiln_cuda_conv_release(kiln_step *s);
int kiln_cuda_conv_describe(const kiln_step *s, char *buf, size_t len, int *weights);
kiln_status kiln_cuda_conv_fwd(const kiln_step *s, const kiln_run_ctx *rc);
kiln_status kiln_cuda_conv_bwd_data(const kiln_step *s, const kiln_run_ctx *rc);
kiln_status kiln_cuda_conv_bwd_weight(const kiln_step *s, const kiln_run_ctx *rc);
size_t kiln_cuda_conv_export(char *buf, size_t len);
kiln_status kiln_cuda_conv_import(const char *text, const char *source, int overwrite);

/* linear.c: cuBLASLt */
kiln_status kiln_cuda_linear_prepare(kiln_step *s, kiln_prep *p);
void kiln_cuda_linear_release(kiln_step *s);
kiln_status kiln_cuda_linear_fwd(const kiln_step *s, const kiln_run_ctx *rc);
kiln_status kiln_cuda_linear_bwd_data(const kiln_step *s, const kiln_run_ctx *rc);
kiln_status kiln_cuda_linear_bwd_weight(const kiln_step *s, const kiln_run_ctx *rc);
/* matmul (x @ w): forward and backward-data run as linear's; its own prepare and backward-weight */
kiln_status kiln_cuda_matmul_prepare(kiln_step *s, kiln_prep *p);
kiln_status kiln_cuda_matmul_bwd_weight(const kiln_step *s, const kiln_run_ctx *rc);
/* how a step's tensor is stored: 0 fp32, 1 bf16, 2 fp16 (the half-storage pass's 16-bit tensors) */
/* a tensor the layout pass stores channels last (KILN_CUDA_LAYOUT=nhwc) */
#define KILN_NHWC(t) ((t).layout == KILN_LAYOUT_NHWC)
static inline int kiln_cuda_half_kind(const kiln_tdesc *t) { return t->dtype == KILN_BF16 ? 1 : t->dtype == KILN_F16 ? 2 : 0; }
/* KILN_CUDA_STORE=half: the kernels offer the half-storage pass their 16-bit slots (kiln_kernel.half) */
int kiln_cuda_store_half(void);
/* KILN_CUDA_LAYOUT=nhwc: the layout pass keeps a 16-bit plan's conv chains channels last (KILN_LAYOUT_NHWC) */
int kiln_cuda_layout_nhwc(void);
/* the backend's passes over a compiled graph, for its kernel table: that layout pass */
kiln_status kiln_cuda_passes(kiln_graph *g, const kiln_compile_opts *o, const kiln_kernel *table);
/* the matmul-class steps' 16-bit slots (kiln_kernel.half): x or dy (input 0); backward-weight's x and dy (its bias
 * gradient sums dy rounded as the product reads it) */
unsigned kiln_cuda_half_in0(int nin, int nout);
unsigned kiln_cuda_half_bwd_weight(int nin, int nout);
/* a forward's x and its output (written rounded under autocast: linear.c) */
unsigned kiln_cuda_half_linear(int nin, int nout);
/* a convolution's output without a bias (conv.c writes what cuDNN rounded, as it is) and backward-data's; batch norm's
 * x (and backward's dy): read widened, for the outputs the half-storage pass stores because their writer rounds them.
 * A convolution's backward reads dy as a 16-bit operand it rounds anyway, so batch norm backward writes its dx so */
unsigned kiln_cuda_half_conv_out(int nin, int nout);
unsigned kiln_cuda_half_conv_bwd_data(int nin, int nout);
unsigned kiln_cuda_half_conv_bwd_weight(int nin, int nout);
unsigned kiln_cuda_half_bn(int nin, int nout);
unsigned kiln_cuda_half_bn_bwd(int nin, int nout);
unsigned kiln_cuda_half_relu_bwd(int nin, int nout);
#endif

/* ---- launchers (pointwise.cu, rows.cu, norm.cu, optim.cu) ---- */
typedef kiln_cuda_stream_t kcs;
void kiln_cuda_relu(kcs st, int64_t n, const float *x, float *y);
/* dy stored as kind dyk (a 16-bit convolution's backward-data output the half-storage pass stores so) */
void kiln_cuda_relu_bwd(kcs st, int64_t n, const void *y, int yk, const void *dy, int dyk, float *dx, int acc);
void kiln_cuda_bias_relu(kcs st, int64_t rows, int64_t ch, int64_t inner, const float *b, int relu, float *y);
/* rk: the sum rounded to 16 bits (1 bf16, 2 fp16; 0 none), where autocast runs the add in its operands' 16 bits;
 * ak, bk, yk: the tensors' kiln_cuda_half_kind, where the half-storage pass stores them in 16 bits */
void kiln_cuda_add(kcs st, int64_t n, const void *a, int ak, const void *b, int bk, void *y, int yk, int rk);
void kiln_cuda_mul(kcs st, int64_t n, const float *a, const float *b, float *y);
void kiln_cuda_mul_bwd(kcs st, int64_t n, const float *dy, const float *other, float *dx, int acc);
/* y stored as kind yk (16 bits only where not accumulated) */
void kiln_cuda_copy(kcs st, int64_t n, const float *x, void *y, int yk, int acc);
void kiln_cuda_copy_strided(kcs st, int ndim, const int64_t *shape, const int64_t *stride, const float *x, void *y, int yk,
                            int acc);
void kiln_cuda_slice_bwd(kcs st, int64_t outer, int64_t dim, int64_t inner, int64_t start, int64_t len, int64_t step,
                         const float *dy, float *dx, int acc);
void kiln_cuda_ones(kcs st, const kiln_cuda_rc *rc, float *y);
void kiln_cuda_fill(kcs st, int64_t n, const float *v, float *y, int acc);
void kiln_cuda_scale_by_norm(kcs st, int64_t n, const double *sumsq, double max_norm, kiln_cuda_flags *f, const kiln_cuda_rc *rc,
                             float *g);
/* the gradient scaler: a run of gradients divided by the scale unless sumsq is not finite; the scale's update */
void kiln_cuda_amp_unscale(kcs st, int64_t n, const double *sumsq, int first, kiln_amp_state *a, float *g);
void kiln_cuda_amp_update(kcs st, kiln_amp_state *a, float growth, float backoff, int64_t interval);
void kiln_cuda_dropout(kcs st, int64_t n, float p, uint64_t key, const kiln_cuda_rc *rc, const float *x, float *y, int acc);
/* pool.cu: max-pooling, dims: h, w, oh, ow, k, stride, pad, c, nhwc (channels last); x and y stored as kinds xk
 * and yk (kiln_cuda_half_kind) */
void kiln_cuda_max_pool(kcs st, int64_t planes, const int64_t *dims, const void *x, int xk, void *y, int yk);
/* arg: workspace of planes * oh * ow int32 (kiln_cuda_max_pool_bwd_workspace bytes): each window's argmax */
size_t kiln_cuda_max_pool_bwd_workspace(int64_t planes, const int64_t *dims);
void kiln_cuda_max_pool_bwd(kcs st, int64_t planes, const int64_t *dims, int relu_mask, const void *x, int xk, const float *dy,
                            float *dx, int acc, int32_t *arg);
/* pool.cu: average pooling (dims: h, w, oh, ow, k, stride, pad, include_pad, adaptive) and the option-A shortcut
 * (dims: n, c, h, w, stride, before, after) */
void kiln_cuda_avg_pool(kcs st, int64_t planes, const int64_t *dims, const void *x, int xk, float *y);
void kiln_cuda_avg_pool_bwd(kcs st, int64_t planes, const int64_t *dims, const float *dy, float *dx, int acc);
void kiln_cuda_subsample_pad(kcs st, const int64_t *dims, const float *x, float *y);
void kiln_cuda_subsample_pad_bwd(kcs st, const int64_t *dims, const float *dy, float *dx, int acc);
void kiln_cuda_sum(kcs st, int64_t n, const float *x, float *y);
void kiln_cuda_sumsq(kcs st, int64_t n, const float *x, double *acc, int add);
/* x stored as kind xk (kiln_cuda_half_kind), each element rounded to kind rk (0: none) before it is summed */
void kiln_cuda_col_sums(kcs st, int64_t rows, int64_t cols, const void *x, int xk, int rk, float *y, int acc);
void kiln_cuda_to_double(kcs st, const float *x, double *y);
void kiln_cuda_log_softmax(kcs st, int64_t rows, int64_t cols, const float *x, float *y);
void kiln_cuda_log_softmax_bwd(kcs st, int64_t rows, int64_t cols, const float *y, const float *dy, float *dx, int acc);
void kiln_cuda_nll(kcs st, int64_t rows, int64_t cols, const float *x, const int32_t *t, kiln_cuda_flags *f, float *loss);
void kiln_cuda_nll_bwd(kcs st, int64_t rows, int64_t cols, const int32_t *t, const float *dloss, float *dx, int acc);
/* ignore: targets of -1 are padding (left out of the mean and the gradient); terms: rows doubles of
 * scratch, count: one */
/* xk: the logits' kiln_cuda_half_kind (a rounded product's output the half-storage pass stores in 16 bits) */
void kiln_cuda_cross_entropy_rows(kcs st, int64_t rows, int64_t cols, const void *x, int xk, const int32_t *t, int ignore,
                                  kiln_cuda_flags *f, double *terms, float *loss);
void kiln_cuda_cross_entropy_bwd(kcs st, int64_t rows, int64_t cols, const void *x, int xk, const int32_t *t, int ignore,
                                 const float *dloss, double *count, void *dx, int dxk, int acc);
/* x (and dy) stored as kind xk (dyk): kiln_cuda_half_kind, the half-storage pass's 16-bit convolution outputs; y
 * rounded to kind rk (0: none; autocast's mark after a 16-bit convolution) and stored as kind yk; dx written as kind
 * dxk (16 bits where only a 16-bit convolution's backward reads it, never accumulated); nhwc: the tensors channels
 * last (KILN_LAYOUT_NHWC: [n, hw, c]) */
void kiln_cuda_batch_norm(kcs st, int64_t n, int64_t c, int64_t hw, int nhwc, const void *x, int xk, const float *w,
                          const float *b, float *rmean, float *rvar, float momentum, float eps, int training, void *y,
                          int yk, int rk, float *smean, float *sinvstd, int64_t *tracked, int relu);
void kiln_cuda_batch_norm_bwd(kcs st, int64_t n, int64_t c, int64_t hw, int nhwc, const void *x, int xk, const void *dy, int dyk,
                              const float *w, const float *mean, const float *invstd, void *dx, int dxk, float *dw, float *db,
                              int acc_dx, int acc_dw, int acc_db);
void kiln_cuda_sgd(kcs st, int64_t n, float *p, const float *g, float *mom, const kiln_cuda_rc *rc, float momentum,
                   float dampening, float weight_decay, int nesterov);
void kiln_cuda_adamw(kcs st, int64_t n, float *p, const float *g, float *m, float *v, const kiln_cuda_rc *rc, float beta1,
                     float beta2, float eps, float weight_decay);
/* layerwise.cu: a run of nseg tensors (seg: offset, numel, decays each, device memory); h: beta1, beta2,
 * eps, weight_decay, momentum, trust; norms: two doubles per tensor, written in phase 0, read in phase 1 */
void kiln_cuda_lamb(kcs st, int phase, int64_t nseg, const int64_t *seg, const float *h, float *p, const float *g, float *m,
                    float *v, double *norms, const kiln_cuda_rc *rc);
void kiln_cuda_lars(kcs st, int phase, int64_t nseg, const int64_t *seg, const float *h, float *p, const float *g, float *buf,
                    double *norms, const kiln_cuda_rc *rc);
void kiln_cuda_novograd(kcs st, int phase, int64_t nseg, const int64_t *seg, const float *h, float *p, const float *g, float *m,
                        float *v, double *norms, const kiln_cuda_rc *rc);
/* flash.cu: the same in tiles through shared memory, heads up to kiln_cuda_flash_max_head() */
int kiln_cuda_flash_max_head(void);
void kiln_cuda_flash(kcs st, int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides, const float *q,
                     const float *k, const float *v, float *y, float *lse);
void kiln_cuda_flash_bwd(kcs st, int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides, const float *q,
                         const float *k, const float *v, const float *y, const float *lse, const float *dy, float *D,
                         float *dq, float *dk, float *dv, int acc_q, int acc_k, int acc_v);
/* backward's D_i = dy_i . y_i for each row and head, into D [b * heads * t] */
void kiln_cuda_flash_rowdot(kcs st, int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides, const float *y,
                            const float *dy, float *D);
/* flash_tc.cu: the same on tensor cores (bf16 or fp16 operands, fp32 accumulation) for heads kiln_cuda_flash_tc_ok takes
 * (a multiple of 16, at most 128); kiln_cuda_flash_tc_setup(d) raises its kernels' shared memory limit for such
 * heads (before any launch or capture: at prepare), 0 or the CUDA error (a GPU with less shared memory a block
 * than the up to 128 KiB it needs: the caller keeps the fp32 tiles) */
int kiln_cuda_flash_tc_ok(int64_t d);
int kiln_cuda_flash_tc_setup(int64_t d, int fp16);
/* fp16: the operands in fp16 (--precision fp16), else bf16; kinds: q's, k's and v's kiln_cuda_half_kind (16 bits
 * where the half-storage pass stores them so: read as they are) */
void kiln_cuda_flash_tc(kcs st, int fp16, int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides,
                        const int *kinds, const void *q, const void *k, const void *v, float *y, float *lse);
void kiln_cuda_flash_tc_bwd(kcs st, int fp16, int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides,
                            const int *kinds, const void *q, const void *k, const void *v, const float *y, const float *lse,
                            const float *dy, float *D, float *dq, float *dk, float *dv, int acc_q, int acc_k, int acc_v);
/* flash_mma.cu: the same heads and arguments, the tiles in registers (mma.sync; FlashAttention-2's scheme), when
 * KILN_CUDA_FLASH=mma; its setup as kiln_cuda_flash_tc_setup (up to 72 KiB a block) */
int kiln_cuda_flash_mma_setup(int64_t d, int fp16);
void kiln_cuda_flash_mma(kcs st, int fp16, int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides,
                         const int *kinds, const void *q, const void *k, const void *v, float *y, float *lse);
void kiln_cuda_flash_mma_bwd(kcs st, int fp16, int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides,
                             const int *kinds, const void *q, const void *k, const void *v, const float *y, const float *lse,
                             const float *dy, float *D, float *dq, float *dk, float *dv, int acc_q, int acc_k, int acc_v);
/* convert.cu: n floats rounded to bf16 (fp16 when fp16) into y (2n bytes, 4-byte aligned) */
void kiln_cuda_to_half(kcs st, int fp16, int64_t n, const float *x, void *y);
/* n 16-bit values of kind (1 bf16, 2 fp16) widened into fp32 x (exact): a rounded product's D (linear.c) */
void kiln_cuda_widen(kcs st, int kind, int64_t n, const void *y, float *x);
/* x [imgs, ch, hw] of kind xk (0 fp32; 16 bits: the half-storage pass's, the same kind) into y [imgs, hw, ch] of
 * kind (1 bf16, 2 fp16), rounded to nearest even: channels last (conv.c's 16-bit copies: images N x C x HW, filters
 * K x C x RS); and back, added to x when acc */
void kiln_cuda_to_nhwc(kcs st, int kind, int64_t imgs, int64_t ch, int64_t hw, const void *x, int xk, void *y);
/* y's kind `kind` into x of kind xk (16 bits only where not accumulated: what cuDNN rounded, stored as it is),
 * relu applied when relu */
void kiln_cuda_from_nhwc(kcs st, int kind, int64_t imgs, int64_t ch, int64_t hw, const void *y, void *x, int xk, int acc, int relu);
/* the layout pass's reorders: x [imgs, ch, hw] of kind xk into y [imgs, hw, ch] of kind yk (to_nhwc), or x [imgs, hw, ch]
 * into y [imgs, ch, hw]; added where acc (then y fp32) */
void kiln_cuda_reorder(kcs st, int to_nhwc, int64_t imgs, int64_t ch, int64_t hw, const void *x, int xk, void *y, int yk,
                       int acc);
/* bmm.cu: y [..., m, n] = a [..., m, k] @ b [..., k, n] over nb batch dims (at most kiln_cuda_bmm_max_batch_dims());
 * a and b through their strides (nb + 2 each), y, dy, da, db contiguous; da or db NULL: not wanted; every operand
 * rounded to kind rk first (1 bf16, 2 fp16: the autocast pass's steps; 0 none) */
int kiln_cuda_bmm_max_batch_dims(void);
void kiln_cuda_bmm(kcs st, int rk, int nb, const int64_t *batch, int64_t m, int64_t k, int64_t n, const int64_t *a_stride,
                   const int64_t *b_stride, const float *a, const float *b, float *y);
void kiln_cuda_bmm_bwd(kcs st, int rk, int nb, const int64_t *batch, int64_t m, int64_t k, int64_t n, const int64_t *a_stride,
                       const int64_t *b_stride, const float *a, const float *b, const float *dy, float *da, float *db,
                       int acc_a, int acc_b);
/* fused.cu: n elements of every tensor of P (passed by value: a captured graph keeps it) */
void kiln_cuda_fused(kcs st, int64_t n, const kiln_cuda_prog *P, const kiln_cuda_rc *rc);

/* transformer.cu */
int kiln_cuda_attention_max_head(void);
/* yk (dxk), xk: the output's and x's kiln_cuda_half_kind, where the half-storage pass stores them in 16 bits */
void kiln_cuda_gelu(kcs st, int64_t n, int tanh_form, const void *x, int xk, void *y, int yk);
void kiln_cuda_gelu_bwd(kcs st, int64_t n, int tanh_form, const void *x, int xk, const float *dy, void *dx, int dxk, int acc);
void kiln_cuda_affine(kcs st, int64_t n, float scale, float shift, const float *x, float *y);
void kiln_cuda_scale(kcs st, int64_t n, float scale, const float *dy, float *dx, int acc);
void kiln_cuda_erf(kcs st, int64_t n, const float *x, float *y);
void kiln_cuda_erf_bwd(kcs st, int64_t n, const float *x, const float *dy, float *dx, int acc);
void kiln_cuda_tanh(kcs st, int64_t n, const float *x, float *y);
void kiln_cuda_tanh_bwd(kcs st, int64_t n, const float *y, const float *dy, float *dx, int acc);
void kiln_cuda_add_bcast(kcs st, int64_t n, int64_t inner, const float *a, const float *b, float *y);
void kiln_cuda_mse(kcs st, int64_t n, const float *x, const float *t, float *loss);
void kiln_cuda_mse_bwd(kcs st, int64_t n, const float *x, const float *t, const float *dloss, int relu_mask, float *dx, int acc);
void kiln_cuda_softmax(kcs st, int64_t rows, int64_t cols, const float *x, float *y);
void kiln_cuda_softmax_bwd(kcs st, int64_t rows, int64_t cols, const float *y, const float *dy, float *dx, int acc);
void kiln_cuda_layer_norm(kcs st, int64_t rows, int64_t C, const float *x, const float *w, const float *b, float eps, void *y,
                          int yk, float *mean, float *rstd);
void kiln_cuda_layer_norm_bwd(kcs st, int64_t rows, int64_t C, const float *x, const float *dy, const float *w,
                              const float *mean, const float *rstd, float *dx, float *dw, float *db, int acc_dx, int acc_dw,
                              int acc_db);
/* idf or idi: the ids as f32 or i32; a bad id is recorded in f (with node) and reads row 0 */
void kiln_cuda_embedding(kcs st, int64_t n, int64_t C, int64_t V, const float *idf, const int32_t *idi, const float *w, float *y,
                         const char *node, kiln_cuda_flags *f);
/* backward: ws holds kiln_cuda_embedding_bwd_workspace(n, V) bytes (the tokens bucketed by id) */
size_t kiln_cuda_embedding_bwd_workspace(int64_t n, int64_t V);
void kiln_cuda_embedding_bwd(kcs st, int64_t n, int64_t C, int64_t V, const float *idf, const int32_t *idi, const float *dy,
                             float *dw, int acc, void *ws);
/* strides: q's, k's, v's and the gradients' batch and row strides (8); D: b*heads*t floats of scratch */
void kiln_cuda_attention(kcs st, int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides, const float *q,
                         const float *k, const float *v, float *y, float *lse);
void kiln_cuda_attention_bwd(kcs st, int64_t b, int64_t t, int64_t c, int64_t heads, const int64_t *strides, const float *q,
                             const float *k, const float *v, const float *y, const float *lse, const float *dy, float *D,
                             float *dq, float *dk, float *dv, int acc_q, int acc_k, int acc_v);
void kiln_cuda_adadelta(kcs st, int64_t n, float *p, const float *g, float *sq, float *acc_delta, const kiln_cuda_rc *rc,
                        float rho, float eps, float weight_decay);

#ifdef __cplusplus
}
#endif
#endif
