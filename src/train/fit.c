/* Plan-only compiles of a training configuration (internal/fit.h). */
#include "train/internal/fit.h"
#include <string.h>
#include "kiln/nn.h"

static kiln_status build(kiln_graph *g, const kiln_train_config *c, kiln_model *m, kiln_params **P) {
    kiln_model_opts mo = {.num_classes = c->num_classes, .fix_bias = c->fix_bias, .gpt = c->gpt};
    kiln_status st = kiln_model_build_ex(g, c->model, &mo, m);
    return st == KILN_OK ? kiln_params_new(g, KILN_F32, P) : st;
}

/* a plan-only compile at `batch`: KILN_ERR_NOMEM when it does not fit in budget (0: no limit) */
static kiln_status plan_size(kiln_graph *g, kiln_params *P, kiln_model *m, const kiln_train_config *c, int64_t batch,
                             double budget, size_t *arena) {
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    o.max_batch = batch;
    o.plan_only = 1;
    o.memory_budget = budget;
    o.checkpoint_activations = c->checkpoint_activations;
    kiln_plan *pl = NULL;
    kiln_status st = kiln_compile(g, P, &m->loss, 1, &o, &pl);
    if (st == KILN_OK && arena) *arena = kiln_plan_arena_bytes(pl);
    kiln_plan_free(pl);
    return st;
}

kiln_status kiln_find_batch_size_config(const kiln_train_config *c, double budget, int64_t limit, int64_t *batch,
                                        size_t *arena_bytes) {
    *batch = 0;
    if (!(budget > 0)) return kiln_fail(KILN_ERR_INVALID_ARG, "batch-size finder: the memory budget must be > 0");
    kiln_graph *g = kiln_graph_new();
    kiln_params *P = NULL;
    kiln_model m;
    kiln_status st = build(g, c, &m, &P);
    /* arena size grows with the batch: double until the budget refuses */
    for (int64_t b = 1; st == KILN_OK && b <= limit; b *= 2) {
        size_t arena = 0;
        kiln_status s2 = plan_size(g, P, &m, c, b, budget, &arena);
        if (s2 == KILN_ERR_NOMEM) break;
        if (s2 != KILN_OK) {
            st = s2;
            break;
        }
        *batch = b;
        if (arena_bytes) *arena_bytes = arena;
    }
    kiln_params_free(P);
    kiln_graph_free(g);
    if (st == KILN_OK && *batch == 0)
        st = kiln_fail(KILN_ERR_NOMEM, "batch-size finder: not even a batch of 1 fits in %.1f MiB", budget / 1048576.0);
    return st;
}

int kiln_train_plan_has_op(const kiln_train_config *c, const char *op) {
    kiln_graph *g = kiln_graph_new();
    kiln_params *P = NULL;
    kiln_model m;
    kiln_plan *pl = NULL;
    int found = 0;
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    o.max_batch = 1; /* a real compile (a plan-only one makes no steps), at batch 1: small */
    o.autotune = 0;
    if (build(g, c, &m, &P) == KILN_OK && kiln_compile(g, P, &m.loss, 1, &o, &pl) == KILN_OK)
        for (int i = 0; i < kiln_plan_step_count(pl) && !found; i++) {
            kiln_step_info info;
            found = kiln_plan_step_info(pl, i, &info) == KILN_OK && strcmp(info.op, op) == 0;
        }
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
    return found;
}

kiln_status kiln_train_arena(const kiln_train_config *c, int64_t batch, size_t *arena_bytes) {
    kiln_graph *g = kiln_graph_new();
    kiln_params *P = NULL;
    kiln_model m;
    kiln_status st = build(g, c, &m, &P);
    if (st == KILN_OK) st = plan_size(g, P, &m, c, batch, 1e18, arena_bytes);
    kiln_params_free(P);
    kiln_graph_free(g);
    return st;
}

kiln_status kiln_find_batch_size(const char *model, double budget, int64_t limit, int64_t *batch, size_t *arena_bytes) {
    kiln_train_config c = kiln_train_defaults();
    c.model = model;
    return kiln_find_batch_size_config(&c, budget, limit, batch, arena_bytes);
}
