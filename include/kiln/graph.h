/* kiln/graph.h — build a model as a graph, compile it once into a plan, step it.
 *
 *     kiln_graph *g = kiln_graph_new();
 *     int64_t xs[] = {KILN_BATCH, 1, 28, 28}, ys[] = {KILN_BATCH};
 *     kiln_value x = kiln_input(g, "x", KILN_F32, 4, xs);
 *     kiln_value y = kiln_input(g, "y", KILN_I32, 1, ys);
 *     kiln_value h = kiln_flatten(g, x, 1);
 *     kiln_value w = kiln_param(g, "fc.weight", 2, (int64_t[]){10, 784}, 784);
 *     kiln_value b = kiln_param(g, "fc.bias", 1, (int64_t[]){10}, 784);
 *     kiln_value loss = kiln_cross_entropy(g, kiln_linear(g, h, w, b), y);
 *     if (kiln_graph_status(g) != KILN_OK) ... kiln_last_error() names the node
 *
 *     kiln_params *P; kiln_params_new(g, KILN_F32, &P); kiln_params_init(P, seed);
 *     kiln_compile_opts o = kiln_compile_defaults(); o.training = 1; o.max_batch = 64;
 *     o.also_batches[0] = 32;                  // the epoch's last, shorter batch
 *     kiln_plan *plan; kiln_compile(g, P, &loss, 1, &o, &plan);
 *     for (...) {
 *         kiln_plan_bind(plan, x, batch.x); kiln_plan_bind(plan, y, batch.y);  // no copy on the cpu
 *         kiln_plan_run(plan, batch.n);        // forward + backward into kiln_params_grad(P)
 *         ... kiln_optim_step (kiln/optim.h): clipping and the update, on the plan's backend ...
 *     }
 *
 * The batch dimension is symbolic (KILN_BATCH): a plan is compiled into one
 * flat list of steps per batch size it will run (max_batch and also_batches),
 * every kernel object made and autotuned at compile; running is iterating the
 * list. Builder calls never fail loudly: the first error is kept
 * (kiln_graph_status) and later calls return -1.
 */
#ifndef KILN_GRAPH_H
#define KILN_GRAPH_H

#include <stdint.h>
#include "kiln/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_BATCH (-1)

typedef int32_t kiln_value; /* a tensor value in a graph; -1 is "none" */
typedef struct kiln_graph kiln_graph;

kiln_graph *kiln_graph_new(void);
void kiln_graph_free(kiln_graph *g);
kiln_status kiln_graph_status(const kiln_graph *g);

kiln_value kiln_input(kiln_graph *g, const char *name, kiln_dtype dtype, int ndim, const int64_t *shape);
/* A trainable float parameter, initialised (kiln_params_init) uniformly in
 * ±1/sqrt(fan_in): PyTorch's default for Linear and Conv2d weights and biases. */
kiln_value kiln_param(kiln_graph *g, const char *name, int ndim, const int64_t *shape, int64_t fan_in);
/* A trainable float parameter initialised to a constant (batch norm: weight 1, bias 0). */
kiln_value kiln_param_fill(kiln_graph *g, const char *name, int ndim, const int64_t *shape, float value);
/* A trainable float parameter drawn from N(0, std^2) (GPT-2's init: std 0.02). */
kiln_value kiln_param_normal(kiln_graph *g, const char *name, int ndim, const int64_t *shape, float std);
/* Non-trainable state (f32 or i64) initialised to a constant, e.g. batch norm's
 * running statistics: saved in checkpoints under its name, updated by training
 * plans, read-only in evaluation plans. */
kiln_value kiln_buffer(kiln_graph *g, const char *name, kiln_dtype dtype, int ndim, const int64_t *shape, double value);

