/* The graph as the compiler sees it: values and nodes in creation order (a
 * valid topological order, since a node can only use values that exist). */
#ifndef KILN_GRAPH_INTERNAL_H
#define KILN_GRAPH_INTERNAL_H

#include "kiln/graph.h"

typedef enum kiln_op {
    KILN_OP_CONV2D, KILN_OP_LINEAR, KILN_OP_RELU, KILN_OP_MAX_POOL2D, KILN_OP_DROPOUT,
    KILN_OP_RESHAPE, KILN_OP_LOG_SOFTMAX, KILN_OP_NLL_LOSS, KILN_OP_CROSS_ENTROPY, KILN_OP_ADD, KILN_OP_MUL,
    /* added by autodiff */
    KILN_OP_ONES,            /* out = 1 (the seed dloss) */
    KILN_OP_CONV2D_BWD_DATA, /* in: dy, w           out: dx */
    KILN_OP_CONV2D_BWD_WEIGHT, /* in: x, dy         out: dw, db? */
    KILN_OP_LINEAR_BWD_DATA, KILN_OP_LINEAR_BWD_WEIGHT,
    KILN_OP_RELU_BWD,        /* in: y, dy */
    KILN_OP_MAX_POOL2D_BWD,  /* in: x, dy */
    KILN_OP_DROPOUT_BWD,     /* in: dy */
    KILN_OP_LOG_SOFTMAX_BWD, /* in: y, dy */
    KILN_OP_NLL_LOSS_BWD,    /* in: target, dloss */
    KILN_OP_CROSS_ENTROPY_BWD, /* in: logits, target, dloss */
    KILN_OP_GRAD_COPY,       /* in: dy             out: dx (dx =|+= dy) */
    KILN_OP_MUL_BWD,         /* in: dy, other      out: da */
    KILN_OP_COUNT
} kiln_op;

const char *kiln_op_name(kiln_op op);

typedef enum { KILN_VAL_ACT, KILN_VAL_INPUT, KILN_VAL_PARAM, KILN_VAL_PARAM_GRAD } kiln_val_kind;

typedef struct kiln_val {
    char name[64];
    kiln_dtype dtype;
    int ndim;
    int64_t shape[KILN_MAX_DIMS]; /* shape[0] == KILN_BATCH when batched */
    int batched;                  /* 1: shape[0] is the symbolic batch */
    kiln_val_kind kind;
    int param;                    /* index into the graph's parameters, for PARAM and PARAM_GRAD */
    kiln_value alias_of;          /* a view of another value's storage (reshape), or -1 */
    int64_t fan_in;               /* params: init bound 1/sqrt(fan_in) */
    kiln_value grad_of;           /* gradients: the value this is d(loss)/d(...) of, else -1 */
    int layout;                   /* 0: plain (NCHW); 16: oneDNN's nChw16c (layout pass) */
} kiln_val;

#define KILN_NODE_MAX_IN 4
#define KILN_NODE_MAX_OUT 2

typedef struct kiln_node {
    kiln_op op;
    int nin, nout;
    kiln_value in[KILN_NODE_MAX_IN];
    kiln_value out[KILN_NODE_MAX_OUT];
    int acc[KILN_NODE_MAX_OUT];   /* grad = None rule: 1 adds into an output that already holds a contribution */
    int64_t iattr[4];             /* conv: stride, pad; pool: kernel, stride; reshape: start dim */
    float fattr[2];               /* dropout: p */
    int fwd;                      /* backward nodes: the forward node they differentiate, else -1 */
    int fuse_relu;                /* conv/linear with a following relu folded in (fusion pass) */
    int relu_mask;                /* max_pool2d_bwd with the following relu_bwd folded in (fusion pass) */
    int dead;                     /* folded into another node: not executed */
    char name[48];                /* "conv2d#3" for messages */
} kiln_node;

struct kiln_graph {
    kiln_val *vals;
    int nvals, cap_vals;
    kiln_node *nodes;
    int nnodes, cap_nodes;
    int nparams;
    kiln_value *param_vals;       /* value id of each parameter */
    kiln_status status;
    char error[512];
};

/* builder internals shared with autodiff */
kiln_value kiln_graph_add_value(kiln_graph *g, const char *name, kiln_dtype dtype, int ndim,
                                const int64_t *shape, int batched, kiln_val_kind kind);
int kiln_graph_add_node(kiln_graph *g, kiln_op op, const kiln_value *in, int nin, const kiln_value *out, int nout);
kiln_graph *kiln_graph_clone(const kiln_graph *g);
/* element count of a value for a given batch */
int64_t kiln_val_numel(const kiln_val *v, int64_t batch);

/* autodiff: appends backward nodes to g for d(loss)/d(every param); fills
 * grad_of[v] with the value holding dL/dv (or -1). */
kiln_status kiln_autodiff(kiln_graph *g, kiln_value loss);
uint8_t *kiln_params_has_grad_mut(kiln_params *P);
/* Calls fn(P, offset, count, ctx) for each contiguous run of parameters that
 * have a gradient (usually one run: the whole flat buffer). Runs cover the
 * padding between views, whose gradients are never written and stay zero. */
typedef void (*kiln_params_run_fn)(kiln_params *P, int64_t offset, int64_t count, void *ctx);
void kiln_params_grad_runs(kiln_params *P, kiln_params_run_fn fn, void *ctx);

#endif

/* planner.c: assigns every arena value (kind ACT, not an alias) a byte offset.
 * Values live from the first node that writes them to the last node that reads
 * them (aliases extend their root's life); `keep[v]` values live to the end.
 * With reuse, a value takes the best-fitting free block of a dead one. */
kiln_value kiln_val_root(const kiln_graph *g, kiln_value v);
kiln_status kiln_plan_memory(const kiln_graph *g, const int *order, int norder, int64_t max_batch, size_t elem,
                             int reuse, const uint8_t *keep, int64_t *offset, size_t *arena_bytes, size_t *no_reuse_bytes);

/* pass_fuse.c: folds relu into a preceding conv2d or linear whose output only it
 * reads, and relu's backward into a max-pool backward over the relu's output.
 * Returns the number of fusions, or -1 when out of memory. */
int kiln_pass_fuse_relu(kiln_graph *g, int nfwd);
int kiln_pass_fuse_pool_relu_bwd(kiln_graph *g);

/* pass_autotune.c: brackets the making of a plan's conv objects: loads the
 * on-disk autotune cache once per process, saves new decisions after. */
void kiln_pass_autotune_begin(void);
void kiln_pass_autotune_end(void);
/* tests: forget every decision and read the disk cache again on next use */
void kiln_pass_autotune_reset(void);

/* pass_layout.c: keeps conv chains in oneDNN's blocked layout (nChw16c) where
 * every reader of the activation and of its gradient can take it. Returns the
 * number of values moved, or -1 when out of memory. */
int kiln_pass_layout(kiln_graph *g);
