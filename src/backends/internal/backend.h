/* The backend interface: what the plan needs from a device to run a graph.
 *
 * A compiled plan is a flat list of steps. Each step is one op applied to
 * resolved tensors (kiln_tdesc: pointer, shape, strides, layout, dtype) plus
 * the kernel the backend chose for it; running the plan is iterating the list.
 * A backend provides:
 *   - its kernels: a table indexed by kiln_op (kernels.c in its folder) with a
 *     run function, an optional prepare (make kernel objects, autotune, size a
 *     workspace) and the layouts each slot takes;
 *   - memory: alloc/free/copy between host and its memory, memory available;
 *   - inputs: whether host memory can be bound in place (cpu) or must be
 *     staged by a copy (ref converts to f64; a device copies asynchronously
 *     on its own stream);
 *   - its passes (the cpu layout pass) and its opaque state in checkpoints
 *     (the cpu autotune decisions);
 *   - run (NULL: the steps one by one; a device may capture the list once),
 *     sync and a clock for per-kernel timing.
 * The graph layer includes this header and no backend's own. See
 * docs/backends.md. */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include <pthread.h>
#include "backends/internal/amp_state.h"
#include "kernels/internal/kernels.h"
#include "kiln/graph.h"
#include "ops/internal/ops.h"

/* a tensor argument of a step, resolved at compile */
/* the cuda backend's layout tag: a 4-d activation stored channels last, [n, h, w, c] (its layout pass, under
 * KILN_CUDA_LAYOUT=nhwc); the cpu's tags are oneDNN's channel block, 8 or 16 (nChw8c, nChw16c), never 1 */
#define KILN_LAYOUT_NHWC 1

typedef struct kiln_tdesc {
    void *data;                       /* NULL for an absent optional output (numel 0), or an input not yet bound */
    kiln_dtype dtype;                 /* as stored by the backend (f64 for f32 values on ref) */
    int ndim;
    int layout;                       /* the backend's layout tag, 0: plain row-major (KILN_LAYOUT_NHWC, or the cpu's
                                         oneDNN block) */
    int64_t shape[KILN_MAX_DIMS];     /* the batch resolved */
    int64_t stride[KILN_MAX_DIMS];    /* in elements */
    int64_t numel;
    int contiguous;
    int batched;                      /* the first dimension is the batch */
} kiln_tdesc;

/* what changes from run to run: set by the plan (or optimizer) before each run */
typedef struct kiln_run_ctx {
    uint64_t counter;                 /* RNG counter (dropout masks): the global step and micro-batch */
    double loss_scale;                /* backward's seed */
    int accumulate;                   /* parameter gradients add to what they hold (micro-batches) */
    double lr;                        /* optimizer updates */
    int64_t optim_step;               /* updates done, this one included */
    void *workspace;                  /* scratch shared by all kernels, sized at compile */
    kiln_collective collective;       /* sync batch norm's sum over the processes (kiln_plan_set_collective) */
    const kiln_amp_state *amp;        /* the gradient scaler (backend memory), NULL: none. The backward seed is
                                         multiplied by its scale; a found_inf skips the update's steps (on a
                                         device its kernels check it; host backends skip them in the runner) */
    int late_slot;                    /* 0: the loss read-out waits for it; k > 0 (a backend with readout_take):
                                         it only queues the copy into slot k - 1 and returns */
} kiln_run_ctx;

/* read-outs a backend can hold before their losses are taken (kiln_backend.readout_take) */
#define KILN_READOUT_SLOTS 4

typedef struct kiln_step kiln_step;
#define KILN_BWD_WORDS ((KILN_OP_COUNT + 63) / 64)
typedef kiln_status (*kiln_step_fn)(const kiln_step *s, const kiln_run_ctx *rc);

