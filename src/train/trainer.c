/* The trainer: opens the data and the model, compiles a training plan once
 * (for the full batch and the epoch's last, shorter one), then steps it over
 * the loader's batches with the optimizer's fused update; evaluates with a
 * separate inference plan every --eval-every epochs; checkpoints and resumes
 * exactly. Prints nothing itself: progress goes to a callback, the epoch
 * lines and messages to the logger, metrics to a JSONL file. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include "base/internal/trace.h"
#include "kiln/trace.h"
#include "kiln/train.h"
#include "train/internal/anomaly.h"
#include "train/internal/auto_workers.h"
#include "train/internal/checkpoint.h"
#include "train/internal/input_shape.h"
#include "train/internal/fit.h"
#include "train/internal/metrics.h"
#include "train/internal/token_plans.h"
#include "dist/internal/bind.h"
#include "dist/internal/ddp.h"
#include "dist/internal/dist.h"

kiln_train_config kiln_train_defaults(void) {
    kiln_train_config c = {0};
    c.model = "mnist-cnn";
    c.data = "fashion-mnist";
    c.epochs = 1;
    c.batch_size = 64;
    c.test_batch_size = 1000;
    c.accumulate = 1;
    c.optim = kiln_optim_defaults(KILN_OPT_ADADELTA);
    c.lr_step_gamma = 0.7f;
    c.lr_step_size = 1;
    c.workers = KILN_WORKERS_AUTO;
    c.prefetch = 2;
    c.seed = 1;
    c.test = 1;
    c.eval_every = 1;
    c.log_every = 100;
    c.fuse = 1;
    c.autotune = 1;
    c.device = "cpu";
    c.loss_scale = "auto";
    c.bucket_mb = 25;
    c.overlap = 1;
    c.timeout = 300;
    c.bind = "none";
    c.gpt = (kiln_gpt_config){.layers = 4, .heads = 4, .dim = 256, .block = 128, .vocab = 256};
    return c;
}

int kiln_cores_available(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static int cores_online(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

static int set_threads(int threads) {
    if (threads <= 0) threads = kiln_cores_available();
    omp_set_num_threads(threads);
    return threads;
}

/* Inference runs in chunks of at most this many samples whatever the loader's
 * batch: the result is the same, and a 1000-image batch would otherwise need a
 * quarter-gigabyte arena for mnist-cnn's activations. */
#define EVAL_CHUNK 250
/* the kernels are timed over this many runs (after a warm-up) to name the largest ones at the end */
#define SAMPLE_FROM 5
#define SAMPLE_RUNS 20

/* ---------------------------------------------------------------- evaluation */

typedef struct {
    double loss, accuracy;
    int64_t samples;
} eval_result;

/* the chunk sizes a pass over n samples in batches of `batch` runs */
/* chunks a pass must run before its plan autotunes: the candidates of a convolution take a few dozen calls to
 * time, once per process (remembered after, and on disk). `kiln eval` of resnet20 over Fashion-MNIST's 10000
 * test images at 32x32 (40 chunks of 250) on the 2-core Zen 3: 5.3 s untuned (oneDNN's first choice), 5.4 s
 * tuning, 3.3 s with the choices remembered (kiln's Winograd, depth-first): later epochs and runs gain */
#define EVAL_TUNE_CHUNKS 32

static kiln_compile_opts eval_opts(int64_t n, int64_t batch, int fuse, int precision, int autotune) {
    kiln_compile_opts o = kiln_compile_defaults();
    o.max_batch = batch < EVAL_CHUNK ? batch : EVAL_CHUNK;
    int64_t last = n % batch;
    o.also_batches[0] = batch % o.max_batch;
    o.also_batches[1] = last % o.max_batch;
    o.fuse = fuse;
    o.precision = precision;
    o.autotune = autotune && n / o.max_batch >= EVAL_TUNE_CHUNKS; /* a short pass: timing costs more than it saves */
    return o;
}

static int argmax_hits(const float *logits, const int32_t *y, int64_t n, int classes) {
    int hits = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *row = logits + i * classes;
        int best = 0;
        for (int k = 1; k < classes; k++)
            if (row[k] > row[best]) best = k;
        hits += best == y[i];
    }
    return hits;
}

/* test loss and accuracy of params P, with an inference plan (no backward, no saved activations) */
static kiln_status evaluate(kiln_graph *g, const kiln_model *m, kiln_params *P, kiln_dataset *ds, int64_t batch,
                            int workers, int fuse, int precision, int autotune, eval_result *er) {
    memset(er, 0, sizeof *er);
    kiln_compile_opts o = eval_opts(ds->len, batch, fuse, precision, autotune);
    kiln_value outs[2] = {m->loss, m->out};
    kiln_plan *plan;
    kiln_status st = kiln_compile(g, P, outs, 2, &o, &plan);
    if (st != KILN_OK) return st;
    kiln_loader_config lc = kiln_loader_defaults();
    lc.batch_size = batch; /* the loader's slots never hold more than the dataset */
    lc.workers = workers == KILN_WORKERS_AUTO ? 1 : workers;
    lc.shuffle = 0;
    lc.next_epoch = 0; /* one pass: nothing to prefetch beyond it */
    kiln_params_host_allocator(P, &lc.host_alloc, &lc.host_free);
    kiln_loader *L = NULL;
    int64_t per = m->block > 0 ? m->block : 1; /* labels (predictions) per sample: the gpt's tokens */
    float *logits = kiln_alloc((size_t)(o.max_batch * per * m->num_classes) * sizeof(float));
    if (!logits) st = kiln_fail(KILN_ERR_NOMEM, "evaluation: out of memory");
    if (st == KILN_OK) st = kiln_loader_new(ds, &lc, &L);
    if (st == KILN_OK) st = kiln_loader_start_epoch(L, 0, 0);
    int64_t hits = 0, sample = kiln_shape_numel(ds->sample_ndim, ds->sample_shape);
    double loss_sum = 0;
    kiln_batch b;
    int got = 0;
    while (st == KILN_OK && (got = kiln_loader_next(L, &b)) == 1) {
        for (int64_t at = 0; at < b.n && st == KILN_OK; at += o.max_batch) {
            int64_t n = b.n - at < o.max_batch ? b.n - at : o.max_batch;
            kiln_plan_bind(plan, m->x, b.x + at * sample);
            kiln_plan_bind(plan, m->y, b.y + at * per);
            if ((st = kiln_plan_run(plan, n)) == KILN_OK)
                st = kiln_plan_read(plan, m->out, logits, n * per * m->num_classes);
            if (st != KILN_OK) break;
            loss_sum += kiln_plan_loss(plan) * (double)n; /* the model's loss is a mean over the chunk */
            hits += argmax_hits(logits, b.y + at * per, n * per, m->num_classes);
            er->samples += n;
        }
        kiln_loader_release(L, &b);
    }
    if (st == KILN_OK && got < 0) st = kiln_loader_status(L);
    kiln_free(logits);
    kiln_loader_free(L);
    kiln_plan_free(plan);
    er->loss = er->samples ? loss_sum / (double)er->samples : NAN;
    er->accuracy = er->samples ? (double)hits / (double)(er->samples * per) : 0;
    return st;
}

/* ---------------------------------------------------------------- checks */

/* a checkpoint that cannot be written should fail the run before training, not after */
static kiln_status check_save_path(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    if (access(dir, W_OK) != 0)
        return kiln_fail(KILN_ERR_IO, "--save %s: cannot write into folder %s: %s", path, dir, strerror(errno));
    return KILN_OK;
}

static kiln_status check_model(const char *model) {
    char known[256] = "";
    size_t o = 0;
    for (const char *const *m = kiln_model_names(); *m; m++) {
        if (strcmp(*m, model) == 0) return KILN_OK;
        o += (size_t)snprintf(known + o, sizeof known - o, "%s%s", o ? ", " : "", *m);
    }
    return kiln_fail(KILN_ERR_INVALID_ARG, "--model: unknown model '%s' (known: %s)", model, known);
}

/* what train and eval share, validated alike before any work */
static kiln_status check_common(const char *batch_flag, int64_t batch, int workers, int threads) {
    if (batch < 1 || batch > KILN_MAX_BATCH)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s is %lld; use 1..%lld", batch_flag, (long long)batch, (long long)KILN_MAX_BATCH);
    if ((workers < 0 && workers != KILN_WORKERS_AUTO) || workers > 64)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--workers is %d; use 0..64 or auto", workers);
    if (threads < 0 || threads > 1024) return kiln_fail(KILN_ERR_INVALID_ARG, "--threads is %d; use 0..1024 (0: every core)", threads);
    return KILN_OK;
}

