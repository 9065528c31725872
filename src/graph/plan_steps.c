/* Building a plan's step list for one batch size: every node of the
 * execution order becomes a step whose tensors are resolved to addresses,
 * shapes and strides, then the backend prepares it (picks the kernel, makes
 * and autotunes kernel objects). A read-out step copies the loss to the host
 * last. Inputs the backend reads in place are patched in when bound. */
#include <stdlib.h>
#include <string.h>
#include "base/internal/rng.h"
#include "graph/internal/plan.h"

/* dropout's backward (and a recomputation) draws the mask of its forward node */
uint64_t kiln_node_rng_key(const kiln_graph *g, int node, uint64_t seed) {
    return kiln_rng_key(seed, 0xd509, (uint64_t)kiln_node_key_id(g, node));
}

kiln_dtype kiln_plan_dtype(const kiln_plan *pl, kiln_value v) {
    const kiln_val *V = &pl->g->vals[v];
    if (V->half) return V->half == 2 ? KILN_F16 : KILN_BF16; /* the half-storage pass's */
    return V->dtype == KILN_F32 ? pl->be->float_dtype : V->dtype;
}

static kiln_plan_input *input_of(const kiln_plan *pl, kiln_value root) {
    for (int i = 0; i < pl->ninputs; i++)
        if (pl->inputs[i].v == root) return &pl->inputs[i];
    return NULL;
}

/* the start of a root value's storage */
static char *root_ptr(const kiln_plan *pl, kiln_value r) {
    const kiln_val *R = &pl->g->vals[r];
    kiln_params *P = pl->P;
    if (R->kind == KILN_VAL_ACT) return pl->offset && pl->offset[r] >= 0 && pl->arena ? pl->arena + pl->offset[r] : NULL;
    if (R->kind == KILN_VAL_PARAM) return (char *)kiln_params_data(P) + (size_t)kiln_params_offset(P, R->param) * pl->elem;
    if (R->kind == KILN_VAL_PARAM_GRAD) return (char *)kiln_params_grad(P) + (size_t)kiln_params_offset(P, R->param) * pl->elem;
    if (R->kind == KILN_VAL_BUFFER) return kiln_params_buffer_data(P, R->param);
    const kiln_plan_input *in = input_of(pl, r);
    return in ? (in->staged ? in->staged : (char *)in->bound) : NULL;
}

void *kiln_plan_ptr(const kiln_plan *pl, kiln_value v) {
    char *base = root_ptr(pl, kiln_val_root(pl->g, v));
    return base ? base + (size_t)pl->g->vals[v].offset * kiln_dtype_size(kiln_plan_dtype(pl, v)) : NULL;
}

static kiln_status add_patch(kiln_plan_input *in, void **loc, size_t off) {
    if (in->npatches == in->cap) {
        int cap = in->cap ? 2 * in->cap : 8;
        kiln_patch *np = realloc(in->patches, (size_t)cap * sizeof *np);
        if (!np) return kiln_fail(KILN_ERR_NOMEM, "compile: out of memory");
        in->patches = np;
        in->cap = cap;
    }
    in->patches[in->npatches++] = (kiln_patch){loc, off};
    return KILN_OK;
}

/* a value as a kernel argument for this batch; absent (-1) gives numel 0 */
static kiln_status resolve(kiln_plan *pl, kiln_value v, int64_t batch, kiln_tdesc *t) {
    memset(t, 0, sizeof *t);
    if (v < 0) return KILN_OK;
    const kiln_val *V = &pl->g->vals[v];
    t->dtype = kiln_plan_dtype(pl, v);
    t->ndim = V->ndim;
    t->layout = V->layout;
    for (int d = 0; d < V->ndim; d++) {
        t->shape[d] = d == 0 && V->batched ? batch : V->shape[d];
        t->stride[d] = V->stride[d];
    }
    t->numel = kiln_val_numel(V, batch);
    t->contiguous = kiln_val_contiguous(V);
    t->batched = V->batched;
    t->data = kiln_plan_ptr(pl, v);
    kiln_value r = kiln_val_root(pl->g, v);
    kiln_plan_input *in = pl->g->vals[r].kind == KILN_VAL_INPUT ? input_of(pl, r) : NULL;
    if (in && !in->staged) return add_patch(in, &t->data, (size_t)V->offset * kiln_dtype_size(t->dtype));
    return KILN_OK;
}

uint8_t kiln_plan_round_out(const kiln_plan *pl, int i) {
    const kiln_node *n = &pl->g->nodes[i];
    const kiln_backend *be = pl->o.round_outputs_as ? kiln_backend_get(pl->o.round_outputs_as) : pl->be;
    return (uint8_t)kiln_node_round_out(n, be ? be->kernels[n->op].round_out : 0);
}

