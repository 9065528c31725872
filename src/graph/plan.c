/* Compile a graph into a plan: clone the graph, specialise it for training or
 * evaluation, add the backward part (autodiff), run the fusion passes and the
 * backend's own passes, plan the arena, then build one step list per batch
 * size (plan_steps.c). Running it is plan_exec.c. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "graph/internal/plan.h"

kiln_compile_opts kiln_compile_defaults(void) {
    kiln_compile_opts o = {0};
    o.max_batch = 64;
    o.reuse_memory = 1;
    o.in_place = 1;
    o.depth_first = 1;
    o.fuse = 1;
    o.autotune = 1;
    o.layout = 1;
    o.fold_bn = 1;
    o.fuse_residual = 1;
    o.seed = 1;
    return o;
}

void kiln_plan_free(kiln_plan *pl) {
    if (!pl) return;
    for (int i = 0; i < pl->nlists; i++) kiln_plan_free_list(pl, &pl->lists[i]);
    for (int i = 0; i < pl->ninputs; i++) {
        if (pl->inputs[i].staged) pl->be->free(pl->inputs[i].staged);
        free(pl->inputs[i].patches);
    }
    free(pl->inputs);
    if (pl->arena) pl->be->free(pl->arena);
    if (pl->ws) pl->be->free(pl->ws);
    free(pl->order);
    free(pl->offset);
    free(pl->outputs);
    kiln_graph_free(pl->g);
    free(pl);
}

static kiln_status check_args(const kiln_graph *g0, kiln_params *P, const kiln_value *outputs, int n_outputs,
                              const kiln_compile_opts *o, const kiln_backend *be) {
    kiln_status st = kiln_graph_status(g0);
    if (st != KILN_OK) return st;
    if (!be) return kiln_fail(KILN_ERR_INVALID_ARG, "compile: unknown backend '%s' (cpu, ref)", o->backend);
    if (o->round_outputs_as && !kiln_backend_get(o->round_outputs_as))
        return kiln_fail(KILN_ERR_INVALID_ARG, "compile: round_outputs_as names an unknown backend '%s'", o->round_outputs_as);
    if (o->max_batch < 1) return kiln_fail(KILN_ERR_INVALID_ARG, "compile: max_batch is %lld (want >= 1)", (long long)o->max_batch);
    for (int i = 0; i < KILN_MAX_EXTRA_BATCHES; i++)
        if (o->also_batches[i] < 0 || o->also_batches[i] > o->max_batch)
            return kiln_fail(KILN_ERR_INVALID_ARG, "compile: also_batches[%d] is %lld, outside [1, max_batch %lld]", i,
                             (long long)o->also_batches[i], (long long)o->max_batch);
    if (n_outputs < 1) return kiln_fail(KILN_ERR_INVALID_ARG, "compile: no outputs");
    if (!P || kiln_params_count(P) != g0->nparams || kiln_params_buffer_count(P) != g0->nbuffers)
        return kiln_fail(KILN_ERR_INVALID_ARG, "compile: the parameters were not made from this graph");
    /* parameters are matched by position: another graph built the same way (a gpt over shorter
     * sequences) may share them, one whose parameter i differs in name or shape may not */
    for (int i = 0; i < g0->nparams; i++) {
        const kiln_val *v = &g0->vals[g0->param_vals[i]];
        int64_t shape[KILN_MAX_DIMS];
        int nd = kiln_params_shape(P, i, shape);
        int same = nd == v->ndim && strcmp(kiln_params_name(P, i), v->name) == 0;
        for (int d = 0; same && d < nd; d++) same = shape[d] == v->shape[d];
        if (!same)
            return kiln_fail(KILN_ERR_INVALID_ARG, "compile: parameter %d is '%s' in the graph but '%s' of another shape or "
                             "name in the parameters: they were made from another graph", i, v->name, kiln_params_name(P, i));
    }
    if (strcmp(kiln_params_backend(P), be->name) != 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "compile: the parameters live on the %s backend, the plan is for %s",
                         kiln_params_backend(P), be->name);
    for (int i = 0; i < n_outputs; i++)
        if (outputs[i] < 0 || outputs[i] >= g0->nvals)
            return kiln_fail(KILN_ERR_INVALID_ARG, "compile: output %d is not a value of the graph", i);
    return KILN_OK;
}