static kiln_status check_optim(const kiln_optim_config *o) {
    if (!(o->lr >= 0)) return kiln_fail(KILN_ERR_INVALID_ARG, "--lr is %g; it must be >= 0", (double)o->lr);
    if (!(o->momentum >= 0)) return kiln_fail(KILN_ERR_INVALID_ARG, "--momentum is %g; it must be >= 0", (double)o->momentum);
    if (!(o->weight_decay >= 0))
        return kiln_fail(KILN_ERR_INVALID_ARG, "--weight-decay is %g; it must be >= 0", (double)o->weight_decay);
    if (o->nesterov && o->kind != KILN_OPT_SGD) return kiln_fail(KILN_ERR_INVALID_ARG, "--nesterov is for --optimizer sgd");
    if (o->nesterov && !(o->momentum > 0)) return kiln_fail(KILN_ERR_INVALID_ARG, "--nesterov needs --momentum > 0");
    /* the other optimizers' defaults leave these 0: a value here was given for another optimizer */
    int betas = o->kind == KILN_OPT_ADAMW || o->kind == KILN_OPT_LAMB || o->kind == KILN_OPT_NOVOGRAD;
    if (!betas && (o->beta1 != 0 || o->beta2 != 0))
        return kiln_fail(KILN_ERR_INVALID_ARG, "--%s is for --optimizer adamw, lamb or novograd", o->beta1 != 0 ? "beta1" : "beta2");
    if (o->kind != KILN_OPT_LARS && o->trust != 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--trust-coefficient is for --optimizer lars");
    if ((o->kind == KILN_OPT_SGD || o->kind == KILN_OPT_LARS) && o->eps != 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--eps is for --optimizer adamw, lamb, novograd or adadelta");
    if (!(o->beta1 >= 0 && o->beta1 < 1)) return kiln_fail(KILN_ERR_INVALID_ARG, "--beta1 is %g; use [0, 1)", (double)o->beta1);
    if (!(o->beta2 >= 0 && o->beta2 < 1)) return kiln_fail(KILN_ERR_INVALID_ARG, "--beta2 is %g; use [0, 1)", (double)o->beta2);
    if (!(o->eps >= 0)) return kiln_fail(KILN_ERR_INVALID_ARG, "--eps is %g; it must be >= 0", (double)o->eps);
    if (o->kind == KILN_OPT_LARS && !(o->trust > 0))
        return kiln_fail(KILN_ERR_INVALID_ARG, "--trust-coefficient is %g; it must be > 0", (double)o->trust);
    return KILN_OK;
}

static kiln_status check_schedule(const kiln_train_config *c) {
    int to_min = c->lr_decay == KILN_LR_COSINE || c->lr_decay == KILN_LR_LINEAR;
    if (c->warmup < 0) return kiln_fail(KILN_ERR_INVALID_ARG, "--warmup is %lld; it must be >= 0", (long long)c->warmup);
    if (c->lr_decay_steps < 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--lr-decay-steps is %lld; it must be >= 0", (long long)c->lr_decay_steps);
    if (!(c->min_lr >= 0 && c->min_lr <= c->optim.lr))
        return kiln_fail(KILN_ERR_INVALID_ARG, "--min-lr is %g; use 0..%g (--lr)", (double)c->min_lr, (double)c->optim.lr);
    if (!to_min && (c->min_lr != 0 || c->lr_decay_steps != 0))
        return kiln_fail(KILN_ERR_INVALID_ARG, "--%s is for --lr-decay cosine or linear", c->min_lr != 0 ? "min-lr" : "lr-decay-steps");
    return KILN_OK;
}

/* parameters (and so plans and optimizer state) on the backend --device names */
static kiln_status new_params(const char *device, kiln_graph *g, kiln_params **P) {
    const char *backend;
    kiln_status st = kiln_device_backend(device, &backend);
    return st == KILN_OK ? kiln_params_new_on(g, backend, P) : st;
}

/* --loss-scale: auto is dynamic loss scaling with fp16 operands only (bf16 has fp32's range) */
static int scaler_on(const kiln_train_config *c) {
    const char *ls = c->loss_scale ? c->loss_scale : "auto";
    return !strcmp(ls, "dynamic") || (!strcmp(ls, "auto") && c->precision == KILN_PRECISION_FP16);
}

static kiln_status check_config(const kiln_train_config *c) {
    if (!c->model || !c->model[0]) return kiln_fail(KILN_ERR_INVALID_ARG, "--model is required");
    if (check_model(c->model) != KILN_OK) return KILN_ERR_INVALID_ARG;
    if (!c->data || !c->data[0]) return kiln_fail(KILN_ERR_INVALID_ARG, "--data is required");
    const char *backend;
    if (kiln_device_backend(c->device, &backend) != KILN_OK) return KILN_ERR_INVALID_ARG;
    if (c->find_batch_size && !(c->memory_budget > 0))
        return kiln_fail(KILN_ERR_INVALID_ARG, "--batch-size auto needs --memory-budget-mb: the budget the batch must fit in");
    if (c->find_batch_size && c->resume)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--batch-size auto with --resume: resume with the batch size the run was saved with");
    if (!c->find_batch_size && c->batch_size < 1)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--batch-size is %lld; it must be at least 1", (long long)c->batch_size);
    kiln_status st = check_common("--test-batch-size", c->test_batch_size, c->workers, c->threads);
    if (st == KILN_OK && !c->find_batch_size) st = check_common("--batch-size", c->batch_size, c->workers, c->threads);
    if (st == KILN_OK) st = check_optim(&c->optim);
    if (st == KILN_OK) st = check_schedule(c);
    if (st != KILN_OK) return st;
#define RANGE(cond, ...) \
    if (!(cond)) return kiln_fail(KILN_ERR_INVALID_ARG, __VA_ARGS__)
    RANGE(c->num_classes >= 0 && c->num_classes <= KILN_MAX_CLASSES, "--num-classes is %d; use 1..%d (0: the model's own)",
          c->num_classes, KILN_MAX_CLASSES);
    RANGE(c->epochs >= 1 && c->epochs <= (int64_t)1 << 40, "--epochs is %lld; it must be at least 1", (long long)c->epochs);
    RANGE(c->prefetch >= 1 && c->prefetch <= 64, "--prefetch is %d; use 1..64", c->prefetch);
    RANGE(c->lr_step_size >= 1, "--lr-step-size is %lld; it must be at least 1", (long long)c->lr_step_size);
    RANGE(c->seed >= 0, "--seed is %lld; it must be >= 0", (long long)c->seed);
    RANGE(c->max_steps >= 0, "--max-steps is %lld", (long long)c->max_steps);
    RANGE(c->save_every >= 0, "--save-every is %lld", (long long)c->save_every);
    RANGE(!c->save_every || c->save, "--save-every needs --save FILE");
    RANGE(c->eval_every >= 0, "--eval-every is %lld; it must be >= 0", (long long)c->eval_every);
    RANGE(c->log_every >= 1, "--log-every is %lld; it must be at least 1", (long long)c->log_every);
    RANGE(!c->load || !c->resume, "--load and --resume both given: --resume continues a run, --load starts one from weights");
    RANGE(!c->loss_scale || !strcmp(c->loss_scale, "auto") || !strcmp(c->loss_scale, "dynamic") || !strcmp(c->loss_scale, "off"),
          "--loss-scale is '%s'; use auto, dynamic or off", c->loss_scale);
    RANGE(c->accumulate >= 1 && c->accumulate <= 1 << 20, "--accumulate is %lld (want >= 1)", (long long)c->accumulate);
    RANGE(c->clip_grad_norm >= 0, "--clip-grad-norm is %g; it must be > 0", (double)c->clip_grad_norm);
    RANGE(c->lr_step_gamma > 0, "--lr-step-gamma is %g; it must be > 0", (double)c->lr_step_gamma);
    RANGE(c->memory_budget >= 0, "--memory-budget-mb is %g; it must be > 0", c->memory_budget / 1048576.0);
    RANGE(c->batch_tokens >= 0, "--batch-tokens is %lld; it must be >= 1 (0: off)", (long long)c->batch_tokens);
    RANGE(!c->batch_tokens || (!strcmp(c->model, "gpt") && !strncmp(c->data, "tokens:", 7)),
          "--batch-tokens is for --model gpt on --data tokens:FILE (documents of several lengths)");
    RANGE(!c->batch_tokens || c->accumulate <= 1, "--batch-tokens with --accumulate is not built yet: use a larger "
          "--batch-tokens instead");
    RANGE(!c->batch_tokens || !c->find_batch_size, "--batch-tokens sets the batches: leave --batch-size alone");
    RANGE(c->timeout > 0, "--timeout is %g; it must be > 0 (seconds)", (double)c->timeout);
    RANGE(kiln_bind_valid(c->bind), "--bind is '%s'; use none, core or numa", c->bind ? c->bind : "");
#undef RANGE
    if (!c->save) return KILN_OK;
    /* the checkpoint keeps the run's settings for --resume: each must be recordable */
    char *settings = kiln_train_settings_json(c);
    if (!settings) return KILN_ERR_INVALID_ARG;
    free(settings);
    return check_save_path(c->save);
}

/* the model a config names, with its --num-classes and --fix-bias */
static kiln_status build_model(kiln_graph *g, const kiln_train_config *c, kiln_model *m) {
    kiln_model_opts mo = {.num_classes = c->num_classes, .fix_bias = c->fix_bias, .gpt = c->gpt};
    return kiln_model_build_ex(g, c->model, &mo, m);
}

/* ---------------------------------------------------------------- a run */

/* A run queued on the plan, its loss not taken yet: it keeps its batch (a device may still be copying from the
 * loader's slot) and where it was in the run (the message of a non-finite loss names it). */
typedef struct {
    kiln_plan *plan;
    uint64_t ticket;
    kiln_batch b;
    double share;               /* of its step's samples */
    int64_t step, epoch;        /* its step, 1-based, and epoch */
} queued_run;

/* A step whose loss is not complete: the sum of its runs' losses so far, runs still untaken, and whether its
 * update has been made (its loss is reported once both are done) */
typedef struct {
    int64_t step;               /* 1-based; 0: a free entry */
    double loss;
    int open, updated;
} step_loss;

typedef struct {
    kiln_train_config c;        /* effective: the finder's batch size, the resumed seed */
    kiln_train_result *r;
    kiln_dataset *train, *test;
    kiln_graph *g;
    kiln_model m;
    kiln_params *P;
    kiln_optim *opt;
    kiln_plan *plan;
    kiln_loader *L;
    kiln_metrics *metrics;
    kiln_ckpt_state resumed;
    int64_t step, epoch, next;  /* position: steps done, epoch in progress, its next batch */
    int64_t per_epoch, accum, total;
    int64_t runs;               /* plan runs (micro-batches) of this process */
    double t0, loss, loss_smooth, step_s, optim_s;
    /* --profile leaves out the first step (first-touch pages, oneDNN's first calls): its step count and times before */
    int64_t prof_steps0;
    double prof_step_s0, prof_optim_s0;
    double epoch_loss, epoch_t0, epoch_wait0, epoch_time, epoch_waited;
    int64_t epoch_steps, epoch_samples, samples;
    kiln_metrics_window win;    /* since the last metrics line */
    int64_t evaluated_at;       /* step of the last evaluation, -1: none */
    eval_result last_eval;
    int stop;
    int auto_on;                /* --workers auto */
    kiln_auto_workers aw;
    kiln_lr_schedule sched;     /* the learning rate of every step */
    kiln_comm *comm;            /* the MPI job (NULL: a world of one) */
    kiln_ddp *ddp;
    int rank, world;            /* only rank 0 reports, evaluates and saves */
    int64_t rank_len;           /* training samples this rank visits per epoch */
    int64_t trace_from, trace_to; /* --trace-steps: the steps recorded (0, 0: all) */
    double step_t0;             /* when the step's first batch began (its trace span) */
    kiln_token_plans tp;        /* --batch-tokens: a plan per length bucket (tp.plan[0] is `plan`) */
    int64_t tokens;             /* --batch-tokens: positions trained on, all ranks */
    uint64_t step_allocs;       /* kiln_alloc calls while running plans and updates */
    int late;                   /* losses taken a step late (a device backend; not --sync-loss) */
    queued_run queue[2];        /* runs whose losses are not taken yet, oldest first */
    int nqueued;
    step_loss open_steps[2];    /* steps whose loss is not complete */
} run;

static double elapsed(const run *R) { return now_s() - R->t0; }
static double waited(const run *R) { return kiln_loader_wait_seconds(R->L); }

/* the data's samples must be what the model's input takes */
static kiln_status check_samples(kiln_graph *g, const kiln_model *m, const kiln_dataset *ds, const char *model) {
    kiln_status st = kiln_check_input_shape(g, m, ds, model, "");
    if (st != KILN_OK) return st;
    if (ds->num_classes > m->num_classes)
        return kiln_fail(KILN_ERR_SHAPE, "%s: %d classes, model %s has %d outputs", ds->name, ds->num_classes, model,
                         m->num_classes);
    return KILN_OK;
}

static kiln_status check_data(run *R) {
    kiln_status st = check_samples(R->g, &R->m, R->train, R->c.model);
    if (st == KILN_OK && R->test) st = check_samples(R->g, &R->m, R->test, R->c.model);
    return st;
}

static kiln_status restore(run *R) {
    kiln_train_config *c = &R->c;
    kiln_ckpt_state *cs = &R->resumed;
    kiln_status st = kiln_checkpoint_resume(c->resume, R->P, R->opt, cs);
    if (st != KILN_OK) {
        /* a checkpoint of another model fails on its first tensor: say why */
        if (cs->model[0] && strcmp(cs->model, c->model) != 0)
            st = kiln_fail_context(KILN_ERR_INVALID_ARG, "--resume %s is a checkpoint of model '%s', not '%s'", c->resume,
                                   cs->model, c->model);
        return st;
    }
    if (strcmp(cs->model, c->model) != 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s: a checkpoint of model '%s', not '%s'", c->resume, cs->model, c->model);
    /* token-budget batches are cut per rank: another world size cuts other batches */
    if (c->batch_tokens && cs->world_size != R->world)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s: saved on %lld rank(s) with --batch-tokens, resumed on %d: a run with "
                         "--batch-tokens resumes on as many ranks as it was saved on", c->resume, (long long)cs->world_size,
                         R->world);
    /* any world size continues the run when the global batch stays (docs/checkpoints.md) */
    if (cs->batch_size * cs->world_size != c->batch_size * R->world)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s: saved with --batch-size %lld on %lld rank%s (global batch %lld); resumed with "
                         "--batch-size %lld on %d rank%s (global batch %lld): resume with the same global batch", c->resume,
                         (long long)cs->batch_size, (long long)cs->world_size, cs->world_size == 1 ? "" : "s",
                         (long long)(cs->batch_size * cs->world_size), (long long)c->batch_size, R->world,
                         R->world == 1 ? "" : "s", (long long)c->batch_size * R->world);
    if (cs->accumulate != (c->accumulate > 0 ? c->accumulate : 1))
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s: saved with --accumulate %lld; resume with the same", c->resume,
                         (long long)cs->accumulate);
    c->seed = (int64_t)cs->seed;
    R->step = cs->step;
    R->epoch = cs->epoch;
    R->next = cs->next_batch;
    kiln_log(KILN_LOG_INFO, "resuming %s at step %lld (epoch %lld, batch %lld)", c->resume, (long long)cs->step,
             (long long)cs->epoch + 1, (long long)cs->next_batch);
    if (cs->world_size != R->world)
        kiln_log(KILN_LOG_INFO, "the run was saved on %lld rank%s x %lld; it continues on %d rank%s x %lld, the same global batch %lld",
                 (long long)cs->world_size, cs->world_size == 1 ? "" : "s", (long long)cs->batch_size, R->world,
                 R->world == 1 ? "" : "s", (long long)c->batch_size, (long long)c->batch_size * R->world);
    return KILN_OK;
}

/* under mpirun: the same model and settings on every rank, rank 0's weights everywhere */
static kiln_status ddp_open(run *R) {
    kiln_ddp_opts o = kiln_ddp_defaults();
    o.bucket_mb = R->c.bucket_mb;
    o.overlap = R->c.overlap;
    o.settings = R->world > 1 ? kiln_train_settings_json(&R->c) : NULL;
    kiln_status st = kiln_ddp_open(R->comm, R->P, &o, &R->ddp);
    free((char *)o.settings);
    const char *via = st == KILN_OK ? kiln_ddp_transport(R->ddp) : NULL;
    if (via && R->world > 1)
        kiln_log(KILN_LOG_INFO, "gradients on %s, one device per rank: summed over the ranks %s", kiln_params_backend(R->P), via);
    return st;
}

/* datasets, model, parameters, optimizer, and the position to start from */
static kiln_status run_open(run *R) {
    kiln_train_config *c = &R->c;
    kiln_status st;
    kiln_data_config dc;
    if ((st = kiln_train_data_config(c, &dc)) != KILN_OK) return st;
    if ((st = kiln_dataset_open_config(c->data, 1, &dc, &R->train)) != KILN_OK) return st;
    kiln_data_config tdc = dc;
    tdc.documents = 0; /* evaluation stays on the val file's windows of the block */
    if (c->test && (st = kiln_dataset_open_config(c->data, 0, &tdc, &R->test)) != KILN_OK) return st;

    R->g = kiln_graph_new();
    if ((st = build_model(R->g, c, &R->m)) != KILN_OK) return st;
    if ((st = check_data(R)) != KILN_OK) return st;
    if ((st = new_params(c->device, R->g, &R->P)) != KILN_OK) return st;
    if (strcmp(kiln_params_backend(R->P), "cpu") != 0) kiln_log(KILN_LOG_INFO, "device: %s", kiln_params_backend(R->P));
    kiln_params_init(R->P, (uint64_t)c->seed);
    if (c->load && (st = kiln_checkpoint_load_params(R->P, c->load)) != KILN_OK) return st;
    if ((st = kiln_optim_new(&c->optim, R->P, &R->opt)) != KILN_OK) return st;
    if (c->clip_grad_norm > 0) kiln_optim_set_clip(R->opt, c->clip_grad_norm);
    kiln_grad_scaler_config gs = kiln_grad_scaler_defaults();
    if (scaler_on(c) && (st = kiln_optim_set_grad_scaler(R->opt, &gs)) != KILN_OK) return st;
    if (c->resume && (st = restore(R)) != KILN_OK) return st;
    if ((st = ddp_open(R)) != KILN_OK) return st;
    if (R->rank == 0 && (c->metrics || c->tensorboard) &&
        (st = kiln_metrics_open(c->metrics, c->tensorboard, c->resume != NULL, &R->metrics)) != KILN_OK)
        return st;
    return KILN_OK;
}

/* A resumed position must fit this data (the saved batch inside an epoch, the
 * step count matching epoch and batch), and something must be left to train:
 * a run of 0 steps never reports success or overwrites a checkpoint. */
static kiln_status check_position(run *R) {
    const kiln_train_config *c = &R->c;
    int64_t groups = (R->per_epoch + R->accum - 1) / R->accum;
    if (R->next >= R->per_epoch || R->next % R->accum)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--resume %s: saved at batch %lld of epoch %lld, but %s gives %lld batches of %lld per "
                         "epoch (in groups of %lld): resume with the data it was saved with", c->resume, (long long)R->next,
                         (long long)R->epoch + 1, c->data, (long long)R->per_epoch, (long long)c->batch_size, (long long)R->accum);
    if (R->epoch > ((int64_t)1 << 53) / groups || R->step != R->epoch * groups + R->next / R->accum)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--resume %s: step %lld does not match epoch %lld, batch %lld of this data "
                         "(expected step %lld): resume with the data it was saved with", c->resume, (long long)R->step,
                         (long long)R->epoch + 1, (long long)R->next, (long long)(R->epoch * groups + R->next / R->accum));
    if (R->epoch >= c->epochs || R->step >= R->total)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--resume %s: the run is at step %lld (epoch %lld) and would stop at step %lld "
                         "(--epochs %lld%s): nothing to train; raise --epochs or --max-steps", c->resume, (long long)R->step,
                         (long long)R->epoch + 1, (long long)R->total, (long long)c->epochs,
                         c->max_steps ? ", --max-steps given" : "");
    return KILN_OK;
}

