/* kiln tune: compile a zoo model's plans with autotuning on, only for the
 * decisions it leaves in the autotune cache, and report what the tuner did
 * (src/kernels/dnnl/conv_tune.c's counters and list of choices). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backends/internal/backend.h"
#include "kernels/internal/dnnl_ops.h"
#include "kiln/train.h"
#include "kiln/tune.h"

_Static_assert(sizeof(((kiln_tune_choice *)0)->problem) == KILN_AUTOTUNE_PROBLEM_MAX &&
                   sizeof(((kiln_tune_choice *)0)->decision) == KILN_AUTOTUNE_DECISION_MAX,
               "kiln_tune_choice holds the tuner's strings");

kiln_tune_config kiln_tune_defaults(void) {
    kiln_tune_config c = {.model = "resnet20", .batch = 32};
    return c;
}

void kiln_tune_result_free(kiln_tune_result *r) {
    free(r->choices);
    r->choices = NULL;
    r->nchoices = 0;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* the plans training and inference compile, autotuned; nothing is run */
static kiln_status compile_plans(const kiln_tune_config *c) {
    kiln_graph *g = kiln_graph_new();
    kiln_params *P = NULL;
    kiln_model m;
    kiln_status st = kiln_model_build_ex(g, c->model, &c->model_opts, &m);
    if (st == KILN_OK) st = kiln_params_new_on(g, "cpu", &P);
    for (int eval = c->eval_only; st == KILN_OK && eval <= 1; eval++) {
        kiln_compile_opts o = kiln_compile_defaults();
        o.training = !eval;
        o.max_batch = c->batch;
        o.autotune = 1;
        kiln_plan *pl = NULL;
        kiln_value outs[2] = {m.loss, m.out};
        st = kiln_compile(g, P, outs, eval ? 2 : 1, &o, &pl);
        kiln_plan_free(pl);
    }
    kiln_params_free(P);
    kiln_graph_free(g);
    return st;
}

static kiln_status collect(kiln_tune_result *r) {
    kiln_autotune_stats s;
    kiln_autotune_stats_get(&s);
    r->tuned = s.tuned;
    r->remembered = s.remembered;
    r->candidates = s.candidates;
    r->over_budget = s.over_budget;
    r->unsure = s.unsure;
    r->tune_seconds = s.seconds;
    int n = kiln_autotune_choices(NULL, 0);
    kiln_autotune_choice *all = calloc((size_t)(n ? n : 1), sizeof *all);
    r->choices = calloc((size_t)(n ? n : 1), sizeof *r->choices);
    if (!all || !r->choices) {
        free(all);
        return kiln_fail(KILN_ERR_NOMEM, "tune: out of memory");
    }
    int got = kiln_autotune_choices(all, n); /* another thread cannot add any: compiling is over */
    r->nchoices = got < n ? got : n;
    for (int i = 0; i < r->nchoices; i++) {
        kiln_tune_choice *t = &r->choices[i];
        memcpy(t->problem, all[i].problem, sizeof t->problem);
        snprintf(t->dir, sizeof t->dir, "%s", all[i].dir);
        memcpy(t->decision, all[i].decision, sizeof t->decision);
        t->us = all[i].us;
        t->remembered = all[i].remembered;
        t->candidates = all[i].candidates;
        t->unsure = all[i].unsure;
    }
    free(all);
    return KILN_OK;
}

kiln_status kiln_tune(const kiln_tune_config *c, kiln_tune_result *r) {
    memset(r, 0, sizeof *r);
    if (c->batch < 1 || c->batch > KILN_MAX_BATCH)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--batch-size is %lld; use 1..%lld", (long long)c->batch, (long long)KILN_MAX_BATCH);
    double t0 = now_s();
    kiln_autotune_stats_reset(); /* the counters and choices of this command alone */
    kiln_autotune_set_retune(c->retune);
    kiln_status st = compile_plans(c);
    kiln_autotune_set_retune(0);
    if (st == KILN_OK) st = collect(r);
    r->seconds = now_s() - t0;
    kiln_cache_path("", r->cache, sizeof r->cache);
    if (st != KILN_OK) kiln_tune_result_free(r);
    return st == KILN_OK ? st : kiln_fail_context(st, "tune %s", c->model ? c->model : "?");
}
