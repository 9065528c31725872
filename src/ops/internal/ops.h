/* The op table: everything kiln knows about an op, in one entry per op.
 *
 * An entry (kiln_op_def) gives the op's name, how many inputs and outputs it
 * has (outputs include tensors saved for backward), its typed attributes,
 * shape and dtype inference, its backward rule (which backward nodes it adds),
 * how it behaves in training and in evaluation, which layouts it tolerates,
 * and whether it is pointwise or a view. Kernels are per backend: each backend
 * folder holds a table indexed by the same op ids (src/backends/<b>/kernels.c),
 * so a new backend never edits an op, and a new op adds one line per backend.
 *
 * Ops live in files by family (src/ops/conv.c, pool.c, pointwise.c, loss.c,
 * view.c, norm.c, update.c); src/ops/table.c gathers them, its size checked at
 * compile time. Passes, autodiff and the planner ask the table; nothing else
 * switches over op kinds. See docs/adding-an-op.md. */
#ifndef KILN_OPS_INTERNAL_H
#define KILN_OPS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/graph.h"

typedef enum kiln_op {
    /* forward ops (graph builder) */
    KILN_OP_CONV2D, KILN_OP_LINEAR, KILN_OP_RELU, KILN_OP_MAX_POOL2D, KILN_OP_DROPOUT,
    KILN_OP_RESHAPE, KILN_OP_LOG_SOFTMAX, KILN_OP_NLL_LOSS, KILN_OP_CROSS_ENTROPY, KILN_OP_ADD, KILN_OP_MUL,
    KILN_OP_TRANSPOSE, KILN_OP_SLICE, KILN_OP_CONTIGUOUS, KILN_OP_SUM, KILN_OP_BATCH_NORM2D,
    KILN_OP_AVG_POOL2D, KILN_OP_ADAPTIVE_AVG_POOL2D, KILN_OP_PAD,
    KILN_OP_MATMUL,            /* x[...,K] @ w[K,N] (+ b) */
    KILN_OP_BMM,               /* in: a [...,M,K], b [...,K,N] (strided views allowed)   out: y [...,M,N] */
    KILN_OP_CAUSAL_ATTENTION,  /* in: q, k, v [B,T,C] (strided views allowed)   out: y [B,T,C], lse [B,heads,T] (saved) */
    /* transformer ops (docs/transformer-ops.md) */
    KILN_OP_EMBEDDING,         /* in: idx (f32 exact integers or i32), weight [V,C]   out: y [..., C] */
    KILN_OP_LAYER_NORM,        /* in: x [..., C], w, b [C]   out: y, and saved for backward: mean, rstd [...] */
    KILN_OP_GELU,              /* attr gelu.tanh_form */
    KILN_OP_SOFTMAX,           /* over the last dim */
    KILN_OP_ADD_BCAST,         /* in: a [..., S], b [S] (b's shape = a's trailing dims, b not batched) */
    KILN_OP_MSE_LOSS,          /* mean((x - target)^2), x and target f32 of one shape */
    KILN_OP_AFFINE, KILN_OP_ERF, KILN_OP_TANH, /* pointwise: y = x*scale + shift, erf(x), tanh(x) */
    /* added by the fold pass (inference plans) */
    KILN_OP_BN_FOLD,           /* in: w, gamma, beta, mean, var, b?   out: w', b' (batch norm folded into w, b) */
    /* added by the option-A shortcut pass (src/graph/pass_subsample_pad.c) */
    KILN_OP_SUBSAMPLE_PAD,     /* in: x [N,C,H,W]   out: x[:, :, ::s, ::s] with zero channels around */
    /* added by the residual fusion pass (inference plans) */
    KILN_OP_CONV2D_ADD,        /* in: x, w, b, r   out: y = conv2d(x, w, b) + r (in r's storage when r dies there) */
    /* added by the pointwise fusion pass */
    KILN_OP_FUSED,             /* a group of pointwise nodes as one kernel: attr.fused is its program */
    KILN_OP_FUSED_PLAIN,       /* the same, holding an op tied to row-major order (dropout's mask) */
    /* added by autodiff */
    KILN_OP_ONES,              /* out = loss scale (the seed d(loss)) */
    KILN_OP_CONV2D_BWD_DATA,   /* in: dy, w            out: dx */
    KILN_OP_CONV2D_BWD_WEIGHT, /* in: x, dy            out: dw, db? */
    KILN_OP_LINEAR_BWD_DATA, KILN_OP_LINEAR_BWD_WEIGHT,
    KILN_OP_MATMUL_BWD_DATA, KILN_OP_MATMUL_BWD_WEIGHT,
    KILN_OP_RELU_BWD,          /* in: y, dy */
    KILN_OP_MAX_POOL2D_BWD,    /* in: x, dy */
    KILN_OP_DROPOUT_BWD,       /* in: dy */
    KILN_OP_LOG_SOFTMAX_BWD,   /* in: y, dy */
    KILN_OP_NLL_LOSS_BWD,      /* in: target, dloss */
    KILN_OP_CROSS_ENTROPY_BWD, /* in: logits, target, dloss */
    KILN_OP_MSE_LOSS_BWD,      /* in: x, target, dloss  out: dx */
    KILN_OP_GRAD_COPY,         /* in: dy (may be a strided view)  out: dx (dx =|+= dy), same shape */
    KILN_OP_MUL_BWD,           /* in: dy, other        out: da */
    KILN_OP_SLICE_BWD,         /* in: dy               out: dx (zero outside the slice; pad's forward too) */
    KILN_OP_SUM_BWD,           /* in: dy (scalar)      out: dx (dy everywhere) */
    KILN_OP_BATCH_NORM2D_BWD,  /* in: x, dy, w, mean, invstd   out: dx?, dw?, db? */
    KILN_OP_AVG_POOL2D_BWD,    /* in: dy               out: dx (both average poolings) */
    KILN_OP_BMM_BWD,           /* in: a, b, dy         out: da?, db? */
    KILN_OP_CAUSAL_ATTENTION_BWD, /* in: q, k, v, y, lse, dy   out: dq?, dk?, dv? (recomputed block by block) */
    KILN_OP_EMBEDDING_BWD,     /* in: idx, dy          out: dweight (scatter-add, deterministic) */
    KILN_OP_LAYER_NORM_BWD,    /* in: x, dy, w, mean, rstd   out: dx?, dw?, db? */
    KILN_OP_GELU_BWD,          /* in: x, dy            out: dx */
    KILN_OP_SOFTMAX_BWD,       /* in: y, dy            out: dx */
    KILN_OP_ADD_BCAST_BWD,     /* in: dy [..., S]      out: db [S] (dy summed over the broadcast dims) */
    KILN_OP_AFFINE_BWD,        /* in: dy               out: dx = scale * dy */
    KILN_OP_ERF_BWD,           /* in: x, dy            out: dx = dy * 2/sqrt(pi) * exp(-x^2) */
    KILN_OP_TANH_BWD,          /* in: y, dy            out: dx = dy * (1 - y^2) */
    KILN_OP_SUBSAMPLE_PAD_BWD, /* in: dy               out: dx (dy's middle channels on every s-th pixel) */
    /* steps outside the graph: the loss read-out, clipping, optimizer updates */
    KILN_OP_READOUT,           /* in: a scalar         out: a host f64 */
    KILN_OP_SUMSQ,             /* in: a gradient run   out: f64 accumulator (acc adds) */
    KILN_OP_CLIP_SCALE,        /* in: f64 sum of squares   out: a gradient run, scaled in place */
    KILN_OP_SGD_UPDATE,        /* in: grad, tensors?   out: param, momentum? (in place) */
    KILN_OP_ADAMW_UPDATE,      /* in: grad, tensors?   out: param, exp_avg, exp_avg_sq */
    KILN_OP_ADADELTA_UPDATE,   /* in: grad, tensors?   out: param, square_avg, acc_delta */
    /* layer-wise updates, two steps per run (attr phase 0: the tensors' norms, 1: the update);
     * in: grad, tensors (i64 triples: offset, numel, decays)   out: param, state..., f64 norms (2 per tensor) */
    KILN_OP_LAMB_UPDATE,       /* out: param, exp_avg, exp_avg_sq, norms */
    KILN_OP_LARS_UPDATE,       /* out: param, momentum_buffer, norms */
    KILN_OP_NOVOGRAD_UPDATE,   /* out: param, exp_avg, exp_avg_sq (one per tensor), norms */
    /* the gradient scaler (dynamic loss scaling): state is a kiln_amp_state (backends/internal/amp_state.h) */
    KILN_OP_AMP_UNSCALE,       /* in: f64 sum of squares of the scaled gradients   out: a gradient run, state */
    KILN_OP_AMP_UPDATE,        /* out: state (the scale grows, or backs off after a non-finite step) */
    KILN_OP_COUNT
} kiln_op;