/* the learning-rate schedule over this run's steps, and what the log says of it and of weight decay */
static void schedule_open(run *R) {
    const kiln_train_config *c = &R->c;
    R->sched = (kiln_lr_schedule){(kiln_lr_decay)c->lr_decay, c->optim.lr, c->min_lr, c->warmup,
                                  c->lr_decay_steps ? c->lr_decay_steps : R->total, c->lr_step_gamma, c->lr_step_size};
    char line[256];
    kiln_lr_describe(&R->sched, line, sizeof line);
    kiln_log(KILN_LOG_INFO, "%s", line);
    if (c->optim.weight_decay == 0) return;
    int n = kiln_params_count(R->P), decayed = 0;
    for (int i = 0; i < n; i++) decayed += kiln_optim_decays(R->opt, i);
    kiln_log(KILN_LOG_INFO, "weight decay %g on %d of %d parameter tensors%s", (double)c->optim.weight_decay, decayed, n,
             c->optim.decay_all ? " (--decay-all)" : " (not on those of fewer than 2 dims: biases, norm weights; --decay-all)");
}

static float lr_now(const run *R) { return (float)kiln_lr_at(&R->sched, R->step, R->epoch); }

/* sync batch norm's collective: the kernels sum their per-channel statistics over the ranks */
static int sync_bn_allreduce(void *comm, double *buf, int64_t n) {
    return kiln_comm_allreduce_f64(comm, buf, n, "the sync batch norm all-reduce") == KILN_OK ? 0 : -1;
}

