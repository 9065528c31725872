/* kiln bench step: compile a zoo model for one batch size, bind synthetic data
 * once, warm up, then time each step alone and report the median (robust to
 * the odd slow step on a shared machine). FLOPs are the plan's steps' (the
 * op table's count of conv and linear work), as the peer benchmark counts
 * them from PyTorch's modules. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "graph/internal/graph.h"
#include "kiln/alloc.h"
#include "kiln/bench.h"
#include "kiln/optim.h"
#include "train/internal/bench_util.h"

kiln_bench_step_config kiln_bench_step_defaults(void) {
    kiln_bench_step_config c = {.model = "resnet20", .batch = 64, .warmup = 3, .steps = 20, .autotune = 1, .depth_first = 1, .seed = 1};
    return c;
}

/* synthetic inputs of the model's shapes: images uniform in [-1, 1] (a language
 * model's: token ids in [0, vocab)), labels in [0, classes) (f32 targets, as
 * mlp-deep's, uniform in [-1, 1]) */
static kiln_status bind_synthetic(kiln_plan *pl, const kiln_graph *g, const kiln_model *m, int64_t batch, uint64_t seed,
                                  float **x, int32_t **y) {
    const kiln_val *X = &g->vals[m->x];
    int64_t nx = batch;
    for (int d = 1; d < X->ndim; d++) nx *= X->shape[d];
    *x = kiln_alloc((size_t)nx * sizeof **x);
    const kiln_val *Y = &g->vals[m->y];
    int64_t ny = Y->dtype == KILN_F32 ? kiln_val_numel(Y, batch) : batch * (m->block > 0 ? m->block : 1);
    *y = kiln_alloc((size_t)ny * sizeof **y);
    if (!*x || !*y) return kiln_fail(KILN_ERR_NOMEM, "bench step: %lld input values", (long long)nx);
    kiln_bench_fill_uniform(*x, nx, seed);
    if (m->block > 0)
        for (int64_t i = 0; i < nx; i++) (*x)[i] = floorf((0.5f + 0.5f * (*x)[i]) * (float)(m->num_classes - 1) + 0.5f);
    if (Y->dtype == KILN_F32) kiln_bench_fill_uniform((float *)*y, ny, seed + 1);
    else
        for (int64_t i = 0; i < ny; i++) (*y)[i] = (int32_t)(i * 7 % m->num_classes);
    kiln_status st = kiln_plan_bind(pl, m->x, *x);
    if (st == KILN_OK) st = kiln_plan_bind(pl, m->y, *y);
    return st;
}

/* the peers' optimizers: SGD for the conv nets (conv_bench.py), AdamW and clipping for the gpt (w8_gpt.py) */
static kiln_status bench_optimizer(const kiln_model *m, kiln_params *P, kiln_optim **o) {
    kiln_optim_config oc = kiln_optim_defaults(m->block > 0 ? KILN_OPT_ADAMW : KILN_OPT_SGD);
    if (m->block > 0) {
        oc.lr = 3e-4f;
        oc.beta2 = 0.95f;
        oc.weight_decay = 0.1f;
    } else {
        oc.lr = 0.1f;
        oc.momentum = 0.9f;
        oc.weight_decay = 5e-4f;
    }
    kiln_status st = kiln_optim_new(&oc, P, o);
    if (st == KILN_OK && m->block > 0) kiln_optim_set_clip(*o, 1.0);
    return st;
}

static kiln_status time_steps(const kiln_bench_step_config *c, kiln_plan *pl, kiln_optim *o, double *t) {
    for (int i = 0; i < c->warmup + c->steps; i++) {
        if (c->profile && i == c->warmup && i > 0) kiln_plan_set_profile(pl, 1); /* the timed steps only */
        double t0 = kiln_bench_now_ms();
        kiln_plan_set_step(pl, (uint64_t)i);
        kiln_status st = kiln_plan_run(pl, c->batch);
        if (st == KILN_OK && o) st = kiln_optim_step(o);
        if (st == KILN_OK) (void)kiln_plan_loss(pl); /* waits for a device backend */
        if (st != KILN_OK) return st;
        if (i >= c->warmup) t[i - c->warmup] = kiln_bench_now_ms() - t0;
    }
    return KILN_OK;
}

kiln_status kiln_bench_step(const kiln_bench_step_config *c, kiln_bench_step_result *r) {
    memset(r, 0, sizeof *r);
    if (c->batch < 1 || c->steps < 1 || c->warmup < 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "bench step: batch %lld, %d steps, %d warm-up", (long long)c->batch,
                         c->steps, c->warmup);
    kiln_graph *g = kiln_graph_new();
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    kiln_optim *o = NULL;
    float *x = NULL;
    int32_t *y = NULL;
    double *t = calloc((size_t)c->steps, sizeof *t);
    kiln_model m;
    kiln_status st = t ? kiln_model_build_ex(g, c->model, &c->model_opts, &m) : kiln_fail(KILN_ERR_NOMEM, "bench step");
    if (st == KILN_OK) st = kiln_params_new_on(g, c->backend ? c->backend : "cpu", &P);
    if (st != KILN_OK) goto out;
    kiln_params_init(P, c->seed);
    kiln_compile_opts co = kiln_compile_defaults();
    co.training = !c->eval;
    co.max_batch = c->batch;
    co.backend = c->backend;
    co.autotune = c->autotune;
    co.depth_first = c->depth_first;
    co.checkpoint_activations = c->checkpoint_activations;
    co.precision = c->precision;
    co.matmul_precision = c->matmul_precision;
    co.seed = c->seed;
    co.profile = c->profile != NULL;
    kiln_value outs[2] = {m.loss, m.out}; /* as the trainer compiles: training keeps the loss alone to the end */
    if ((st = kiln_compile(g, P, outs, c->eval ? 2 : 1, &co, &pl)) != KILN_OK) goto out;
    if ((st = bind_synthetic(pl, g, &m, c->batch, c->seed, &x, &y)) != KILN_OK) goto out;
    if (!c->eval && (st = bench_optimizer(&m, P, &o)) != KILN_OK) goto out;
    if ((st = time_steps(c, pl, o, t)) != KILN_OK) goto out;
    if (c->profile) kiln_plan_profile_report(pl, c->profile, c->profile_len);
    r->ms = kiln_bench_median(t, c->steps);
    r->ms_min = t[0];
    r->ms_max = t[c->steps - 1];
    r->images_per_s = (double)c->batch / (r->ms * 1e-3);
    r->flops = kiln_plan_flops(pl);
    r->gflops = r->flops / (r->ms * 1e-3) * 1e-9;
    r->arena_mb = (double)kiln_plan_arena_bytes(pl) / (1024.0 * 1024.0);
    r->arena_mb_plain = (double)kiln_plan_arena_bytes_plain(pl) / (1024.0 * 1024.0);
    r->recomputed = kiln_plan_recomputed(pl);
    for (int i = 0; i < kiln_plan_step_count(pl); i++) {
        kiln_step_info si;
        if (kiln_plan_step_info(pl, i, &si) == KILN_OK) r->bf16_steps += strcmp(si.precision, "bf16") == 0;
    }
    for (int i = 0; i < kiln_params_count(P); i++) r->params += kiln_params_numel(P, i);
out:
    kiln_optim_free(o);
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
    kiln_free(x);
    kiln_free(y);
    free(t);
    return st == KILN_OK ? st : kiln_fail_context(st, "bench step %s", c->model ? c->model : "?");
}