#define KILN_OP_MAX_IN 8
#define KILN_OP_MAX_OUT 8 /* a fused group of pointwise ops may keep several values for backward */

/* ---- typed attributes: one struct per op family, one union for the node ---- */
typedef struct { int64_t stride, pad, dilation, groups; } kiln_conv_attrs;
typedef struct { int64_t kernel, stride, pad; } kiln_pool_attrs;
/* both average poolings: kernel/stride/pad/count_include_pad (avg_pool2d) or out_h/out_w (adaptive) */
typedef struct { int64_t kernel, stride, pad, out_h, out_w; int count_include_pad, adaptive; } kiln_avg_pool_attrs;
/* zeros `before` and `after` the input along dim (F.pad of one dim) */
typedef struct { int dim; int64_t before, after; } kiln_pad_attrs;
typedef struct { float p; } kiln_dropout_attrs;
typedef struct { int ndim; int64_t shape[KILN_MAX_DIMS]; } kiln_reshape_attrs; /* shape[0] may be KILN_BATCH */
typedef struct { int dim0, dim1; } kiln_transpose_attrs;
typedef struct { int dim; int64_t start, end, step; } kiln_slice_attrs; /* x[start:end:step] along dim */
/* momentum 0.1 and eps 1e-5 are PyTorch's; training is set at compile */
typedef struct { float momentum, eps; int training, sync; } kiln_bn_attrs; /* sync: statistics over every process */
typedef struct { float eps; } kiln_ln_attrs;       /* layer norm: PyTorch's default eps 1e-5 */
typedef struct { int tanh_form; } kiln_gelu_attrs; /* 0: x * Phi(x) (erf), 1: GPT-2's tanh approximation */
typedef struct { double max_norm; } kiln_clip_attrs;
typedef struct { int64_t heads; } kiln_attn_attrs; /* causal self-attention: C split into heads of C/heads */
typedef struct { float momentum, dampening, weight_decay; int nesterov; } kiln_sgd_attrs;
typedef struct { float beta1, beta2, eps, weight_decay; } kiln_adamw_attrs;
typedef struct { float rho, eps, weight_decay; } kiln_adadelta_attrs;
/* LAMB and NovoGrad use beta1, beta2, eps; LARS momentum and trust (its eta) */
typedef struct { float beta1, beta2, eps, weight_decay, momentum, trust; int phase; } kiln_layerwise_attrs;
typedef struct { float scale, shift; } kiln_affine_attrs;
/* amp_unscale: first 1 on the first run's step (it records found_inf); amp_update: GradScaler's factors */
typedef struct { float growth, backoff; int64_t interval; int first; } kiln_amp_attrs; /* y = x * scale + shift */
/* cross_entropy: ignore 1 skips targets of -1 (F.cross_entropy's ignore_index=-1, padding): the mean is over the rest */
typedef struct { int ignore; } kiln_loss_attrs;
typedef struct { int64_t stride, before, after; } kiln_subsample_attrs; /* subsample_pad: x[:, :, ::stride, ::stride], channels padded */
struct kiln_fused_prog;
typedef union kiln_attrs {
    kiln_conv_attrs conv;
    kiln_pool_attrs pool;
    kiln_avg_pool_attrs avg_pool;
    kiln_pad_attrs pad;
    kiln_dropout_attrs dropout;
    kiln_reshape_attrs reshape;
    kiln_transpose_attrs transpose;
    kiln_slice_attrs slice;
    kiln_bn_attrs bn;
    kiln_ln_attrs ln;
    kiln_gelu_attrs gelu;
    kiln_clip_attrs clip;
    kiln_attn_attrs attn;
    kiln_sgd_attrs sgd;
    kiln_adamw_attrs adamw;
    kiln_adadelta_attrs adadelta;
    kiln_layerwise_attrs layerwise;
    kiln_affine_attrs affine;
    kiln_amp_attrs amp;
    kiln_loss_attrs loss;
    kiln_subsample_attrs subsample;
    const struct kiln_fused_prog *fused; /* owned by the graph (kiln_graph.fused) */
} kiln_attrs;

