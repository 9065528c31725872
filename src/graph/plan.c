/* Compile a graph into a plan. Compiling clones the graph, adds the backward
 * part (autodiff), runs the passes, plans the arena, and makes every kernel
 * object (oneDNN primitives) for the batch size. Running it is plan_exec.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "graph/internal/plan.h"
#include "kernels/internal/dnnl_ops.h"

kiln_compile_opts kiln_compile_defaults(void) {
    kiln_compile_opts o = {0};
    o.max_batch = 64;
    o.reuse_memory = 1;
    o.fuse = 1;
    o.autotune = 1;
    o.layout = 1;
    o.seed = 1;
    return o;
}

void *kiln_plan_ptr(const kiln_plan *pl, kiln_value v) {
    const kiln_graph *g = pl->g;
    kiln_value r = kiln_val_root(g, v);
    const kiln_val *V = &g->vals[r];
    switch (V->kind) {
    case KILN_VAL_ACT: return pl->offset[r] >= 0 ? pl->arena + pl->offset[r] : NULL;
    case KILN_VAL_INPUT:
        if (pl->ref_inputs && pl->ref_inputs[r]) return pl->ref_inputs[r];
        return (void *)pl->bound[r];
    case KILN_VAL_PARAM:
        return (char *)kiln_params_data(pl->P) + (size_t)kiln_params_offset(pl->P, V->param) * pl->elem;
    case KILN_VAL_PARAM_GRAD:
        return (char *)kiln_params_grad(pl->P) + (size_t)kiln_params_offset(pl->P, V->param) * pl->elem;
    }
    return NULL;
}

static void free_state(kiln_plan *pl, batch_state *bs) {
    if (!bs->kobj) return;
    for (int i = 0; i < pl->g->nnodes; i++) {
        if (!bs->kobj[i]) continue;
        if (pl->g->nodes[i].op == KILN_OP_CONV2D) kiln_dnnl_conv_free(bs->kobj[i]);
        else kiln_dnnl_linear_free(bs->kobj[i]);
    }
    free(bs->kobj);
    memset(bs, 0, sizeof *bs);
}

void kiln_plan_free(kiln_plan *pl) {
    if (!pl) return;
    for (int i = 0; i < MAX_BATCH_STATES; i++) free_state(pl, &pl->states[i]);
    if (pl->ref_inputs) {
        for (int v = 0; v < pl->g->nvals; v++) kiln_free(pl->ref_inputs[v]);
        free(pl->ref_inputs);
    }
    kiln_free(pl->arena);
    kiln_free(pl->ws);
    free(pl->order);
    free(pl->offset);
    free(pl->bound);
    free(pl->outputs);
    free(pl->need_bwd_data);
    free(pl->need_bwd_weight);
    free(pl->node_time);
    kiln_graph_free(pl->g);
    free(pl);
}

void kiln_plan_conv_shape(const kiln_plan *pl, const kiln_node *n, int64_t batch, kiln_conv_shape *cs) {
    const kiln_val *X = &pl->g->vals[n->in[0]], *W = &pl->g->vals[n->in[1]];
    cs->n = X->batched ? batch : X->shape[0];
    cs->c = X->shape[1];
    cs->h = X->shape[2];
    cs->w = X->shape[3];
    cs->k = W->shape[0];
    cs->r = W->shape[2];
    cs->s = W->shape[3];
    cs->stride = n->iattr[0];
    cs->pad = n->iattr[1];
    kiln_conv_shape_infer(cs);
}

void kiln_plan_pool_shape(const kiln_plan *pl, const kiln_node *n, kiln_value x, int64_t batch, kiln_pool_shape *ps) {
    const kiln_val *X = &pl->g->vals[x];
    ps->n = X->batched ? batch : X->shape[0];
    ps->c = X->shape[1];
    ps->h = X->shape[2];
    ps->w = X->shape[3];
    ps->k = n->iattr[0];
    ps->stride = n->iattr[1];
    kiln_pool_shape_infer(ps);
}

/* kernel objects (oneDNN primitives) for one batch size; made once per size */
kiln_status kiln_plan_batch_state(kiln_plan *pl, int64_t batch, batch_state **out) {
    batch_state *free_slot = NULL, *lru = NULL;
    for (int i = 0; i < MAX_BATCH_STATES; i++) {
        batch_state *bs = &pl->states[i];
        if (bs->batch == batch) {
            bs->last_used = ++pl->runs;
            *out = bs;
            return KILN_OK;
        }
        if (!bs->batch && !free_slot) free_slot = bs;
        if (bs->batch && (!lru || bs->last_used < lru->last_used)) lru = bs;
    }
    batch_state *bs = free_slot ? free_slot : lru;
    free_state(pl, bs);
    bs->kobj = calloc((size_t)pl->g->nnodes, sizeof(void *));
    if (!bs->kobj) return kiln_fail(KILN_ERR_NOMEM, "plan: out of memory");
    bs->batch = batch;
    bs->last_used = ++pl->runs;
    size_t ws = 0;
    if (pl->o.autotune) kiln_pass_autotune_begin();
    for (int i = 0; i < pl->nfwd; i++) {
        const kiln_node *n = &pl->g->nodes[i];
        kiln_status st = KILN_OK;
        if (n->op == KILN_OP_CONV2D) {
            kiln_conv_shape cs;
            kiln_plan_conv_shape(pl, n, batch, &cs);
            kiln_dnnl_conv_opts co = {n->nin > 2, n->fuse_relu, pl->need_bwd_data[i], pl->need_bwd_weight[i], pl->o.autotune,
                                      pl->g->vals[kiln_val_root(pl->g, n->in[0])].layout == 16,
                                      pl->g->vals[kiln_val_root(pl->g, n->out[0])].layout == 16};
            st = kiln_dnnl_conv_new(&cs, &co, (kiln_dnnl_conv **)&bs->kobj[i]);
            if (st == KILN_OK) {
                size_t w = kiln_dnnl_conv_workspace(bs->kobj[i]);
                if (w > ws) ws = w;
                kiln_log(KILN_LOG_DEBUG, "%s: %s", n->name, kiln_dnnl_conv_describe(bs->kobj[i]));
            }
        } else if (n->op == KILN_OP_LINEAR) {
            const kiln_val *X = &pl->g->vals[n->in[0]], *W = &pl->g->vals[n->in[1]];
            st = kiln_dnnl_linear_new(X->batched ? batch : X->shape[0], W->shape[1], W->shape[0], n->nin > 2,
                                      n->fuse_relu, pl->need_bwd_data[i], pl->need_bwd_weight[i],
                                      (kiln_dnnl_linear **)&bs->kobj[i]);
        }
        if (st != KILN_OK) {
            free_state(pl, bs);
            return kiln_fail_context(st, "%s", n->name);
        }
    }
    if (pl->o.autotune) kiln_pass_autotune_end();
    if (ws > pl->ws_bytes) {
        kiln_free(pl->ws);
        pl->ws = kiln_alloc(ws);
        pl->ws_bytes = pl->ws ? ws : 0;
        if (!pl->ws) {
            free_state(pl, bs);
            return kiln_fail(KILN_ERR_NOMEM, "plan: out of memory for a %zu-byte kernel workspace", ws);
        }
    }
    *out = bs;
    return KILN_OK;
}

