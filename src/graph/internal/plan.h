/* The compiled plan, shared by plan.c (compile), plan_exec.c (run) and
 * plan_profile.c (per-kernel timing). */
#ifndef KILN_PLAN_INTERNAL_H
#define KILN_PLAN_INTERNAL_H

#include "graph/internal/graph.h"
#include "kernels/internal/kernels.h"

#define MAX_BATCH_STATES 4

typedef struct {
    int64_t batch;      /* 0: unused */
    void **kobj;        /* per node: kiln_dnnl_conv / kiln_dnnl_linear for forward conv/linear nodes */
    uint64_t last_used;
} batch_state;

struct kiln_plan {
    kiln_graph *g;
    kiln_params *P;
    kiln_compile_opts o;
    size_t elem;
    int nfwd;
    int *order;
    int norder;
    int64_t *offset;
    char *arena;
    size_t arena_bytes, arena_no_reuse;
    const void **bound;     /* per value: caller memory of inputs */
    double **ref_inputs;    /* reference plans: double copies of float inputs */
    kiln_value *outputs;
    int nout;
    uint8_t *need_bwd_data, *need_bwd_weight; /* per forward conv/linear node */
    batch_state states[MAX_BATCH_STATES];
    uint64_t runs;
    void *ws;
    size_t ws_bytes;
    uint64_t step;
    int accumulate;         /* 1: parameter gradients add to what they hold (micro-batches) */
    double loss_scale;      /* d(loss) seed: 1, or 1/N when N micro-batches make one step */
    int64_t batch;          /* batch of the last run */
    double *node_time;      /* profiling: seconds per node, summed over runs (NULL: off) */
    int64_t profiled_runs;
};

/* a value's memory: arena, bound input, parameter or parameter gradient */
void *kiln_plan_ptr(const kiln_plan *pl, kiln_value v);
void kiln_plan_conv_shape(const kiln_plan *pl, const kiln_node *n, int64_t batch, kiln_conv_shape *cs);
void kiln_plan_pool_shape(const kiln_plan *pl, const kiln_node *n, kiln_value x, int64_t batch, kiln_pool_shape *ps);
/* the kernel objects for a batch size, made (and autotuned) on first use */
kiln_status kiln_plan_batch_state(kiln_plan *pl, int64_t batch, batch_state **out);

#endif
