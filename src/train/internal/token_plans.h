/* --batch-tokens in the trainer (token_plans.c): a training plan per length
 * bucket over the run's one set of parameters, the loader's batch sampler, and
 * each batch's share of its step's tokens. */
#ifndef KILN_TRAIN_TOKEN_PLANS_H
#define KILN_TRAIN_TOKEN_PLANS_H

#include "kiln/data.h"
#include "kiln/graph.h"
#include "kiln/nn.h"
#include "kiln/train.h"

typedef struct kiln_token_plans {
    kiln_length_batches *loader_side, *trainer_side; /* one each: an epoch's scratch is not shared between threads */
    kiln_batch_sampler bs;           /* for the loader (ctx: this struct) */
    int n;                           /* plans: the buckets that hold samples */
    int64_t width[KILN_MAX_LEN_BUCKETS];
    kiln_graph *g[KILN_MAX_LEN_BUCKETS];
    int own_graph[KILN_MAX_LEN_BUCKETS];  /* 0: the run's graph (the block's width) */
    kiln_model m[KILN_MAX_LEN_BUCKETS];
    kiln_plan *plan[KILN_MAX_LEN_BUCKETS]; /* plan[0] (the widest) belongs to the caller once opened */
    kiln_length_epoch ep;            /* the trainer's view of epoch `epoch` */
    int64_t epoch;
    kiln_length_epoch lep;           /* the loader's scratch for the fields it does not take */
    size_t arena_bytes;              /* all plans' arenas */
} kiln_token_plans;

/* every plan compiled with co (max_batch and also_batches per bucket), g0/m0 the
 * run's graph of the block's width, train the documents; rank/world split them */
kiln_status kiln_token_plans_open(kiln_token_plans *T, const kiln_train_config *c, kiln_graph *g0, const kiln_model *m0,
                                  kiln_params *P, const kiln_dataset *train, int rank, int world, const kiln_compile_opts *co);
/* the plan for a batch of this width (-1: none) */
int kiln_token_plans_find(const kiln_token_plans *T, int64_t width);
/* batch b of epoch e: its positions over the positions of the step on all ranks */
kiln_status kiln_token_plans_share(kiln_token_plans *T, int64_t epoch, int64_t batch, double *share, int64_t *group_tokens);
/* frees everything but plan[0]; again is harmless */
void kiln_token_plans_close(kiln_token_plans *T);

#endif