kiln_status kiln_compile(kiln_graph *g0, kiln_params *P, const kiln_value *outputs, int n_outputs,
                         const kiln_compile_opts *opts, kiln_plan **out) {
    *out = NULL;
    kiln_status st = kiln_graph_status(g0);
    if (st != KILN_OK) return st;
    kiln_compile_opts o = opts ? *opts : kiln_compile_defaults();
    if (o.max_batch < 1) return kiln_fail(KILN_ERR_INVALID_ARG, "compile: max_batch is %lld (want >= 1)", (long long)o.max_batch);
    if (n_outputs < 1) return kiln_fail(KILN_ERR_INVALID_ARG, "compile: no outputs");
    if (!P || kiln_params_count(P) != g0->nparams)
        return kiln_fail(KILN_ERR_INVALID_ARG, "compile: the parameters were not made from this graph");
    if (o.reference != (kiln_params_dtype(P) == KILN_F64))
        return kiln_fail(KILN_ERR_INVALID_ARG, "compile: %s plans need %s parameters", o.reference ? "reference" : "fast",
                         o.reference ? "f64" : "f32");
    for (int i = 0; i < n_outputs; i++)
        if (outputs[i] < 0 || outputs[i] >= g0->nvals)
            return kiln_fail(KILN_ERR_INVALID_ARG, "compile: output %d is not a value of the graph", i);

    kiln_plan *pl = calloc(1, sizeof *pl);
    if (!pl) return kiln_fail(KILN_ERR_NOMEM, "compile: out of memory");
    pl->o = o;
    pl->P = P;
    pl->loss_scale = 1.0;
    pl->elem = o.reference ? sizeof(double) : sizeof(float);
    pl->g = kiln_graph_clone(g0);
    if (!pl->g) goto oom;
    kiln_graph *g = pl->g;
    pl->nfwd = g->nnodes;

    /* inference, or dropout switched off: dropout is a view of its input */
    for (int i = 0; i < pl->nfwd; i++) {
        kiln_node *n = &g->nodes[i];
        if (n->op == KILN_OP_DROPOUT && (!o.training || o.dropout_off || n->fattr[0] == 0.0f)) {
            n->op = KILN_OP_RESHAPE;
            g->vals[n->out[0]].alias_of = n->in[0];
        }
    }
    if (o.training) {
        st = kiln_autodiff(g, outputs[0]);
        if (st != KILN_OK) goto fail;
    }
    if (o.fuse && !o.reference) {
        if (kiln_pass_fuse_relu(g, pl->nfwd) < 0 || kiln_pass_fuse_pool_relu_bwd(g) < 0) goto oom;
    }
    if (o.layout && !o.reference) {
        if (kiln_pass_layout(g) < 0) goto oom;
    }

    /* which backward directions each forward conv/linear needs */
    pl->need_bwd_data = calloc((size_t)g->nnodes, 1);
    pl->need_bwd_weight = calloc((size_t)g->nnodes, 1);
    uint8_t *has_grad = kiln_params_has_grad_mut(P);
    if (!pl->need_bwd_data || !pl->need_bwd_weight) goto oom;
    for (int i = pl->nfwd; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->op == KILN_OP_CONV2D_BWD_DATA || n->op == KILN_OP_LINEAR_BWD_DATA) pl->need_bwd_data[n->fwd] = 1;
        if (n->op == KILN_OP_CONV2D_BWD_WEIGHT || n->op == KILN_OP_LINEAR_BWD_WEIGHT) pl->need_bwd_weight[n->fwd] = 1;
    }
    if (o.training) {
        for (int p = 0; p < g->nparams; p++) has_grad[p] = 0;
        for (int v = 0; v < g->nvals; v++)
            if (g->vals[v].kind == KILN_VAL_PARAM_GRAD) has_grad[g->vals[v].param] = 1;
    }

    /* execution order: every node that does work (views cost nothing) */
    pl->order = malloc((size_t)g->nnodes * sizeof(int));
    if (!pl->order) goto oom;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].op != KILN_OP_RESHAPE && !g->nodes[i].dead) pl->order[pl->norder++] = i;

    pl->outputs = malloc((size_t)n_outputs * sizeof *pl->outputs);
    pl->offset = malloc((size_t)g->nvals * sizeof *pl->offset);
    pl->bound = calloc((size_t)g->nvals, sizeof *pl->bound);
    uint8_t *keep = calloc((size_t)g->nvals, 1);
    if (!pl->outputs || !pl->offset || !pl->bound || !keep) {
        free(keep);
        goto oom;
    }
    pl->nout = n_outputs;
    for (int i = 0; i < n_outputs; i++) {
        pl->outputs[i] = outputs[i];
        keep[outputs[i]] = 1;
    }
    st = kiln_plan_memory(g, pl->order, pl->norder, o.max_batch, pl->elem, o.reuse_memory, keep, pl->offset,
                          &pl->arena_bytes, &pl->arena_no_reuse);
    free(keep);
    if (st != KILN_OK) goto fail;
    /* a plan that cannot fit in the machine fails here, clearly, not in the OOM killer mid-run */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double budget = o.memory_budget > 0 ? o.memory_budget : 0.9 * (double)pages * (double)page;
    if (budget > 0 && (double)pl->arena_bytes > budget) {
        st = kiln_fail(KILN_ERR_NOMEM, "compile: the plan needs %.2f GiB of activations and gradients for a batch of %lld; "
                       "the memory budget is %.2f GiB: use a smaller batch", pl->arena_bytes / 1073741824.0,
                       (long long)o.max_batch, budget / 1073741824.0);
        goto fail;
    }
    if (o.plan_only) { /* sizes only: what the batch-size finder needs */
        *out = pl;
        return KILN_OK;
    }
    pl->arena = kiln_alloc(pl->arena_bytes ? pl->arena_bytes : 64);
    if (!pl->arena) {
        st = kiln_fail(KILN_ERR_NOMEM, "compile: cannot allocate a %zu-byte arena", pl->arena_bytes);
        goto fail;
    }
    if (o.reference) {
        pl->ref_inputs = calloc((size_t)g->nvals, sizeof(double *));
        if (!pl->ref_inputs) goto oom;
        for (int v = 0; v < g->nvals; v++)
            if (g->vals[v].kind == KILN_VAL_INPUT && g->vals[v].dtype == KILN_F32) {
                pl->ref_inputs[v] = kiln_alloc((size_t)kiln_val_numel(&g->vals[v], o.max_batch) * sizeof(double) + 8);
                if (!pl->ref_inputs[v]) goto oom;
            }
    } else {
        batch_state *bs;
        st = kiln_plan_batch_state(pl, o.max_batch, &bs);
        if (st != KILN_OK) goto fail;
    }
    *out = pl;
    return KILN_OK;
