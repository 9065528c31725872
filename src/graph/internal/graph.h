/* The graph as the compiler sees it: values and nodes in creation order (a
 * valid topological order, since a node can only use values that exist).
 * What each node *means* is its op's entry in the op table (src/ops/); this
 * header holds only the data. */
#ifndef KILN_GRAPH_INTERNAL_H
#define KILN_GRAPH_INTERNAL_H

#include "kiln/graph.h"
#include "ops/internal/ops.h"

typedef enum {
    KILN_VAL_ACT,        /* an activation or gradient: lives in the plan's arena */
    KILN_VAL_INPUT,      /* bound by the caller each run (images, labels) */
    KILN_VAL_PARAM,      /* trainable: a view of the flat parameter buffer */
    KILN_VAL_PARAM_GRAD, /* its gradient: a view of the flat gradient buffer */
    KILN_VAL_BUFFER,     /* non-trainable state (batch norm's running statistics): saved, updated in training */
} kiln_val_kind;

/* parameter initialisation */
typedef enum { KILN_INIT_UNIFORM_FAN_IN, KILN_INIT_CONST, KILN_INIT_NORMAL } kiln_init_kind;

typedef struct kiln_val {
    char name[64];
    kiln_dtype dtype;             /* logical dtype: f32 (a backend may hold it as f64), i32, i64 */
    int ndim;
    int64_t shape[KILN_MAX_DIMS]; /* shape[0] == KILN_BATCH when batched */
    int batched;                  /* 1: shape[0] is the symbolic batch */
    kiln_val_kind kind;
    int param;                    /* index of the parameter (PARAM, PARAM_GRAD) or buffer (BUFFER), else -1 */
    /* views: a value sharing another's storage. Strides are in elements and
     * static (the batch dimension stays outermost, so no stride depends on it);
     * offset is in elements from the root's start. Roots are contiguous. */
    kiln_value alias_of;          /* -1 for a root */
    int64_t stride[KILN_MAX_DIMS];
    int64_t offset;
    kiln_init_kind init;          /* params and buffers */
    double init_value;            /* KILN_INIT_CONST; the standard deviation for KILN_INIT_NORMAL */
    int64_t fan_in;               /* KILN_INIT_UNIFORM_FAN_IN: bound 1/sqrt(fan_in) */
    kiln_value grad_of;           /* gradients: the value this is d(loss)/d(...) of, else -1 */
    int layout;                   /* a backend's layout tag for the storage; 0: plain row-major */
    int output;                   /* a plan output: the caller reads it row-major, so it stays plain */
    int half;                     /* stored in 16 bits by the half-storage pass (pass_half_store.c): 1 bf16,
                                     2 fp16; 0: as dtype. Set on a root and every view of it */
} kiln_val;

typedef struct { char name[48]; } kiln_block_name;

typedef struct kiln_node {
    kiln_op op;
    int nin, nout;
    kiln_value in[KILN_OP_MAX_IN];
    kiln_value out[KILN_OP_MAX_OUT];
    uint8_t acc[KILN_OP_MAX_OUT]; /* grad = None rule: 1 adds into an output that already holds a contribution */
    /* output k may take the storage of input reuse_in[k] - 1 when that input dies at this node (0: no):
     * the node reads all of that input before it writes the output (a fused pointwise node's program), or its
     * kernel takes the overlap (linear's backward-data on the cpu) */
    uint8_t reuse_in[KILN_OP_MAX_OUT];
    kiln_attrs attr;              /* typed by the op (ops.h) */
    int epilogue;                 /* KILN_EPI_*: a following op folded into this one by the fusion pass */
    int fwd;                      /* backward nodes: the forward node they differentiate, else -1 */
    int dead;                     /* folded into another node: not executed */
    int block;                    /* the block scope it was built in (kiln_graph_block_begin), else -1 */
    int recompute_of;             /* a recomputation (activation checkpointing): the forward node it
                                     repeats, whose RNG key it draws; else -1 */
    int precision;                /* kiln_precision: the autocast pass's mark (matmul-class ops), else fp32 */
    char name[48];                /* "conv2", "relu#3", "conv2:bwd_data" for messages and profiles */
} kiln_node;

struct kiln_graph {
    kiln_val *vals;
    int nvals, cap_vals;
    kiln_node *nodes;
    int nnodes, cap_nodes;
    int nparams;
    kiln_value *param_vals;       /* value id of each parameter */
    int nbuffers;
    kiln_value *buffer_vals;      /* value id of each buffer */
    char *fixed_biases;           /* "a.bias,b.bias": what kiln_graph_fix_bias removed (NULL: nothing) */
    kiln_block_name *blocks;      /* the block scopes, by kiln_node.block */
    int nblocks;
    int cur_block;                /* the open scope, or -1 */
    struct kiln_fused_prog **fused; /* the programs of fused nodes (the pointwise fusion pass) */
    int nfused;
    kiln_status status;
    char error[512];
};

/* builder internals shared with autodiff and the passes */
kiln_value kiln_graph_add_value(kiln_graph *g, const char *name, kiln_dtype dtype, int ndim,
                                const int64_t *shape, int batched, kiln_val_kind kind);
