/* The doctor: a baseline window of the user's configuration, profiled, then
 * the guide's remedies that apply, each predicted either from what the window
 * measured (data-wait removed) or by a trial window with the remedy (the
 * autotuner, fusion, bf16, threads, a larger batch); memory by planning only.
 * docs/doctor.md. */
#include "kiln/doctor.h"
#include "kiln/optim.h"
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include "data/internal/folder.h"
#include "data/internal/source.h"
#include "backends/internal/backend.h"
#include "kernels/internal/dnnl_ops.h"
#include "train/internal/device_peak.h"
#include "train/internal/doctor_dist.h"
#include "train/internal/fit.h"
#include "train/internal/machine.h"

#define MIB 1048576.0

kiln_doctor_opts kiln_doctor_defaults(void) { return (kiln_doctor_opts){.window_steps = 12}; }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* a window: the configuration for `steps` steps, profiled, nothing written, quiet */
static kiln_status window(const kiln_train_config *base, int64_t steps, kiln_train_result *res) {
    kiln_train_config c = *base;
    c.max_steps = steps;
    c.epochs = c.epochs > 1000000 ? c.epochs : 1000000; /* the step count ends it */
    c.profile = 1;
    c.test = 0;
    c.save = c.resume = c.metrics = c.trace = NULL;
    c.save_every = 0;
    c.progress = NULL;
    c.stop_flag = NULL;
    kiln_log_level level = kiln_log_get_level();
    kiln_log_set_level(KILN_LOG_ERROR);
    kiln_status st = kiln_train(&c, res);
    kiln_log_set_level(level);
    if (st == KILN_OK && res->steps <= 0) st = kiln_fail(KILN_ERR_INVALID_ARG, "doctor: the window trained no step");
    return st;
}

/* wall time per step after the first (which pays first touches and lazy set-up) */
static double step_wall_ms(const kiln_train_result *res) {
    if (res->steps < 2) return 1e3 * (res->train_time_s - res->compile_time_s);
    return 1e3 * (res->train_time_s - res->compile_time_s - res->first_step_s) / (double)(res->steps - 1);
}

kiln_status kiln_doctor_measure(const kiln_train_config *c, int64_t steps, double *step_ms, double *samples_per_s) {
    kiln_train_result res;
    kiln_status st = window(c, steps, &res);
    if (st != KILN_OK) return st;
    *step_ms = step_wall_ms(&res);
    *samples_per_s = (double)res.batch_size * (c->accumulate > 0 ? (double)c->accumulate : 1) / (*step_ms * 1e-3);
    return KILN_OK;
}

static kiln_remedy *add(kiln_doctor_report *r, const char *flag, const char *value, const char *technique) {
    if (r->nremedies >= KILN_DOCTOR_MAX_REMEDIES) return NULL;
    kiln_remedy *m = &r->remedies[r->nremedies++];
    memset(m, 0, sizeof *m);
    snprintf(m->flag, sizeof m->flag, "%s", flag);
    snprintf(m->value, sizeof m->value, "%s", value);
    snprintf(m->technique, sizeof m->technique, "%s", technique);
    return m;
}

/* ---- memory: does the plan fit the budget, and what makes it fit ---- */

/* the backend the run's --device names: NULL when it names none that can run here (the baseline says why) */
static const kiln_backend *run_backend(const kiln_train_config *c) {
    const char *name = NULL;
    return kiln_device_backend(c->device, &name) == KILN_OK && name ? kiln_backend_get(name) : NULL;
}

/* a backend with memory of its own (a GPU) runs the kernels there */
static int on_device(const kiln_train_config *c) {
    const kiln_backend *be = run_backend(c);
    return be && !be->host_memory;
}

