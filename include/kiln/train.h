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
    int64_t epoch, epochs;      /* epoch in progress (0-based); total */
    int64_t batch, batches;     /* within the epoch */
    double loss;                /* of this step */
    double loss_smooth;         /* exponential moving average of the step losses (0.98) */
    double lr;                  /* the learning rate of this step */
    double images_per_s;        /* since the start of training */
    double data_wait_frac;      /* share of time spent waiting for batches */
    double elapsed_s, eta_s;
    int done;                   /* 1 on the last call */
} kiln_progress;
typedef void (*kiln_progress_fn)(const kiln_progress *p, void *user);

/* the largest batch (and test batch) size accepted: far beyond any memory, small enough to keep sizes exact */
#define KILN_MAX_BATCH ((int64_t)1 << 24)
/* the most ranks a checkpoint may name (kiln.world_size) */
#define KILN_MAX_WORLD ((int64_t)1 << 20)

/* --workers auto */
#define KILN_WORKERS_AUTO (-1)

typedef struct kiln_train_config {
    const char *model;          /* "mnist-cnn", "mnist-cnn-bn", "mlp" */
    int num_classes;            /* the ResNets' outputs (kiln_model_opts); 0: the model's own */
    kiln_gpt_config gpt;        /* the gpt model's shape; gpt.block is also the token loader's window */
    const char *data;           /* "fashion-mnist" or a folder of IDX files */
    int64_t epochs;
    int64_t batch_size, test_batch_size;
    int find_batch_size;        /* 1: batch_size is the largest power of two whose plan fits memory_budget */
    int64_t accumulate;         /* loader batches per optimizer step (gradient accumulation); 1: none */
    kiln_optim_config optim;
    float clip_grad_norm;       /* > 0: clip the global gradient norm to this before each update; 0: off */
    float lr_step_gamma;        /* StepLR gamma, applied every lr_step_size epochs */
    int64_t lr_step_size;
    int64_t warmup;             /* linear warmup over this many optimizer steps (kiln_lr_at); 0: none */
    int lr_decay;               /* kiln_lr_decay after the warmup: step (StepLR, the default), none, cosine, linear */
    float min_lr;               /* where cosine and linear decay end */
    int64_t lr_decay_steps;     /* the step cosine and linear decay end at; 0: the run's last (epochs, max_steps) */
    int workers;                /* loader threads; KILN_WORKERS_AUTO: measured and chosen while training */
    int prefetch, lock_memory;
    int skip_bad;               /* --bad-samples skip: a corrupt sample is replaced by the next readable one */
    const char *trace;          /* Chrome trace of the run written here (NULL: none) */
    const char *trace_steps;    /* "A-B": the trace records steps A..B only (NULL: all) */
    int threads;                /* compute threads (OpenMP team, shared with oneDNN) */
    int64_t seed;
    int64_t max_steps;          /* 0: no limit; else stop when the run's global step reaches it */
    const char *save;           /* checkpoint written at the end (NULL: none) */
    int64_t save_every;         /* also write it every N steps (0: only at the end) */
    const char *resume;         /* checkpoint to continue from (NULL: fresh start) */
    const char *load;           /* start from these weights (any safetensors with the model's names) */
    int test;                   /* 1: evaluate on the test set (every eval_every epochs and at the end) */
    int64_t eval_every;         /* epochs between evaluations; 0: only at the end */
    const char *metrics;        /* JSONL file: a line per log_every steps and per epoch (NULL: none) */
    int64_t log_every;          /* steps between metrics lines (and the CLI's progress lines) */
    const char *tensorboard;    /* folder for TensorBoard event files with the metrics' scalars (NULL: none) */
    int fuse, autotune, dropout_off;
    const char *checkpoint_activations; /* "none", "block" or op names: recompute them inside backward (kiln_compile_opts) */
    int fix_bias;               /* --fix-bias: the model without the conv/linear biases its batch norms cancel */
    int profile;                /* 1: time every kernel and log the breakdown at the end */
    int detect_anomaly;         /* 1: every step's outputs checked for NaN/Inf (kiln_plan_set_detect_anomaly) */
    int sync_loss;              /* 1: a device backend waits for each step's loss; 0: it is read a step late */
    double memory_budget;       /* bytes a plan's arena may take; 0: 90 % of the machine's memory */
    const char *device;         /* "cpu" (default), "cuda", "auto" (cuda when a GPU is here), or another
                                   registered backend's name ("ref": the double reference) */
    int matmul_precision;       /* GPU: 0 highest (fp32), 1 high (tf32), 2 medium (bf16) */
    int precision;              /* kiln_precision: mixed precision (kiln_compile_opts.precision) */
    const char *loss_scale;     /* "auto" (dynamic with fp16), "dynamic" or "off": the gradient scaler */
    /* under mpirun (docs/distributed.md): --batch-size is per rank */
    int sync_bn;                /* batch norm statistics over all ranks */
    float bucket_mb;            /* gradient bucket size (25) */
    int overlap;                /* 1: bucket all-reduces start inside backward */
    float timeout;              /* seconds a collective may wait for the other ranks (300) */
    const char *bind;           /* "none" (default), "core" or "numa" */
    int64_t batch_tokens;       /* token data: length-bucketed batches of about this many tokens; 0: off */
    /* image transforms (kiln_data_config; 0 / NULL: none): torchvision's Resize,
     * CenterCrop, RandomResizedCrop ("N[,lo,hi]"), RandomHorizontalFlip, Normalize
     * ("m1,m2,m3/s1,s2,s3" or "imagenet"), channels 1|3, and the test share of a
     * folder of class folders */
    int resize, center_crop;
    const char *random_resized_crop;
    int hflip;
    const char *normalize;
    int channels;
    float val_split;
    const char *cache;          /* image folders and shards: keep decoded samples in this folder (--cache; NULL: none) */
    /* checked after every step: when it becomes non-zero (e.g. from a SIGINT
     * handler) training stops there, the checkpoint is written for that position
     * so --resume continues exactly, and kiln_train returns KILN_OK with
     * result.interrupted = 1 (no evaluation) */
    volatile int *stop_flag;
    kiln_progress_fn progress;  /* called after every step (NULL: none) */
    void *progress_user;
} kiln_train_config;
kiln_train_config kiln_train_defaults(void);

