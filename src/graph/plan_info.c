/* What a compiled plan runs, step by step, for `kiln inspect` and the FLOP
 * counts of `kiln bench step`: each step of the max_batch list with its op,
 * tensors (shapes with the batch resolved, layouts), attributes and epilogue;
 * what the backend's kernel table says about it (the implementation chosen,
 * the reorders it makes on every run); and its arithmetic from the op table. */
#include <stdio.h>
#include <string.h>
#include "graph/internal/plan.h"

_Static_assert(KILN_STEP_MAX_ARGS >= KILN_OP_MAX_IN && KILN_STEP_MAX_ARGS >= KILN_OP_MAX_OUT, "kiln_step_info holds every argument");

static const kiln_steplist *first_list(const kiln_plan *pl) { return pl && pl->nlists ? &pl->lists[0] : NULL; }

int kiln_plan_step_count(const kiln_plan *pl) {
    const kiln_steplist *L = first_list(pl);
    return L ? L->nsteps : 0;
}

/* a layout tag is the channel block of oneDNN's nChw<b>c (the cpu backend's 16), or channels last (the cuda's) */
static void arg(const kiln_tdesc *t, kiln_step_arg *a) {
    a->ndim = t->ndim;
    memcpy(a->shape, t->shape, sizeof a->shape);
    const char *half = t->dtype == KILN_BF16 ? " bf16" : t->dtype == KILN_F16 ? " fp16" : ""; /* half storage */
    if (t->layout == KILN_LAYOUT_NHWC) snprintf(a->layout, sizeof a->layout, "nhwc%s", half);
    else if (t->layout) snprintf(a->layout, sizeof a->layout, "nChw%dc%s", t->layout, half);
    else snprintf(a->layout, sizeof a->layout, "plain%s", half);
}

static double step_flops(const kiln_plan *pl, const kiln_step *s, int64_t batch) {
    const kiln_op_def *d = kiln_op_get(s->op);
    if (s->node < 0 || !d || !d->flops) return 0;
    return d->flops(pl->g, &pl->g->nodes[s->node], batch);
}

/* autodiff appends its nodes after the forward ones */
const char *kiln_plan_step_phase(const kiln_plan *pl, const kiln_step *s) {
    return s->node < 0 ? "other" : pl->g->nodes[s->node].recompute_of >= 0 ? "recompute"
           : pl->o.training && s->node >= pl->nfwd ? "backward" : "forward";
}

/* the images a slice of the depth-first segment holding step i takes (backend.h), 0 outside one */
static int64_t depth_first_slice(const kiln_steplist *L, int i) {
    for (int h = 0; h <= i; h++) {
        int n = L->steps[h].depth_first.steps;
        if (n > 1 && i < h + n) return L->steps[h].depth_first.images;
        if (n > 1) h += n - 1;
    }
    return 0;
}

/* step i writes the scales a later step's kernel applies to its weights (a backend's batch norm fold at no pass
 * over the weights) */
static int scales_only(const kiln_steplist *L, int i) {
    for (int j = i + 1; L->steps[i].nout && j < L->nsteps; j++)
        if (L->steps[j].w_scale && L->steps[j].w_scale == L->steps[i].out[0].data) return 1;
    return 0;
}

kiln_status kiln_plan_step_info(const kiln_plan *pl, int i, kiln_step_info *out) {
    memset(out, 0, sizeof *out);
    const kiln_steplist *L = first_list(pl);
    if (!L || i < 0 || i >= L->nsteps)
        return kiln_fail(KILN_ERR_INVALID_ARG, "plan: no step %d (it has %d)", i, L ? L->nsteps : 0);
    const kiln_step *s = &L->steps[i];
    out->name = s->name;
    out->op = kiln_op_name(s->op);
    out->phase = kiln_plan_step_phase(pl, s);
    out->nin = s->nin;
    out->nout = s->nout;
    for (int k = 0; k < s->nin; k++) arg(&s->in[k], &out->in[k]);
    for (int k = 0; k < s->nout; k++) arg(&s->out[k], &out->out[k]);
    kiln_op_format_attrs(s->op, &s->attr, out->attrs, sizeof out->attrs);
    out->precision = kiln_precision_name(s->precision);
    out->epilogue = s->epilogue == KILN_EPI_RELU           ? "relu"
                    : s->epilogue == KILN_EPI_RELU_BWD_MASK ? "relu_bwd_mask"
                    : s->epilogue == KILN_EPI_ADD_RELU      ? "add_relu"
                                                            : "";
    const kiln_kernel *k = &pl->be->kernels[s->op];
    if (k->describe) out->reorders = k->describe(s, out->kernel, sizeof out->kernel, &out->weight_reorders);
    int64_t slice = depth_first_slice(L, i);
    size_t len = strlen(out->kernel);
    if (s->w_scale && len < sizeof out->kernel)
        len += (size_t)snprintf(out->kernel + len, sizeof out->kernel - len, ", weights times the fold's scales");
    if (scales_only(L, i)) snprintf(out->kernel, sizeof out->kernel, "scales only");
    len = strlen(out->kernel);
    if (slice && s->kobj && len < sizeof out->kernel)
        snprintf(out->kernel + len, sizeof out->kernel - len, ", depth-first by %lld", (long long)slice);
    out->flops = step_flops(pl, s, L->batch);
    return KILN_OK;
}

double kiln_plan_flops(const kiln_plan *pl) {
    const kiln_steplist *L = first_list(pl);
    double total = 0;
    for (int i = 0; L && i < L->nsteps; i++) total += step_flops(pl, &L->steps[i], L->batch);
    return total;
}
