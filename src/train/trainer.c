/* The trainer: builds the model, compiles a training plan once, then steps it
 * over the loader's batches with a fused optimizer; evaluates with a separate
 * inference plan (no backward, no saved activations); checkpoints and resumes
 * exactly. Prints nothing itself: progress goes to a callback, messages to the logger. */
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
#include "kiln/train.h"
#include "train/internal/checkpoint.h"

kiln_train_config kiln_train_defaults(void) {
    kiln_train_config c = {0};
    c.model = "mnist-cnn";
    c.data = "fashion-mnist";
    c.epochs = 1;
    c.batch_size = 64;
    c.test_batch_size = 1000;
    c.optim = kiln_optim_defaults(KILN_OPT_ADADELTA);
    c.lr_step_gamma = 0.7f;
    c.lr_step_size = 1;
    c.workers = 1;
    c.prefetch = 2;
    c.threads = 0;
    c.seed = 1;
    c.test = 1;
    c.fuse = 1;
    c.autotune = 1;
    return c;
}

int kiln_cores_available(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
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

/* accuracy of params P on a dataset, with an inference plan */
static kiln_status evaluate(kiln_graph *g, const kiln_model *m, kiln_params *P, kiln_dataset *ds, int64_t batch,
                            int workers, int fuse, double *accuracy, int64_t *samples) {
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 0;
    o.max_batch = batch < EVAL_CHUNK ? batch : EVAL_CHUNK;
    /* the chunk sizes this pass will run: full chunks, a batch's last chunk, the last batch's */
    int64_t last = ds->len % batch, sizes[2] = {batch % o.max_batch, last ? last % o.max_batch : 0};
    for (int i = 0, k = 0; i < 2; i++)
        if (sizes[i] && sizes[i] != o.max_batch && (k == 0 || o.also_batches[0] != sizes[i])) o.also_batches[k++] = sizes[i];
    o.fuse = fuse;
    o.autotune = 0; /* one pass over the test set: timing candidates costs more than it saves */
    kiln_plan *plan;
    kiln_status st = kiln_compile(g, P, &m->out, 1, &o, &plan);
    if (st != KILN_OK) return st;
    kiln_loader_config lc = kiln_loader_defaults();
    lc.batch_size = batch;
    lc.shuffle = 0;
    lc.workers = workers;
    kiln_loader *L;
    if ((st = kiln_loader_new(ds, &lc, &L)) != KILN_OK) {
        kiln_plan_free(plan);
        return st;
    }
    int64_t correct = 0, seen = 0, sample = kiln_shape_numel(ds->sample_ndim, ds->sample_shape);
    float *logits = kiln_alloc((size_t)(o.max_batch * m->num_classes) * sizeof(float));
    if (!logits) st = kiln_fail(KILN_ERR_NOMEM, "evaluation: out of memory");
    kiln_loader_start_epoch(L, 0, 0);
    kiln_batch b;
    int got;
    while (st == KILN_OK && (got = kiln_loader_next(L, &b)) == 1) {
        for (int64_t at = 0; at < b.n && st == KILN_OK; at += o.max_batch) {
            int64_t n = b.n - at < o.max_batch ? b.n - at : o.max_batch;
            kiln_plan_bind(plan, m->x, b.x + at * sample);
            kiln_plan_bind(plan, m->y, b.y + at);
            if ((st = kiln_plan_run(plan, n)) != KILN_OK) break;
            if ((st = kiln_plan_read(plan, m->out, logits, n * m->num_classes)) != KILN_OK) break;
            const float *out = logits;
            for (int64_t i = 0; i < n; i++) {
                const float *row = out + i * m->num_classes;
                int best = 0;
                for (int k = 1; k < m->num_classes; k++)
                    if (row[k] > row[best]) best = k;
                correct += best == b.y[at + i];
            }
            seen += n;
        }
        kiln_loader_release(L, &b);
    }
    if (st == KILN_OK && got < 0) st = KILN_ERR_IO;
    kiln_free(logits);
    kiln_loader_free(L);
    kiln_plan_free(plan);
    *accuracy = seen ? (double)correct / (double)seen : 0;
    if (samples) *samples = seen;
    return st;
}

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

kiln_status kiln_find_batch_size(const char *model, double budget, int64_t limit, int64_t *batch, size_t *arena_bytes) {
    *batch = 0;
    if (!(budget > 0)) return kiln_fail(KILN_ERR_INVALID_ARG, "batch-size finder: the memory budget must be > 0");
    kiln_graph *g = kiln_graph_new();
    kiln_params *P = NULL;
    kiln_model m;
    kiln_status st = kiln_model_build(g, model, &m);
    if (st == KILN_OK) st = kiln_params_new(g, KILN_F32, &P);
    /* arena size grows with the batch: double until the budget refuses */
    for (int64_t b = 1; st == KILN_OK && b <= limit; b *= 2) {
        kiln_compile_opts o = kiln_compile_defaults();
        o.training = 1;
        o.max_batch = b;
        o.plan_only = 1;
        o.memory_budget = budget;
        kiln_plan *pl = NULL;
        kiln_status s2 = kiln_compile(g, P, &m.loss, 1, &o, &pl);
        if (s2 == KILN_ERR_NOMEM) break;
        if (s2 != KILN_OK) {
            st = s2;
            break;
        }
        *batch = b;
        if (arena_bytes) *arena_bytes = kiln_plan_arena_bytes(pl);
        kiln_plan_free(pl);
    }
    kiln_params_free(P);
    kiln_graph_free(g);
    if (st == KILN_OK && *batch == 0)
        st = kiln_fail(KILN_ERR_NOMEM, "batch-size finder: not even a batch of 1 fits in %.1f MiB", budget / 1048576.0);
    return st;
}

static kiln_status check_config(const kiln_train_config *c) {
    if (!c->model || !c->model[0]) return kiln_fail(KILN_ERR_INVALID_ARG, "--model is required");
    int known = 0;
    for (const char *const *m = kiln_model_names(); *m; m++) known |= strcmp(*m, c->model) == 0;
    if (!known) return kiln_fail(KILN_ERR_INVALID_ARG, "--model: unknown model '%s' (known: mnist-cnn, mlp)", c->model);
    if (!c->data || !c->data[0]) return kiln_fail(KILN_ERR_INVALID_ARG, "--data is required");
    if (c->find_batch_size && !(c->memory_budget > 0))
        return kiln_fail(KILN_ERR_INVALID_ARG, "--batch-size auto needs --memory-budget-mb: the budget the batch must fit in");
    if (c->find_batch_size && c->resume)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--batch-size auto with --resume: resume with the batch size the run was saved with");
    if (!c->find_batch_size && c->batch_size < 1)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--batch-size is %lld; it must be at least 1", (long long)c->batch_size);
    if (c->test_batch_size < 1) return kiln_fail(KILN_ERR_INVALID_ARG, "--test-batch-size is %lld; it must be at least 1", (long long)c->test_batch_size);
    if (c->epochs < 1) return kiln_fail(KILN_ERR_INVALID_ARG, "--epochs is %lld; it must be at least 1", (long long)c->epochs);
    if (c->workers < 0 || c->workers > 64) return kiln_fail(KILN_ERR_INVALID_ARG, "--workers is %d; use 0..64", c->workers);
    if (c->prefetch < 1 || c->prefetch > 64) return kiln_fail(KILN_ERR_INVALID_ARG, "--prefetch is %d; use 1..64", c->prefetch);
    if (c->threads < 0 || c->threads > 1024) return kiln_fail(KILN_ERR_INVALID_ARG, "--threads is %d", c->threads);
    if (c->max_steps < 0) return kiln_fail(KILN_ERR_INVALID_ARG, "--max-steps is %lld", (long long)c->max_steps);
    if (c->save_every < 0) return kiln_fail(KILN_ERR_INVALID_ARG, "--save-every is %lld", (long long)c->save_every);
    if (c->save_every && !c->save) return kiln_fail(KILN_ERR_INVALID_ARG, "--save-every needs --save FILE");
    if (c->load && c->resume)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--load and --resume both given: --resume continues a run, --load starts one from weights");
    if (c->accumulate < 0 || c->accumulate > 1 << 20) return kiln_fail(KILN_ERR_INVALID_ARG, "--accumulate is %lld", (long long)c->accumulate);
    if (c->clip_grad_norm < 0) return kiln_fail(KILN_ERR_INVALID_ARG, "--clip-grad-norm is %g; it must be > 0", (double)c->clip_grad_norm);
    if (!(c->lr_step_gamma > 0)) return kiln_fail(KILN_ERR_INVALID_ARG, "--lr-step-gamma is %g; it must be > 0", (double)c->lr_step_gamma);
    if (c->save) return check_save_path(c->save);
    return KILN_OK;
}

/* writes the run's checkpoint for position (step, epoch, next batch) */
static kiln_status save_checkpoint(const kiln_train_config *c, kiln_params *P, kiln_optim *opt, int64_t step, int64_t epoch,
                                   int64_t next, uint64_t seed) {
    kiln_ckpt_state s = {0};
    snprintf(s.model, sizeof s.model, "%s", c->model);
    snprintf(s.optimizer, sizeof s.optimizer, "%s", kiln_optim_name(c->optim.kind));
    s.step = step;
    s.epoch = epoch;
    s.next_batch = next;
    s.seed = seed;
    s.batch_size = c->batch_size;
    s.accumulate = c->accumulate > 0 ? c->accumulate : 1;
    s.lr = kiln_optim_lr(opt);
    s.optim_steps = kiln_optim_steps(opt);
    return kiln_checkpoint_save(c->save, P, opt, &s);
}

kiln_status kiln_train(const kiln_train_config *cfg, kiln_train_result *r) {
    memset(r, 0, sizeof *r);
    r->test_accuracy = -1;
    kiln_status st = check_config(cfg);
    if (st != KILN_OK) return st;
    kiln_train_config found = *cfg;
    const kiln_train_config *c = &found;
    if (cfg->find_batch_size) {
        size_t arena = 0;
        if ((st = kiln_find_batch_size(cfg->model, cfg->memory_budget, 60000, &found.batch_size, &arena)) != KILN_OK) return st;
        kiln_log(KILN_LOG_INFO, "batch-size finder: %lld, the largest power of two whose activations and gradients fit in "
                 "%.0f MiB (%.1f MiB; oneDNN's workspaces come on top)", (long long)found.batch_size,
                 cfg->memory_budget / 1048576.0, arena / 1048576.0);
    }
    int threads = set_threads(c->threads);
    int cores = kiln_cores_available();
    kiln_log(KILN_LOG_INFO, "thread budget: %d compute thread%s (OpenMP, shared with oneDNN), %d loader worker%s (low priority, asleep while the ring is full), %d core%s available",
             threads, threads == 1 ? "" : "s", c->workers, c->workers == 1 ? "" : "s", cores, cores == 1 ? "" : "s");
    if (threads > cores)
        kiln_log(KILN_LOG_WARN, "%d compute threads on %d cores: they will fight for the cores", threads, cores);

    kiln_graph *g = NULL;
    kiln_params *P = NULL;
    kiln_optim *opt = NULL;
    kiln_plan *plan = NULL;
    kiln_loader *L = NULL;
    kiln_dataset *train = NULL, *test = NULL;
    kiln_model m;

    if ((st = kiln_dataset_open(c->data, 1, &train)) != KILN_OK) goto out;
    if (c->test && (st = kiln_dataset_open(c->data, 0, &test)) != KILN_OK) goto out;
    g = kiln_graph_new();
    if ((st = kiln_model_build(g, c->model, &m)) != KILN_OK) goto out;
    if (kiln_shape_numel(train->sample_ndim, train->sample_shape) != 784) {
        st = kiln_fail(KILN_ERR_SHAPE, "%s: samples of %lld values, model %s wants 784 (1x28x28)", train->name,
                       (long long)kiln_shape_numel(train->sample_ndim, train->sample_shape), c->model);
        goto out;
    }
    if ((st = kiln_params_new(g, KILN_F32, &P)) != KILN_OK) goto out;
    kiln_params_init(P, c->seed);
    if (c->load && (st = kiln_checkpoint_load_params(P, c->load)) != KILN_OK) goto out;
    if ((st = kiln_optim_new(&c->optim, P, &opt)) != KILN_OK) goto out;
    if (c->clip_grad_norm > 0) kiln_optim_set_clip(opt, c->clip_grad_norm);

    kiln_ckpt_state cs = {0};
    uint64_t seed = c->seed;
    if (c->resume) {
        if ((st = kiln_checkpoint_resume(c->resume, P, opt, &cs)) != KILN_OK) {
            /* a checkpoint of another model fails on its first tensor: say why */
            if (cs.model[0] && strcmp(cs.model, c->model) != 0)
                st = kiln_fail_context(KILN_ERR_INVALID_ARG, "--resume %s is a checkpoint of model '%s', not '%s'", c->resume,
                                       cs.model, c->model);
            goto out;
        }
        if (strcmp(cs.model, c->model) != 0) {
            st = kiln_fail(KILN_ERR_INVALID_ARG, "%s: a checkpoint of model '%s', not '%s'", c->resume, cs.model, c->model);
            goto out;
        }
        if (cs.batch_size != c->batch_size) {
            st = kiln_fail(KILN_ERR_INVALID_ARG, "%s: saved with --batch-size %lld; resume with the same", c->resume, (long long)cs.batch_size);
            goto out;
        }
        if (cs.accumulate != (c->accumulate > 0 ? c->accumulate : 1)) {
            st = kiln_fail(KILN_ERR_INVALID_ARG, "%s: saved with --accumulate %lld; resume with the same", c->resume,
                           (long long)cs.accumulate);
            goto out;
        }
        seed = cs.seed;
        kiln_log(KILN_LOG_INFO, "resuming %s at step %lld (epoch %lld, batch %lld)", c->resume, (long long)cs.step,
                 (long long)cs.epoch + 1, (long long)cs.next_batch);
    }

    /* the clock starts before compiling: autotuning and starting the loader are part of the run's cost */
    double t0 = now_s();
    kiln_compile_opts co = kiln_compile_defaults();
    co.training = 1;
    co.max_batch = c->batch_size < train->len ? c->batch_size : train->len; /* no batch is larger than the dataset */
    co.also_batches[0] = train->len % co.max_batch; /* the epoch's last, shorter batch */
    co.profile = c->profile;
    co.fuse = c->fuse;
    co.autotune = c->autotune;
    co.dropout_off = c->dropout_off;
    co.memory_budget = c->memory_budget;
    co.seed = seed;
    if ((st = kiln_compile(g, P, &m.loss, 1, &co, &plan)) != KILN_OK) goto out;
    r->arena_bytes = kiln_plan_arena_bytes(plan);
    r->arena_bytes_no_reuse = kiln_plan_arena_bytes_no_reuse(plan);
    {
        char *desc = malloc(16384);
        if (desc) {
            kiln_plan_describe(plan, desc, 16384);
            kiln_log(KILN_LOG_DEBUG, "training plan:\n%s", desc);
            free(desc);
        }
    }
    kiln_log(KILN_LOG_DEBUG, "arena %.1f MiB (%.1f MiB without reuse)", r->arena_bytes / 1048576.0, r->arena_bytes_no_reuse / 1048576.0);

    kiln_loader_config lc = kiln_loader_defaults();
    lc.batch_size = c->batch_size;
    lc.shuffle = 1;
    lc.seed = seed;
    lc.workers = c->workers;
    lc.prefetch = c->prefetch;
    lc.lock_memory = c->lock_memory;
    if ((st = kiln_loader_new(train, &lc, &L)) != KILN_OK) goto out;
    int64_t per_epoch = kiln_loader_batches_per_epoch(L);
    int64_t accum = c->accumulate > 0 ? c->accumulate : 1;
    /* a step is one update: `accum` loader batches, the last group of an epoch possibly fewer */
    int64_t total = c->epochs * ((per_epoch + accum - 1) / accum);
    if (c->max_steps && c->max_steps < total) total = c->max_steps;

    int64_t step = cs.step, epoch = cs.epoch, first = cs.next_batch, samples = 0;
    double loss = NAN, wait0 = 0, optim_s = 0;
    r->compile_time_s = now_s() - t0;
    int stop = step >= total;
    while (!stop && epoch < c->epochs) {
        kiln_optim_set_lr(opt, kiln_lr_step_schedule(c->optim.lr, c->lr_step_gamma, c->lr_step_size, epoch));
        if ((st = kiln_loader_start_epoch(L, epoch, first)) != KILN_OK) goto out;
        kiln_batch b;
        int got;
        int64_t next = first;
        int64_t micro = 0, group_n = 1;
        double group_loss = 0;
        while ((got = kiln_loader_next(L, &b)) == 1) {
            kiln_plan_bind(plan, m.x, b.x);
            kiln_plan_bind(plan, m.y, b.y);
            /* micro-batches of a step add their gradients, each weighted by its share of the
             * group's samples, so N batches train exactly as one N times larger (also the
             * short group at an epoch's end); each gets its own dropout counter */
            if (micro == 0) {
                group_n = 0;
                for (int64_t k = b.index; k < b.index + accum && k < per_epoch; k++) {
                    int64_t left = train->len - k * c->batch_size;
                    group_n += left < c->batch_size ? left : c->batch_size;
                }
            }
            double share = (double)b.n / (double)group_n;
            kiln_plan_set_accumulate(plan, micro > 0, share);
            kiln_plan_set_step(plan, (uint64_t)(step * accum + micro));
            st = kiln_plan_run(plan, b.n);
            if (st == KILN_OK) {
                double l = kiln_plan_loss(plan);
                if (!isfinite(l))
                    st = kiln_fail(KILN_ERR_NUMERIC, "step %lld (epoch %lld, batch %lld): the loss is %g; lower --lr or check the data%s",
                                   (long long)step + 1, (long long)epoch + 1, (long long)b.index, l,
                                   c->save ? "; no checkpoint was written" : "");
                group_loss += l * share;
            }
            kiln_loader_release(L, &b);
            if (st != KILN_OK) goto out;
            samples += b.n;
            next = b.index + 1;
            if (++micro < accum && next < per_epoch) continue; /* the step's group is not complete */
            loss = group_loss;
            micro = 0;
            group_loss = 0;
            {
                double to = c->profile ? now_s() : 0;
                st = kiln_optim_step(opt);
                if (c->profile) optim_s += now_s() - to;
            }
            if (st != KILN_OK) goto out;
            step++;
            stop = step >= total;
            if (c->save_every && step % c->save_every == 0 && !stop) {
                int done = next >= per_epoch;
                if ((st = save_checkpoint(c, P, opt, step, done ? epoch + 1 : epoch, done ? 0 : next, seed)) != KILN_OK) goto out;
            }
            if (c->progress) {
                double el = now_s() - t0, wait = kiln_loader_wait_seconds(L) - wait0;
                kiln_progress p = {step, total, epoch, c->epochs, next, per_epoch, loss, samples / (el > 0 ? el : 1e-9),
                                   el > 0 ? wait / el : 0, el, (double)(total - step) * el / (double)(step - cs.step), stop};
                c->progress(&p, c->progress_user);
            }
            /* a stop request (Ctrl-C in the CLI) seen after step s stops at s */
            if (c->stop_flag && *c->stop_flag && !stop) {
                stop = 1;
                r->interrupted = 1;
                kiln_log(KILN_LOG_INFO, "interrupted at step %lld%s", (long long)step,
                         c->save ? ": saving the checkpoint for --resume" : "");
            }
            if (stop) break;
        }
        if (got < 0) {
            st = KILN_ERR_IO;
            goto out;
        }
        if (next >= per_epoch) {
            epoch++;
            next = 0;
        }
        first = next;
        if (stop) break;
    }
    r->train_time_s = now_s() - t0;
    r->data_wait_frac = r->train_time_s > 0 ? kiln_loader_wait_seconds(L) / r->train_time_s : 0;
    r->steps = step - cs.step;
    r->samples = samples;
    r->epochs = epoch;
    r->images_per_s = r->train_time_s > 0 ? (double)samples / r->train_time_s : 0;
    r->final_loss = loss;
    r->threads = threads;
    r->workers = c->workers;
    r->batch_size = c->batch_size;

    if (c->save && (st = save_checkpoint(c, P, opt, step, epoch, first, seed)) != KILN_OK) goto out;
    if (r->steps > 0) {
        const char *names[3];
        double ms[3];
        int n = kiln_plan_profile_top(plan, 3, names, ms);
        double step_ms = 1e3 * (r->train_time_s - r->compile_time_s) / (double)r->steps;
        char top[256] = "";
        size_t o = 0;
        for (int i = 0; i < n && o < sizeof top; i++)
            o += (size_t)snprintf(top + o, sizeof top - o, "%s%s %.0f%%", i ? ", " : "", names[i], 100 * ms[i] / step_ms);
        if (r->data_wait_frac > 0.05)
            kiln_log(KILN_LOG_INFO, "what holds this run back: waiting for data, %.0f%% of the time: raise --workers or --prefetch",
                     100 * r->data_wait_frac);
        else
            kiln_log(KILN_LOG_INFO, "what holds this run back: compute (data-wait %.1f%%); the largest kernels per step: %s "
                     "(--profile for all)", 100 * r->data_wait_frac, top);
    }
    if (c->profile) {
        char report[8192];
        kiln_plan_profile_report(plan, report, sizeof report);
        kiln_log(KILN_LOG_INFO, "%s  optimizer (%s, fused) %7.3f ms per step; whole step %.3f ms", report,
                 kiln_optim_name(c->optim.kind), r->steps ? 1e3 * optim_s / (double)r->steps : 0.0,
                 r->steps ? 1e3 * (r->train_time_s - r->compile_time_s) / (double)r->steps : 0.0);
    }
    /* the training plan's arena is not needed to evaluate: give it back to the OS */
    kiln_plan_free(plan);
    plan = NULL;
    kiln_loader_free(L);
    L = NULL;
    kiln_alloc_release_cached();
    if (c->test && !r->interrupted) {
        if ((st = evaluate(g, &m, P, test, c->test_batch_size, c->workers, c->fuse, &r->test_accuracy, NULL)) != KILN_OK) goto out;
    }
    r->peak_rss_mb = peak_rss_mb();
out:
    kiln_loader_free(L);
    kiln_plan_free(plan);
    kiln_optim_free(opt);
    kiln_params_free(P);
    kiln_graph_free(g);
    kiln_dataset_free(train);
    kiln_dataset_free(test);
    return st;
}

kiln_status kiln_evaluate(const char *model, const char *data, const char *load, int64_t batch_size, int workers,
                          int threads, double *accuracy, int64_t *samples) {
    if (batch_size < 1) return kiln_fail(KILN_ERR_INVALID_ARG, "--batch-size is %lld; it must be at least 1", (long long)batch_size);
    if (!load) return kiln_fail(KILN_ERR_INVALID_ARG, "eval needs --load FILE");
    set_threads(threads);
    kiln_graph *g = kiln_graph_new();
    kiln_params *P = NULL;
    kiln_dataset *test = NULL;
    kiln_model m;
    kiln_status st = kiln_model_build(g, model, &m);
    if (st == KILN_OK) st = kiln_dataset_open(data, 0, &test);
    if (st == KILN_OK) st = kiln_params_new(g, KILN_F32, &P);
    if (st == KILN_OK) st = kiln_checkpoint_load_params(P, load);
    if (st == KILN_OK) st = evaluate(g, &m, P, test, batch_size, workers, 1, accuracy, samples);
    kiln_params_free(P);
    kiln_dataset_free(test);
    kiln_graph_free(g);
    return st;
}
