/* kiln/train.h — the trainer: epochs, evaluation, checkpoints, exact resume.
 *
 *     kiln_train_config c = kiln_train_defaults();
 *     c.model = "mnist-cnn"; c.data = "fashion-mnist"; c.save = "run.safetensors";
 *     kiln_train_result r;
 *     if (kiln_train(&c, &r) != KILN_OK) ... kiln_last_error()
 *     printf("%.2f%%\n", 100 * r.test_accuracy);
 *
 * Checkpoints are safetensors: the model's tensors under PyTorch's state_dict
 * names, the optimizer's state as "optim.<state>.<param>", and what exact
 * resumption needs (step, epoch, next batch, seed, learning rate) in the
 * metadata. They are written atomically: an existing file is never left half
 * written.
 */
#ifndef KILN_TRAIN_H
#define KILN_TRAIN_H

#include "kiln/data.h"
#include "kiln/nn.h"
#include "kiln/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_progress {
    int64_t step, total_steps;  /* global step; total planned */
    int64_t epoch, epochs;
    int64_t batch, batches;     /* within the epoch */
    double loss;                /* of this step */
    double images_per_s;        /* since the start of training */
    double data_wait_frac;      /* share of time spent waiting for batches */
    double elapsed_s, eta_s;
    int done;                   /* 1 on the last call */
} kiln_progress;
typedef void (*kiln_progress_fn)(const kiln_progress *p, void *user);

typedef struct kiln_train_config {
    const char *model;          /* "mnist-cnn" */
    const char *data;           /* "fashion-mnist" or a folder of IDX files */
    int64_t epochs;
    int64_t batch_size, test_batch_size;
    int find_batch_size;        /* 1: batch_size is the largest power of two whose plan fits memory_budget */
    int64_t accumulate;         /* loader batches per optimizer step (gradient accumulation); 0 or 1: none */
    kiln_optim_config optim;
    float clip_grad_norm;       /* > 0: clip the global gradient norm to this before each update */
    float lr_step_gamma;        /* StepLR gamma, applied every lr_step_size epochs */
    int64_t lr_step_size;
    int workers, prefetch, lock_memory;
    int threads;                /* compute threads (OpenMP team, shared with oneDNN) */
    uint64_t seed;
    int64_t max_steps;          /* 0: no limit; else stop when the run's global step reaches it */
    const char *save;           /* checkpoint written at the end (NULL: none) */
    int64_t save_every;         /* also write it every N steps (0: only at the end) */
    const char *resume;         /* checkpoint to continue from (NULL: fresh start) */
    const char *load;           /* start from these weights (any safetensors with the model's names) */
    int test;                   /* 1: measure test accuracy at the end */
    int fuse, autotune, dropout_off;
    int profile;                /* 1: time every kernel and log the breakdown at the end */
    double memory_budget;       /* bytes a plan's arena may take; 0: 90 % of the machine's memory */
    /* checked after every step: when it becomes non-zero (e.g. from a SIGINT
     * handler) training stops there, the checkpoint is written for that position
     * so --resume continues exactly, and kiln_train returns KILN_OK with
     * result.interrupted = 1 (no evaluation) */
    volatile int *stop_flag;
    kiln_progress_fn progress;  /* called after every step (NULL: none) */
    void *progress_user;
} kiln_train_config;
kiln_train_config kiln_train_defaults(void);

typedef struct kiln_train_result {
    int64_t epochs, steps, samples;
    double train_time_s;        /* from compiling the plan to the last step (incl. autotuning) */
    double compile_time_s;      /* of which compiling, autotuning and starting the loader */
    double images_per_s, data_wait_frac;
    double final_loss, test_accuracy; /* test_accuracy < 0 when not measured */
    double peak_rss_mb;
    int threads, workers;
    int64_t batch_size;         /* the one used (the finder's choice with find_batch_size) */
    int interrupted;            /* stopped by stop_flag */
    size_t arena_bytes, arena_bytes_no_reuse;
} kiln_train_result;

kiln_status kiln_train(const kiln_train_config *c, kiln_train_result *r);

/* Test-set accuracy of a model with the weights in `load` (a checkpoint or any
 * safetensors file with the model's tensor names). */
kiln_status kiln_evaluate(const char *model, const char *data, const char *load, int64_t batch_size, int workers,
                          int threads, double *accuracy, int64_t *samples);

/* checkpoint.c */
kiln_status kiln_checkpoint_load_params(kiln_params *P, const char *path);

/* The batch-size finder (the guide's "increase the batch size"): the largest
 * power of two up to `limit` whose training plan's activations and gradients
 * fit in `budget` bytes, found by planning only (nothing is allocated). */
kiln_status kiln_find_batch_size(const char *model, double budget, int64_t limit, int64_t *batch, size_t *arena_bytes);

/* the compute-thread budget: threads <= 0 means every core this process may use */
int kiln_cores_available(void);

#ifdef __cplusplus
}
#endif
#endif
