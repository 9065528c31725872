/* --batch-tokens: the guide's "preallocate memory in case of variable input
 * length". The gpt's graph has the sequence length in its shapes, so each
 * length bucket gets its own graph (kiln_gpt_config.seq: the same parameters,
 * wpe's first rows) and its own training plan, compiled once at the bucket's
 * largest batch (and its last, smaller one): every arena and kernel object
 * exists before the first step, and no step allocates. The plans share the
 * run's kiln_params (kiln_compile checks every parameter's name and shape).
 *
 * The loader's batch sampler and the trainer's weights come from two
 * kiln_length_batches of the same settings (each keeps scratch for an epoch;
 * the loader asks from its workers). A batch's share of its step is its
 * positions over the step's positions on all ranks, known to every rank from
 * the schedule alone: the ranks' summed gradients are the gradient of the
 * mean loss over every position of the step, with no extra all-reduce. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "train/internal/token_plans.h"

static kiln_status sampler_order(const kiln_batch_sampler *s, int64_t epoch, int64_t *index, int64_t *start, int64_t *width) {
    kiln_token_plans *T = s->ctx;
    kiln_length_epoch e = T->lep;
    e.index = index;
    e.start = start;
    e.width = width;
    return kiln_length_batches_epoch(T->loader_side, epoch, &e);
}

static kiln_status alloc_epoch(kiln_length_epoch *e, const kiln_length_batches_info *I, int full) {
    size_t g = (size_t)I->groups + 1;
    e->bucket = calloc(g, sizeof(int64_t));
    e->tokens = calloc(g, sizeof(int64_t));
    e->group_tokens = calloc(g, sizeof(int64_t));
    if (full) {
        e->index = calloc((size_t)I->samples + 1, sizeof(int64_t));
        e->start = calloc(g, sizeof(int64_t));
        e->width = calloc(g, sizeof(int64_t));
    }
    int ok = e->bucket && e->tokens && e->group_tokens && (!full || (e->index && e->start && e->width));
    return ok ? KILN_OK : kiln_fail(KILN_ERR_NOMEM, "batch-tokens: out of memory");
}

static void free_epoch(kiln_length_epoch *e) {
    free(e->index), free(e->start), free(e->width), free(e->bucket), free(e->tokens), free(e->group_tokens);
    memset(e, 0, sizeof *e);
}

/* the schedules from the documents' lengths */
static kiln_status open_schedules(kiln_token_plans *T, const kiln_train_config *c, const kiln_dataset *train, int rank,
                                  int world) {
    if (!train->sample_len) return kiln_fail(KILN_ERR_INVALID_ARG, "--batch-tokens: %s has no documents", train->name);
    int64_t n = train->len, *len = malloc(sizeof *len * (size_t)(n + 1));
    if (!len) return kiln_fail(KILN_ERR_NOMEM, "batch-tokens: out of memory");
    for (int64_t i = 0; i < n; i++) len[i] = train->sample_len(train, i);
    kiln_status st = kiln_length_batches_new(len, n, c->gpt.block, c->batch_tokens, rank, world, (uint64_t)c->seed, &T->loader_side);
    if (st == KILN_OK)
        st = kiln_length_batches_new(len, n, c->gpt.block, c->batch_tokens, rank, world, (uint64_t)c->seed, &T->trainer_side);
    free(len);
    if (st != KILN_OK) return st;
    const kiln_length_batches_info *I = kiln_length_batches_get_info(T->loader_side);
    if ((st = alloc_epoch(&T->ep, I, 1)) != KILN_OK || (st = alloc_epoch(&T->lep, I, 0)) != KILN_OK) return st;
    T->epoch = -1;
    T->bs = (kiln_batch_sampler){I->groups, I->samples, I->max_numel, sampler_order, T};
    return KILN_OK;
}