/* x [N,C,H,W], w [K,C,R,S], b [K] or -1 */
kiln_value kiln_conv2d(kiln_graph *g, kiln_value x, kiln_value w, kiln_value b, int64_t stride, int64_t pad);
/* F.conv2d in full: w [K,C/groups,R,S]; dilation spaces the kernel taps; groups
 * split C and K (groups == C: depthwise) */
kiln_value kiln_conv2d_ex(kiln_graph *g, kiln_value x, kiln_value w, kiln_value b, int64_t stride, int64_t pad,
                          int64_t dilation, int64_t groups);
/* x [N,I], w [O,I], b [O] or -1 */
/* x [..., I] (leading dims kept) . w[O, I]^T (+ b[O]): nn.Linear */
kiln_value kiln_linear(kiln_graph *g, kiln_value x, kiln_value w, kiln_value b);
/* x [..., K] . w[K, N] (+ b[N]): HF GPT-2's Conv1D (weights stored [in, out]) */
kiln_value kiln_matmul(kiln_graph *g, kiln_value x, kiln_value w, kiln_value b);
kiln_value kiln_relu(kiln_graph *g, kiln_value x);
kiln_value kiln_max_pool2d(kiln_graph *g, kiln_value x, int64_t kernel, int64_t stride);
/* F.max_pool2d(x, kernel, stride, pad): padding never wins (pad <= kernel / 2) */
kiln_value kiln_max_pool2d_ex(kiln_graph *g, kiln_value x, int64_t kernel, int64_t stride, int64_t pad);
/* F.avg_pool2d(x, kernel, stride, pad, count_include_pad=...) (floor mode, pad <= kernel / 2) */
kiln_value kiln_avg_pool2d(kiln_graph *g, kiln_value x, int64_t kernel, int64_t stride, int64_t pad,
                           int count_include_pad);
/* F.adaptive_avg_pool2d(x, (out_h, out_w)); (1, 1) is the global average pool */
kiln_value kiln_adaptive_avg_pool2d(kiln_graph *g, kiln_value x, int64_t out_h, int64_t out_w);
/* identity when the plan is compiled for inference */
kiln_value kiln_dropout(kiln_graph *g, kiln_value x, float p);
kiln_value kiln_flatten(kiln_graph *g, kiln_value x, int start_dim);
/* shape[0] may be KILN_BATCH */
kiln_value kiln_reshape(kiln_graph *g, kiln_value x, int ndim, const int64_t *shape);
kiln_value kiln_log_softmax(kiln_graph *g, kiln_value x);         /* over the last dim */
kiln_value kiln_nll_loss(kiln_graph *g, kiln_value logp, kiln_value target);        /* mean */
kiln_value kiln_cross_entropy(kiln_graph *g, kiln_value logits, kiln_value target); /* mean */
/* F.cross_entropy(logits, target, ignore_index=-1): targets of -1 (padding) are
 * left out, the mean is over the others (0, with no gradient, when none is left;
 * PyTorch gives NaN there) */
kiln_value kiln_cross_entropy_masked(kiln_graph *g, kiln_value logits, kiln_value target);
kiln_value kiln_mse_loss(kiln_graph *g, kiln_value x, kiln_value target);           /* mean of (x - target)^2, f32 target */
/* same shapes, or b shaped as a's trailing dims and not batched (positions [T,C]
 * added to every [T,C] of [B,T,C]: b's gradient sums over the broadcast dims);
 * a and b may come in either order */
kiln_value kiln_add(kiln_graph *g, kiln_value a, kiln_value b);
kiln_value kiln_mul(kiln_graph *g, kiln_value a, kiln_value b);   /* same shapes */
kiln_value kiln_sum(kiln_graph *g, kiln_value x);                 /* all elements, to a scalar */
/* pointwise arithmetic (each one node; the fusion pass joins chains of them):
 * x * scale + shift, x * a (divide: a = 1/divisor), x + a, erf(x), tanh(x) */