typedef enum { KILN_ATTR_I64, KILN_ATTR_INT, KILN_ATTR_F32, KILN_ATTR_F64, KILN_ATTR_FUSED } kiln_attr_type;
typedef struct kiln_attr_spec {
    const char *name;
    kiln_attr_type type;
    size_t offset; /* into kiln_attrs */
} kiln_attr_spec;
#define KILN_ATTR(nm, ty, member) {nm, ty, offsetof(kiln_attrs, member)}

/* ---- the pointwise fusion pass's program (src/graph/pass_fuse_pointwise.c) ----
 * A fused node runs its members' ops over tiles of the tensors: registers are
 * tiles; registers 0..nin-1 are the node's inputs, read in place; each output
 * has a register of its own (out_reg), the others are scratch reused as values
 * die. An instruction is one member op (or an add that folds a member's
 * accumulating write into a register already written in the group). */
#define KILN_FUSED_MAX_INSTR 48
#define KILN_FUSED_MAX_REGS 16
typedef struct kiln_pw_instr {
    int op;                     /* a kiln_op with a tile function in the backend's table */
    uint8_t dst, nsrc, src[3];
    uint8_t acc;                /* add into dst (a member adding to a gradient the group already wrote) */
    uint8_t round;              /* the plan's 16-bit precision (kiln_precision) the member's value is rounded to: a
                                   member that follows autocast (kiln_pass_autocast_follow); 0: none */
    kiln_attrs attr;            /* the member's attributes */
    uint64_t key;               /* random ops: the member's RNG key (dropout: the same mask fused or not) */
} kiln_pw_instr;
typedef struct kiln_fused_prog {
    int ninstr, nregs, nin, nout;
    uint8_t out_reg[KILN_OP_MAX_OUT];
    uint8_t out_round;          /* outputs (bit k) holding 16-bit numbers: written by a member that rounds */
    kiln_pw_instr ins[KILN_FUSED_MAX_INSTR];
    char holds[480];            /* the member nodes' names, for kiln inspect */
} kiln_fused_prog;