struct kiln_step {
    kiln_step_fn run;
    kiln_op op;
    const char *name;                 /* the node's name, for messages and profiles */
    int node;                         /* graph node, -1 for steps outside the graph */
    int fwd_step;                     /* backward steps: the step of the forward node they differentiate, or -1 */
    uint64_t bwd_ops[KILN_BWD_WORDS]; /* forward steps: bit k when a backward node of op k differentiates it */
    int nin, nout;
    kiln_tdesc in[KILN_OP_MAX_IN], out[KILN_OP_MAX_OUT];
    uint8_t acc[KILN_OP_MAX_OUT];     /* grad = None rule: add into output k */
    uint8_t param_grad[KILN_OP_MAX_OUT]; /* output k is a parameter gradient: adds while accumulating */
    int epilogue;                     /* KILN_EPI_* */
    int precision;                    /* kiln_precision of the node; a backend deciding `auto` sets fp32 or bf16 */
    uint8_t round_out;                /* outputs written rounded to the step's 16 bits (kiln_kernel.round_out) */
    kiln_attrs attr;
    uint64_t key;                     /* counter-based RNG key (random ops) */
    int64_t batch;
    void *kobj;                       /* the backend's kernel object (oneDNN primitives) */
    int owns_kobj;
    struct {                          /* cpu: steps [this, this + steps) run image slice by image slice, `images` at a
                                         time, each slice by one of `threads` threads in its own `ws` bytes of the
                                         workspace, the convolutions' weights copied after those (`params` bytes)
                                         (src/backends/cpu/depth_first.c); steps 0: not the head of one */
        int steps, threads;
        int64_t images;
        size_t ws, params;
    } depth_first;
    const float *w_scale;             /* cpu: a forward convolution on kiln's kernel reads in[1] times these, one per
                                         output channel (the scales of the batch norm fold before it, which then
                                         writes them alone: src/backends/cpu/fold_scale.c); NULL: none */
    union {                           /* sizes the kernel needs, worked out at prepare */
        kiln_conv_shape conv;
        kiln_pool_shape pool;
        kiln_avg_pool_shape avg_pool;
        struct { int64_t rows, cols; } rc;
        struct { int64_t n, c, hw; } nchw;
        struct { int64_t outer, dim, inner; } slice;
        kiln_bmm_shape bmm;
        struct { kiln_attn_shape shape; int slots, mma; } attn; /* slots: threads the workspace has room for (cpu);
                                                                  mma: the tensor-core kernels in registers (cuda) */
    } sz;
};

/* elements from a tensor argument's first to its last (a strided view spans more than numel) */
int64_t kiln_tdesc_span(const kiln_tdesc *t);

/* a forward step is differentiated by a backward node of op `op` */
static inline int kiln_step_has_bwd(const kiln_step *s, kiln_op op) { return (int)((s->bwd_ops[op / 64] >> (op % 64)) & 1); }

/* the grad = None rule at run time */
static inline int kiln_step_acc(const kiln_step *s, const kiln_run_ctx *rc, int k) {
    return s->acc[k] || (rc->accumulate && s->param_grad[k]);
}

/* what prepare sees: the whole list (backward steps find their forward step's
 * kernel object) and the compile options; it raises `workspace` to its need */
typedef struct kiln_prep {
    const kiln_compile_opts *o;
    kiln_step *steps;
    int nsteps;
    size_t workspace;
} kiln_prep;

/* A pointwise op on n elements from element `start` of its tensors, in the
 * backend's float type: what a fused kernel runs per tile (and the op alone,
 * tile by tile, so fused and unfused give the same bits). dst never aliases a
 * source; I->acc: add into dst (backward ops). */
typedef void (*kiln_tile_fn)(const kiln_pw_instr *I, int64_t start, int64_t n, void *dst, const void *const *src,
                             const kiln_run_ctx *rc);