kiln_value kiln_affine(kiln_graph *g, kiln_value x, float scale, float shift);
kiln_value kiln_scale(kiln_graph *g, kiln_value x, float a);
kiln_value kiln_add_scalar(kiln_graph *g, kiln_value x, float a);
kiln_value kiln_erf(kiln_graph *g, kiln_value x);
kiln_value kiln_tanh(kiln_graph *g, kiln_value x);
/* Views share storage: transpose two dims and slice [start, end) along a dim are
 * strided (the batch dimension stays first and whole); an op that needs packed
 * rows gets a copy (kiln_contiguous) inserted in front of it automatically. */
kiln_value kiln_transpose(kiln_graph *g, kiln_value x, int dim0, int dim1);
kiln_value kiln_slice(kiln_graph *g, kiln_value x, int dim, int64_t start, int64_t end);
/* x[start:end:step] along dim (step >= 1): x[:, :, ::2] is (2, 0, H, 2) */
kiln_value kiln_slice_step(kiln_graph *g, kiln_value x, int dim, int64_t start, int64_t end, int64_t step);
/* zeros before and after x along dim (the batch dim excepted): F.pad of one dim,
 * e.g. the channel padding of a ResNet's option-A shortcut */
kiln_value kiln_pad(kiln_graph *g, kiln_value x, int dim, int64_t before, int64_t after);
kiln_value kiln_contiguous(kiln_graph *g, kiln_value x);
/* PyTorch's BatchNorm2d over x [N,C,H,W]: weight, bias [C] parameters; running_mean,
 * running_var [C] f32 buffers and num_batches_tracked [] i64 buffer. Training plans
 * normalise with the batch's statistics and update the buffers (momentum, unbiased
 * running variance); evaluation plans use the running statistics. */
kiln_value kiln_batch_norm2d(kiln_graph *g, kiln_value x, kiln_value weight, kiln_value bias, kiln_value running_mean,
                             kiln_value running_var, kiln_value num_batches_tracked, float momentum, float eps);

/* torch.matmul of tensors of equal rank: a [...,M,K] @ b [...,K,N] over the same leading
 * dims (the batch among them); a and b may be strided views (k transposed) */
kiln_value kiln_bmm(kiln_graph *g, kiln_value a, kiln_value b);
/* Causal multi-head self-attention, nanoGPT's: q, k, v [B,T,C], heads divides C, head h
 * in columns h*D..(h+1)*D (D = C/heads); per head y = softmax(q k^T / sqrt(D), causal) v,
 * y [B,T,C] laid out as q. q, k and v may be column slices of one [B,T,3C] tensor (read
 * in place). The T x T scores are never held (FlashAttention's blocking: docs/attention.md). */
kiln_value kiln_causal_attention(kiln_graph *g, kiln_value q, kiln_value k, kiln_value v, int heads);
/* Transformer ops (docs/transformer-ops.md); x may have 2 to 4 dims, batch first.
 * F.embedding: idx [B,T] (i32, or f32 holding exact integers as the token loader
 * gives), weight [V,C] -> [B,T,C]. An index outside [0,V) fails the step with a
 * message naming the node. The weight's gradient is a deterministic scatter-add. */
kiln_value kiln_embedding(kiln_graph *g, kiln_value idx, kiln_value weight);
/* nn.LayerNorm over the last dim: x [...,C], w and b [C]; PyTorch's eps is 1e-5 */
kiln_value kiln_layer_norm(kiln_graph *g, kiln_value x, kiln_value w, kiln_value b, float eps);
/* F.gelu: tanh_form 0: x * Phi(x) (erf, PyTorch's default); 1: approximate='tanh' (GPT-2's) */
kiln_value kiln_gelu(kiln_graph *g, kiln_value x, int tanh_form);
kiln_value kiln_softmax(kiln_graph *g, kiln_value x);             /* over the last dim */