/* the work nodes of a graph (views cost nothing) in execution order, and their arena */
static kiln_status arena_of(const kiln_plan *pl, const kiln_graph *g, int *order, int *norder, int64_t *offset,
                            size_t *bytes, size_t *no_reuse) {
    uint8_t *keep = calloc((size_t)g->nvals, 1);
    if (!keep) return kiln_fail(KILN_ERR_NOMEM, "compile: out of memory");
    *norder = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (!(kiln_op_get(g->nodes[i].op)->flags & KILN_OPF_VIEW) && !g->nodes[i].dead) order[(*norder)++] = i;
    for (int i = 0; i < pl->nout; i++) keep[pl->outputs[i]] = 1;
    kiln_status st = kiln_plan_memory(g, order, *norder, pl->o.max_batch, pl->elem, pl->o.reuse_memory, keep, offset,
                                      bytes, no_reuse);
    free(keep);
    return st;
}

/* 16-bit storage where it changes no number (pass_half_store.c), on a backend whose kernels offer it; quiet:
 * a candidate graph measured for checkpointing, not the plan's */
static kiln_status half_store(kiln_plan *pl, kiln_graph *g, int quiet) {
    kiln_half_slots_fn half[KILN_OP_COUNT];
    unsigned round_out[KILN_OP_COUNT];
    for (int op = 0; op < KILN_OP_COUNT; op++) half[op] = pl->be->kernels[op].half, round_out[op] = pl->be->kernels[op].round_out;
    int n = kiln_pass_half_store(g, pl->o.precision, half, round_out);
    if (n < 0) return kiln_graph_status(g);
    if (n && !quiet && !pl->o.plan_only)
        kiln_log(KILN_LOG_INFO, "half storage: %d activations stored as %s (read only as %s operands, or written so)", n,
                 kiln_precision_name(pl->o.precision), kiln_precision_name(pl->o.precision));
    return KILN_OK;
}

/* the ops the backend runs in their input's 16 bits (kiln_kernel.autocast_follows), as the backend rounding
 * the outputs decides (round_outputs_as: the reference reproducing another backend's) */
static int autocast_follow(const kiln_plan *pl, kiln_graph *g) {
    const kiln_backend *be = pl->o.round_outputs_as ? kiln_backend_get(pl->o.round_outputs_as) : pl->be;
    uint8_t follows[KILN_OP_COUNT];
    unsigned round_out[KILN_OP_COUNT];
    for (int op = 0; op < KILN_OP_COUNT; op++)
        follows[op] = be ? be->kernels[op].autocast_follows : 0, round_out[op] = be ? be->kernels[op].round_out : 0;
    return kiln_pass_autocast_follow(g, pl->o.precision, follows, round_out);
}

/* the arena a graph would need after the passes that follow checkpointing (the plan without it, or a
 * candidate schedule): autocast and half storage change what values weigh, the backend's passes their layouts */
static kiln_status arena_after_passes(kiln_plan *pl, kiln_graph *g, size_t *bytes) {
    int *order = malloc((size_t)(g->nnodes ? g->nnodes : 1) * sizeof *order);
    int64_t *offset = malloc((size_t)g->nvals * sizeof *offset);
    size_t no_reuse = 0;
    int norder = 0;
    kiln_status st = order && offset ? KILN_OK : kiln_fail(KILN_ERR_NOMEM, "compile: out of memory");
    if (st == KILN_OK && pl->o.precision != KILN_PRECISION_FP32) {
        kiln_pass_autocast(g, pl->o.precision);
        st = autocast_follow(pl, g) < 0 ? kiln_graph_status(g) : half_store(pl, g, 1);
    }
    if (st == KILN_OK && pl->be->passes) st = pl->be->passes(g, &pl->o);
    if (st == KILN_OK) st = arena_of(pl, g, order, &norder, offset, bytes, &no_reuse);
    free(order);
    free(offset);
    return st;
}

/* the work a checkpointed graph repeats: its recomputing nodes that are not views */
static int recompute_work(const kiln_graph *g) {
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        n += g->nodes[i].recompute_of >= 0 && !g->nodes[i].dead && !(kiln_op_get(g->nodes[i].op)->flags & KILN_OPF_VIEW);
    return n;
}

typedef struct {
    kiln_ckpt_choice ch;
    size_t bytes;
    int work;
} ckpt_candidate;

/* the fewest recomputations among arenas within 5 % of the smallest: a few percent of memory is not
 * worth more recomputation (gpt's 4 blocks: 25.0 MiB on 2 slots recomputes 42 nodes, 26.0 on its own
 * blocks 32, 1.29x against 1.22x the plain step) */
