/* Running a plan: bind the inputs (patched into the steps in place, or staged
 * by the backend), pick the step list of the batch size, and hand it to the
 * backend. No allocation, no shape work, no kernel choice per run. */
#include "base/internal/trace.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "graph/internal/plan.h"

kiln_status kiln_plan_bind(kiln_plan *pl, kiln_value v, const void *data) {
    for (int i = 0; pl && i < pl->ninputs; i++) {
        kiln_plan_input *in = &pl->inputs[i];
        if (in->v != v) continue;
        in->bound = data;
        for (int k = 0; k < in->npatches; k++) *in->patches[k].loc = (char *)data + in->patches[k].off;
        return KILN_OK;
    }
    return kiln_fail(KILN_ERR_INVALID_ARG, "bind: value %d is not an input of the plan", v);
}

void kiln_plan_set_step(kiln_plan *pl, uint64_t step) { pl->rc.counter = step; }

void kiln_plan_set_grad_scaler(kiln_plan *pl, const void *scaler) { pl->rc.amp = scaler; }

void kiln_plan_set_accumulate(kiln_plan *pl, int accumulate, double loss_scale) {
    pl->rc.accumulate = accumulate;
    pl->rc.loss_scale = loss_scale;
}

void kiln_plan_set_collective(kiln_plan *pl, int (*allreduce)(void *user, double *buf, int64_t n), void *user) {
    pl->rc.collective = (kiln_collective){allreduce, user};
}

static const kiln_steplist *list_for(const kiln_plan *pl, int64_t batch) {
    for (int i = 0; i < pl->nlists; i++)
        if (pl->lists[i].batch == batch) return &pl->lists[i];
    return NULL;
}

/* every input bound; staged ones copied in (a device backend may do this asynchronously) */
static kiln_status stage_inputs(kiln_plan *pl, int64_t batch) {
    for (int i = 0; i < pl->ninputs; i++) {
        kiln_plan_input *in = &pl->inputs[i];
        const kiln_val *V = &pl->g->vals[in->v];
        if (!in->bound) return kiln_fail(KILN_ERR_INVALID_ARG, "run: input '%s' is not bound", V->name);
        if (!in->staged) continue;
        kiln_status st = pl->be->stage_input(in->staged, in->bound, kiln_val_numel(V, batch), V->dtype);
        if (st != KILN_OK) return kiln_fail_context(st, "input '%s'", V->name);
    }
    return KILN_OK;
}

/* steps [from, to) of a list; with a hook (plan_hook.h) in segments that
 * end at the marked steps, the hook called after each */
static kiln_status run_steps(kiln_plan *pl, const kiln_steplist *L, int from, int to) {
    double *time = pl->profile ? L->time : NULL;
    if (!pl->hook || !L->mark)
        return kiln_backend_run(pl->be, L->steps + from, to - from, &pl->rc, time ? time + from : NULL);
    for (int a = from; a < to;) {
        int b = a;
        while (b + 1 < to && !L->mark[b]) b++;
        kiln_status st = kiln_backend_run(pl->be, L->steps + a, b + 1 - a, &pl->rc, time ? time + a : NULL);
        if (st == KILN_OK && L->mark[b]) st = pl->hook(pl->hook_user, (int)(L - pl->lists), b + 1);
        if (st != KILN_OK) return st;
        a = b + 1;
    }
    return KILN_OK;
}