/* The guide's "disable bias for convolutions directly followed by a batch
 * norm": removes the bias of every conv2d or linear whose output only a batch
 * norm over the same channels reads (directly, or through a view that keeps
 * [N, C] in front). The norm subtracts any per-channel constant, so results do
 * not change beyond rounding, and the bias stops being a parameter: no
 * gradient, no optimizer state, no checkpoint entry. Call it after building
 * and before kiln_params_new. Returns how many were removed, or -1; their
 * names ("conv1.bias,conv2.bias", malloc'd, or NULL when none) in *removed if
 * given. Training compiles warn about each such bias that is left. */
int kiln_graph_fix_bias(kiln_graph *g, char **removed);

/* Block scopes: the nodes built between kiln_graph_block_begin(g, "h.0") and
 * kiln_graph_block_end(g) form one block (a transformer block, a few layers).
 * With checkpoint_activations "block", a training plan keeps only the values
 * that leave a block (its outputs: the next block's input) and recomputes the
 * block's inside from them within backward (torch.utils.checkpoint's
 * segments). Blocks do not nest; errors are the graph's sticky error. */
void kiln_graph_block_begin(kiln_graph *g, const char *name);
void kiln_graph_block_end(kiln_graph *g);
/* Checks a checkpoint_activations value: NULL, "" or "none"; "block"; op names
 * of ops cheap to recompute ("gelu,layernorm": underscores may be left out);
 * or "block" with op names. KILN_ERR_INVALID_ARG naming the bad part and the
 * accepted names otherwise. */
kiln_status kiln_checkpoint_check(const char *spec);

/* shape of a value (shape[0] == KILN_BATCH when batched); returns ndim or -1 */
int kiln_value_shape(const kiln_graph *g, kiln_value v, int64_t *shape);
const char *kiln_value_name(const kiln_graph *g, kiln_value v);
kiln_dtype kiln_value_dtype(const kiln_graph *g, kiln_value v); /* its logical dtype (f32, i32, ...) */

/* ---- parameters: one flat buffer, one flat gradient buffer, named views ---- */
typedef struct kiln_params kiln_params;
/* Parameters (and buffers) in a backend's memory: the cpu backend's f32 host
 * memory, or the ref backend's f64 (reference plans, tests). Host code reads
 * and writes them with kiln_params_read/write (a copy); on the host backends
 * kiln_params_data/grad also give the memory itself. */
kiln_status kiln_params_new_on(const kiln_graph *g, const char *backend, kiln_params **out);
/* the backend by dtype: KILN_F32 cpu, KILN_F64 ref */
kiln_status kiln_params_new(const kiln_graph *g, kiln_dtype dtype, kiln_params **out);
/* The backend a --device choice names: "cpu"; "cuda" (an error saying why when
 * the CUDA backend was not built or no GPU is here); "auto": cuda when it can
 * run, else cpu. */
kiln_status kiln_device_backend(const char *device, const char **backend);
const char *kiln_params_backend(const kiln_params *P);
int kiln_params_host_memory(const kiln_params *P); /* 1: data/grad/buffer pointers are host memory */
/* the whole flat value buffer (kiln_params_total elements of kiln_params_dtype) to or from the host */
kiln_status kiln_params_read(const kiln_params *P, void *host);
kiln_status kiln_params_write(kiln_params *P, const void *host);
kiln_status kiln_params_grad_read(const kiln_params *P, void *host); /* the flat gradients, copied to the host */
/* Host memory the parameters' backend copies from asynchronously (a GPU's
 * page-locked memory, the guide's pin_memory), for the loader's ring; both
 * NULL when plain memory is as good (cpu). */