typedef struct kiln_kernel {
    kiln_step_fn run;                 /* NULL: this backend cannot run the op */
    kiln_status (*prepare)(kiln_step *s, kiln_prep *p);
    void (*release)(kiln_step *s);    /* frees what prepare made (owned kernel objects) */
    unsigned blocked_in, blocked_out; /* slots that take the backend's blocked layout */
    unsigned tied;                    /* slots that must share one layout (inputs bit k, outputs KILN_TIE_OUT(k)) */
    /* optional (kiln inspect): the implementation the step runs when the backend
     * chooses among several, into buf; returns how many activations its kernel
     * converts to or from its own layout on every run, *weights the weights */
    int (*describe)(const kiln_step *s, char *buf, size_t len, int *weights);
    /* slots (as `tied`) where a plain tensor costs the kernel a reorder of its own on
     * every run (a convolution's activations): the layout pass weighs these against
     * the reorders it would add to keep a family blocked */
    unsigned reorders_plain;
    kiln_tile_fn tile;                /* pointwise ops: may join a fused kernel (the fusion pass asks) */
    int fusable;                      /* a device backend's pointwise ops: may join its fused kernel, which
                                         runs them itself (no tile function); the value is the backend's own */
    const struct kiln_vform *vec;     /* cpu: the op's vector pass (src/kernels/cpu/pointwise_vec.h), or NULL */
    /* batch norm backward: takes KILN_EPI_RELU_BWD_MASK (relu's backward folded in, the
     * mask recomputed from x; input 5 the bias); the fusion pass fuses only where set */
    int relu_bwd_mask;
    /* the half-storage pass (src/graph/pass_half_store.c): the slots (inputs bit k, outputs KILN_TIE_OUT(k))
     * this kernel reads or writes as 16-bit tensors (the step's tdesc dtype bf16 or fp16) on a node of nin
     * inputs and nout outputs; an input slot so only where it would round the value to 16 bits anyway. NULL: none */
    kiln_half_slots_fn half;
    /* batch norm: takes KILN_EPI_ADD_RELU (a residual add and relu after it; input 6
     * the residual, tied to x's layout); the fusion pass fuses only where set */
    int add_relu;
    /* outputs (bit k: output k) this kernel writes rounded to 16 bits on a step of precision bf16 or fp16 (cuDNN's
     * 16-bit convolutions write their outputs' type, as PyTorch's autocast convolutions do); an accumulated output
     * adds the rounded value; a channel bias (input 2) is added after the rounding, in fp32, so that output holds no
     * 16-bit numbers (kiln_node_holds_16), unless KILN_ROUND_BIAS_IN says it is added before (cuBLASLt's epilogue). The plan marks the steps (kiln_step.round_out); the reference reproduces the
     * marks when compiled with kiln_compile_opts.round_outputs_as this backend. 0: outputs in fp32 */
    unsigned round_out;
    /* KILN_FOLLOW_IN0 (ALL): the autocast pass gives a node of this op the plan's 16-bit precision where its input
     * 0 (every input) holds 16-bit numbers, written rounded (PyTorch's autocast runs such an op in its input's
     * dtype: the cuda backend's batch norm after a 16-bit convolution, the residual add of two such norms, relu,
     * max-pool), so that its round_out outputs are written rounded; its operands are not (no bf16_in). A fused
     * group's members follow one by one (kiln_pw_instr.round) */
    uint8_t autocast_follows;
} kiln_kernel;
#define KILN_TIE_OUT(k) (1u << (8 + (k)))

/* A device backend's own collectives for data parallel runs (cuda: NCCL, one
 * process per GPU). src/dist/ddp.c asks every rank whether they can run
 * (load), has rank 0 make an id, sends it to every rank over MPI and opens a
 * communicator with it. Sums and broadcasts are queued on the device after
 * what its compute stream holds: the host does not wait for them.
 * A backend without them (or where load fails) has its gradients staged
 * through host memory and MPI. */
#define KILN_COLL_ID_BYTES 128
typedef struct kiln_coll_ops {
    int (*load)(char *why, size_t len);                 /* 1: usable here; else 0 and why */
    const char *(*version)(void);                       /* "NCCL 2.27.3", after load */
    kiln_status (*make_id)(unsigned char id[KILN_COLL_ID_BYTES]);
    kiln_status (*open)(const unsigned char id[KILN_COLL_ID_BYTES], int rank, int size, void **comm);
    /* in place, over the ranks: started after what the compute stream holds so far (cuda: on a stream of
     * its own, so backward's later kernels run meanwhile); join makes the compute stream wait for every
     * sum started */
    kiln_status (*sum_f32)(void *comm, float *buf, int64_t n);
    kiln_status (*join)(void *comm);
    /* the host waits until every sum joined has ended, at most timeout_s: KILN_OK, KILN_ERR_IO when the bound
     * passed, another code (its message) when the collectives failed; either way the communicator is left
     * aborted, so that close does not wait for peers that will never come */
    kiln_status (*wait)(void *comm, double timeout_s);
    kiln_status (*bcast)(void *comm, void *buf, size_t bytes, int root);
    void (*close)(void *comm);
} kiln_coll_ops;