/* the training plan (the full batch and the epoch's last one) and the loader */
static kiln_status run_compile(run *R) {
    kiln_train_config *c = &R->c;
    kiln_compile_opts co = kiln_compile_defaults();
    co.training = 1;
    /* each rank visits ceil(len / world) samples an epoch (DistributedSampler, padded) */
    R->rank_len = (R->train->len + R->world - 1) / R->world;
    co.max_batch = c->batch_size < R->rank_len ? c->batch_size : R->rank_len; /* no batch is larger than the dataset */
    co.also_batches[0] = R->rank_len % co.max_batch;
    co.fuse = c->fuse;
    co.autotune = c->autotune;
    co.dropout_off = c->dropout_off;
    co.sync_bn = c->sync_bn && R->world > 1; /* a world of one: plain batch norm gives the same bits */
    co.checkpoint_activations = c->checkpoint_activations;
    co.memory_budget = c->memory_budget;
    co.seed = (uint64_t)c->seed;
    co.matmul_precision = c->matmul_precision;
    co.precision = c->precision;
    co.profile = c->profile;
    kiln_status st;
    if (c->batch_tokens) {
        st = kiln_token_plans_open(&R->tp, c, R->g, &R->m, R->P, R->train, R->rank, R->world, &co);
        R->plan = R->tp.plan[0]; /* the widest (the run frees it): reports, and DDP's overlap hooks */
    } else {
        st = kiln_compile(R->g, R->P, &R->m.loss, 1, &co, &R->plan);
    }
    if (st == KILN_OK) st = kiln_ddp_attach(R->ddp, R->plan);
    for (int i = 1; st == KILN_OK && c->batch_tokens && i < R->tp.n; i++) /* the other length buckets' plans overlap too */
        st = kiln_ddp_attach_more(R->ddp, R->tp.plan[i]);
    if (st != KILN_OK) return st;
    kiln_train_anomaly_begin(R->plan, c->detect_anomaly);
    for (int i = 0; i < (c->batch_tokens ? R->tp.n : 1); i++) /* backward's seed times the loss scale */
        kiln_plan_set_grad_scaler(c->batch_tokens ? R->tp.plan[i] : R->plan, kiln_optim_grad_scaler(R->opt));
    /* the loss read a step late where the backend can (a device): one process (ranks all-reduce it at once),
     * no --detect-anomaly (it checks each run as it ends), not --sync-loss */
    R->late = !c->sync_loss && R->world == 1 && !c->detect_anomaly;
    for (int i = 0; i < (c->batch_tokens ? R->tp.n : 1); i++)
        R->late = kiln_plan_set_late_loss(c->batch_tokens ? R->tp.plan[i] : R->plan, R->late);
    if (R->late)
        kiln_log(KILN_LOG_INFO, "the loss is read a step late: the %s runs on while the next step is queued "
                 "(--sync-loss waits for each)", kiln_plan_backend(R->plan));
    for (int i = 0; co.sync_bn && i < (c->batch_tokens ? R->tp.n : 1); i++) /* every length bucket's plan */
        kiln_plan_set_collective(c->batch_tokens ? R->tp.plan[i] : R->plan, sync_bn_allreduce, R->comm);
    R->r->arena_bytes = c->batch_tokens ? R->tp.arena_bytes : kiln_plan_arena_bytes(R->plan);
    R->r->arena_bytes_no_reuse = kiln_plan_arena_bytes_no_reuse(R->plan);
    R->r->arena_bytes_plain = kiln_plan_arena_bytes_plain(R->plan);
    if (c->checkpoint_activations)
        kiln_log(KILN_LOG_INFO, "checkpoint-activations %s: %d nodes recomputed in backward; arena %.1f MiB -> %.1f MiB",
                 c->checkpoint_activations, kiln_plan_recomputed(R->plan), R->r->arena_bytes_plain / 1048576.0,
                 R->r->arena_bytes / 1048576.0);
    char *desc = malloc(16384);
    if (desc) {
        kiln_plan_describe(R->plan, desc, 16384);
        kiln_log(KILN_LOG_DEBUG, "training plan:\n%s", desc);
        free(desc);
    }
    kiln_log(KILN_LOG_DEBUG, "arena %.1f MiB (%.1f MiB without reuse), kernel workspace %.1f MiB", R->r->arena_bytes / 1048576.0,
             R->r->arena_bytes_no_reuse / 1048576.0, kiln_plan_workspace_bytes(R->plan) / 1048576.0);
    kiln_loader_config lc = kiln_loader_defaults();
    lc.batch_size = c->batch_size;
    lc.shuffle = 1;
    lc.seed = (uint64_t)c->seed;
    lc.workers = c->workers;
    lc.prefetch = c->prefetch;
    lc.lock_memory = c->lock_memory;
    lc.skip_bad = c->skip_bad;
    lc.rank = R->rank;
    lc.world = R->world;
    lc.batches = c->batch_tokens ? &R->tp.bs : NULL;
    R->auto_on = c->workers == KILN_WORKERS_AUTO;
    if (R->auto_on) kiln_auto_workers_begin(&R->aw, kiln_cores_available(), R->r->workers_why, sizeof R->r->workers_why, &lc);
    kiln_params_host_allocator(R->P, &lc.host_alloc, &lc.host_free);
    if ((st = kiln_loader_new(R->train, &lc, &R->L)) != KILN_OK) return st;
    R->r->ring_slots = kiln_loader_ring_slots(R->L);
    R->r->ring_bytes = kiln_loader_ring_bytes(R->L);
    kiln_log(KILN_LOG_INFO, "loader: a ring of %d batch slots, %.1f MiB in all%s, fixed for the run", R->r->ring_slots,
             (double)R->r->ring_bytes / 1048576.0, c->lock_memory ? " (mlocked)" : "");
    R->per_epoch = kiln_loader_batches_per_epoch(R->L);
    R->accum = c->accumulate > 0 ? c->accumulate : 1;
    /* a step is one update: `accum` loader batches, the last group of an epoch possibly fewer */
    R->total = c->epochs * ((R->per_epoch + R->accum - 1) / R->accum);
    if (c->max_steps && c->max_steps < R->total) R->total = c->max_steps;
    schedule_open(R);
    return c->resume ? check_position(R) : KILN_OK;
}