void kiln_params_host_allocator(const kiln_params *P, void *(**alloc)(size_t), void (**free_fn)(void *));
void kiln_params_free(kiln_params *P);
void kiln_params_init(kiln_params *P, uint64_t seed);
int kiln_params_count(const kiln_params *P);
const char *kiln_params_name(const kiln_params *P, int i);
int kiln_params_find(const kiln_params *P, const char *name); /* -1 if absent */
int kiln_params_shape(const kiln_params *P, int i, int64_t *shape); /* returns ndim */
int64_t kiln_params_offset(const kiln_params *P, int i);         /* elements into the flat buffer */
int64_t kiln_params_numel(const kiln_params *P, int i);
int64_t kiln_params_total(const kiln_params *P);
kiln_dtype kiln_params_dtype(const kiln_params *P);
void *kiln_params_data(kiln_params *P);  /* flat values, in the backend's memory */
void *kiln_params_grad(kiln_params *P);  /* flat gradients, written by backward, in the backend's memory */
/* per parameter: 1 if the last compiled training plan produces its gradient (the optimizer skips the others) */
const uint8_t *kiln_params_has_grad(const kiln_params *P);
/* 1 when parameter i is a bias a batch norm cancels (one kiln_graph_fix_bias would remove): a
 * checkpoint saved without it (a --fix-bias run) loads it as zero, which changes no result */
int kiln_params_cancelled(const kiln_params *P, int i);
/* "a.bias,b.bias": the biases kiln_graph_fix_bias removed from the graph these parameters were
 * made from ("" when none); loading a checkpoint that holds one of them is refused */
const char *kiln_params_removed(const kiln_params *P);
/* changes whenever has_grad is rewritten (a training plan was compiled) */
uint64_t kiln_params_has_grad_version(const kiln_params *P);
/* The contiguous runs of parameters that have a gradient (usually one run:
 * the whole flat buffer), as element offsets and counts, at most `max`;
 * returns how many. Runs cover the padding between views, whose gradients are
 * never written and stay zero. */
int kiln_params_grad_runs(const kiln_params *P, int64_t *offset, int64_t *count, int max);
/* buffers (non-trainable state), each in its own aligned block */
int kiln_params_buffer_count(const kiln_params *P);
const char *kiln_params_buffer_name(const kiln_params *P, int i);
int kiln_params_buffer_shape(const kiln_params *P, int i, int64_t *shape); /* returns ndim */
kiln_dtype kiln_params_buffer_dtype(const kiln_params *P, int i);           /* f32 (f64 in reference params) or i64 */
int64_t kiln_params_buffer_numel(const kiln_params *P, int i);
void *kiln_params_buffer_data(kiln_params *P, int i); /* in the backend's memory */
kiln_status kiln_params_buffer_read(const kiln_params *P, int i, void *host);
kiln_status kiln_params_buffer_write(kiln_params *P, int i, const void *host);
int kiln_params_buffer_find(const kiln_params *P, const char *name);       /* -1 if absent */

/* ---- compile and run ---- */
#define KILN_MAX_EXTRA_BATCHES 3
/* mixed precision (kiln_compile_opts.precision, --precision); fp16: a GPU's tensor cores (the cpu has no fp16
 * kernels; the reference backend rounds operands to fp16), with dynamic loss scaling (kiln_optim_set_grad_scaler) */
typedef enum { KILN_PRECISION_FP32 = 0, KILN_PRECISION_BF16 = 1, KILN_PRECISION_AUTO = 2, KILN_PRECISION_FP16 = 3 } kiln_precision;
/* "fp32", "bf16", "auto", "fp16": 0 and *out, or -1 */
int kiln_precision_parse(const char *s, kiln_precision *out);
const char *kiln_precision_name(int p); /* "fp32", "bf16", "auto", "fp16" ("?" otherwise) */