static int pick_candidate(const ckpt_candidate *c, int n) {
    int best = -1;
    size_t least = SIZE_MAX;
    for (int i = 0; i < n; i++) least = c[i].bytes < least ? c[i].bytes : least;
    for (int i = 0; i < n; i++)
        if ((double)c[i].bytes <= 1.05 * (double)least &&
            (best < 0 || c[i].work < c[best].work || (c[i].work == c[best].work && c[i].bytes < c[best].bytes)))
            best = i;
    return best;
}

/* "block": among the schedules recomputing at most one forward pass's nodes (checkpointing every
 * block recomputes about that), pick_candidate's. Each candidate is planned as the plan would be:
 * the arena decides, not a model of it. */
static kiln_status choose_schedule(kiln_plan *pl, const char *spec, kiln_ckpt_choice *best) {
    const kiln_graph *g = pl->g;
    int budget = 0, nb = g->nblocks, n = 0;
    for (int i = 0; i < pl->nfwd; i++) budget += !g->nodes[i].dead && !(kiln_op_get(g->nodes[i].op)->flags & KILN_OPF_VIEW);
    kiln_ckpt_sched *k = kiln_ckpt_sched_new(nb);
    ckpt_candidate *cand = malloc(2 * (size_t)nb * sizeof *cand);
    kiln_status st = k && cand ? KILN_OK : kiln_fail(KILN_ERR_NOMEM, "compile: out of memory");
    for (int s = 1; st == KILN_OK && s <= nb; s++)
        for (int keep = 0; st == KILN_OK && keep < 2 && kiln_ckpt_sched_cost(k, 1, nb, s) >= 0; keep++) {
            ckpt_candidate c = {.ch = {.slots = s, .keep_last = keep}};
            kiln_graph *t = kiln_graph_clone(g);
            if (!t) st = kiln_fail(KILN_ERR_NOMEM, "compile: out of memory");
            int made = t ? kiln_pass_checkpoint_ex(t, pl->nfwd, spec, &c.ch) : -1;
            c.work = t ? recompute_work(t) : 0;
            if (t && made < 0) st = kiln_graph_status(t);
            else if (t && c.work <= budget && (st = arena_after_passes(pl, t, &c.bytes)) == KILN_OK) cand[n++] = c;
            kiln_graph_free(t);
        }
    int i = st == KILN_OK ? pick_candidate(cand, n) : -1;
    if (i >= 0) {
        *best = cand[i].ch;
        if (!pl->o.plan_only)
            kiln_log(KILN_LOG_DEBUG, "checkpoint: %d blocks on %d slots%s: %.1f MiB, %d nodes recomputed", nb, best->slots,
                     best->keep_last ? ", the last segment kept" : "", cand[i].bytes / 1048576.0, cand[i].work);
    }
    kiln_ckpt_sched_free(k);
    free(cand);
    return st;
}

/* activation checkpointing (pass_checkpoint.c), and the arena the plan would need without it */
static kiln_status checkpoint(kiln_plan *pl) {
    const char *spec = pl->o.checkpoint_activations;
    kiln_status st = kiln_checkpoint_check(spec);
    if (st != KILN_OK) return kiln_fail_context(st, "compile: checkpoint_activations");
    if (!spec || !*spec || strcmp(spec, "none") == 0) return st;
    kiln_ckpt_choice choice = {.slots = pl->g->nblocks, .keep_last = 0}; /* every block its own segment */
    if (kiln_checkpoint_blocks(spec) && pl->g->nblocks > 1 && (st = choose_schedule(pl, spec, &choice)) != KILN_OK)
        return st;
    kiln_graph *plain = kiln_graph_clone(pl->g);
    if (!plain) return kiln_fail(KILN_ERR_NOMEM, "compile: out of memory");
    int n = kiln_pass_checkpoint_ex(pl->g, pl->nfwd, spec, &choice);
    if (n < 0) st = kiln_graph_status(pl->g);
    else if ((pl->recomputed = n) > 0) st = arena_after_passes(pl, plain, &pl->arena_plain);
    kiln_graph_free(plain);
    return st;
}

/* what the autocast pass did, said once: the nodes marked, and those whose outputs the backend rounds to 16 bits
 * (kiln_kernel.round_out: the cuda backend's convolutions and linears) */