static kiln_status save(run *R, int64_t step, int64_t epoch, int64_t next) {
    const kiln_train_config *c = &R->c;
    kiln_ckpt_state s = {0};
    snprintf(s.model, sizeof s.model, "%s", c->model);
    snprintf(s.optimizer, sizeof s.optimizer, "%s", kiln_optim_name(c->optim.kind));
    snprintf(s.backend, sizeof s.backend, "%s", kiln_plan_backend(R->plan));
    s.step = step;
    s.epoch = epoch;
    s.next_batch = next;
    s.seed = (uint64_t)c->seed;
    s.batch_size = c->batch_size;
    s.world_size = R->world;
    s.accumulate = R->accum;
    s.lr = kiln_optim_lr(R->opt);
    s.optim_steps = kiln_optim_steps(R->opt);
    char *settings = kiln_train_settings_json(c);
    if (!settings) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", c->save); /* check_config saw them recordable */
    s.settings = settings;
    kiln_status st = kiln_checkpoint_save(c->save, R->P, R->opt, &s);
    free(settings);
    return st;
}

/* the kernels of a few runs are timed (all of them with --profile) to name the largest at the end */
static void sample_kernels(run *R) {
    if (R->c.profile) return;
    if (R->runs == SAMPLE_FROM) kiln_plan_set_profile(R->plan, 1);
    if (R->runs == SAMPLE_FROM + SAMPLE_RUNS) kiln_plan_set_profile(R->plan, 0); /* keeps what it timed */
}

/* --profile: the first step pays one-time costs (first-touch pages, each primitive's first call), so when more
 * steps follow, the kernels' times start again after it and the report's step time leaves it out as well: the
 * phases, kernels and step time then describe the same steps (the doctor divides one by the other) */
static void profile_after_first(run *R) {
    if (!R->c.profile || R->total - R->resumed.step < 2) return;
    kiln_plan_set_profile(R->plan, 1);
    R->prof_steps0 = 1;
    R->prof_step_s0 = R->step_s;
    R->prof_optim_s0 = R->optim_s;
}

/* One loader batch: a micro-batch of the step's group. Micro-batches of a step
 * add their gradients, each weighted by its share of the group's samples, so N
 * batches train exactly as one N times larger (also the short group at an
 * epoch's end); each gets its own dropout counter. */
/* --trace: steps outside --trace-steps are not recorded; a step is a span, and the flow from its batch's loading ends in it */
static void trace_batch(run *R, const kiln_batch *b, int64_t micro) {
    if (R->trace_to > 0 && micro == 0) {
        /* the loader works ahead by its ring: its threads record that many steps before the window */
        int64_t s = R->step + 1, lead = R->r->ring_slots;
        kiln_trace_pause(s + lead < R->trace_from || s > R->trace_to);
        kiln_trace_pause_self(s < R->trace_from || s > R->trace_to);
    }
    if (!kiln_trace_on()) return;
    double t = kiln_trace_now();
    if (micro == 0) R->step_t0 = t;
    kiln_trace_flow(0, ((uint64_t)R->epoch << 32) | (uint64_t)b->index, t);
}

static kiln_status take_runs(run *R, int keep);
static step_loss *step_entry(run *R, int64_t step);
static void report_progress(run *R);

/* queues the batch's run: its loss is taken at once, or (late) after the next run is queued */
static kiln_status run_batch(run *R, const kiln_batch *b, int64_t micro, int64_t group_n) {
    trace_batch(R, b, micro);
    double share = (double)b->n / (double)group_n, t = now_s();
    kiln_plan *plan = R->plan;
    const kiln_model *m = &R->m;
    int64_t group_tokens = 0;
    if (b->width) { /* --batch-tokens: the bucket's plan; the batch's share of the step's positions on all ranks */
        int k = kiln_token_plans_find(&R->tp, b->width);
        kiln_status st = k < 0 ? kiln_fail(KILN_ERR_INVALID_ARG, "batch of width %lld has no plan", (long long)b->width)
                               : kiln_token_plans_share(&R->tp, R->epoch, b->index, &share, &group_tokens);
        if (st != KILN_OK) return st;
        plan = R->tp.plan[k];
        m = &R->tp.m[k];
    }
    /* backward's seed: the ranks' summed gradients are their mean (--batch-tokens: the share is of all ranks already) */
    double seed = b->width ? share : share / R->world;
    kiln_alloc_stats a0;
    kiln_alloc_get_stats(&a0);
    kiln_plan_bind(plan, m->x, b->x);
    kiln_plan_bind(plan, m->y, b->y);
    kiln_plan_set_accumulate(plan, micro > 0, seed);
    kiln_ddp_begin_micro(R->ddp, micro + 1 == R->accum || b->index + 1 >= R->per_epoch);
    kiln_plan_set_step(plan, (uint64_t)(R->step * R->accum + micro));
    sample_kernels(R);
    kiln_status st = kiln_plan_run(plan, b->n);
    kiln_alloc_stats a1;
    kiln_alloc_get_stats(&a1);
    R->step_allocs += a1.allocs - a0.allocs;
    R->runs++;
    R->step_s += now_s() - t;
    step_loss *e = st == KILN_OK ? step_entry(R, R->step + 1) : NULL;
    if (st == KILN_OK && (!e || R->nqueued == 2)) st = kiln_fail(KILN_ERR_INVALID_ARG, "train: more runs queued than it keeps");
    if (st != KILN_OK) {
        kiln_loader_release(R->L, b);
        if (st == KILN_ERR_NUMERIC) /* --detect-anomaly found one: where in the run */
            return kiln_fail_context(st, "step %lld (epoch %lld, batch %lld)", (long long)R->step + 1,
                                     (long long)R->epoch + 1, (long long)b->index);
        return st;
    }
    R->tokens += group_tokens;
    e->open++;
    R->queue[R->nqueued++] = (queued_run){plan, kiln_plan_ticket(plan), *b, share, R->step + 1, R->epoch};
    return take_runs(R, R->late);
}

/* the entry of a step whose loss is incomplete, a new one if none */
static step_loss *step_entry(run *R, int64_t step) {
    for (int i = 0; i < 2; i++)
        if (R->open_steps[i].step == step) return &R->open_steps[i];
    for (int i = 0; i < 2; i++)
        if (!R->open_steps[i].step) {
            R->open_steps[i] = (step_loss){.step = step};
            return &R->open_steps[i];
        }
    return NULL; /* not reached: a step's loss completes before the second next step begins */
}

/* a step's loss complete and its update made: the figures, metrics line and progress that show it */
static kiln_status finish_step(run *R, step_loss *e) {
    double loss = e->loss;
    int64_t step = e->step;
    e->step = 0;
    R->loss = loss;
    R->loss_smooth = step == R->resumed.step + 1 ? loss : 0.98 * R->loss_smooth + 0.02 * loss;
    R->epoch_loss += loss;
    R->epoch_steps++;
    R->win.loss_sum += loss;
    R->win.steps++;
    if (R->metrics && (step % R->c.log_every == 0 || step >= R->total)) {
        kiln_status st = kiln_metrics_step(R->metrics, &R->win, step, R->epoch + 1, kiln_optim_lr(R->opt), elapsed(R), waited(R));
        if (st != KILN_OK) return st;
    }
    report_progress(R);
    return KILN_OK;
}

/* Takes the losses of all queued runs but the newest `keep`, giving their batches back to the loader; a
 * step's loss is complete when its last run's is taken. Late, the wait for the device is step time. */
static kiln_status take_runs(run *R, int keep) {
    while (R->nqueued > keep) {
        queued_run q = R->queue[0];
        memmove(R->queue, R->queue + 1, (size_t)--R->nqueued * sizeof *R->queue);
        double t = now_s(), l;
        kiln_status st = kiln_plan_take_loss(q.plan, q.ticket, &l);
        R->step_s += now_s() - t;
        kiln_loader_release(R->L, &q.b);
        if (st == KILN_OK && !isfinite(l))
            st = kiln_fail(KILN_ERR_NUMERIC, "step %lld (epoch %lld, batch %lld): the loss is %g; lower --lr or check the "
                           "data%s", (long long)q.step, (long long)q.epoch + 1, (long long)q.b.index, l,
                           R->c.save ? "; no checkpoint was written" : "");
        if (st != KILN_OK) return st;
        int64_t n = q.b.n * R->world; /* every rank's batch is as large: the figures count them all */
        R->samples += n;
        R->epoch_samples += n;
        R->win.samples += n;
        step_loss *e = step_entry(R, q.step);
        e->loss += l * q.share;
        if (--e->open == 0 && e->updated && (st = finish_step(R, e)) != KILN_OK) return st;
    }
    return KILN_OK;
}

/* after an error: the queued runs' batches go back untaken */
static void drop_runs(run *R) {
    for (int i = 0; i < R->nqueued; i++) kiln_loader_release(R->L, &R->queue[i].b);
    R->nqueued = 0;
}