int kiln_graph_add_node(kiln_graph *g, kiln_op op, const kiln_value *in, int nin, const kiln_value *out, int nout);
/* Moves the node just added (the last) to index `at`, shifting the nodes from
 * `at` on (and the forward-node indices that name them) by one: a pass that
 * runs after autodiff places a new node where it must run. Returns at, or -1. */
int kiln_graph_move_node(kiln_graph *g, int node, int at);
/* Applies op to inputs: checks arity, runs the op's shape inference, makes the
 * output values (views share their input's storage) and the node. Returns the
 * node id, or -1 with the graph's sticky error set. */
int kiln_graph_apply(kiln_graph *g, kiln_op op, const kiln_value *in, int nin, const kiln_attrs *attr);
/* the error is kept with the node's name: later builder calls return -1 */
int kiln_graph_fail(kiln_graph *g, kiln_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
kiln_graph *kiln_graph_clone(const kiln_graph *g);
/* element count of a value for a given batch */
int64_t kiln_val_numel(const kiln_val *v, int64_t batch);
/* 1 when a value's elements are laid out contiguously (row-major, no gaps) */
int kiln_val_contiguous(const kiln_val *v);
/* row-major strides of a shape (the batch dimension's stride does not depend on the batch) */
void kiln_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride);
/* the value whose storage v shares (v itself when it is a root) */
kiln_value kiln_val_root(const kiln_graph *g, kiln_value v);

/* how many live nodes read each value (a node reading it twice counts twice);
 * last[v], when given, is the last of them (-1: none). NULL when out of memory. */
int *kiln_graph_readers(const kiln_graph *g, int *last);
/* the first live node writing each value (-1: none); writers[v], when given, counts the live nodes
 * writing it (accumulated gradients have several). NULL when out of memory. The fusion passes' maps. */
int *kiln_graph_producers(const kiln_graph *g, int *writers);

/* autodiff: appends backward nodes to g for d(loss)/d(every param), following
 * each op's backward rule in the table */
kiln_status kiln_autodiff(kiln_graph *g, kiln_value loss);

/* has_grad for a training plan to rewrite (bumps kiln_params_has_grad_version) */
uint8_t *kiln_params_has_grad_mut(kiln_params *P);

/* planner.c: assigns every arena value (kind ACT, a root) a byte offset.
 * Values live from the first node that writes them to the last node that reads
 * them (views extend their root's life); `keep[v]` values live to the end.
 * With reuse, a value takes the best-fitting free block of a dead one. */
kiln_status kiln_plan_memory(const kiln_graph *g, const int *order, int norder, int64_t max_batch, size_t elem,
                             int reuse, const uint8_t *keep, int64_t *offset, size_t *arena_bytes, size_t *no_reuse_bytes);

/* pass_fuse.c: folds an op into its producer where the producer's op takes it
 * as an epilogue (relu after conv2d or linear), and relu's backward into a
 * max-pool backward over the relu's output. Return the number of fusions, or
 * -1 when out of memory. */
int kiln_pass_fuse_epilogues(kiln_graph *g, int nfwd);
int kiln_pass_fuse_pool_relu_bwd(kiln_graph *g);
/* pad(contiguous(x[:, :, ::s, ::s]), dim 1) as one subsample_pad node (before autodiff) */
int kiln_pass_subsample_pad(kiln_graph *g);
/* relu_bwd into the batch-norm backward after it (backends whose kernel takes the mask) */
int kiln_pass_fuse_norm_relu_bwd(kiln_graph *g);
/* relu(batch_norm(x) + r) as the norm with an add-and-relu epilogue (backends whose kernel takes it) */
int kiln_pass_fuse_norm_add_relu(kiln_graph *g);
/* pass_checkpoint.c (activation checkpointing): for the forward nodes that
 * `spec` chooses ("block": every block scope; op names: nodes of those ops;
 * both, comma-separated), each group's saved activations (forward values that
 * backward nodes read) are recomputed by clones of their nodes placed just
 * before the group's first backward reader, and every backward reader reads
 * the clone, so the original dies after its last forward reader. A block's
 * outputs (values forward nodes after it read) are its checkpoints and stay.
 * nfwd: the forward nodes (before autodiff). The number of clones, or -1 (the
 * graph's error set). */
int kiln_pass_checkpoint(kiln_graph *g, int nfwd, const char *spec);
/* the same with the block scopes taken as a chain of units and checkpointed on
 * a binomial schedule (checkpoint_schedule.c) of `slots` slots: segments of
 * blocks, each recomputed once from its input checkpoint and split again
 * inside its recomputation; keep_last keeps the last segment from the forward
 * instead. slots >= the number of blocks is kiln_pass_checkpoint: every block
 * its own segment. */
typedef struct {
    int slots;
    int keep_last;
} kiln_ckpt_choice;
int kiln_pass_checkpoint_ex(kiln_graph *g, int nfwd, const char *spec, const kiln_ckpt_choice *choice);
/* whether spec names "block" (kiln_checkpoint_check it first) */
int kiln_checkpoint_blocks(const char *spec);
/* checkpoint_schedule.c: the binomial schedule's tables for chains of up to
 * `units` units. cost: the unit forwards a chain of n recomputes with s slots
 * (top: the forward pass makes its first sweep), -1 when it cannot; split: the
 * length of its first segment. */