static void log_autocast(const kiln_plan *pl, int cast) {
    int rounded = 0, p = pl->o.precision;
    for (int i = 0; i < pl->g->nnodes; i++) rounded += kiln_plan_round_out(pl, i) != 0;
    if (p == KILN_PRECISION_AUTO)
        kiln_log(KILN_LOG_INFO, "autocast: %d matmul-class nodes marked auto: the backend keeps bf16 where it measures it faster", cast);
    else if (!rounded)
        kiln_log(KILN_LOG_INFO, "autocast: %d matmul-class nodes take %s operands (fp32 accumulation and outputs)", cast,
                 kiln_precision_name(p));
    else
        kiln_log(KILN_LOG_INFO, "autocast: %d matmul-class nodes take %s operands (fp32 accumulation; %d nodes write %s "
                 "outputs: the backend's 16-bit convolutions and linears, and the norms, adds, relus and pools that follow them)", cast, kiln_precision_name(p),
                 rounded, kiln_precision_name(p));
}

/* the graph passes, in order: specialise, the bias check and autodiff (training) or batch norm
 * folding (inference), fusion, activation checkpointing, autocast, half storage, the backend's own */
/* batch norm takes the residual add and relu after it as its epilogue: where its kernel does, and, in a reference
 * reproducing another backend's 16-bit outputs, where that backend's does too (an add that follows autocast rounds
 * the norm's output and then the sum, member by member in a fused group; the epilogue would round once) */
static int norm_add_relu(const kiln_plan *pl) {
    const kiln_backend *as = pl->o.round_outputs_as ? kiln_backend_get(pl->o.round_outputs_as) : NULL;
    return pl->be->kernels[KILN_OP_BATCH_NORM2D].add_relu && (!as || as->kernels[KILN_OP_BATCH_NORM2D].add_relu);
}

static kiln_status transform(kiln_plan *pl, kiln_value loss) {
    kiln_graph *g = pl->g;
    const kiln_compile_opts *o = &pl->o;
    kiln_status st = KILN_OK;
    kiln_pass_specialize(g, o);
    if (o->training && !o->plan_only) kiln_pass_warn_bias_before_norm(g);
    /* the option-A shortcut's chain as one op, where the backend runs it (forward and backward) */
    if (o->fuse && pl->be->kernels[KILN_OP_SUBSAMPLE_PAD].run && pl->be->kernels[KILN_OP_SUBSAMPLE_PAD_BWD].run &&
        kiln_pass_subsample_pad(g) < 0)
        return kiln_graph_status(g);
    if (o->training && (st = kiln_autodiff(g, loss)) != KILN_OK) return st;
    /* a backend without the fold kernel runs the norms as they are */
    if (!o->training && o->fold_bn && pl->be->kernels[KILN_OP_BN_FOLD].run &&
        kiln_pass_fold_bn(g, pl->outputs, pl->nout) < 0)
        return kiln_graph_status(g);
    if (!o->training && o->fuse && o->fuse_residual && pl->be->kernels[KILN_OP_CONV2D_ADD].run &&
        kiln_pass_fuse_residual(g, pl->outputs, pl->nout) < 0)
        return kiln_graph_status(g);
    if (o->fuse && (kiln_pass_fuse_epilogues(g, pl->nfwd) < 0 || kiln_pass_fuse_pool_relu_bwd(g) < 0 ||
                    (pl->be->kernels[KILN_OP_BATCH_NORM2D_BWD].relu_bwd_mask && kiln_pass_fuse_norm_relu_bwd(g) < 0) ||
                    (norm_add_relu(pl) && kiln_pass_fuse_norm_add_relu(g) < 0)))
        return kiln_fail(KILN_ERR_NOMEM, "compile: out of memory");
    if (o->fuse) { /* what is left of pointwise chains: one kernel per group */
        uint8_t tileable[KILN_OP_COUNT];
        kiln_backend_tileable(pl->be, tileable);
        if (kiln_pass_fuse_pointwise(g, tileable, o->seed) < 0) return kiln_graph_status(g);
    }
    if (o->training && (st = checkpoint(pl)) != KILN_OK) return st;
    if (o->precision < KILN_PRECISION_FP32 || o->precision > KILN_PRECISION_FP16)
        return kiln_fail(KILN_ERR_INVALID_ARG, "compile: precision is %d (fp32 0, bf16 1, auto 2, fp16 3)", o->precision);
    int cast = kiln_pass_autocast(g, o->precision);
    if (cast && autocast_follow(pl, g) < 0) return kiln_graph_status(g);
    if (cast && !o->plan_only) log_autocast(pl, cast);
    if ((st = half_store(pl, g, 0)) != KILN_OK) return st;
    if (pl->be->passes) return pl->be->passes(g, o);
    return KILN_OK;
}