typedef struct kiln_backend {
    const char *name;                 /* "ref", "cpu" */
    kiln_dtype float_dtype;           /* how f32 values are stored (KILN_F64 for the reference) */
    int host_memory;                  /* 1: its memory is host memory; parameters are used in place */
    const kiln_kernel *kernels;       /* KILN_OP_COUNT entries */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    /* page-locked host memory its copies read asynchronously (the loader's ring); NULL: plain memory */
    void *(*pinned_alloc)(size_t bytes);
    void (*pinned_free)(void *p);
    /* copies between host and backend memory; may return before the copy ends when async */
    kiln_status (*copy)(void *dst, const void *src, size_t bytes, int async);
    size_t (*memory_available)(void);
    /* 1: a bound host input of this dtype is used in place; 0: it is staged */
    int (*input_in_place)(kiln_dtype dtype);
    /* stages n elements of a bound input (host, logical dtype) into backend memory */
    kiln_status (*stage_input)(void *dst, const void *host, int64_t n, kiln_dtype dtype);
    /* the backend's own passes over the compiled graph (layouts) */
    kiln_status (*passes)(kiln_graph *g, const kiln_compile_opts *o);
    void (*prepare_begin)(const kiln_compile_opts *o);
    void (*prepare_end)(const kiln_compile_opts *o);
    /* NULL, or a pass over a list once every step is prepared (the kernels chosen): cpu, depth-first segments */
    kiln_status (*prepare_list)(kiln_prep *p);
    kiln_status (*run)(const kiln_step *steps, int n, const kiln_run_ctx *rc); /* NULL: one by one */
    kiln_status (*sync)(void);
    double (*now)(void);              /* seconds, for per-step timing */
    /* opaque state kept in checkpoints (the cpu autotune decisions) */
    size_t (*export_state)(char *buf, size_t len);
    kiln_status (*import_state)(const char *text, const char *source);
    /* NULL: always usable; else 1, or 0 with the reason in why (no GPU here) */
    int (*available)(char *why, size_t len);
    /* NULL: read-outs wait for the device. Else waits for the read-out queued into a slot (and what came
     * before it on the device) and gives its loss, or the error a kernel recorded before it */
    kiln_status (*readout_take)(int slot, double *loss);
    /* a step is being freed: drop what the backend keeps about it (a captured graph) */
    void (*step_freed)(kiln_step *s);
    /* mixed precision: NULL when the kernels honour kiln_step.precision themselves (cpu; cuda: its linear
     * and matmul steps take bf16 tensor-core math, its convolutions run on 16-bit channels-last copies);
     * else runs a bf16 step in their place (ref: its kernel on rounded operands), and `auto` means fp32 */
    kiln_step_fn run_reduced;         /* (bf16 or fp16 steps) */
    /* 1: its update kernels skip themselves when the gradient scaler found a non-finite gradient (cuda); 0:
     * the optimizer reads found_inf and skips them (host backends read it in place, others copy it) */
    int amp_on_device;
    /* NULL: data parallel gradients go through host memory and MPI; else the backend's own (above) */
    const kiln_coll_ops *coll;
    /* NULL: one device per process; else which device this process uses, named so that two
     * processes on one host naming the same one share it ("cuda 0 (PCI 0000:1b:00.0)") */
    kiln_status (*device_name)(char *buf, size_t len);
} kiln_backend;

/* The layout pass (pass_layout.c) for a backend: activations its conv-like kernels read and write in its own
 * layout (the kernel table's blocked_in, blocked_out, tied and reorders_plain) are stored in it, tagged `tag`
 * (kiln_val.layout), where every value of a family has a multiple of `block` channels. Returns the values moved, or
 * -1 (out of memory). The cpu's: oneDNN's nChw16c or nChw8c (tag and block 16 or 8). */
typedef struct kiln_layout_spec {
    const kiln_kernel *kernels;
    int tag, block;
} kiln_layout_spec;
int kiln_pass_layout(kiln_graph *g, const kiln_layout_spec *spec);

/* the registry: "cpu" and "ref" built in; another backend registers itself
 * (a CUDA backend when a GPU is found; tests register a device simulator) */
kiln_status kiln_backend_register(const kiln_backend *b);
const kiln_backend *kiln_backend_get(const char *name);
int kiln_backend_count(void);
/* 1 when b can run here; else 0 and why (e.g. "no CUDA GPU here (...)") */
int kiln_backend_available(const kiln_backend *b, char *why, size_t len);
const kiln_backend *kiln_backend_at(int i);
/* the backend whose float storage is dtype (f32: cpu, f64: ref) */
const kiln_backend *kiln_backend_for_dtype(kiln_dtype dtype);
/* 1 when b has a kernel for the step and takes its dtypes and layouts */
int kiln_backend_supports(const kiln_backend *b, const kiln_step *s);
/* prepares one step (kernel lookup, prepare) after its tensors are resolved */
kiln_status kiln_backend_prepare(const kiln_backend *b, kiln_step *s, kiln_prep *p);
void kiln_backend_release(const kiln_backend *b, kiln_step *s);
/* runs a list of steps, optionally timing each (time[i] += seconds) */
kiln_status kiln_backend_run(const kiln_backend *b, const kiln_step *steps, int n, const kiln_run_ctx *rc, double *time);
/* host memory, shared by the backends whose memory it is (cpu, ref) */
void *kiln_host_alloc(size_t bytes);
void kiln_host_free(void *p);
kiln_status kiln_host_copy(void *dst, const void *src, size_t bytes, int async);
size_t kiln_host_memory(void);
double kiln_host_now(void);