typedef struct kiln_compile_opts {
    int training;       /* 1: add backward (autodiff from outputs[0], a scalar loss) */
    int64_t max_batch;  /* the plan is sized for this batch and runs it */
    int64_t also_batches[KILN_MAX_EXTRA_BATCHES]; /* smaller batch sizes it will also run (0: none) */
    const char *backend; /* NULL: the parameters' backend; "cpu" (f32), "cuda" (f32 on the GPU, when built) or "ref"
                            (naive double kernels, f64: the test oracle) */
    int reuse_memory;   /* 1 (default): the planner shares arena space by liveness */
    int in_place;       /* 1 (default): backward kernels that can write their gradient over a dying input of its
                           shape do (cpu: relu's and mse's backward, linear's and matmul's backward-data); needs
                           reuse_memory */
    int fuse;           /* 1 (default): the fusion pass folds relu into conv2d/linear */
    int autotune;       /* 1 (default): time each conv algorithm on its real shape, keep the fastest */
    int layout;         /* 1 (default): the layout pass keeps conv chains in oneDNN's blocked layout */
    int fold_bn;        /* 1 (default): inference plans fold each batch norm into the conv2d before it (a small
                           step recomputes the conv's weights and bias every run; the norm's pass is gone) */
    int fuse_residual;  /* 1 (default): inference plans fold an add after a conv2d into it (conv2d_add: a ResNet
                           block's shortcut sum, the conv writing into the shortcut's storage); needs fuse */
    int depth_first;    /* 1 (default): inference plans run chains of convolutions image slice by image slice, each
                           slice through the whole chain on one core while its tensors stay in that core's cache
                           (cpu: kiln's Winograd convolutions, src/backends/cpu/depth_first.c); the same bits */
    int dropout_off;    /* 1: dropout is the identity even in training (golden tests) */
    int sync_bn;        /* training: batch norms take their statistics over every process of a data-parallel job
                           (SyncBatchNorm; the trainer gives the plan its collective); a world of one: the same */
    uint64_t seed;      /* dropout key */
    double memory_budget; /* bytes the arena may take; 0: 90 % of the machine's memory */
    int plan_only;      /* 1: plan the memory (and check the budget) but allocate nothing and make no kernels */
    int profile;        /* 1: time every step of every run (kiln_plan_profile_report) */
    const char *checkpoint_activations; /* training: NULL or "none"; "block" recomputes every block scope's
                           inside within backward; op names ("gelu,layernorm") recompute those nodes' outputs
                           (kiln_checkpoint_check). Results are bit-identical; the arena shrinks. */
    int precision;      /* kiln_precision: matmul-class ops (conv2d, linear, matmul, bmm and their backward) with bf16
                           operands, fp32 accumulation and outputs (the autocast pass); auto: bf16 where the cpu
                           backend measures it faster at compile. Parameters, gradients, optimizer state stay fp32. */
    int matmul_precision; /* GPU matmuls and convolutions: 0 highest (fp32), 1 high (tf32), 2 medium (bf16), as
                             PyTorch's set_float32_matmul_precision; the cpu computes in fp32 always */
    const char *round_outputs_as; /* NULL: the plan's backend's. A backend's name: the autocast steps round the
                             outputs that backend's kernels write in 16 bits (the cuda backend's convolutions), so
                             the ref backend, compiled so, is the oracle for that backend's mixed precision */
} kiln_compile_opts;
kiln_compile_opts kiln_compile_defaults(void);

typedef struct kiln_plan kiln_plan;
kiln_status kiln_compile(kiln_graph *g, kiln_params *P, const kiln_value *outputs, int n_outputs,
                         const kiln_compile_opts *opts, kiln_plan **out);
void kiln_plan_free(kiln_plan *plan);
/* Binds an input to caller memory for the next runs (float or int32 as declared). */
kiln_status kiln_plan_bind(kiln_plan *plan, kiln_value input, const void *data);
/* The step number keys dropout masks: same step, same mask. */
void kiln_plan_set_step(kiln_plan *plan, uint64_t step);
/* Gradient accumulation: with accumulate = 1 the next runs add their parameter
 * gradients to those already held instead of writing them; loss_scale seeds
 * backward (1/N averages N micro-batches as one batch of N times the size). */
void kiln_plan_set_accumulate(kiln_plan *plan, int accumulate, double loss_scale);
/* Sync batch norm (compiled with sync_bn): allreduce sums n doubles in place over
 * the processes of the job, returning 0, or -1 with the message set (the kernels
 * call it, every process in the same order); NULL (the default): a world of one. */
