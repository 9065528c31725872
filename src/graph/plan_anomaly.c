/* Anomaly detection (--detect-anomaly; the guide's torch.autograd.detect_anomaly):
 * the plan runs its steps one at a time and checks every float output for
 * NaN/Inf after its step; the first one found stops the run naming the node
 * as `kiln inspect` does, its phase, the output, and which inputs were already
 * non-finite (none: the op made it). Outputs of earlier steps were checked
 * when they were written, so a non-finite input is a plan input (the data),
 * a parameter or a buffer. The check reads only each output's extent, as
 * integers (exponent all ones), vectorised and over the compute team for
 * large tensors. Host memory only: a device backend would need a copy of
 * every output, which is not built. Off, it costs nothing: plan_exec.c takes
 * this path only when it is on. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/internal/trace.h"
#include "graph/internal/plan.h"

#define PARALLEL_FROM 32768 /* as the kernels: below this the team costs more than it saves */

/* 1 when some element's exponent is all ones (NaN or Inf); integer compares and
 * an OR, which plain SSE2 vectorises (no float compare, no early exit) */
static int any_bad_f32(const float *x, int64_t n) {
    uint32_t bad = 0;
#pragma omp parallel for simd reduction(| : bad) if (n > PARALLEL_FROM) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return bad != 0;
}

static int any_bad_f64(const double *x, int64_t n) {
    uint64_t bad = 0;
#pragma omp parallel for simd reduction(| : bad) if (n > PARALLEL_FROM) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        uint64_t u;
        memcpy(&u, &x[i], sizeof u);
        bad |= (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
    }
    return bad != 0;
}

/* 1 when n elements from x (f32 or f64) are all finite */
static int run_finite(const void *x, kiln_dtype dt, int64_t n) {
    return dt == KILN_F64 ? !any_bad_f64(x, n) : !any_bad_f32(x, n);
}

static int is_float(kiln_dtype dt) { return dt == KILN_F32 || dt == KILN_F64; }

/* 1 when every element of t is finite (non-float tensors and absent ones are);
 * a strided view is read row by row along its last dimension */
static int tensor_finite(const kiln_tdesc *t) {
    if (!t->data || !t->numel || !is_float(t->dtype)) return 1;
    size_t es = t->dtype == KILN_F64 ? 8 : 4;
    if (t->contiguous || t->layout || t->ndim == 0) return run_finite(t->data, t->dtype, t->numel);
    int last = t->ndim - 1;
    int64_t rows = t->numel / t->shape[last], idx[KILN_MAX_DIMS] = {0};
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0;
        for (int d = 0; d < last; d++) off += idx[d] * t->stride[d];
        const char *row = (const char *)t->data + (size_t)off * es;
        for (int64_t j = 0; j < t->shape[last]; j++)
            if (!run_finite(row + (size_t)(j * t->stride[last]) * es, t->dtype, 1)) return 0;
        for (int d = last - 1; d >= 0 && ++idx[d] == t->shape[d]; d--) idx[d] = 0;
    }
    return 1;
}

/* what the first bad element is, for the message ("NaN at element 12"); only after a failed check */
static void first_bad(const kiln_tdesc *t, char *buf, size_t len) {
    int64_t span = t->layout ? t->numel : kiln_tdesc_span(t);
    for (int64_t i = 0; i < span; i++) {
        double v = t->dtype == KILN_F64 ? ((const double *)t->data)[i] : ((const float *)t->data)[i];
        if (!isfinite(v)) {
            snprintf(buf, len, "%s at element %lld of %lld", isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf", (long long)i,
                     (long long)t->numel);
            return;
        }
    }
    snprintf(buf, len, "non-finite");
}

static int overlaps(const kiln_tdesc *a, const kiln_tdesc *b) {
    if (!a->data || !b->data) return 0;
    size_t ea = a->dtype == KILN_F64 ? 8 : 4, eb = b->dtype == KILN_F64 ? 8 : 4;
    const char *a0 = a->data, *a1 = a0 + (size_t)kiln_tdesc_span(a) * ea;
    const char *b0 = b->data, *b1 = b0 + (size_t)kiln_tdesc_span(b) * eb;
    return a0 < b1 && b0 < a1;
}

/* a value as messages name it: a view (a flattened input) with the value it views */
static const char *value_name(const kiln_plan *pl, const kiln_step *s, int k, int out, char *buf, size_t len) {
    if (s->node < 0) return out ? "the loss read-out" : "the loss";
    kiln_value v = out ? pl->g->nodes[s->node].out[k] : pl->g->nodes[s->node].in[k];
    if (v < 0) return "?";
    kiln_value r = kiln_val_root(pl->g, v);
    if (r == v) return pl->g->vals[v].name;
    snprintf(buf, len, "%s', a view of '%s", pl->g->vals[v].name, pl->g->vals[r].name); /* the caller quotes it */
    return buf;
}