/* one kernel of a profiled run: its mean time per run and what it achieved */
typedef struct kiln_kernel_stat {
    char name[64];              /* the step as kiln inspect names it */
    char op[32];
    double ms;                  /* per run (micro-batch) */
    double gflops;              /* conv and linear work per second (0 for other ops) */
    double gbps;                /* bytes of its inputs and outputs per second */
} kiln_kernel_stat;

typedef struct kiln_train_result {
    int64_t epochs, steps, samples;
    double train_time_s;        /* from compiling the plan to the last step (incl. autotuning) */
    double compile_time_s;      /* of which compiling, autotuning and starting the loader */
    double first_step_s;        /* of which the first step (first touches of memory, lazy kernel set-up) */
    double first_step_wait_s;   /* the data-wait up to the first step's end (the loader's start included) */
    double images_per_s, data_wait_frac;
    double tokens_per_s;        /* the gpt: images_per_s x block (0 for the image models) */
    double final_loss;          /* the last step's */
    double test_loss, test_accuracy; /* the last evaluation's; < 0 (accuracy) when none ran */
    double peak_rss_mb;
    int threads, workers;       /* workers: the count at the end (--workers auto's choice) */
    char workers_why[192];      /* --workers auto: what it measured and chose ("" otherwise) */
    int64_t skipped;            /* samples --bad-samples skip replaced */
    double loss_scale;          /* with the gradient scaler: its scale at the end (0: none) */
    int64_t skipped_updates;    /* with it: updates skipped for inf or NaN gradients, resumed ones included */
    int ring_slots;             /* the loader's batch ring, fixed for the run */
    size_t ring_bytes;
    int64_t batch_size;         /* the one used (the finder's choice with find_batch_size) */
    int interrupted;            /* stopped by stop_flag */
    size_t arena_bytes, arena_bytes_no_reuse;
    size_t arena_bytes_plain;   /* the arena without --checkpoint-activations (arena_bytes when it is off) */
    /* with profile: per optimizer step, the wall time of the step's runs and
     * update, the sum of their kernels' times, and the rest (dispatch overhead) */
    double step_ms, kernel_ms, overhead_ms;
    /* data parallel: ranks, and the batch of one update over all of them (batch_size x world_size);
     * per reducing step, the gradient all-reduce wait before the optimizer (exposed) and the share of
     * the all-reduce time hidden behind backward, both the mean over the ranks; gradient buckets
     * (0 in a world of one) */
    int world_size;
    int64_t global_batch;
    int64_t step_allocs;        /* kiln_alloc calls made while running plans and updates (0: all preallocated) */
    int buckets;
    double allreduce_exposed_ms, allreduce_hidden_frac;
    double grad_mb;             /* gradients all-reduced per step, MiB (0 in a world of one) */
    /* per reducing step: the wait of the rank that arrived last (communication alone, the same on
     * every rank), and a rank's wait beyond it (arrival imbalance), the mean over the ranks */
    double allreduce_comm_exposed_ms, allreduce_skew_ms;
    double allreduce_comm_exposed_median_ms; /* that wait's median over the latest 256 steps */
    double fwd_ms, bwd_ms, optim_ms; /* with profile: the kernels of forward and backward, and the update, per step */
    int ntop;                   /* with profile: the largest kernels, most expensive first */
    kiln_kernel_stat top[3];
} kiln_train_result;