void kiln_plan_set_collective(kiln_plan *plan, int (*allreduce)(void *user, double *buf, int64_t n), void *user);
/* The gradient scaler (kiln/optim.h: kiln_optim_grad_scaler) whose scale multiplies backward's seed; NULL: none. */
void kiln_plan_set_grad_scaler(kiln_plan *plan, const void *scaler);
/* Runs the step list compiled for this batch size (max_batch or one of also_batches). */
kiln_status kiln_plan_run(kiln_plan *plan, int64_t batch);
/* A training plan's forward steps and the loss read-out only: the loss of the batch, no gradient written
 * (kiln gradcheck's finite differences). Batch norm still updates its running statistics. In a plan compiled
 * with reuse_memory = 0, `changed` (NULL: none) names the memory changed since the last run (a parameter):
 * the steps before the first that reads it are not run again, their outputs being what they were. */
kiln_status kiln_plan_run_forward(kiln_plan *plan, int64_t batch, const void *changed, size_t bytes);
/* After a run: a value's data in host memory (float*, or double* in a reference
 * plan). Only outputs are guaranteed to survive the run; others may be overwritten,
 * and may be stored in 16 bits (the half-storage pass, which never marks an output). */
const void *kiln_plan_value(const kiln_plan *plan, kiln_value v);
/* Copies the first n elements (row-major, views gathered) of a value of the last run to dst as float. */
kiln_status kiln_plan_read(const kiln_plan *plan, kiln_value v, float *dst, int64_t n);
double kiln_plan_loss(const kiln_plan *plan); /* outputs[0] (a scalar), read out by the last step of the run */
/* The loss read a step late (the guide: avoid CPU-GPU synchronisation). With late = 1 on a device backend
 * (cuda), kiln_plan_run queues the run's read-out and returns before the device has run it: each run gets a
 * ticket (kiln_plan_ticket after it), and kiln_plan_take_loss(ticket) waits for that run's read-out alone,
 * giving its loss or the error its kernels recorded (a target out of range), so the host can queue the next
 * run first. The last KILN_PLAN_LATE_RUNS runs can be taken (an older untaken one is taken, and waited for,
 * when its slot is needed); kiln_plan_loss takes the last run's. Bound host inputs must stay unchanged until
 * their run's loss is taken (a device may still be copying them). Returns whether late reads are on: 0 on
 * backends that run synchronously (cpu, ref), where nothing changes. */
#define KILN_PLAN_LATE_RUNS 4
int kiln_plan_set_late_loss(kiln_plan *plan, int late);
uint64_t kiln_plan_ticket(const kiln_plan *plan);
kiln_status kiln_plan_take_loss(kiln_plan *plan, uint64_t ticket, double *loss);
/* the plan's backend ("cpu", "ref") */
const char *kiln_plan_backend(const kiln_plan *plan);
/* Arena bytes (activations and gradients) and what they would be without reuse. */
size_t kiln_plan_arena_bytes(const kiln_plan *plan);
size_t kiln_plan_arena_bytes_no_reuse(const kiln_plan *plan);
/* With checkpoint_activations: the arena the same plan needs without it (else the arena), and
 * how many forward nodes are recomputed within backward. */
size_t kiln_plan_arena_bytes_plain(const kiln_plan *plan);
int kiln_plan_recomputed(const kiln_plan *plan);
/* The kernels' shared workspace, beside the arena (oneDNN's operand copies, cuDNN's and its 16-bit copies); the
 * memory budget counts the arena alone. 0 for a plan_only compile (no kernels made). */