static void report_progress(run *R) {
    if (!R->c.progress || R->rank != 0) return;
    double el = elapsed(R), wait = waited(R);
    kiln_progress p = {R->step, R->total, R->epoch, R->c.epochs, R->next, R->per_epoch, R->loss, R->loss_smooth,
                       kiln_optim_lr(R->opt), R->samples / (el > 0 ? el : 1e-9), el > 0 ? wait / el : 0, el,
                       (double)(R->total - R->step) * el / (double)(R->step - R->resumed.step), R->stop};
    R->c.progress(&p, R->c.progress_user);
}

/* the update that ends a step's group, then what follows a step: checkpoint, metrics, progress, stop. The
 * step's loss is complete here unless read late (one process: no all-reduce needs it); then its figures
 * follow when its last run's loss is taken. */
static kiln_status run_update(run *R) {
    double t = now_s();
    step_loss *e = step_entry(R, R->step + 1);
    /* the loss, and a stop request seen by any rank (all ranks stop at the same step) */
    /* --batch-tokens: each rank's loss comes weighted by its share of the step's positions: their sum is the mean */
    double v[2] = {R->c.batch_tokens ? e->loss * R->world : e->loss, R->c.stop_flag && *R->c.stop_flag};
    kiln_status st = kiln_ddp_reduce(R->ddp);
    if (st == KILN_OK) st = kiln_ddp_step_mean(R->ddp, v, 2, "the loss all-reduce");
    if (st != KILN_OK) return st;
    if (!R->late) e->loss = v[0];
    kiln_optim_set_lr(R->opt, lr_now(R));
    kiln_alloc_stats a0, a1;
    kiln_alloc_get_stats(&a0);
    st = kiln_optim_step(R->opt);
    kiln_alloc_get_stats(&a1);
    R->step_allocs += a1.allocs - a0.allocs;
    double t1 = now_s();
    kiln_trace_span("optimizer", "train", t, t1);
    if (kiln_trace_on()) kiln_trace_span("step", "train", R->step_t0, t1);
    R->optim_s += t1 - t;
    R->step_s += t1 - t;
    if (st != KILN_OK) return st;
    int saving = R->c.save_every && (R->step + 1) % R->c.save_every == 0 && R->step + 1 < R->total && R->rank == 0;
    /* no checkpoint before its step's loss is seen finite */
    if (saving && (st = take_runs(R, 0)) != KILN_OK) return st;
    R->step++;
    if (R->step == R->resumed.step + 1) {
        R->r->first_step_s = elapsed(R) - R->r->compile_time_s;
        R->r->first_step_wait_s = waited(R);
        profile_after_first(R);
    }
    R->stop = R->step >= R->total;
    e->updated = 1;
    if (!e->open && (st = finish_step(R, e)) != KILN_OK) return st;
    int epoch_done = R->next >= R->per_epoch;
    if (saving && (st = save(R, R->step, epoch_done ? R->epoch + 1 : R->epoch, epoch_done ? 0 : R->next)) != KILN_OK)
        return st;
    /* a stop request (Ctrl-C in the CLI) seen after step s stops at s */
    /* one process: a request seen after step s stops at s; under mpirun the ranks agree on it through the
     * next step's loss all-reduce (all stop at the same step, one later) */
    int asked = R->world == 1 ? R->c.stop_flag && *R->c.stop_flag : v[1] > 0;
    if (asked && !R->stop) {
        R->stop = 1;
        R->r->interrupted = 1;
        kiln_log(KILN_LOG_INFO, "interrupted at step %lld%s", (long long)R->step,
                 R->c.save ? ": saving the checkpoint for --resume" : "");
    }
    return KILN_OK;
}

/* samples in the group of batches [first, first + accum) of an epoch */
static int64_t group_samples(const run *R, int64_t first) {
    int64_t n = 0;
    for (int64_t k = first; k < first + R->accum && k < R->per_epoch; k++) {
        int64_t left = R->rank_len - k * R->c.batch_size;
        n += left < R->c.batch_size ? left : R->c.batch_size;
    }
    return n;
}

/* one epoch (or what is left of it), stopping early at the step limit or a stop request */
static kiln_status epoch_runs(run *R) {
    kiln_optim_set_lr(R->opt, lr_now(R)); /* what progress shows before the epoch's first update */
    kiln_status st = kiln_loader_start_epoch(R->L, R->epoch, R->next);
    if (st != KILN_OK) return st;
    kiln_batch b;
    int got;
    int64_t micro = 0, group_n = 1;
    while ((got = kiln_loader_next(R->L, &b)) == 1) {
        if (micro == 0) group_n = group_samples(R, b.index);
        if ((st = run_batch(R, &b, micro, group_n)) != KILN_OK) return st;
        if (R->auto_on) kiln_auto_workers_step(&R->aw, R->L, R->runs, waited(R), R->step_s);
        R->next = b.index + 1;
        if (++micro < R->accum && R->next < R->per_epoch) continue; /* the step's group is not complete */
        if ((st = run_update(R)) != KILN_OK) return st;
        micro = 0;
        if (R->stop) break;
    }
    if (got < 0) return kiln_loader_status(R->L);
    return KILN_OK;
}

/* the epoch's runs, their losses all taken at its end (or their batches given back after an error) */
static kiln_status run_epoch(run *R) {
    kiln_status st = epoch_runs(R);
    if (st == KILN_OK) st = take_runs(R, 0);
    if (st != KILN_OK) drop_runs(R);
    return st;
}

static kiln_status run_evaluate(run *R) {
    int workers = R->c.workers == KILN_WORKERS_AUTO ? kiln_loader_workers(R->L) : R->c.workers;
    kiln_status st = evaluate(R->g, &R->m, R->P, R->test, R->c.test_batch_size, workers, R->c.fuse,
                             KILN_PRECISION_FP32 /* test figures compare across precisions */, R->c.autotune, &R->last_eval);
    if (st == KILN_OK) R->evaluated_at = R->step;
    return st;
}

/* the epoch's time and data-wait, taken before any evaluation */
static void end_epoch(run *R) {
    R->epoch_time = now_s() - R->epoch_t0;
    R->epoch_waited = waited(R) - R->epoch_wait0;
}

/* the epoch's line: through the logger, and into the metrics file */
static kiln_status report_epoch(run *R, int evaluated) {
    double t = R->epoch_time, wait = R->epoch_waited;
    double train_loss = R->epoch_steps ? R->epoch_loss / (double)R->epoch_steps : NAN, ips = t > 0 ? R->epoch_samples / t : 0;
    char test[96] = "";
    if (evaluated)
        snprintf(test, sizeof test, " | test loss %.4f | test accuracy %.2f%%", R->last_eval.loss, 100 * R->last_eval.accuracy);
    kiln_log(KILN_LOG_INFO, "epoch %lld/%lld: train loss %.4f%s | %.0f images/s | data-wait %.1f%% | %.1f s%s",
             (long long)R->epoch + 1, (long long)R->c.epochs, train_loss, test, ips, t > 0 ? 100 * wait / t : 0.0, t,
             R->next < R->per_epoch ? " (stopped mid-epoch)" : "");
    if (!R->metrics) return KILN_OK;
    kiln_metrics_epoch_line e = {R->epoch + 1, R->step, train_loss, kiln_optim_lr(R->opt), ips, t > 0 ? wait / t : 0, t,
                                 evaluated, R->last_eval.loss, R->last_eval.accuracy};
    return kiln_metrics_epoch(R->metrics, &e);
}

static void begin_epoch(run *R) {
    R->epoch_t0 = now_s();
    R->epoch_wait0 = waited(R);
    R->epoch_loss = 0;
    R->epoch_steps = R->epoch_samples = 0;
}

static int eval_due(const run *R, int64_t epochs_done) {
    return R->c.test && R->rank == 0 && R->c.eval_every > 0 && epochs_done % R->c.eval_every == 0;
}

/* the epochs: each ends with its line (and an evaluation when due); the last
 * epoch's line waits for the final evaluation, made after the training plan is freed */
static kiln_status run_epochs(run *R) {
    R->stop = R->step >= R->total;
    while (!R->stop && R->epoch < R->c.epochs) {
        begin_epoch(R);
        kiln_status st = run_epoch(R);
        if (st != KILN_OK) return st;
        if (R->next < R->per_epoch) break; /* stopped mid-epoch */
        if (R->epoch + 1 == R->c.epochs || R->stop) return KILN_OK; /* its line comes after the final evaluation */
        end_epoch(R);
        int eval = eval_due(R, R->epoch + 1);
        if (eval && (st = run_evaluate(R)) != KILN_OK) return st;
        if ((st = report_epoch(R, eval)) != KILN_OK) return st;
        R->epoch++;
        R->next = 0;
    }
    return KILN_OK;
}

/* the end-of-run line: what holds the run back */
static void report_bottleneck(run *R) {
    kiln_train_result *r = R->r;
    if (r->steps <= 0) return;
    if (r->data_wait_frac > 0.05) {
        kiln_log(KILN_LOG_INFO, "what holds this run back: waiting for data, %.0f%% of the time: raise --workers or --prefetch",
                 100 * r->data_wait_frac);
        return;
    }
    const char *names[3];
    double ms[3];
    int n = kiln_plan_profile_top(R->plan, 3, names, ms);
    int64_t runs = 0;
    kiln_plan_profile_total_ms(R->plan, &runs);
    /* per-run kernel times against the wall time per run (data waits and updates included) */
    double run_ms = 1e3 * (r->train_time_s - r->compile_time_s) / (double)(R->runs ? R->runs : 1);
    char top[256] = "";
    size_t o = 0;
    for (int i = 0; i < n && o < sizeof top; i++)
        o += (size_t)snprintf(top + o, sizeof top - o, "%s%s %.0f%%", i ? ", " : "", names[i], 100 * ms[i] / run_ms);
    kiln_log(KILN_LOG_INFO, "what holds this run back: compute (data-wait %.1f%%); the largest kernels per step: %s "
             "(--profile for all)", 100 * r->data_wait_frac, n ? top : "not timed");
}

