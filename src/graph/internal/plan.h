/* The compiled plan, shared by plan.c (compile), plan_steps.c (step lists),
 * plan_exec.c (bind and run) and plan_profile.c (per-step timing). The plan
 * talks to its backend only through backends/internal/backend.h. */
#ifndef KILN_PLAN_INTERNAL_H
#define KILN_PLAN_INTERNAL_H

#include "backends/internal/backend.h"
#include "graph/internal/graph.h"

#define KILN_PLAN_MAX_LISTS (1 + KILN_MAX_EXTRA_BATCHES)

/* the steps of one batch size */
typedef struct kiln_steplist {
    int64_t batch;
    kiln_step *steps;
    int nsteps;
    double *time; /* seconds per step summed over timed runs */
    uint8_t *mark; /* the hook is called after step i when mark[i] (NULL: no marks) */
} kiln_steplist;

/* a place in a step that holds a bound input's address (cpu: the loader's slot, in place) */
typedef struct {
    void **loc;
    size_t off;
} kiln_patch;

typedef struct {
    kiln_value v;
    const void *bound;  /* the caller's memory */
    void *staged;       /* backend memory when the backend stages this input, else NULL (bound in place) */
    kiln_patch *patches;
    int npatches, cap;
} kiln_plan_input;

struct kiln_plan {
    kiln_graph *g;
    kiln_params *P;
    kiln_compile_opts o;
    const kiln_backend *be;
    size_t elem;              /* bytes of a float value on the backend */
    int nfwd;
    int *order;               /* the nodes that do work, in execution order */
    int norder;
    int64_t *offset;          /* arena offset per root value, -1 if none */
    char *arena;
    size_t arena_bytes, arena_no_reuse;
    size_t arena_plain;       /* the arena without activation checkpointing */
    int recomputed;           /* nodes activation checkpointing cloned into backward */
    kiln_value *outputs;
    int nout;
    kiln_plan_input *inputs;
    int ninputs;
    kiln_steplist lists[KILN_PLAN_MAX_LISTS];
    int nlists;
    void *ws;                 /* the kernels' shared workspace */
    size_t ws_bytes;
    kiln_run_ctx rc;
    double loss_host;         /* the read-out step writes the loss here */
    int late;                 /* kiln_plan_set_late_loss: read-outs queue, losses are taken by ticket */
    int last_late;            /* the last run's read-out was late */
    uint64_t tickets;         /* runs begun (kiln_plan_ticket) */
    struct {
        uint64_t ticket;      /* the run whose read-out holds this slot; 0: none */
        int taken;
        double loss;
        kiln_status st;
        char msg[256];        /* its error's message, kept until the ticket is taken */
    } late_runs[KILN_READOUT_SLOTS];
    int profile;
    int64_t profiled_runs;
    kiln_status (*hook)(void *user, int list, int done); /* plan_hook.h; NULL: none */
    void *hook_user;
    int anomaly;              /* --detect-anomaly: steps run one by one, outputs checked (plan_anomaly.c) */
    double anomaly_s;         /* seconds spent checking */
    char plant_node[64];      /* tests: KILN_TEST_ANOMALY=NODE@STEP poisons that node's output */
    uint64_t plant_step;      /* 0: nothing planted */
};

/* a value's storage dtype on the plan's backend */
kiln_dtype kiln_plan_dtype(const kiln_plan *pl, kiln_value v);
/* a value's address (views included); NULL for an input bound in place and not yet bound */
void *kiln_plan_ptr(const kiln_plan *pl, kiln_value v);
/* plan_steps.c: makes and prepares the step list of one batch size */
kiln_status kiln_plan_build_list(kiln_plan *pl, int64_t batch, kiln_steplist *L, size_t *workspace);
/* the outputs of node i's step written rounded to its 16 bits: those the kernel of its op declares
 * (kiln_kernel.round_out) on the plan's backend, or on the one named by round_outputs_as, where autocast marked it */
uint8_t kiln_plan_round_out(const kiln_plan *pl, int i);
void kiln_plan_free_list(kiln_plan *pl, kiln_steplist *L);
/* plan_late.c: around a run with late read-outs (kiln_plan_set_late_loss) */
kiln_status kiln_plan_late_begin(kiln_plan *pl);
void kiln_plan_late_end(kiln_plan *pl, kiln_status st);
/* plan_info.c: "forward", "backward", "recompute" or "other" (the loss read-out), as kiln inspect says */
const char *kiln_plan_step_phase(const kiln_plan *pl, const kiln_step *s);
/* plan_anomaly.c (--detect-anomaly): the plan's float inputs when a run begins; a step's outputs after it ran */
kiln_status kiln_plan_check_inputs(kiln_plan *pl, const kiln_steplist *L);
kiln_status kiln_plan_check_step(kiln_plan *pl, const kiln_step *s);

#endif