/* the message: the node, its phase and op, the output, then the inputs that were already non-finite */
static kiln_status report(const kiln_plan *pl, const kiln_step *s, int k) {
    char what[96], inputs[512] = "", name[160];
    first_bad(&s->out[k], what, sizeof what);
    size_t o = 0;
    for (int j = 0; j < s->nin && o < sizeof inputs; j++) {
        if (overlaps(&s->in[j], &s->out[k])) continue; /* written in place: what it held is gone */
        if (tensor_finite(&s->in[j])) continue;
        char bad[96], name[160];
        first_bad(&s->in[j], bad, sizeof bad);
        o += (size_t)snprintf(inputs + o, sizeof inputs - o, "%sinput %d '%s' was already non-finite (%s)", o ? "; " : "",
                              j, value_name(pl, s, j, 0, name, sizeof name), bad);
    }
    return kiln_fail(KILN_ERR_NUMERIC, "anomaly: node '%s' (%s, %s) wrote %s to its output %d '%s'; %s", s->name,
                     kiln_op_name(s->op), kiln_plan_step_phase(pl, s), what, k, value_name(pl, s, k, 1, name, sizeof name),
                     o ? inputs : "all inputs finite: the op produced it");
}

/* KILN_TEST_ANOMALY=NODE@STEP (tests only, read when detection is switched on):
 * the step's first output is poisoned with a NaN in run STEP (the plan's step
 * counter + 1, i.e. the training step without --accumulate) */
static void read_plant(kiln_plan *pl) {
    pl->plant_step = 0;
    const char *e = getenv("KILN_TEST_ANOMALY"), *at = e ? strrchr(e, '@') : NULL;
    if (!at || (size_t)(at - e) >= sizeof pl->plant_node) return;
    memcpy(pl->plant_node, e, (size_t)(at - e));
    pl->plant_node[at - e] = 0;
    pl->plant_step = strtoull(at + 1, NULL, 10);
}

static void plant(const kiln_plan *pl, const kiln_step *s) {
    if (pl->plant_step != pl->rc.counter + 1 || strcmp(s->name, pl->plant_node) || !s->nout || !s->out[0].data) return;
    if (s->out[0].dtype == KILN_F64) ((double *)s->out[0].data)[0] = NAN;
    else if (s->out[0].dtype == KILN_F32) ((float *)s->out[0].data)[0] = NAN;
}

kiln_status kiln_plan_set_detect_anomaly(kiln_plan *pl, int on) {
    if (on && !pl->be->host_memory)
        return kiln_fail(KILN_ERR_INVALID_ARG, "anomaly detection is not on this device (%s: its memory is not host "
                         "memory, and copying every output back is not built); use --device cpu", pl->be->name);
    pl->anomaly = on;
    pl->anomaly_s = 0;
    if (on) read_plant(pl);
    return KILN_OK;
}

double kiln_plan_anomaly_seconds(const kiln_plan *pl) { return pl ? pl->anomaly_s : 0; }

/* a float input of the plan (the batch) holding NaN/Inf: named with the first node that reads it. A ReLU
 * folded into that node would turn a NaN into 0 (max(x, 0)), hiding it from the outputs until backward. */
static kiln_status check_inputs(const kiln_plan *pl, const kiln_steplist *L) {
    for (int i = 0; i < pl->ninputs; i++) {
        const kiln_plan_input *in = &pl->inputs[i];
        const kiln_val *V = &pl->g->vals[in->v];
        kiln_tdesc t = kiln_tdesc_flat(in->staged ? in->staged : (void *)in->bound, kiln_plan_dtype(pl, in->v),
                                       kiln_val_numel(V, L->batch));
        if (tensor_finite(&t)) continue;
        char what[96], name[160];
        first_bad(&t, what, sizeof what);
        for (int k = 0; k < L->nsteps; k++)
            for (int j = 0; j < L->steps[k].nin; j++)
                if (overlaps(&L->steps[k].in[j], &t)) {
                    const kiln_step *s = &L->steps[k];
                    return kiln_fail(KILN_ERR_NUMERIC, "anomaly: node '%s' (%s, %s), the first to read the input '%s': "
                                     "input %d '%s' was already non-finite (%s) when the run began", s->name,
                                     kiln_op_name(s->op), kiln_plan_step_phase(pl, s), V->name, j,
                                     value_name(pl, s, j, 0, name, sizeof name), what);
                }
        return kiln_fail(KILN_ERR_NUMERIC, "anomaly: the input '%s' is non-finite (%s); no step reads it", V->name, what);
    }
    return KILN_OK;
}

kiln_status kiln_plan_check_inputs(kiln_plan *pl, const kiln_steplist *L) {
    double t0 = kiln_trace_now();
    kiln_status st = check_inputs(pl, L);
    pl->anomaly_s += kiln_trace_now() - t0;
    return st;
}

kiln_status kiln_plan_check_step(kiln_plan *pl, const kiln_step *s) {
    double t0 = kiln_trace_now();
    if (pl->plant_step) plant(pl, s);
    for (int k = 0; k < s->nout; k++)
        if (!tensor_finite(&s->out[k])) return report(pl, s, k);
    pl->anomaly_s += kiln_trace_now() - t0;
    return KILN_OK;
}
