/* kiln inspect: a zoo model compiled as training (or inference) compiles it,
 * described step by step from the plan's public description
 * (kiln_plan_step_info) as one JSON document. */
#include <jansson.h>
#include <stdlib.h>
#include "kiln/inspect.h"
#include "kiln/train.h"

kiln_inspect_config kiln_inspect_defaults(void) {
    kiln_inspect_config c = {.model = "resnet20", .batch = 32, .autotune = 1};
    return c;
}

static json_t *args_json(const kiln_step_arg *a, int n) {
    json_t *arr = json_array();
    for (int k = 0; k < n; k++) {
        json_t *o = json_object(), *shape = json_array();
        for (int d = 0; d < a[k].ndim; d++) json_array_append_new(shape, json_integer(a[k].shape[d]));
        json_object_set_new(o, "shape", shape);
        json_object_set_new(o, "layout", json_string(a[k].layout));
        json_array_append_new(arr, o);
    }
    return arr;
}

static json_t *step_json(const kiln_step_info *s) {
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(s->name));
    json_object_set_new(o, "op", json_string(s->op));
    json_object_set_new(o, "phase", json_string(s->phase));
    json_object_set_new(o, "in", args_json(s->in, s->nin));
    json_object_set_new(o, "out", args_json(s->out, s->nout));
    json_object_set_new(o, "attrs", json_string(s->attrs));
    json_object_set_new(o, "epilogue", json_string(s->epilogue));
    json_object_set_new(o, "precision", json_string(s->precision));
    json_object_set_new(o, "kernel", json_string(s->kernel));
    json_object_set_new(o, "reorders", json_integer(s->reorders));
    json_object_set_new(o, "weight_reorders", json_integer(s->weight_reorders));
    json_object_set_new(o, "flops", json_real(s->flops));
    return o;
}

static kiln_status describe(const kiln_inspect_config *c, kiln_params *P, kiln_plan *pl, char **out) {
    json_t *doc = json_object(), *steps = json_array();
    int64_t params = 0, reorders = 0, wreorders = 0;
    for (int i = 0; i < kiln_params_count(P); i++) params += kiln_params_numel(P, i);
    kiln_status st = KILN_OK;
    for (int i = 0; st == KILN_OK && i < kiln_plan_step_count(pl); i++) {
        kiln_step_info s;
        if ((st = kiln_plan_step_info(pl, i, &s)) != KILN_OK) break;
        reorders += s.reorders;
        wreorders += s.weight_reorders;
        json_array_append_new(steps, step_json(&s));
    }
    json_object_set_new(doc, "model", json_string(c->model));
    json_object_set_new(doc, "batch", json_integer(c->batch));
    json_object_set_new(doc, "mode", json_string(c->eval ? "eval" : "train"));
    json_object_set_new(doc, "backend", json_string(kiln_plan_backend(pl)));
    json_object_set_new(doc, "params", json_integer(params));
    json_object_set_new(doc, "arena_bytes", json_integer((json_int_t)kiln_plan_arena_bytes(pl)));
    json_object_set_new(doc, "arena_bytes_plain", json_integer((json_int_t)kiln_plan_arena_bytes_plain(pl)));
    json_object_set_new(doc, "workspace_bytes", json_integer((json_int_t)kiln_plan_workspace_bytes(pl)));
    json_object_set_new(doc, "recomputed", json_integer(kiln_plan_recomputed(pl)));
    json_object_set_new(doc, "flops", json_real(kiln_plan_flops(pl)));
    json_object_set_new(doc, "reorders", json_integer(reorders));
    json_object_set_new(doc, "weight_reorders", json_integer(wreorders));
    json_object_set_new(doc, "steps", steps);
    *out = st == KILN_OK ? json_dumps(doc, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12)) : NULL;
    json_decref(doc);
    if (st == KILN_OK && !*out) st = kiln_fail(KILN_ERR_NOMEM, "inspect: out of memory (or a name that is not UTF-8)");
    return st;
}

kiln_status kiln_inspect(const kiln_inspect_config *c, char **json) {
    *json = NULL;
    if (c->batch < 1 || c->batch > KILN_MAX_BATCH)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--batch-size is %lld; use 1..%lld", (long long)c->batch, (long long)KILN_MAX_BATCH);
    kiln_graph *g = kiln_graph_new();
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    kiln_model m;
    kiln_status st = kiln_model_build_ex(g, c->model, &c->model_opts, &m);
    if (st == KILN_OK) st = kiln_params_new_on(g, "cpu", &P);
    if (st == KILN_OK) {
        kiln_compile_opts o = kiln_compile_defaults();
        o.training = !c->eval;
        o.max_batch = c->batch;
        o.autotune = c->autotune;
        o.checkpoint_activations = c->checkpoint_activations;
        o.precision = c->precision;
        kiln_value outs[2] = {m.loss, m.out}; /* as the trainer compiles: training reads the loss, evaluation the logits too */
        st = kiln_compile(g, P, outs, c->eval ? 2 : 1, &o, &pl);
    }
    if (st == KILN_OK) st = describe(c, P, pl, json);
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
    return st == KILN_OK ? st : kiln_fail_context(st, "inspect %s", c->model ? c->model : "?");
}