static kiln_status node_step(kiln_plan *pl, int i, int64_t batch, const int *step_of, const uint64_t *bwd_ops, kiln_step *s) {
    const kiln_node *n = &pl->g->nodes[i];
    s->op = n->op;
    s->name = n->name;
    s->node = i;
    s->batch = batch;
    s->nin = n->nin;
    s->nout = n->nout;
    s->epilogue = n->epilogue;
    s->precision = n->precision;
    s->round_out = kiln_plan_round_out(pl, i);
    s->attr = n->attr;
    s->fwd_step = n->fwd >= 0 ? step_of[n->fwd] : -1;
    /* a recomputation is made as its original */
    memcpy(s->bwd_ops, &bwd_ops[(size_t)(n->recompute_of >= 0 ? n->recompute_of : i) * KILN_BWD_WORDS], sizeof s->bwd_ops);
    if (kiln_op_get(n->op)->flags & KILN_OPF_RANDOM) s->key = kiln_node_rng_key(pl->g, i, pl->o.seed);
    kiln_status st = KILN_OK;
    for (int k = 0; k < n->nin && st == KILN_OK; k++) st = resolve(pl, n->in[k], batch, &s->in[k]);
    for (int k = 0; k < n->nout && st == KILN_OK; k++) {
        st = resolve(pl, n->out[k], batch, &s->out[k]);
        s->acc[k] = n->acc[k];
        s->param_grad[k] = n->out[k] >= 0 && pl->g->vals[n->out[k]].kind == KILN_VAL_PARAM_GRAD;
    }
    return st;
}

/* the loss (a scalar output) goes to the host at the end of every run */
static kiln_status readout_step(kiln_plan *pl, int64_t batch, kiln_step *s) {
    s->op = KILN_OP_READOUT;
    s->name = "readout";
    s->node = -1;
    s->fwd_step = -1;
    s->batch = batch;
    s->nin = s->nout = 1;
    s->out[0] = kiln_tdesc_flat(&pl->loss_host, KILN_F64, 1);
    return resolve(pl, pl->outputs[0], batch, &s->in[0]);
}

kiln_status kiln_plan_build_list(kiln_plan *pl, int64_t batch, kiln_steplist *L, size_t *workspace) {
    const kiln_graph *g = pl->g;
    const kiln_val *loss = &g->vals[pl->outputs[0]];
    int readout = loss->ndim == 0 && loss->dtype == KILN_F32;
    L->batch = batch;
    L->steps = calloc((size_t)pl->norder + 1, sizeof *L->steps);
    L->time = calloc((size_t)pl->norder + 1, sizeof *L->time);
    int *step_of = malloc((size_t)(g->nnodes ? g->nnodes : 1) * sizeof *step_of);
    uint64_t *bwd_ops = calloc((size_t)(g->nnodes ? g->nnodes : 1) * KILN_BWD_WORDS, sizeof *bwd_ops);
    kiln_status st = KILN_OK;
    if (!L->steps || !L->time || !step_of || !bwd_ops) st = kiln_fail(KILN_ERR_NOMEM, "compile: out of memory");
    for (int i = 0; st == KILN_OK && i < g->nnodes; i++) {
        step_of[i] = -1;
        kiln_op op = g->nodes[i].op;
        if (g->nodes[i].fwd >= 0 && !g->nodes[i].dead) bwd_ops[(size_t)g->nodes[i].fwd * KILN_BWD_WORDS + op / 64] |= 1ull << (op % 64);
    }
    for (int s = 0; st == KILN_OK && s < pl->norder; s++) {
        step_of[pl->order[s]] = s;
        st = node_step(pl, pl->order[s], batch, step_of, bwd_ops, &L->steps[s]);
        L->nsteps = s + 1;
    }
    if (st == KILN_OK && readout) st = readout_step(pl, batch, &L->steps[L->nsteps++]);
    kiln_prep prep = {&pl->o, L->steps, L->nsteps, 0};
    for (int s = 0; st == KILN_OK && s < L->nsteps; s++) st = kiln_backend_prepare(pl->be, &L->steps[s], &prep);
    if (st == KILN_OK && pl->be->prepare_list && pl->arena) st = pl->be->prepare_list(&prep);
    if (prep.workspace > *workspace) *workspace = prep.workspace;
    free(step_of);
    free(bwd_ops);
    if (st != KILN_OK && batch != pl->o.max_batch) return kiln_fail_context(st, "compile: batch %lld", (long long)batch);
    return st;
}

void kiln_plan_free_list(kiln_plan *pl, kiln_steplist *L) {
    for (int s = 0; L->steps && s < L->nsteps; s++) kiln_backend_release(pl->be, &L->steps[s]);
    free(L->steps);
    free(L->time);
    free(L->mark);
    memset(L, 0, sizeof *L);
}