/* bucket k's graph (the run's own at the block's width) and plan */
static kiln_status open_plan(kiln_token_plans *T, int i, const kiln_length_batches_info *I, int k, const kiln_train_config *c,
                             kiln_graph *g0, const kiln_model *m0, kiln_params *P, const kiln_compile_opts *co) {
    T->width[i] = I->width[k];
    kiln_status st = KILN_OK;
    if (I->width[k] == c->gpt.block) {
        T->g[i] = g0;
        T->m[i] = *m0;
    } else {
        kiln_model_opts mo = {.num_classes = c->num_classes, .fix_bias = c->fix_bias, .gpt = c->gpt};
        mo.gpt.seq = (int)I->width[k];
        T->g[i] = kiln_graph_new();
        T->own_graph[i] = 1;
        st = kiln_model_build_ex(T->g[i], c->model, &mo, &T->m[i]);
    }
    kiln_compile_opts o = *co;
    o.max_batch = I->per_batch[k] < I->count[k] ? I->per_batch[k] : I->count[k];
    memset(o.also_batches, 0, sizeof o.also_batches);
    if (I->last[k] != o.max_batch) o.also_batches[0] = I->last[k];
    if (st == KILN_OK) st = kiln_compile(T->g[i], P, &T->m[i].loss, 1, &o, &T->plan[i]);
    if (st == KILN_OK) T->arena_bytes += kiln_plan_arena_bytes(T->plan[i]);
    return st;
}

kiln_status kiln_token_plans_open(kiln_token_plans *T, const kiln_train_config *c, kiln_graph *g0, const kiln_model *m0,
                                  kiln_params *P, const kiln_dataset *train, int rank, int world, const kiln_compile_opts *co) {
    memset(T, 0, sizeof *T);
    kiln_status st = open_schedules(T, c, train, rank, world);
    if (st != KILN_OK) return st;
    const kiln_length_batches_info *I = kiln_length_batches_get_info(T->loader_side);
    for (int k = 0; k < I->nbuckets && st == KILN_OK; k++)
        if (I->count[k] > 0) st = open_plan(T, T->n++, I, k, c, g0, m0, P, co);
    if (st != KILN_OK) return st;
    char line[256];
    size_t o = 0;
    for (int k = 0; k < I->nbuckets && o < sizeof line; k++)
        o += (size_t)snprintf(line + o, sizeof line - o, "%s%lld x %lld (%lld documents)", k ? ", " : "",
                              (long long)I->per_batch[k], (long long)I->width[k], (long long)I->count[k]);
    kiln_log(KILN_LOG_INFO, "batch-tokens %lld: %lld batches an epoch per rank in buckets of samples x positions %s; %d "
             "plans compiled, arenas %.1f MiB in all", (long long)c->batch_tokens, (long long)I->groups, line, T->n,
             T->arena_bytes / 1048576.0);
    return KILN_OK;
}

int kiln_token_plans_find(const kiln_token_plans *T, int64_t width) {
    for (int i = 0; i < T->n; i++)
        if (T->width[i] == width) return i;
    return -1;
}

kiln_status kiln_token_plans_share(kiln_token_plans *T, int64_t epoch, int64_t batch, double *share, int64_t *group_tokens) {
    if (T->epoch != epoch) {
        kiln_status st = kiln_length_batches_epoch(T->trainer_side, epoch, &T->ep);
        if (st != KILN_OK) return st;
        T->epoch = epoch;
    }
    int64_t g = T->ep.group_tokens[batch];
    *share = g > 0 ? (double)T->ep.tokens[batch] / (double)g : 0.0;
    *group_tokens = g;
    return KILN_OK;
}

void kiln_token_plans_close(kiln_token_plans *T) {
    for (int i = 0; i < T->n; i++) {
        if (i > 0) kiln_plan_free(T->plan[i]);
        T->plan[i] = NULL;
        if (T->own_graph[i]) kiln_graph_free(T->g[i]);
        T->g[i] = NULL;
        T->own_graph[i] = 0;
    }
    T->n = 0;
    kiln_length_batches_free(T->loader_side);
    kiln_length_batches_free(T->trainer_side);
    T->loader_side = T->trainer_side = NULL;
    free_epoch(&T->ep);
    free_epoch(&T->lep);
}