/* which parameters the training plan gives a gradient (the optimizer skips the others) */
static void mark_has_grad(kiln_plan *pl) {
    if (!pl->o.training) return;
    uint8_t *has_grad = kiln_params_has_grad_mut(pl->P);
    for (int p = 0; p < pl->g->nparams; p++) has_grad[p] = 0;
    for (int v = 0; v < pl->g->nvals; v++)
        if (pl->g->vals[v].kind == KILN_VAL_PARAM_GRAD) has_grad[pl->g->vals[v].param] = 1;
}

/* execution order: every node that does work (views cost nothing), then the arena */
static kiln_status plan_memory(kiln_plan *pl) {
    kiln_graph *g = pl->g;
    pl->order = malloc((size_t)(g->nnodes ? g->nnodes : 1) * sizeof(int));
    pl->offset = malloc((size_t)g->nvals * sizeof *pl->offset);
    if (!pl->order || !pl->offset) return kiln_fail(KILN_ERR_NOMEM, "compile: out of memory");
    kiln_status st = arena_of(pl, g, pl->order, &pl->norder, pl->offset, &pl->arena_bytes, &pl->arena_no_reuse);
    if (st != KILN_OK) return st;
    if (!pl->recomputed) pl->arena_plain = pl->arena_bytes;
    /* a plan that cannot fit fails here, clearly, not in the OOM killer mid-run */
    double budget = pl->o.memory_budget > 0 ? pl->o.memory_budget : 0.9 * (double)pl->be->memory_available();
    if (budget > 0 && (double)pl->arena_bytes > budget)
        return kiln_fail(KILN_ERR_NOMEM, "compile: the plan needs %.2f GiB of activations and gradients for a batch of %lld; "
                         "the memory budget is %.2f GiB: use a smaller batch", pl->arena_bytes / 1073741824.0,
                         (long long)pl->o.max_batch, budget / 1073741824.0);
    return KILN_OK;
}

/* inputs the backend stages get a buffer of their own; the others are bound in place */
static kiln_status make_inputs(kiln_plan *pl) {
    kiln_graph *g = pl->g;
    for (int v = 0; v < g->nvals; v++) pl->ninputs += g->vals[v].kind == KILN_VAL_INPUT;
    pl->inputs = calloc((size_t)(pl->ninputs ? pl->ninputs : 1), sizeof *pl->inputs);
    if (!pl->inputs) return kiln_fail(KILN_ERR_NOMEM, "compile: out of memory");
    for (int v = 0, i = 0; v < g->nvals; v++) {
        if (g->vals[v].kind != KILN_VAL_INPUT) continue;
        kiln_plan_input *in = &pl->inputs[i++];
        in->v = v;
        if (pl->be->input_in_place(g->vals[v].dtype)) continue;
        size_t bytes = (size_t)kiln_val_numel(&g->vals[v], pl->o.max_batch) * kiln_dtype_size(kiln_plan_dtype(pl, v));
        if (!(in->staged = pl->be->alloc(bytes + 64))) return kiln_fail(KILN_ERR_NOMEM, "compile: out of memory for input '%s'", g->vals[v].name);
    }
    return KILN_OK;
}

/* one step list per batch size the run will use: every kernel object made (and autotuned) now */
static kiln_status make_lists(kiln_plan *pl) {
    int64_t sizes[KILN_PLAN_MAX_LISTS] = {pl->o.max_batch};
    int n = 1;
    for (int i = 0; i < KILN_MAX_EXTRA_BATCHES; i++) {
        int64_t b = pl->o.also_batches[i], seen = 0;
        for (int j = 0; j < n; j++) seen |= sizes[j] == b;
        if (b > 0 && !seen) sizes[n++] = b;
    }
    size_t ws = 0;
    if (pl->be->prepare_begin) pl->be->prepare_begin(&pl->o);
    kiln_status st = KILN_OK;
    for (int i = 0; i < n && st == KILN_OK; i++) {
        st = kiln_plan_build_list(pl, sizes[i], &pl->lists[i], &ws);
        pl->nlists = i + 1;
    }
    if (pl->be->prepare_end) pl->be->prepare_end(&pl->o);
    if (st != KILN_OK) return st;
    if (ws && !(pl->ws = pl->be->alloc(ws)))
        return kiln_fail(KILN_ERR_NOMEM, "compile: out of memory for a %zu-byte kernel workspace", ws);
    pl->ws_bytes = ws;
    pl->rc.workspace = pl->ws;
    return KILN_OK;
}