/* ---- the settings, as the command line names them ----
 * One entry per field of kiln_train_config a user sets ("batch-size",
 * "lr", ...): the CLI's parser and --help come from this table, and a
 * checkpoint keeps the run-defining ones (resumable = 0) so a resumed run can
 * take them back. Defaults are kiln_train_defaults()'s. */
typedef struct kiln_train_option {
    const char *name;           /* "batch-size": the flag without dashes, and the key in checkpoints */
    const char *metavar;        /* "N", "FILE"; NULL for a flag */
    const char *help;
    int resumable;              /* 1: may differ from the checkpoint's value on --resume */
    int flag;                   /* 1: takes no value */
} kiln_train_option;
int kiln_train_option_count(void);
const kiln_train_option *kiln_train_option_at(int i);
/* parses value (NULL for a flag) into the field; a bad value is an error naming the option */
kiln_status kiln_train_option_set(kiln_train_config *c, const char *name, const char *value);
/* the field's value as text ("64", "0.001", "true", "auto"); 0, or -1 for an unknown name */
int kiln_train_option_get(const kiln_train_config *c, const char *name, char *buf, size_t len);
/* every run-defining setting (resumable = 0) as a JSON object of strings; malloc'd; NULL with the message
 * set when out of memory or when a value cannot be recorded (not UTF-8) */
char *kiln_train_settings_json(const kiln_train_config *c);
/* the settings a checkpoint was saved with (its "kiln.settings" metadata), as JSON; malloc'd.
 * *json is NULL for a checkpoint written before settings were kept. */
kiln_status kiln_checkpoint_settings(const char *path, char **json);
/* the ranks a checkpoint's run trained on (its "kiln.world_size"; 1 when absent): a
 * resumed run keeps the global batch, --batch-size x ranks, not the per-rank one */
kiln_status kiln_checkpoint_world_size(const char *path, int64_t *world);

kiln_status kiln_train(const kiln_train_config *c, kiln_train_result *r);
/* the dataset settings of a config as kiln_dataset_open_config takes them */
kiln_status kiln_train_data_config(const kiln_train_config *c, kiln_data_config *dc);

/* Test-set loss and accuracy of a model with the weights in `load` (a checkpoint
 * or any safetensors file with the model's tensor names), on the backend device
 * names (kiln_device_backend: "cpu", "cuda", "auto"; NULL: cpu). */
kiln_status kiln_evaluate(const char *model, const char *data, const char *load, const char *device, int64_t batch_size,
                          int workers, int threads, double *loss, double *accuracy, int64_t *samples);

/* The same, with c's model, data and its transforms (the test split's deterministic
 * ones), device, workers and threads. */
kiln_status kiln_evaluate_config(const kiln_train_config *c, const char *load, int64_t batch_size, double *loss,
                                 double *accuracy, int64_t *samples);

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
