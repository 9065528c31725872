#ifndef KILN_CHECKPOINT_H
#define KILN_CHECKPOINT_H

#include "kiln/train.h"

/* what exact resumption needs besides tensors */
typedef struct kiln_ckpt_state {
    char model[64];
    char optimizer[16];
    int64_t step;        /* global steps done */
    int64_t epoch;       /* epoch in progress */
    int64_t next_batch;  /* first batch of `epoch` still to run */
    uint64_t seed;       /* keys shuffling and dropout (counter = step) */
    int64_t batch_size;  /* per rank */
    int64_t world_size;  /* ranks that trained it: the global batch is batch_size * world_size */
    int64_t accumulate;  /* loader batches per step */
    float lr;            /* current learning rate */
    int64_t optim_steps;
    char backend[16];     /* whose opaque state (autotune decisions) the checkpoint keeps */
    const char *settings; /* the run's settings as JSON (kiln_train_settings_json), for --resume alone */
} kiln_ckpt_state;

kiln_status kiln_checkpoint_save(const char *path, kiln_params *P, kiln_optim *o, const kiln_ckpt_state *s);
/* loads parameters, optimizer state (o may be NULL) and the state */
kiln_status kiln_checkpoint_resume(const char *path, kiln_params *P, kiln_optim *o, kiln_ckpt_state *s);

#endif