/* steps [from, to) one by one, each a span named as kiln inspect names it */
static kiln_status run_spans(kiln_plan *pl, const kiln_steplist *L, int from, int to) {
    for (int i = from; i < to; i++) {
        double t0 = kiln_trace_now();
        kiln_status st = run_steps(pl, L, i, i + 1);
        kiln_trace_span_copy(L->steps[i].name, "kernel", t0, kiln_trace_now());
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}

/* --trace: the forward steps, then the backward ones (from the first step
 * that differentiates another), each a span holding its kernels' spans; on a
 * GPU the spans time the launches, not the kernels */
static kiln_status run_traced(kiln_plan *pl, const kiln_steplist *L) {
    int k = 0;
    while (k < L->nsteps && L->steps[k].fwd_step < 0) k++;
    double t0 = kiln_trace_now();
    kiln_status st = run_spans(pl, L, 0, k);
    double t1 = kiln_trace_now();
    kiln_trace_span("forward", "train", t0, t1);
    if (st != KILN_OK || k == L->nsteps) return st;
    st = run_spans(pl, L, k, L->nsteps);
    kiln_trace_span("backward", "train", t1, kiln_trace_now());
    return st;
}

/* --detect-anomaly: the inputs when the run begins, then every step's outputs after it (plan_anomaly.c) */
static kiln_status run_checked(kiln_plan *pl, const kiln_steplist *L) {
    kiln_status st = kiln_plan_check_inputs(pl, L);
    for (int i = 0; st == KILN_OK && i < L->nsteps; i++) {
        st = run_steps(pl, L, i, i + 1);
        if (st == KILN_OK) st = kiln_plan_check_step(pl, &L->steps[i]);
    }
    return st;
}

kiln_status kiln_plan_run(kiln_plan *pl, int64_t batch) {
    if (!pl->arena) return kiln_fail(KILN_ERR_INVALID_ARG, "run: the plan was compiled with plan_only (sizes, no memory)");
    const kiln_steplist *L = list_for(pl, batch);
    if (!L) {
        char sizes[96];
        size_t o = 0;
        for (int i = 0; i < pl->nlists && o < sizeof sizes; i++)
            o += (size_t)snprintf(sizes + o, sizeof sizes - o, "%s%lld", i ? ", " : "", (long long)pl->lists[i].batch);
        return kiln_fail(KILN_ERR_INVALID_ARG, "run: batch %lld was not compiled (the plan runs batches of %s; "
                         "add it to also_batches)", (long long)batch, sizes);
    }
    kiln_status st = stage_inputs(pl, batch);
    if (st != KILN_OK) return st;
    pl->loss_host = NAN;
    int late = pl->late && !pl->anomaly; /* --detect-anomaly checks every step's outputs as they come */
    if (late && (st = kiln_plan_late_begin(pl)) != KILN_OK) return st;
    st = pl->anomaly ? run_checked(pl, L) : kiln_trace_on() ? run_traced(pl, L) : run_steps(pl, L, 0, L->nsteps);
    if (late) kiln_plan_late_end(pl, st);
    else pl->tickets++;
    pl->last_late = late;
    if (pl->profile) pl->profiled_runs++;
    return st;
}

static int is_forward(const kiln_plan *pl, const kiln_step *s) {
    return s->node < pl->nfwd && (s->node < 0 || pl->g->nodes[s->node].recompute_of < 0);
}

static int reads(const kiln_step *s, uintptr_t lo, uintptr_t hi) {
    for (int k = 0; k < s->nin; k++) {
        const kiln_tdesc *t = &s->in[k];
        uintptr_t a = (uintptr_t)t->data, e = a + (uintptr_t)kiln_tdesc_span(t) * kiln_dtype_size(t->dtype);
        if (t->data && a < hi && lo < e) return 1;
    }
    return 0;
}

/* the forward nodes come first in the graph (autodiff appends its own); the read-out has none. Without
 * memory reuse every value keeps its own storage, so the steps before the first reader of what changed
 * still hold what the previous run computed from the same values. */
kiln_status kiln_plan_run_forward(kiln_plan *pl, int64_t batch, const void *changed, size_t bytes) {
    const kiln_steplist *L = list_for(pl, batch);
    if (!pl->arena || !L) return kiln_plan_run(pl, batch); /* its error */
    kiln_status st = stage_inputs(pl, batch);
    pl->loss_host = NAN;
    pl->last_late = 0; /* its read-out waits */
    uintptr_t lo = (uintptr_t)changed, hi = lo + bytes;
    int from = changed && !pl->o.reuse_memory ? -1 : 0;
    for (int i = 0; st == KILN_OK && i < L->nsteps; i++) {
        const kiln_step *s = &L->steps[i];
        if (!is_forward(pl, s)) continue;
        if (from < 0 && s->node >= 0 && !reads(s, lo, hi)) continue;
        from = i;
        st = kiln_backend_run(pl->be, s, 1, &pl->rc, NULL);
    }
    return st;
}

const void *kiln_plan_value(const kiln_plan *pl, kiln_value v) {
    if (!pl || v < 0 || v >= pl->g->nvals) return NULL;
    return kiln_plan_ptr(pl, v);
}

/* element i of a value in row-major order, through its strides */
static int64_t strided_at(const kiln_val *V, int64_t batch, int64_t i) {
    int64_t off = 0;
    for (int d = V->ndim - 1; d >= 0; d--) {
        int64_t n = d == 0 && V->batched ? batch : V->shape[d];
        off += (i % n) * V->stride[d];
        i /= n;
    }
    return off;
}

kiln_status kiln_plan_read(const kiln_plan *pl, kiln_value v, float *dst, int64_t n) {
    if (!pl || v < 0 || v >= pl->g->nvals) return kiln_fail(KILN_ERR_INVALID_ARG, "read: value %d is not in the plan", v);
    const kiln_val *V = &pl->g->vals[v];
    const char *src = kiln_plan_ptr(pl, v);
    if (!src) return kiln_fail(KILN_ERR_INVALID_ARG, "read: '%s' has no storage", V->name);
    if (V->half) /* never a plan output (pass_half_store.c) */
        return kiln_fail(KILN_ERR_INVALID_ARG, "read: '%s' is stored in 16 bits inside the plan; only its outputs are read",
                         V->name);
    int f64 = kiln_plan_dtype(pl, v) == KILN_F64, contiguous = kiln_val_contiguous(V);
    if (!f64 && contiguous) return pl->be->copy(dst, src, (size_t)n * sizeof(float), 0);
    int64_t batch = V->batched ? n / (kiln_val_numel(V, 1) ? kiln_val_numel(V, 1) : 1) : 1;
    char *host = NULL; /* a strided view in a device's memory: its whole extent comes over first */
    if (!pl->be->host_memory) {
        size_t bytes = (size_t)(n ? (contiguous ? n - 1 : strided_at(V, batch, n - 1)) + 1 : 1) * (f64 ? 8 : 4);
        if (!(host = malloc(bytes))) return kiln_fail(KILN_ERR_NOMEM, "read: out of memory");
        kiln_status st = pl->be->copy(host, src, bytes, 0);
        if (st != KILN_OK) {
            free(host);
            return st;
        }
        src = host;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t at = contiguous ? i : strided_at(V, batch, i);
        dst[i] = f64 ? (float)((const double *)src)[at] : ((const float *)src)[at];
    }
    free(host);
    return KILN_OK;
}

/* a late run's loss is taken here (waiting for it); its error, if any, is left to kiln_plan_take_loss */
double kiln_plan_loss(const kiln_plan *pl) {
    if (!pl->last_late) return pl->loss_host;
    double loss;
    (void)kiln_plan_take_loss((kiln_plan *)pl, pl->tickets, &loss);
    return loss;
}