/* as the compile's default: 90 % of the memory the plan lives in, the device's on a GPU */
static double budget_bytes(const kiln_train_config *c) {
    if (c->memory_budget > 0) return c->memory_budget;
    const kiln_backend *be = run_backend(c);
    if (be && !be->host_memory && be->memory_available) return 0.9 * (double)be->memory_available();
    return 0.9 * (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
}

/* the first activation-checkpointing setting whose arena fits; 0 when none does */
static int fitting_checkpoint(const kiln_train_config *c, double budget, size_t before, kiln_doctor_report *r) {
    static const char *const tries[] = {"gelu,layernorm", "relu", "block"};
    for (int i = 0; i < 3; i++) {
        kiln_train_config t = *c;
        t.checkpoint_activations = tries[i];
        size_t arena = 0;
        if (kiln_train_arena(&t, c->batch_size, &arena) != KILN_OK || arena >= before || (double)arena > budget) continue;
        kiln_remedy *m = add(r, "checkpoint-activations", tries[i], "activation checkpointing");
        if (!m) return 0;
        m->memory = m->applied = 1;
        m->predicted = (double)before / (double)arena;
        snprintf(m->why, sizeof m->why, "the training plan needs %.0f MiB at batch %lld, more than the %.0f MiB budget",
                 before / MIB, (long long)c->batch_size, budget / MIB);
        snprintf(m->how, sizeof m->how, "planned without running: arena %.0f -> %.0f MiB (recomputing in backward costs "
                 "some forward time again)", before / MIB, arena / MIB);
        return 1;
    }
    return 0;
}

static void fitting_batch(const kiln_train_config *c, double budget, size_t before, kiln_doctor_report *r) {
    int64_t b = 0;
    size_t arena = 0;
    if (kiln_find_batch_size_config(c, budget, c->batch_size, &b, &arena) != KILN_OK || b <= 0) return;
    char v[32];
    snprintf(v, sizeof v, "%lld", (long long)b);
    kiln_remedy *m = add(r, "batch-size", v, "the batch-size finder");
    if (!m) return;
    m->memory = m->applied = 1;
    m->predicted = (double)before / (double)arena;
    snprintf(m->why, sizeof m->why, "the training plan needs %.0f MiB at batch %lld, more than the %.0f MiB budget, and "
             "checkpointing does not bring it under", before / MIB, (long long)c->batch_size, budget / MIB);
    snprintf(m->how, sizeof m->how, "planned without running: batch %lld needs %.0f MiB", (long long)b, arena / MIB);
    /* the same samples per update: accumulate the smaller batches */
    int64_t k = (c->batch_size + b - 1) / b * (c->accumulate > 0 ? c->accumulate : 1);
    snprintf(v, sizeof v, "%lld", (long long)k);
    if (!(m = add(r, "accumulate", v, "gradient accumulation"))) return;
    m->memory = m->applied = 1;
    m->predicted = (double)before / (double)arena;
    snprintf(m->why, sizeof m->why, "with --batch-size %lld, as many samples per optimizer step as batch %lld gave",
             (long long)b, (long long)c->batch_size);
    snprintf(m->how, sizeof m->how, "%lld micro-batches of %lld per update", (long long)k, (long long)b);
}

/* 1 when the configuration fits as given */
static int check_memory(const kiln_train_config *c, kiln_doctor_report *r) {
    double budget = budget_bytes(c);
    size_t arena = 0;
    r->budget_mb = budget / MIB;
    if (kiln_train_arena(c, c->batch_size, &arena) != KILN_OK) return 1; /* the baseline will say what is wrong */
    r->arena_mb = (double)arena / MIB;
    if ((double)arena <= budget) return 1;
    if (!fitting_checkpoint(c, budget, arena, r)) fitting_batch(c, budget, arena, r);
    return 0;
}

/* ---- the baseline ---- */

static void machine(const kiln_train_config *c, kiln_doctor_report *r) {
    r->cores_online = (int)sysconf(_SC_NPROCESSORS_ONLN);
    r->cores_available = kiln_cores_available();
    /* the peak of the cores this run may use (more threads than cores would only measure contention) */
    int threads = c->threads > 0 && c->threads < r->cores_available ? c->threads : r->cores_available;
    r->peak_gflops = kiln_machine_peak_gflops(threads);
    r->copy_gbps = kiln_machine_copy_gbps(threads);
    r->bf16_kernels = kiln_dnnl_has_bf16();
    const kiln_backend *be = run_backend(c);
    if (be && !be->host_memory && (!be->device_name || be->device_name(r->device, sizeof r->device) != KILN_OK))
        snprintf(r->device, sizeof r->device, "%s", be->name);
    if (r->device[0] && kiln_device_peaks(be->name, c->precision, c->matmul_precision, &r->device_peak_gflops,
                                          &r->device_copy_gbps) != KILN_OK)
        kiln_log(KILN_LOG_WARN, "doctor: %s's peaks not measured: %s", r->device, kiln_last_error());
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            snprintf(r->cpu, sizeof r->cpu, "%s", strchr(line, ':') + 2);
            r->cpu[strcspn(r->cpu, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
}

static kiln_status baseline(const kiln_train_config *c, int64_t steps, kiln_doctor_report *r) {
    kiln_core_times t0, t1;
    kiln_train_result res;
    kiln_core_times_read(&t0);
    double w0 = now_s();
    kiln_status st = window(c, steps, &res);
    r->window_s = now_s() - w0;
    kiln_core_times_read(&t1);
    if (st != KILN_OK) return st;
    double busy[KILN_MAX_CORES];
    int n = kiln_core_busy(&t0, &t1, busy);
    r->ncores = n < KILN_DOCTOR_MAX_CORES ? n : KILN_DOCTOR_MAX_CORES;
    memcpy(r->core_busy, busy, sizeof(double) * (size_t)r->ncores);
    r->steps = res.steps;
    r->batch_size = res.batch_size;
    r->threads = res.threads;
    r->workers = res.workers;
    r->step_ms = step_wall_ms(&res);
    /* over the steps step_ms counts: the first (the loader's start, its first batch) left out as there */
    double waited = res.data_wait_frac * res.train_time_s;
    r->data_wait_ms = res.steps < 2 ? 1e3 * waited : 1e3 * (waited - res.first_step_wait_s) / (double)(res.steps - 1);
    if (r->data_wait_ms > r->step_ms) r->data_wait_ms = r->step_ms;
    r->fwd_ms = res.fwd_ms;
    r->bwd_ms = res.bwd_ms;
    r->optim_ms = res.optim_ms;
    r->overhead_ms = res.overhead_ms;
    r->samples_per_s = (double)res.batch_size * (c->accumulate > 0 ? (double)c->accumulate : 1) / (r->step_ms * 1e-3);
    r->ring_mb = (double)res.ring_bytes / MIB;
    r->peak_rss_mb = res.peak_rss_mb;
    r->ntop = res.ntop;
    memcpy(r->top, res.top, sizeof r->top);
    if (!r->arena_mb) r->arena_mb = (double)res.arena_bytes / MIB;
    kiln_doctor_dist_baseline(&res, r);
    return KILN_OK;
}

/* ---- remedies predicted from the baseline's own figures ---- */

/* data sources read through the decoding workers, which --cache serves: image folders, shards, HTTP (not IDX, named
 * or a folder of IDX files, tokens or CIFAR binaries) */
static int decoded_source(const char *data) {
    return kiln_source_is_url(data) || kiln_shards_detect(data) || kiln_imagefolder_detect(data);
}

static void data_remedies(const kiln_train_config *c, kiln_doctor_report *r) {
    double wait = r->data_wait_ms, compute = r->step_ms - wait, frac = wait / r->step_ms;
    if (frac < 0.05 || compute <= 0) return;
    double gain = r->step_ms / compute;
    /* a worker loads a batch in about (wait + what loading on the training thread cost) ms: enough workers keep up */
    int have = c->workers == KILN_WORKERS_AUTO ? r->workers : c->workers;
    int need = have + (int)ceil(wait / compute);
    if (need > r->cores_available) need = r->cores_available;
    if (need > have) {
        char v[16];
        snprintf(v, sizeof v, "%d", need);
        kiln_remedy *m = add(r, "workers", v, "asynchronous data loading (num_workers)");
        if (m) {
            m->predicted = gain;
            snprintf(m->why, sizeof m->why, "the training thread waits for data %.0f%% of each step (%.1f of %.1f ms) with "
                     "%d loader worker%s", 100 * frac, wait, r->step_ms, have, have == 1 ? "" : "s");
            snprintf(m->how, sizeof m->how, "the step without its data-wait: %.1f -> %.1f ms, if %d workers keep up "
                     "(each loads a batch while the step computes)", r->step_ms, compute, need);
        }
    }
    if (!c->cache && decoded_source(c->data)) {
        char dir[160];
        const char *home = getenv("XDG_CACHE_HOME");
        uint64_t h = 1469598103934665603ull; /* one cache folder per data source (FNV-1a of its name) */
        for (const char *p = c->data; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
        snprintf(dir, sizeof dir, "%s%s/kiln/decoded-%016llx", home ? home : getenv("HOME") ? getenv("HOME") : "/tmp",
                 home ? "" : "/.cache", (unsigned long long)h);
        kiln_remedy *m = add(r, "cache", dir, "cache the decoded data (data loading)");
        if (m) {
            m->predicted = gain * 0.98; /* ranked just after the workers: the first epoch still decodes */
            snprintf(m->why, sizeof m->why, "decoding and resizing images costs the loader the %.1f ms a step waits",
                     wait);
            snprintf(m->how, sizeof m->how, "from the second epoch on the step without its data-wait: %.1f -> %.1f ms "
                     "(the first epoch decodes and fills the cache)", r->step_ms, compute);
        }
    }
}

/* ---- remedies predicted by a trial window with the remedy ---- */

typedef struct {
    const kiln_train_config *base;
    kiln_doctor_report *r;
    int64_t steps;
} trial_ctx;

/* how a trial's remedy is kept: when >= 5 % faster per sample; offered always (applied when faster); or, for a
 * setting the guide calls wrong in itself, offered and applied always (the measured gain is only reported) */
enum { IF_FASTER, OFFER, WRONG };
/* a trial window of t, its remedy kept as `keep` says */
static void trial(trial_ctx *x, const kiln_train_config *t, const char *flag, const char *value, const char *technique,
                  const char *why, int keep) {
    double ms = 0, sps = 0;
    if (kiln_doctor_measure(t, x->steps, &ms, &sps) != KILN_OK) {
        kiln_log(KILN_LOG_DEBUG, "doctor: the trial of --%s %s failed: %s", flag, value, kiln_last_error());
        return;
    }
    double gain = sps / x->r->samples_per_s;
    kiln_log(KILN_LOG_DEBUG, "doctor: --%s %s: %.1f ms a step, %.0f samples/s (%.2fx)", flag, value, ms, sps, gain);
    if (gain < 1.05 && keep == IF_FASTER) return;
    kiln_remedy *m = add(x->r, flag, value, technique);
    if (!m) return;
    m->wrong = keep == WRONG;
    m->predicted = gain;
    snprintf(m->why, sizeof m->why, "%s", why);
    snprintf(m->how, sizeof m->how, "a %lld-step trial window with it: %.0f -> %.0f samples/s (compiling excluded)",
             (long long)x->steps, x->r->samples_per_s, sps);
}

/* mixed precision can be faster on the cpu where oneDNN has bf16 kernels (elsewhere on the cpu `auto` is fp32 itself,
 * and a trial of it measures noise), and on a GPU, whose autocast steps take tensor cores (cuBLASLt, cuDNN) */
static int bf16_may_help(const kiln_train_config *c) {
    if (on_device(c)) return 1;
    const kiln_backend *be = run_backend(c);
    return be && !strcmp(be->name, "cpu") && kiln_dnnl_has_bf16();
}

static int has_matmuls(const kiln_train_config *c) {
    return kiln_train_plan_has_op(c, "conv2d") || kiln_train_plan_has_op(c, "linear") || kiln_train_plan_has_op(c, "matmul");
}

/* a GPU's fp32 matmuls and convolutions: AMP's bf16 tensor cores (the cpu: `auto`, bf16 where measured faster), and
 * TF32 when they run in full fp32 FMA math (--matmul-precision highest) */
static void precision_remedies(const kiln_train_config *c, trial_ctx *x) {
    kiln_train_config t = *c;
    int gpu = on_device(c);
    if (c->precision == KILN_PRECISION_FP32 && bf16_may_help(c) && has_matmuls(c)) {
        t.precision = gpu ? KILN_PRECISION_BF16 : KILN_PRECISION_AUTO;
        trial(x, &t, "precision", gpu ? "bf16" : "auto",
              gpu ? "automatic mixed precision (bf16 on tensor cores)" : "mixed precision (bf16 where measured faster)",
              gpu ? "every matmul and convolution takes fp32 operands: bf16 ones run on the GPU's tensor cores"
                  : "every matmul and convolution runs in fp32; bf16 operands may be faster on this CPU", IF_FASTER);
        t = *c;
    }
    if (gpu && c->precision == KILN_PRECISION_FP32 && c->matmul_precision == 0 && has_matmuls(c)) {
        t.matmul_precision = 1;
        trial(x, &t, "matmul-precision", "high", "TF32 tensor cores for fp32 matmuls (set_float32_matmul_precision)",
              "fp32 matmuls and convolutions run in full fp32 FMA math (--matmul-precision highest)", IF_FASTER);
    }
}

static void trial_remedies(const kiln_train_config *c, trial_ctx *x) {
    kiln_doctor_report *r = x->r;
    kiln_train_config t = *c;
    char why[256], v[32];
    if (c->threads > r->cores_available) {
        t.threads = r->cores_available;
        snprintf(v, sizeof v, "%d", r->cores_available);
        snprintf(why, sizeof why, "%d compute threads on %d cores: threads preempt each other at every barrier",
                 c->threads, r->cores_available);
        trial(x, &t, "threads", v, "avoid oversubscription (OpenMP threads)", why, WRONG);
        t = *c;
    }
    if (!c->autotune && kiln_train_plan_has_op(c, "conv2d")) {
        t.autotune = 1;
        trial(x, &t, "no-autotune", "false", "cudnn.benchmark: autotune every convolution",
              "convolutions run oneDNN's default implementation, untimed (--no-autotune)", WRONG);
        t = *c;
    }
    if (!c->fuse) {
        t.fuse = 1;
        trial(x, &t, "no-fuse", "false", "fuse pointwise operations", "fusion is off (--no-fuse): every pointwise op is its own pass", WRONG);
        t = *c;
    }
    precision_remedies(c, x);
}

/* a batch far below what memory allows: the finder's batch, up to 8 times the given one */
static void batch_remedy(const kiln_train_config *c, trial_ctx *x) {
    int64_t b = 0;
    size_t arena = 0;
    if (c->find_batch_size || kiln_find_batch_size_config(c, budget_bytes(c), 8 * c->batch_size, &b, &arena) != KILN_OK ||
        b < 4 * c->batch_size)
        return;
    kiln_train_config t = *c;
    t.batch_size = b;
    char v[32], why[256];
    snprintf(v, sizeof v, "%lld", (long long)b);
    snprintf(why, sizeof why, "batch %lld uses %.0f MiB of a %.0f MiB budget; batch %lld fits (%.0f MiB): fewer, larger "
             "kernels per sample (scale --lr with it, or use --optimizer lars/lamb)", (long long)c->batch_size,
             x->r->arena_mb, budget_bytes(c) / MIB, (long long)b, arena / MIB);
    trial(x, &t, "batch-size", v, "increase the batch size (the batch-size finder)", why, OFFER);
}

static void rank_remedies(kiln_doctor_report *r) {
    for (int i = 1; i < r->nremedies; i++)
        for (int j = i; j > 0; j--) {
            kiln_remedy *a = &r->remedies[j - 1], *b = &r->remedies[j];
            int swap = b->memory > a->memory || (b->memory == a->memory && b->predicted > a->predicted);
            if (!swap) break;
            kiln_remedy t = *a;
            *a = *b;
            *b = t;
        }
}

/* what --apply applies: what makes the run fit, what replaces a setting wrong in itself (a short trial on a
 * busy machine may measure no gain), and what its prediction says is 5 % faster (a larger batch measured
 * slower is reported, not applied) */
static void choose_applied(kiln_doctor_report *r) {
    for (int i = 0; i < r->nremedies; i++) {
        kiln_remedy *m = &r->remedies[i];
        m->applied = m->memory || m->wrong || m->predicted >= 1.05;
    }
}

kiln_status kiln_doctor_run(const kiln_train_config *given, const kiln_doctor_opts *o, kiln_doctor_report *r) {
    double t0 = now_s();
    memset(r, 0, sizeof *r);
    int64_t steps = o && o->window_steps > 1 ? o->window_steps : 12;
    kiln_train_config c = *given;
    machine(&c, r);
    r->fits = check_memory(&c, r);
    /* a run that does not fit is measured with what makes it fit */
    if (!r->fits && r->nremedies && kiln_doctor_apply(r, &c) != KILN_OK) return kiln_fail_context(KILN_ERR_INVALID_ARG, "doctor");
    if (!r->fits && !r->nremedies)
        return kiln_fail(KILN_ERR_NOMEM, "doctor: the training plan needs %.0f MiB, more than the %.0f MiB budget, and "
                         "neither checkpointing nor a smaller batch fits", r->arena_mb, r->budget_mb);
    kiln_status st = baseline(&c, steps, r);
    if (st != KILN_OK) return st;
    if (o && o->measure_only) {
        snprintf(r->bottleneck, sizeof r->bottleneck, "unknown");
        r->elapsed_s = now_s() - t0;
        return KILN_OK;
    }
    data_remedies(&c, r);
    trial_ctx x = {&c, r, steps};
    trial_remedies(&c, &x);
    batch_remedy(&c, &x);
    if ((st = kiln_doctor_dist_remedies(&c, steps, r)) != KILN_OK) return st;
    rank_remedies(r);
    choose_applied(r);
    /* the diagnosis: a run that cannot fit or fights for its cores before all else, then waiting for data */
    snprintf(r->bottleneck, sizeof r->bottleneck, "%s", !r->fits ? "memory" : c.threads > r->cores_available ? "threads"
             : r->data_wait_ms > 0.05 * r->step_ms ? "data" : "compute");
    kiln_doctor_dist_bottleneck(r); /* under mpirun: the ranks' threads, the all-reduce */
    r->elapsed_s = now_s() - t0;
    return KILN_OK;
}

/* the cache's parent folders (--cache makes only the last) */
static void make_parents(const char *dir) {
    char p[512];
    snprintf(p, sizeof p, "%s", dir);
    for (char *q = p + 1; *q; q++)
        if (*q == '/') {
            *q = 0;
            mkdir(p, 0777);
            *q = '/';
        }
}

kiln_status kiln_doctor_apply(const kiln_doctor_report *r, kiln_train_config *c) {
    for (int i = 0; i < r->nremedies; i++) {
        const kiln_remedy *m = &r->remedies[i];
        if (!m->applied) continue;
        /* two remedies for one flag (under mpirun --threads twice): the first, ranked higher, wins */
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= r->remedies[j].applied && strcmp(r->remedies[j].flag, m->flag) == 0;
        if (seen) continue;
        if (!strcmp(m->flag, "cache")) make_parents(m->value);
        kiln_status st = kiln_train_option_set(c, m->flag, m->value[0] ? m->value : NULL);
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}

double kiln_doctor_predicted_total(const kiln_doctor_report *r) {
    double g = 1;
    int data = 0;
    for (int i = 0; i < r->nremedies; i++) {
        const kiln_remedy *m = &r->remedies[i];
        int is_data = !strcmp(m->flag, "workers") || !strcmp(m->flag, "cache");
        if (!m->applied || m->memory || (is_data && data++)) continue; /* workers and the cache remove the same wait */
        g *= m->predicted;
    }
    return g;
}

/* ---- the report as JSON ---- */

static json_t *applied_json(const kiln_doctor_report *r) {
    if (r->applied_samples_per_s <= 0) return json_null();
    json_t *o = json_object();
    json_object_set_new(o, "step_ms", json_real(r->applied_step_ms));
    json_object_set_new(o, "samples_per_s", json_real(r->applied_samples_per_s));
    json_object_set_new(o, "measured_gain", json_real(r->samples_per_s > 0 ? r->applied_samples_per_s / r->samples_per_s : 0));
    json_object_set_new(o, "predicted_gain", json_real(r->applied_predicted));
    return o;
}

static json_t *remedy_json(const kiln_remedy *m) {
    json_t *o = json_object();
    json_object_set_new(o, "flag", json_string(m->flag));
    json_object_set_new(o, "value", json_string(m->value));
    json_object_set_new(o, "technique", json_string(m->technique));
    json_object_set_new(o, "why", json_string(m->why));
    json_object_set_new(o, "how", json_string(m->how));
    json_object_set_new(o, "predicted_gain", json_real(m->predicted));
    json_object_set_new(o, "memory", json_boolean(m->memory));
    json_object_set_new(o, "wrong_in_itself", json_boolean(m->wrong));
    json_object_set_new(o, "applied", json_boolean(m->applied));
    return o;
}

static json_t *kernel_json(const kiln_kernel_stat *k, double peak, double bw) {
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(k->name));
    json_object_set_new(o, "op", json_string(k->op));
    json_object_set_new(o, "ms", json_real(k->ms));
    json_object_set_new(o, "gflops", json_real(k->gflops));
    json_object_set_new(o, "gbps", json_real(k->gbps));
    json_object_set_new(o, "of_peak", json_real(k->gflops > 0 && peak > 0 ? k->gflops / peak : bw > 0 ? k->gbps / bw : 0));
    return o;
}

char *kiln_doctor_json(const kiln_doctor_report *r) {
    json_t *o = json_object(), *mach = json_object(), *step = json_object(), *mem = json_object();
    json_t *cores = json_array(), *tops = json_array(), *rem = json_array();
    json_object_set_new(mach, "cpu", json_string(r->cpu));
    json_object_set_new(mach, "cores_online", json_integer(r->cores_online));
    json_object_set_new(mach, "cores_available", json_integer(r->cores_available));
    json_object_set_new(mach, "fp32_peak_gflops", json_real(r->peak_gflops));
    json_object_set_new(mach, "bf16_kernels", json_boolean(r->bf16_kernels));
    json_object_set_new(mach, "device", json_string(r->device));
    json_object_set_new(mach, "device_peak_gflops", json_real(r->device_peak_gflops));
    json_object_set_new(mach, "device_copy_gbps", json_real(r->device_copy_gbps));
    json_object_set_new(mach, "copy_gbps", json_real(r->copy_gbps));
    json_object_set_new(step, "steps", json_integer(r->steps));
    json_object_set_new(step, "batch_size", json_integer(r->batch_size));
    json_object_set_new(step, "threads", json_integer(r->threads));
    json_object_set_new(step, "workers", json_integer(r->workers));
    json_object_set_new(step, "window_s", json_real(r->window_s));
    json_object_set_new(step, "step_ms", json_real(r->step_ms));
    json_object_set_new(step, "data_wait_ms", json_real(r->data_wait_ms));
    json_object_set_new(step, "forward_ms", json_real(r->fwd_ms));
    json_object_set_new(step, "backward_ms", json_real(r->bwd_ms));
    json_object_set_new(step, "optimizer_ms", json_real(r->optim_ms));
    json_object_set_new(step, "overhead_ms", json_real(r->overhead_ms));
    json_object_set_new(step, "samples_per_s", json_real(r->samples_per_s));
    for (int i = 0; i < r->ncores; i++) json_array_append_new(cores, json_real(r->core_busy[i]));
    json_object_set_new(step, "core_busy", cores);
    json_object_set_new(mem, "fits", json_boolean(r->fits));
    json_object_set_new(mem, "arena_mb", json_real(r->arena_mb));
    json_object_set_new(mem, "budget_mb", json_real(r->budget_mb));
    json_object_set_new(mem, "loader_ring_mb", json_real(r->ring_mb));
    json_object_set_new(mem, "peak_rss_mb", json_real(r->peak_rss_mb));
    /* a device's kernels against the device's peaks, never the CPU's */
    for (int i = 0; i < r->ntop; i++)
        json_array_append_new(tops, kernel_json(&r->top[i], r->device[0] ? r->device_peak_gflops : r->peak_gflops,
                                                r->device[0] ? r->device_copy_gbps : r->copy_gbps));
    for (int i = 0; i < r->nremedies; i++) json_array_append_new(rem, remedy_json(&r->remedies[i]));
    json_object_set_new(o, "machine", mach);
    json_object_set_new(o, "step", step);
    json_object_set_new(o, "memory", mem);
    json_object_set_new(o, "top_kernels", tops);
    json_object_set_new(o, "bottleneck", json_string(r->bottleneck));
    json_object_set_new(o, "remedies", rem);
    json_object_set_new(o, "distributed", kiln_doctor_dist_json(r));
    json_object_set_new(o, "applied", applied_json(r));
    json_object_set_new(o, "elapsed_s", json_real(r->elapsed_s));
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return text;
}