/* decision_file.c: a backend's autotune decisions on disk (KILN_CACHE_DIR,
 * else $XDG_CACHE_HOME/kiln or ~/.cache/kiln; KILN_CACHE_DIR= : none) */
#define KILN_DECISIONS_MAX (1 << 18)
typedef struct kiln_decision_file {
    const char *name;                                  /* "autotune-v4.txt" */
    size_t (*export_all)(char *buf, size_t len);
    kiln_status (*import_keep)(const char *text, const char *source); /* decisions already made win */
    pthread_mutex_t lock;
    int loaded;
    int stale;                                         /* the file holds something else (corrupt): rewrite it */
    char saved[KILN_DECISIONS_MAX];                    /* what the file holds */
} kiln_decision_file;
#define KILN_DECISION_FILE(nm, ex, im) {.name = nm, .export_all = ex, .import_keep = im, .lock = PTHREAD_MUTEX_INITIALIZER}
const char *kiln_cache_path(const char *name, char *buf, size_t len); /* "" when there is no cache */
void kiln_decision_file_load(kiln_decision_file *f);  /* once per process (or after reset) */
void kiln_decision_file_save(kiln_decision_file *f);  /* atomically, when something new was decided */
void kiln_decision_file_reset(kiln_decision_file *f); /* tests: read the file again next time */

/* prepare functions every backend's table shares: the sizes a kernel needs */
kiln_status kiln_prepare_avg_pool(kiln_step *s, kiln_prep *p);    /* sz.avg_pool from x (forward) or dx (backward) */
kiln_status kiln_prepare_pad(kiln_step *s, kiln_prep *p);         /* sz.slice of pad's output along its dim */
kiln_status kiln_prepare_pool(kiln_step *s, kiln_prep *p);        /* sz.pool from x and the attributes */
kiln_status kiln_prepare_rows_of_out(kiln_step *s, kiln_prep *p); /* sz.rc: rows x last dim of out[0] */
kiln_status kiln_prepare_rows_of_in(kiln_step *s, kiln_prep *p);  /* sz.rc of in[0] */
kiln_status kiln_prepare_slice(kiln_step *s, kiln_prep *p);       /* sz.slice around the sliced dim of out[0] */
kiln_status kiln_prepare_nchw(kiln_step *s, kiln_prep *p);        /* sz.nchw of x [N, C, H, W] */
kiln_status kiln_prepare_bmm(kiln_step *s, kiln_prep *p);         /* sz.bmm from a and b (forward and backward) */
kiln_status kiln_prepare_attention(kiln_step *s, kiln_prep *p);   /* sz.attn.shape from q, k, v (both directions) */
/* attention backward's dq, dk, dv (NULL: not wanted) and their acc flags: three outputs, or,
 * when q, k, v are the column thirds of one value, the thirds of its one gradient */
void kiln_attention_grads(const kiln_step *s, const kiln_run_ctx *rc, void *out[3], int acc[3]);

/* pointwise.c: a tile is this many bytes of each operand (1024 floats) */
#define KILN_TILE_BYTES 4096
/* runs a pointwise op's tile function over its whole tensors, tile by tile
 * (parallel over the compute team when `parallel` and the tensor is large) */
kiln_status kiln_pointwise_run(const kiln_step *s, const kiln_run_ctx *rc, kiln_tile_fn tile, int parallel);
/* adds a tile of m values from src into dst (a fused step's output that accumulates), with the table's grad_copy */
void kiln_fused_add_tile(const kiln_run_ctx *rc, const kiln_kernel *table, int64_t start, int64_t m, void *dst,
                         const void *src);
/* rounds a tile of m values to a 16-bit precision (kiln_precision), in place: a fused member that follows autocast
 * (kiln_pw_instr.round), on a backend reproducing another's 16-bit outputs (the ref) */
typedef void (*kiln_round_tile_fn)(int precision, void *tile, int64_t m);
/* runs a fused step's program (s->attr.fused) tile by tile with the table's tile functions; round: NULL where no
 * member rounds (a backend without followers) */
kiln_status kiln_fused_run(const kiln_step *s, const kiln_run_ctx *rc, const kiln_kernel *table, size_t elem, int parallel,
                           kiln_round_tile_fn round);
/* the ops whose table entry has a tile function, when the table runs fused steps: the fusion pass's material */
void kiln_backend_tileable(const kiln_backend *b, uint8_t *tileable);

/* a 1-d tensor of n elements at data, for steps over flat buffers */
kiln_tdesc kiln_tdesc_flat(void *data, kiln_dtype dtype, int64_t n);

#endif