size_t kiln_plan_workspace_bytes(const kiln_plan *plan);
/* A readable listing of the compiled steps (one line per kernel call). */
void kiln_plan_describe(const kiln_plan *plan, char *buf, size_t len);
/* What one step of the plan's max_batch list runs, on what (kiln inspect). */
#define KILN_STEP_MAX_ARGS 8
typedef struct kiln_step_arg {
    int ndim;
    int64_t shape[KILN_MAX_DIMS];    /* the batch resolved */
    char layout[16];                 /* "plain" (row-major), or the backend's: "nChw16c"; then " bf16" or " fp16"
                                        where the half-storage pass stores it in 16 bits */
} kiln_step_arg;
typedef struct kiln_step_info {
    const char *name;                /* the node: "layer1.0.conv1", "layer1.0.conv1:bwd_data" */
    const char *op;                  /* "conv2d", "conv2d_bwd_data", "batch_norm2d", ... */
    const char *phase;               /* "forward", "backward" (made by autodiff) or "other" (the loss read-out) */
    int nin, nout;
    kiln_step_arg in[KILN_STEP_MAX_ARGS], out[KILN_STEP_MAX_ARGS];
    char attrs[128];                 /* "stride=2 pad=1 dilation=1 groups=1" */
    const char *epilogue;            /* "" or the op folded in: "relu", "relu_bwd_mask" */
    const char *precision;           /* "fp32", or "bf16" for a matmul-class step with bf16 operands (--precision) */
    char kernel[128];                /* the backend's choice when it has several ("direct/nChw16c/jit:avx512_core"),
                                        then ", depth-first by N" in a depth-first segment (N images a slice); "" */
    int reorders;                    /* activations its kernel converts to or from its own layout on every run */
    int weight_reorders;             /* weights (or their gradients) likewise */
    double flops;                    /* 2 x multiply-adds: conv2d, linear and their backward steps; else 0 */
} kiln_step_info;
int kiln_plan_step_count(const kiln_plan *plan);
kiln_status kiln_plan_step_info(const kiln_plan *plan, int i, kiln_step_info *out);
/* the sum of the steps' flops: the conv and linear work of one run */
double kiln_plan_flops(const kiln_plan *plan);
/* Per-step timing of every run (off unless compiled with profile = 1, or
 * switched on here for a while: on starts afresh, off stops and keeps the
 * figures), and a readable report of it. */
void kiln_plan_set_profile(kiln_plan *plan, int on);
void kiln_plan_profile_report(const kiln_plan *plan, char *buf, size_t len);
/* The k most expensive kernels so far: names and mean ms per run, most expensive first; returns how many. */
int kiln_plan_profile_top(const kiln_plan *plan, int k, const char **names, double *ms);
/* the same as step indices (kiln_plan_step_info) */
int kiln_plan_profile_top_steps(const kiln_plan *plan, int k, int *steps, double *ms);
/* the mean ms per run of the forward steps and of the backward ones (recomputations included) */
void kiln_plan_profile_phases(const kiln_plan *plan, double *fwd_ms, double *bwd_ms);
/* Anomaly detection (--detect-anomaly, docs/debugging.md): with on, every run checks each step's float outputs
 * for NaN/Inf after the step; the first found fails the run with KILN_ERR_NUMERIC naming the node, its phase,
 * the output and the inputs already non-finite. Host-memory backends only (else an error, nothing changes). */
kiln_status kiln_plan_set_detect_anomaly(kiln_plan *plan, int on);
double kiln_plan_anomaly_seconds(const kiln_plan *plan); /* spent checking since switched on */
/* Sum over steps of the mean ms per run, and the number of timed runs. */
double kiln_plan_profile_total_ms(const kiln_plan *plan, int64_t *runs);

/* A backend's opaque state, e.g. the cpu backend's autotune decisions: text
 * kept in checkpoints so a resumed run makes the same kernel choices. */
size_t kiln_backend_state_export(const char *backend, char *buf, size_t len);
kiln_status kiln_backend_state_import(const char *backend, const char *text, const char *source);

#ifdef __cplusplus
}
#endif
#endif