static int64_t arg_bytes(const kiln_step_arg *a) {
    int64_t n = 4;
    for (int d = 0; d < a->ndim; d++) n *= a->shape[d];
    return n;
}

/* the largest kernels with what they achieved (GFLOP/s of conv and linear work, GB/s of their tensors) */
static void top_kernels(run *R) {
    kiln_train_result *r = R->r;
    int steps[3];
    double ms[3];
    r->ntop = kiln_plan_profile_top_steps(R->plan, 3, steps, ms);
    for (int i = 0; i < r->ntop; i++) {
        kiln_step_info info;
        kiln_kernel_stat *k = &r->top[i];
        if (kiln_plan_step_info(R->plan, steps[i], &info) != KILN_OK) continue;
        int64_t bytes = 0;
        for (int a = 0; a < info.nin; a++) bytes += arg_bytes(&info.in[a]);
        for (int a = 0; a < info.nout; a++) bytes += arg_bytes(&info.out[a]);
        snprintf(k->name, sizeof k->name, "%s", info.name);
        snprintf(k->op, sizeof k->op, "%s", info.op);
        k->ms = ms[i];
        k->gflops = ms[i] > 0 ? info.flops / (ms[i] * 1e6) : 0;
        k->gbps = ms[i] > 0 ? (double)bytes / (ms[i] * 1e6) : 0;
    }
}

/* --profile: every kernel, the optimizer, and what the step spends outside kernels */
static void report_profile(run *R) {
    kiln_train_result *r = R->r;
    int64_t steps = r->steps - R->prof_steps0, runs = 0;
    double kernels = kiln_plan_profile_total_ms(R->plan, &runs);
    if (!R->c.profile || steps <= 0 || runs <= 0) return;
    double per_step = (double)runs / (double)steps, optim_s = R->optim_s - R->prof_optim_s0;
    kiln_plan_profile_phases(R->plan, &r->fwd_ms, &r->bwd_ms);
    r->fwd_ms *= per_step;
    r->bwd_ms *= per_step;
    r->optim_ms = 1e3 * optim_s / (double)steps;
    top_kernels(R);
    char *report = malloc(16384);
    if (!report) return;
    kiln_plan_profile_report(R->plan, report, 16384);
    r->step_ms = 1e3 * (R->step_s - R->prof_step_s0) / (double)steps;
    r->kernel_ms = kernels * per_step + r->optim_ms;
    r->overhead_ms = r->step_ms - r->kernel_ms;
    kiln_log(KILN_LOG_INFO, "%s  optimizer (%s, fused) %7.3f ms per step\n"
             "  whole step %.3f ms (runs and update, data waits excluded%s): kernels %.3f ms, outside kernels %.3f ms "
             "(%.2f%%)", report, kiln_optim_name(R->c.optim.kind), r->optim_ms, r->step_ms,
             R->prof_steps0 ? "; the first step left out" : "", r->kernel_ms, r->overhead_ms,
             r->step_ms > 0 ? 100 * r->overhead_ms / r->step_ms : 0.0);
    free(report);
}

/* the figures of the run, before the final evaluation */
static void fill_result(run *R) {
    kiln_train_result *r = R->r;
    r->train_time_s = elapsed(R);
    r->data_wait_frac = r->train_time_s > 0 ? waited(R) / r->train_time_s : 0;
    r->steps = R->step - R->resumed.step;
    r->samples = R->samples;
    r->epochs = R->epoch + (R->next >= R->per_epoch);
    r->images_per_s = r->train_time_s > 0 ? (double)R->samples / r->train_time_s : 0;
    r->tokens_per_s = r->images_per_s * (R->m.block > 0 ? R->m.block : 0); /* a language model's samples are windows */
    if (R->c.batch_tokens) r->tokens_per_s = r->train_time_s > 0 ? (double)R->tokens / r->train_time_s : 0; /* not padding */
    r->step_allocs = (int64_t)R->step_allocs;
    r->final_loss = R->loss;
    r->workers = kiln_loader_workers(R->L);
    r->skipped = kiln_loader_skipped(R->L);
    kiln_grad_scaler_info gs;
    if (kiln_optim_grad_scaler(R->opt) && kiln_optim_grad_scaler_read(R->opt, &gs) == KILN_OK) {
        r->loss_scale = gs.scale;
        r->skipped_updates = gs.skipped;
        kiln_log(KILN_LOG_INFO, "grad scaler: scale %g at the end; %lld of %lld updates skipped for inf or NaN gradients",
                 gs.scale, (long long)gs.skipped, (long long)kiln_optim_steps(R->opt));
    }
    if (R->auto_on) kiln_auto_workers_end(&R->aw, R->L);
    r->batch_size = R->c.batch_size;
    r->world_size = R->world;
    r->global_batch = R->c.batch_size * R->world;
}

/* the all-reduce figures, averaged over the ranks (a collective: every rank calls it) */
static kiln_status fill_comm(run *R) {
    kiln_train_result *r = R->r;
    kiln_ddp_stats s = kiln_ddp_stats_of(R->ddp);
    double per = s.reductions ? 1e3 / (double)s.reductions : 0;
    double v[5] = {per * s.exposed_s, s.hidden_frac, per * s.last_exposed_s, per * s.skew_s, 1e3 * s.last_exposed_median_s};
    kiln_status st = kiln_ddp_mean(R->ddp, v, 5, "the all-reduce figures");
    r->allreduce_comm_exposed_median_ms = v[4];
    r->allreduce_comm_exposed_ms = v[2];
    r->allreduce_skew_ms = v[3];
    r->buckets = s.buckets;
    r->grad_mb = s.buckets ? (double)kiln_params_total(R->P) * 4 / 1048576.0 : 0; /* f32 gradients */
    r->allreduce_exposed_ms = v[0];
    r->allreduce_hidden_frac = v[1];
    return st;
}

/* after the last step: checkpoint, reports, the final evaluation and the last epoch's line */
static kiln_status run_finish(run *R) {
    kiln_train_result *r = R->r;
    fill_result(R);
    end_epoch(R);
    int epoch_done = R->next >= R->per_epoch;
    kiln_status st = fill_comm(R);
    if (st != KILN_OK) return st;
    if (R->c.save && R->rank == 0 && (st = save(R, R->step, epoch_done ? R->epoch + 1 : R->epoch, epoch_done ? 0 : R->next)) != KILN_OK)
        return st;
    report_bottleneck(R);
    report_profile(R);
    kiln_train_anomaly_report(R->plan, R->c.detect_anomaly, R->step_s, r->steps);
    /* the training plan's arena is not needed to evaluate: give it back to the OS */
    kiln_plan_free(R->plan);
    R->plan = NULL;
    kiln_token_plans_close(&R->tp);
    kiln_alloc_release_cached();
    int eval = R->c.test && R->rank == 0 && !r->interrupted && R->evaluated_at != R->step;
    if (eval && (st = run_evaluate(R)) != KILN_OK) return st;
    if (R->evaluated_at >= 0) {
        r->test_loss = R->last_eval.loss;
        r->test_accuracy = R->last_eval.accuracy;
    }
    if (r->steps > 0 && (st = report_epoch(R, eval)) != KILN_OK) return st;
    r->peak_rss_mb = peak_rss_mb();
    return KILN_OK;
}

static void run_close(run *R) {
    kiln_metrics_close(R->metrics);
    kiln_loader_free(R->L);
    kiln_plan_free(R->plan);
    kiln_token_plans_close(&R->tp);
    kiln_optim_free(R->opt);
    kiln_ddp_free(R->ddp);
    kiln_params_free(R->P);
    kiln_graph_free(R->g);
    kiln_dataset_free(R->train);
    kiln_dataset_free(R->test);
}

static kiln_status resolve_batch(run *R) {
    kiln_train_config *c = &R->c;
    if (!c->find_batch_size) return KILN_OK;
    size_t arena = 0;
    kiln_status st = kiln_find_batch_size_config(c, c->memory_budget, 60000, &c->batch_size, &arena);
    if (st != KILN_OK) return st;
    c->find_batch_size = 0;
    kiln_log(KILN_LOG_INFO, "batch-size finder: %lld, the largest power of two whose activations and gradients fit in "
             "%.0f MiB (%.1f MiB; oneDNN's workspaces come on top)", (long long)c->batch_size, c->memory_budget / 1048576.0,
             arena / 1048576.0);
    return KILN_OK;
}