kiln_status kiln_compile(kiln_graph *g0, kiln_params *P, const kiln_value *outputs, int n_outputs,
                         const kiln_compile_opts *opts, kiln_plan **out) {
    *out = NULL;
    kiln_compile_opts o = opts ? *opts : kiln_compile_defaults();
    if (!o.backend && P) o.backend = kiln_params_backend(P); /* the plan runs where the parameters live */
    const kiln_backend *be = kiln_backend_get(o.backend);
    kiln_status st = check_args(g0, P, outputs, n_outputs, &o, be);
    if (st != KILN_OK) return st;
    kiln_plan *pl = calloc(1, sizeof *pl);
    if (!pl) return kiln_fail(KILN_ERR_NOMEM, "compile: out of memory");
    pl->o = o;
    pl->be = be;
    pl->P = P;
    pl->rc.loss_scale = 1.0;
    pl->loss_host = NAN;
    pl->profile = o.profile;
    pl->elem = kiln_dtype_size(be->float_dtype);
    pl->nout = n_outputs;
    pl->g = kiln_graph_clone(g0);
    pl->outputs = malloc((size_t)n_outputs * sizeof *pl->outputs);
    if (!pl->g || !pl->outputs) {
        st = kiln_fail(KILN_ERR_NOMEM, "compile: out of memory");
        goto fail;
    }
    memcpy(pl->outputs, outputs, (size_t)n_outputs * sizeof *outputs);
    for (int i = 0; i < n_outputs; i++) pl->g->vals[outputs[i]].output = 1;
    pl->nfwd = pl->g->nnodes;
    pl->g->cur_block = -1; /* backward nodes belong to no block */
    if ((st = transform(pl, outputs[0])) != KILN_OK) goto fail;
    mark_has_grad(pl);
    if ((st = plan_memory(pl)) != KILN_OK) goto fail;
    if (o.plan_only) { /* sizes only: what the batch-size finder needs */
        *out = pl;
        return KILN_OK;
    }
    if (!(pl->arena = be->alloc(pl->arena_bytes ? pl->arena_bytes : 64))) {
        st = kiln_fail(KILN_ERR_NOMEM, "compile: cannot allocate a %zu-byte arena", pl->arena_bytes);
        goto fail;
    }
    if ((st = make_inputs(pl)) != KILN_OK || (st = make_lists(pl)) != KILN_OK) goto fail;
    *out = pl;
    return KILN_OK;
fail:
    kiln_plan_free(pl);
    return st;
}

size_t kiln_plan_arena_bytes(const kiln_plan *pl) { return pl->arena_bytes; }
size_t kiln_plan_arena_bytes_no_reuse(const kiln_plan *pl) { return pl->arena_no_reuse; }
size_t kiln_plan_arena_bytes_plain(const kiln_plan *pl) { return pl->arena_plain; }
size_t kiln_plan_workspace_bytes(const kiln_plan *pl) { return pl->ws_bytes; }
int kiln_plan_recomputed(const kiln_plan *pl) { return pl->recomputed; }
const char *kiln_plan_backend(const kiln_plan *pl) { return pl->be->name; }

void kiln_plan_describe(const kiln_plan *pl, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    const kiln_steplist *L = pl->nlists ? &pl->lists[0] : NULL;
    for (int i = 0; L && i < L->nsteps && o < len; i++) {
        const kiln_step *s = &L->steps[i];
        char shape[96], attrs[128];
        const kiln_tdesc *t = s->nout ? &s->out[0] : &s->in[0];
        kiln_op_format_attrs(s->op, &s->attr, attrs, sizeof attrs);
        o += (size_t)snprintf(buf + o, len - o, "%3d %-22s %-18s %-16s %s%s%s%s%s%s%s%s\n", i, s->name, kiln_op_name(s->op),
                              kiln_shape_str(t->ndim, t->shape, shape, sizeof shape), attrs,
                              s->epilogue == KILN_EPI_RELU ? " +relu" : s->epilogue == KILN_EPI_ADD_RELU ? " +add+relu" : "",
                              s->epilogue == KILN_EPI_RELU_BWD_MASK ? " +relu_bwd" : "",
                              t->layout ? " blocked" : "", s->acc[0] ? " (accumulate)" : "",
                              s->nout > 0 && s->param_grad[0] ? " -> grad" : "",
                              s->precision != KILN_PRECISION_FP32 ? " " : "",
                              s->precision != KILN_PRECISION_FP32 ? kiln_precision_name(s->precision) : "");
    }
}