/* how an op follows autocast on a backend (kiln_kernel.autocast_follows, src/graph/pass_autocast.c): in its
 * input 0's 16 bits, or only where every input is 16-bit */
enum { KILN_FOLLOW_NONE = 0, KILN_FOLLOW_IN0 = 1, KILN_FOLLOW_ALL = 2 };
/* in kiln_kernel.round_out beside the outputs' bits: the channel bias is added before the rounding (the cuda
 * backend's cuBLASLt epilogue), so the output holds 16-bit numbers with a bias too (kiln_node_holds_16) */
#define KILN_ROUND_BIAS_IN (1u << 16)

/* epilogues: a following op folded into a node by the fusion pass */
enum {
    KILN_EPI_NONE = 0,
    KILN_EPI_RELU = 1,          /* y = relu(op(...)) */
    KILN_EPI_RELU_BWD_MASK = 2, /* a backward that also applies relu's backward (max-pool) */
    KILN_EPI_ADD_RELU = 4,      /* y = relu(op(...) + residual): batch norm's residual add, the residual its input 6 */
};

/* op flags */
enum {
    KILN_OPF_VIEW = 1 << 0,        /* no kernel: output 0 shares input 0's storage */
    KILN_OPF_POINTWISE = 1 << 1,   /* out[i] depends on in[*][i] only (the fusion pass's material) */
    KILN_OPF_ELEMENTWISE_LAYOUT = 1 << 2, /* works on any storage layout when all operands share it */
    KILN_OPF_STEP_ONLY = 1 << 3,   /* not a graph node: read-out, clipping, optimizer steps */
    KILN_OPF_RANDOM = 1 << 4,      /* draws from the counter-based RNG (its step gets a key) */
    KILN_OPF_LOSS = 1 << 5,        /* checks integer targets against the class count */
    KILN_OPF_LAYER = 1 << 6,       /* named after its weight: input 1 'conv2.weight' names the node 'conv2' */
    /* input 2 (optional) is a bias added to each channel (dim 1) of output 0, and
     * input 1 (the weight) is a stack of per-channel filters along its dim 0:
     * scaling filter k scales channel k (conv2d, linear) */
    KILN_OPF_CHANNEL_BIAS = 1 << 7,
    /* batch norm's contract: normalises input 0 per channel (dim 1) with inputs
     * weight, bias, running_mean, running_var (1-4) and attr.bn; in training the
     * batch's mean takes away any per-channel constant added to input 0 */
    KILN_OPF_CHANNEL_NORM = 1 << 8,
    /* cheap to recompute for the memory its output takes (the guide's activation
     * checkpointing advice: activations, pointwise ops, normalisation, dropout
     * masks, down-sampling): --checkpoint-activations may name it */
    KILN_OPF_RECOMPUTE = 1 << 9,
};