/* every rank's budget, logged by rank 0 (the other ranks report only warnings) */
static kiln_status log_budgets(run *R, const char *mine) {
    enum { LINE = 512 };
    if (R->world == 1) {
        kiln_log(KILN_LOG_INFO, "thread budget: %s", mine);
        return KILN_OK;
    }
    char line[LINE], *all = malloc((size_t)LINE * (size_t)R->world);
    if (!all) return kiln_fail(KILN_ERR_NOMEM, "out of memory");
    snprintf(line, sizeof line, "%s: %s", kiln_comm_host(R->comm), mine);
    kiln_status st = kiln_comm_allgather(R->comm, line, all, LINE, "the thread-budget exchange");
    if (st == KILN_OK) kiln_log(KILN_LOG_INFO, "%d ranks (%s), batch %lld per rank, global batch %lld", R->world,
                                kiln_comm_library(R->comm), (long long)R->c.batch_size, (long long)R->c.batch_size * R->world);
    for (int i = 0; st == KILN_OK && i < R->world; i++) kiln_log(KILN_LOG_INFO, "thread budget of rank %d on %s", i, all + (size_t)i * LINE);
    free(all);
    return st;
}

static kiln_status log_threads(run *R) {
    char bound[192];
    kiln_status st = kiln_bind_threads(R->comm, R->c.bind, bound, sizeof bound);
    if (st != KILN_OK) return st;
    /* after binding: the cores this rank may use are its share */
    int cores = kiln_cores_available(), workers = R->c.workers, local = kiln_comm_local_size(R->comm);
    /* ranks sharing a host share its cores (no oversubscription), unless the launcher bound each to its own */
    if (R->c.threads <= 0 && local > 1 && cores >= cores_online()) R->c.threads = cores / local > 0 ? cores / local : 1;
    int threads = set_threads(R->c.threads);
    R->r->threads = threads;
    char wtext[48], line[448];
    if (workers == KILN_WORKERS_AUTO) snprintf(wtext, sizeof wtext, "loader workers chosen by measuring (auto)");
    else snprintf(wtext, sizeof wtext, "%d loader worker%s", workers, workers == 1 ? "" : "s");
    snprintf(line, sizeof line, "%d compute thread%s (OpenMP, shared with oneDNN), %s (low priority, asleep while the ring "
             "is full), %d core%s available%s%s", threads, threads == 1 ? "" : "s", wtext, cores, cores == 1 ? "" : "s",
             bound[0] ? ", " : "", bound);
    st = log_budgets(R, line);
    if (threads > cores) kiln_log(KILN_LOG_WARN, "%d compute threads on %d cores: they will fight for the cores", threads, cores);
    return st;
}

/* one run, from the thread budget to closing: the part a trace covers */
static kiln_status train_run(run *R) {
    kiln_train_result *r = R->r;
    const kiln_train_config *cfg = &R->c;
    kiln_trace_thread("train");
    kiln_status st = log_threads(R);
    if (st == KILN_OK) st = run_open(R);
    if (st == KILN_OK) {
        /* the clock starts before compiling: autotuning and starting the loader are part of the run's cost */
        R->t0 = now_s();
        st = run_compile(R);
        r->compile_time_s = elapsed(R);
        R->win = (kiln_metrics_window){.t0 = r->compile_time_s};
    }
    /* a stop request while starting (a slow disk, autotuning) ends the run before its first step: nothing saved */
    if (st == KILN_OK && cfg->stop_flag && *cfg->stop_flag) {
        r->interrupted = 1;
        kiln_log(KILN_LOG_INFO, "interrupted before the first step: nothing trained, nothing saved");
        run_close(R);
        return KILN_OK;
    }
    if (st == KILN_OK) st = run_epochs(R);
    if (st == KILN_OK) st = run_finish(R);
    run_close(R);
    return st;
}

/* path with each %r replaced by the rank */
static void rank_path(const char *path, int rank, char *out, size_t len) {
    size_t o = 0;
    for (const char *p = path; *p && o + 12 < len; p++)
        if (p[0] == '%' && p[1] == 'r') o += (size_t)snprintf(out + o, len - o, "%d", rank), p++;
        else out[o++] = *p;
    out[o] = 0;
}

/* --trace-steps A-B: 1 <= A <= B */
static kiln_status parse_trace_steps(const kiln_train_config *c, int64_t *from, int64_t *to) {
    *from = *to = 0;
    if (!c->trace_steps || !c->trace_steps[0]) return KILN_OK;
    long long a = 0, b = 0;
    int n = 0;
    if (sscanf(c->trace_steps, "%lld-%lld%n", &a, &b, &n) != 2 || c->trace_steps[n] || a < 1 || b < a)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--trace-steps %s: give A-B, the first and last step to record (1 <= A <= B)",
                         c->trace_steps);
    if (!c->trace) return kiln_fail(KILN_ERR_INVALID_ARG, "--trace-steps %s needs --trace FILE", c->trace_steps);
    *from = a;
    *to = b;
    return KILN_OK;
}

kiln_status kiln_train(const kiln_train_config *cfg, kiln_train_result *r) {
    memset(r, 0, sizeof *r);
    r->test_accuracy = r->test_loss = -1;
    kiln_status st = check_config(cfg);
    if (st != KILN_OK) return st;
    run R = {.c = *cfg, .r = r, .evaluated_at = -1, .loss = NAN};
    R.comm = kiln_dist_comm();
    R.rank = kiln_comm_rank(R.comm);
    R.world = kiln_comm_size(R.comm);
    if ((st = resolve_batch(&R)) != KILN_OK) return st;
    if ((st = parse_trace_steps(cfg, &R.trace_from, &R.trace_to)) != KILN_OK) return st;
    /* rank 0 alone traces (the ranks' files would collide; their steps are alike), or with %r in
     * the name every rank its own file (to compare the ranks' steps and all-reduces) */
    char trace[4096];
    int traced = cfg->trace && (R.rank == 0 || strstr(cfg->trace, "%r"));
    if (traced) rank_path(cfg->trace, R.rank, trace, sizeof trace);
    if (traced && (st = kiln_trace_start(trace)) != KILN_OK) return st;
    if (R.trace_to > 0) kiln_trace_pause(1); /* until the window comes near */
    st = train_run(&R);
    /* run_close freed the loader, so its workers are joined: every span is in */
    long long events = 0;
    kiln_trace_pause_self(0);
    kiln_status ts = traced ? kiln_trace_stop(&events) : KILN_OK;
    if (traced && ts == KILN_OK) kiln_log(KILN_LOG_INFO, "trace: %lld spans written to %s", events, trace);
    return st != KILN_OK ? st : ts;
}

kiln_status kiln_train_data_config(const kiln_train_config *c, kiln_data_config *dc) {
    *dc = kiln_data_defaults();
    dc->resize = c->resize;
    dc->center_crop = c->center_crop;
    dc->hflip = c->hflip;
    dc->channels = c->channels;
    dc->val_split = c->val_split;
    dc->skip_bad = c->skip_bad;
    dc->cache = c->cache;
    dc->block = c->gpt.block;
    dc->documents = c->batch_tokens > 0;
    kiln_status st = KILN_OK;
    if (c->random_resized_crop && c->random_resized_crop[0]) st = kiln_data_parse_rrc(c->random_resized_crop, dc);
    if (st == KILN_OK && c->normalize && c->normalize[0]) st = kiln_data_parse_normalize(c->normalize, dc);
    return st;
}

kiln_status kiln_evaluate(const char *model, const char *data, const char *load, const char *device, int64_t batch_size,
                          int workers, int threads, double *loss, double *accuracy, int64_t *samples) {
    kiln_train_config c = kiln_train_defaults();
    c.model = model;
    c.data = data;
    c.device = device;
    c.workers = workers;
    c.threads = threads;
    return kiln_evaluate_config(&c, load, batch_size, loss, accuracy, samples);
}

kiln_status kiln_evaluate_config(const kiln_train_config *c, const char *load, int64_t batch_size, double *loss,
                                 double *accuracy, int64_t *samples) {
    const char *model = c->model, *data = c->data, *device = c->device;
    int workers = c->workers, threads = c->threads;
    kiln_data_config dc;
    kiln_status st = kiln_train_data_config(c, &dc);
    if (st != KILN_OK) return st;
    dc.documents = 0; /* the test split is windows of the block, as training evaluates */
    st = check_common("--batch-size", batch_size, workers, threads);
    if (st != KILN_OK) return st;
    if (!load) return kiln_fail(KILN_ERR_INVALID_ARG, "eval needs --load FILE");
    set_threads(threads);
    kiln_graph *g = kiln_graph_new();
    kiln_params *P = NULL;
    kiln_dataset *test = NULL;
    kiln_model m;
    eval_result er = {0};
    st = build_model(g, c, &m);
    if (st == KILN_OK) st = kiln_dataset_open_config(data, 0, &dc, &test);
    if (st == KILN_OK) st = check_samples(g, &m, test, model);
    if (st == KILN_OK) st = new_params(device, g, &P);
    if (st == KILN_OK) st = kiln_checkpoint_load_params(P, load);
    if (st == KILN_OK) st = evaluate(g, &m, P, test, batch_size, workers, 1, c->precision, c->autotune, &er);
    if (loss) *loss = er.loss;
    if (accuracy) *accuracy = er.accuracy;
    if (samples) *samples = er.samples;
    kiln_params_free(P);
    kiln_dataset_free(test);
    kiln_graph_free(g);
    return st;
}