oom:
    st = kiln_fail(KILN_ERR_NOMEM, "compile: out of memory");
fail:
    kiln_plan_free(pl);
    return st;
}

kiln_status kiln_plan_bind(kiln_plan *pl, kiln_value v, const void *data) {
    if (!pl || v < 0 || v >= pl->g->nvals || pl->g->vals[v].kind != KILN_VAL_INPUT)
        return kiln_fail(KILN_ERR_INVALID_ARG, "bind: value %d is not an input of the plan", v);
    pl->bound[v] = data;
    return KILN_OK;
}

void kiln_plan_set_step(kiln_plan *pl, uint64_t step) { pl->step = step; }

void kiln_plan_set_accumulate(kiln_plan *pl, int accumulate, double loss_scale) {
    pl->accumulate = accumulate;
    pl->loss_scale = loss_scale;
}

const void *kiln_plan_value(const kiln_plan *pl, kiln_value v) {
    if (!pl || v < 0 || v >= pl->g->nvals) return NULL;
    return kiln_plan_ptr(pl, v);
}

double kiln_plan_loss(const kiln_plan *pl) {
    const void *p = kiln_plan_ptr(pl, pl->outputs[0]);
    if (!p) return NAN;
    return pl->o.reference ? *(const double *)p : (double)*(const float *)p;
}

size_t kiln_plan_arena_bytes(const kiln_plan *pl) { return pl->arena_bytes; }
size_t kiln_plan_arena_bytes_no_reuse(const kiln_plan *pl) { return pl->arena_no_reuse; }

void kiln_plan_describe(const kiln_plan *pl, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    for (int s = 0; s < pl->norder && o < len; s++) {
        const kiln_node *n = &pl->g->nodes[pl->order[s]];
        char shape[96];
        const kiln_val *O = &pl->g->vals[n->out[0]];
        o += (size_t)snprintf(buf + o, len - o, "%3d %-22s -> %-14s %s%s%s%s%s\n", s, n->name, O->name,
                              kiln_shape_str(O->ndim, O->shape, shape, sizeof shape), n->fuse_relu ? " +relu" : "",
                              n->relu_mask ? " +relu_bwd" : "", O->layout == 16 ? " nChw16c" : "",
                              n->acc[0] ? " (accumulate)" : "");
    }
}