/* shape inference: reads in[] and attr, fills the output specs */
typedef struct kiln_out_spec {
    kiln_dtype dtype;
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    int batched;
    /* views (KILN_OPF_VIEW): strides and offset into input 0's root; stride[0]
     * == 0 means contiguous */
    int64_t stride[KILN_MAX_DIMS];
    int64_t offset;
} kiln_out_spec;

typedef struct kiln_infer {
    kiln_graph *g;
    kiln_op op;
    int node;                        /* the id the node will get (for messages) */
    int nin;
    const struct kiln_val *in[KILN_OP_MAX_IN];
    const kiln_attrs *attr;
    int nout;
    kiln_out_spec out[KILN_OP_MAX_OUT];
} kiln_infer;

/* Sets the graph's sticky error as "<op>#<node>: <message>" and returns -1. */
int kiln_infer_fail(kiln_infer *ix, kiln_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "[64, 1, 28, 28]" of a value (into a buffer of 96 bytes) */
const char *kiln_infer_shape(const struct kiln_val *v, char *buf);

/* ---- autodiff's side of a backward rule (src/graph/autodiff.c) ---- */
struct kiln_node;
struct kiln_val;
typedef struct kiln_ad kiln_ad;
/* dL/dv is wanted: v depends on a parameter */
int kiln_ad_needs(const kiln_ad *ad, kiln_value v);
/* a value of the graph (valid until the next node or value is added) */
const struct kiln_val *kiln_ad_value(const kiln_ad *ad, kiln_value v);
/* the gradient flowing into output k of the forward node being differentiated, or -1 */
kiln_value kiln_ad_dout(const kiln_ad *ad, int k);
/* t[k] = f's input k when dL/d(input k) is wanted, else -1, for k < n: the targets of one
 * backward node writing several gradients; returns how many are wanted */
int kiln_ad_targets(const kiln_ad *ad, const struct kiln_node *f, int n, kiln_value *t);
/* Adds backward node `op` for the forward node being differentiated: inputs
 * in[], outputs the gradients of targets[] (a target of -1 leaves its slot
 * empty). The first contribution to a gradient creates and writes it, later
 * ones add (the grad = None rule). Copies the forward node's attributes.
 * Returns the node id, or -1. */
int kiln_ad_emit(kiln_ad *ad, kiln_op op, const kiln_value *in, int nin, const kiln_value *targets, int ntargets);
/* conv2d's and linear's rule: backward-data for x, backward-weight for w and b (weighted.c) */
int kiln_ops_weighted_backward(kiln_ad *ad, const struct kiln_node *f, kiln_op bwd_data, kiln_op bwd_weight,
                               int weight_first);
/* their flops: each output element is one filter's dot product; each backward node costs its forward's */
double kiln_ops_weighted_flops(const kiln_graph *g, const struct kiln_node *n, int64_t batch);
/* View op `op` (reshape, transpose, ...) applied to v, e.g. to an incoming
 * gradient: for view ops' backward rules. Returns the view or -1. */
kiln_value kiln_ad_view(kiln_ad *ad, kiln_op op, kiln_value v, const kiln_attrs *attr);
/* Passes gradient view `dview` (shaped like x) on to x: when it is x's only
 * contribution, x's gradient *is* the view (no copy); otherwise a GRAD_COPY. */
int kiln_ad_flow(kiln_ad *ad, kiln_value dview, kiln_value x);

typedef struct kiln_op_def {
    const char *name;
    int min_in, max_in;              /* inputs (optional trailing ones, e.g. a bias) */
    int nout;                        /* outputs made by the builder (0 for backward and step-only ops) */
    unsigned flags;                  /* KILN_OPF_* */
    unsigned strided_in;             /* bit k: input k may be a strided (non-contiguous) view */
    unsigned epilogues;              /* KILN_EPI_* this op can absorb */
    unsigned as_epilogue;            /* KILN_EPI_* this op becomes when folded into its producer */
    const kiln_attr_spec *attrs;     /* the attribute schema (for listings), NULL-name terminated */
    int (*infer)(kiln_infer *ix);    /* forward ops: validate inputs, fill out[]; 0 or -1 */
    /* NULL: nothing flows back. f is a copy of the forward node: adding nodes moves the graph's arrays */
    int (*backward)(kiln_ad *ad, const struct kiln_node *f);
    /* training or evaluation (o->training, o->dropout_off, o->sync_bn): e.g. dropout becomes a view, batch norm
     * uses running statistics, or in training (sync_bn) the statistics of every process */
    void (*specialize)(kiln_graph *g, int node, const kiln_compile_opts *o);
    /* the arithmetic of one call of node n at this batch, as 2 x multiply-adds (kiln inspect, bench step);
     * NULL: not counted (only conv2d, linear and their backward ops are) */
    double (*flops)(const kiln_graph *g, const struct kiln_node *n, int64_t batch);
    /* mixed precision (the autocast pass, --precision bf16|auto): bit k when input k becomes a bf16 operand
     * (fp32 accumulation, fp32 outputs); 0: the op always computes in fp32. Matmul-class ops only. */
    unsigned bf16_in;
} kiln_op_def;

const kiln_op_def *kiln_op_get(kiln_op op);
const char *kiln_op_name(kiln_op op);
/* the op's attribute values as "stride=1 pad=0" */
void kiln_op_format_attrs(kiln_op op, const kiln_attrs *a, char *buf, size_t len);

/* the family files' entries, gathered by table.c */
extern const kiln_op_def kiln_op_conv2d, kiln_op_conv2d_bwd_data, kiln_op_conv2d_bwd_weight, kiln_op_conv2d_add;
extern const kiln_op_def kiln_op_linear, kiln_op_linear_bwd_data, kiln_op_linear_bwd_weight;
extern const kiln_op_def kiln_op_matmul, kiln_op_matmul_bwd_data, kiln_op_matmul_bwd_weight;
extern const kiln_op_def kiln_op_max_pool2d, kiln_op_max_pool2d_bwd;
extern const kiln_op_def kiln_op_avg_pool2d, kiln_op_adaptive_avg_pool2d, kiln_op_avg_pool2d_bwd, kiln_op_pad;
extern const kiln_op_def kiln_op_relu, kiln_op_relu_bwd, kiln_op_add, kiln_op_mul, kiln_op_mul_bwd, kiln_op_grad_copy,
    kiln_op_ones, kiln_op_dropout, kiln_op_dropout_bwd, kiln_op_sum, kiln_op_sum_bwd;
extern const kiln_op_def kiln_op_log_softmax, kiln_op_log_softmax_bwd, kiln_op_nll_loss, kiln_op_nll_loss_bwd,
    kiln_op_cross_entropy, kiln_op_cross_entropy_bwd, kiln_op_mse_loss, kiln_op_mse_loss_bwd;
extern const kiln_op_def kiln_op_reshape, kiln_op_transpose, kiln_op_slice, kiln_op_slice_bwd, kiln_op_contiguous;
extern const kiln_op_def kiln_op_batch_norm2d, kiln_op_batch_norm2d_bwd, kiln_op_bn_fold;
extern const kiln_op_def kiln_op_subsample_pad, kiln_op_subsample_pad_bwd;
extern const kiln_op_def kiln_op_bmm, kiln_op_bmm_bwd, kiln_op_causal_attention, kiln_op_causal_attention_bwd;
extern const kiln_op_def kiln_op_embedding, kiln_op_embedding_bwd, kiln_op_layer_norm, kiln_op_layer_norm_bwd,
    kiln_op_gelu, kiln_op_gelu_bwd, kiln_op_softmax, kiln_op_softmax_bwd, kiln_op_add_bcast, kiln_op_add_bcast_bwd;
extern const kiln_op_def kiln_op_affine, kiln_op_affine_bwd, kiln_op_erf, kiln_op_erf_bwd, kiln_op_tanh, kiln_op_tanh_bwd,
    kiln_op_fused, kiln_op_fused_plain;
extern const kiln_op_def kiln_op_readout, kiln_op_sumsq, kiln_op_clip_scale, kiln_op_sgd_update,
    kiln_op_adamw_update, kiln_op_adadelta_update;
extern const kiln_op_def kiln_op_lamb_update, kiln_op_lars_update, kiln_op_novograd_update;
extern const kiln_op_def kiln_op_amp_unscale, kiln_op_amp_update;

/* a backend's 16-bit slots for an op's node of nin inputs and nout outputs (inputs bit k, outputs bit 8 + k):
 * kiln_kernel.half, read by the half-storage pass */
typedef unsigned (*kiln_half_slots_fn)(int nin, int nout);

#endif