typedef struct kiln_ckpt_sched kiln_ckpt_sched;
kiln_ckpt_sched *kiln_ckpt_sched_new(int units);
void kiln_ckpt_sched_free(kiln_ckpt_sched *k);
int kiln_ckpt_sched_cost(const kiln_ckpt_sched *k, int top, int n, int s);
int kiln_ckpt_sched_split(const kiln_ckpt_sched *k, int top, int n, int s);
/* the RNG key id of a node: a backward node's forward node, a recomputation's original */
int kiln_node_key_id(const kiln_graph *g, int node);
/* pass_fuse_pointwise.c: joins maximal groups of pointwise nodes (ops with
 * tileable[op] set: the backend can run them inside a fused kernel) whose
 * intermediates nothing else reads into one fused node each; seed gives the
 * dropout members' keys (as the plan's). The number of groups, or -1 (the
 * graph's error set). */
int kiln_pass_fuse_pointwise(kiln_graph *g, const uint8_t *tileable, uint64_t seed);
/* a random op's RNG key: by the plan's seed and the forward node it belongs to */
uint64_t kiln_node_rng_key(const kiln_graph *g, int node, uint64_t seed);
/* adds a program to the graph (which frees it); NULL when out of memory */
struct kiln_fused_prog *kiln_graph_add_prog(kiln_graph *g);

/* pass_autocast.c (mixed precision): marks each live node of an op with bf16 operands (the table's
 * bf16_in) with `precision` (kiln_precision); fp32 marks nothing. The number marked. */
int kiln_pass_autocast(kiln_graph *g, int precision);
/* after it: each live fp32 node whose op follows[op] marks (KILN_FOLLOW_*: a backend's kernel table,
 * kiln_kernel.autocast_follows; NULL: none) gets `precision` where its sources hold 16-bit numbers, written by
 * nodes that round them (round_out[op], the table's kiln_kernel.round_out; NULL: none), in order, so a chain
 * follows; a fused node where any member follows, each marked in its program. The number marked. */
int kiln_pass_autocast_follow(kiln_graph *g, int precision, const uint8_t *follows, const unsigned *round_out);
/* the outputs (bit k) a node writes rounded to its 16-bit precision: `table` (its op's kiln_kernel.round_out)
 * on a node of a 16-bit precision, a fused node's program's own (kiln_fused_prog.out_round); 0 on fp32 */
unsigned kiln_node_round_out(const kiln_node *n, unsigned table);
/* of those, the outputs that hold 16-bit numbers: not a channel-bias op's output 0 where it has a bias (added in
 * fp32 after the rounding: kiln_kernel.round_out), unless the table says the bias goes in before the rounding
 * (KILN_ROUND_BIAS_IN). What a follower may follow, and half storage may store */
unsigned kiln_node_holds_16(const kiln_node *n, unsigned table);
/* Half storage (after autocast): an activation whose every reader rounds it to the plan's 16-bit format anyway
 * (a matmul-class node of that precision, in a slot its kernel reads as 16 bits), or whose writer rounds it so
 * itself (round_out[op] bit k on a node of that precision: the cuda backend's convolutions; NULL: none) and
 * whose every reader has a 16-bit slot for it, and whose one writer can store it so, is stored in 16 bits: the
 * same numbers, half the bytes. half[op](nin, nout) gives a backend's slots (inputs bit k, outputs
 * KILN_TIE_OUT(k); NULL: none); precision bf16 or fp16, else nothing. Returns the values marked, or -1 (the
 * graph's error set). */
int kiln_pass_half_store(kiln_graph *g, int precision, const kiln_half_slots_fn *half, const unsigned *round_out);

/* compile-time specialisation for training or evaluation (dropout becomes a
 * view, batch norm uses its running statistics), via each op's `specialize` */
void kiln_pass_specialize(kiln_graph *g, const kiln_compile_opts *o);

/* pass_bias_norm.c: warns about each conv2d/linear bias a following batch norm
 * cancels; marks[v] = 1 for each such bias value (the count, or -1) */
void kiln_pass_warn_bias_before_norm(const kiln_graph *g);
int kiln_pass_mark_cancelled_biases(const kiln_graph *g, uint8_t *marks);
/* pass_fold_bn.c: folds each evaluation batch norm into the conv2d (or linear)
 * that alone feeds it, through a bn_fold node that recomputes the layer's
 * weight and bias every run; the number folded, or -1 (the graph's error set) */
int kiln_pass_fold_bn(kiln_graph *g, const kiln_value *outputs, int noutputs);
/* pass_fuse_residual.c: add(conv2d(x, w, b), r) becomes conv2d_add(x, w, b, r) in inference
 * plans (the conv's output read by nothing else); returns how many, or -1 */
int kiln_pass_fuse_residual(kiln_graph *g, const kiln_value *outputs, int noutputs);

#endif
