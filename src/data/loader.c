/* The batch loader: a ring of preallocated, 64-byte aligned batch slots that
 * persistent worker threads fill in place, one sample at a time, handed to the
 * training thread strictly in batch order.
 *
 * Determinism: batch k of epoch e holds samples order_e[k*bs .. k*bs+n) (the
 * sampler's order) and sample i of the epoch gets the transform key
 * kiln_rng_key(seed, e, i). Which worker loads a sample, and when, changes
 * nothing.
 *
 * Work: workers claim single samples from an assignment cursor (epoch, batch);
 * a batch takes a free slot when its first sample is claimed, so all workers
 * work on the oldest batch first and the first batch of an epoch is ready as
 * soon as possible. With next_epoch the cursor runs on into epoch e+1 while
 * the consumer finishes e; start_epoch(e+1, 0) keeps that work. Any other
 * start_epoch cancels: `gen` is bumped, stale slots are freed once no sample
 * is being loaded.
 *
 * Slot life: FREE -> FILLING (samples claimed, `done` counting those loaded)
 * -> READY -> HELD (returned by next) -> FREE (release). Batches are assigned
 * slots in order, so the batch the consumer waits for is either in a slot or
 * the next to get one, and the ring cannot deadlock unless the caller holds
 * every slot.
 *
 * Errors: a failed sample either stops the epoch (the first error's status
 * and message are kept and next() returns -1 with them on the training
 * thread) or, with skip_bad, is replaced by the next readable sample of the
 * dataset (index + 1, ..., wrapping), so batches keep their size (a compiled
 * plan runs fixed batch sizes) and stay the same for any worker count.
 *
 * A batch sampler (cfg.batches) makes the batches instead: per epoch, lists
 * of samples with a width each; batch b's samples are order[start[b]..) and
 * each is written at x + i * width by the dataset's get_width. Everything
 * else (slots, claims, keys by position in the epoch's order) is the same. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "base/internal/rng.h"
#include "base/internal/trace.h"
#include "kiln/alloc.h"
#include "kiln/data.h"

#define MAX_WORKERS 256
/* nice value of the workers: loading must yield to the compute threads */
#define WORKER_NICE 10
/* skipped samples named in the log; later ones are only counted */
#define SKIP_WARNINGS 10
/* bad samples in a row that skip_bad replaces before it gives up */
#define SKIP_RUN 64
/* read-ahead: when batch b opens and fewer than HINT_AHEAD samples after it are named to
 * will_need (at least 2 batches), the window is refilled up to HINT_SAMPLES samples (at
 * least 2 batches more) in one call. Over HTTP on loopback at 0 workers, 4 batches ahead loaded 20,000
 * images/s where 2 loaded 15,500; at 2 workers (~50,000 images/s, a batch a millisecond)
 * 4 ahead with a 1,024-sample window left the workers waiting for ranges in flight;
 * 16 ahead with 3,072 gave 48,500-50,500 images/s where 8 with 2,048 gave 48,000-49,000.
 * A refill of many batches at once lets each shard's ranges go out as one multi-range
 * request (~40 ranges, not ~5) */
#define HINT_AHEAD 1024
#define HINT_SAMPLES 3072

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD };

typedef struct slot {
    float *x;
    int32_t *y;
    int64_t epoch, batch;
    int64_t n;         /* samples of the batch */
    int64_t width;     /* batch sampler: positions per sample; else 0 */
    int64_t claimed;   /* samples handed to workers */
    int64_t done;      /* samples finished (loaded or failed) */
    uint64_t gen;
    int state;
    int locked;        /* mlock succeeded */
} slot;

struct kiln_loader {
    kiln_dataset *ds;
    kiln_loader_config cfg;
    kiln_sampler sampler;
    int64_t numel, lnumel; /* floats and labels per sample */
    int64_t epoch_len;     /* samples per epoch (the sampler's) */
    int64_t nbatches;
    int nslots;
    slot *slots;
    size_t xb, yb;         /* bytes of a slot's x and y */
    int64_t *order[2];     /* the orders of two consecutive epochs, by epoch parity */
    int64_t *start[2], *width[2]; /* batch sampler: each batch's first position in order, and its width */
    int64_t order_epoch[2];

    pthread_mutex_t mu;
    pthread_cond_t work;  /* workers: a slot is free, an epoch started, workers changed, or stop */
    pthread_cond_t ready; /* consumer: a slot became READY (or an error) */
    pthread_cond_t idle;  /* start_epoch: no sample is being loaded */
    pthread_t *threads;
    int nthreads;         /* started */
    int want;             /* at work: threads with id >= want are parked */
    int stop;
    int active;           /* an epoch is running: workers may claim */
    int started;          /* start_epoch was called */
    uint64_t gen;
    int64_t a_epoch, a_batch; /* the next batch to get a slot */
    int64_t hint_epoch, hint_next; /* the next batch to name to will_need */
    slot *a_slot;         /* the batch samples are being claimed from (NULL: none) */
    int64_t d_epoch, d_batch; /* the next batch for the consumer */
    int busy;             /* samples being loaded now */
    double wait_s;
    atomic_llong skipped;
    kiln_status err;      /* the first load error of this epoch (KILN_OK: none) */
    char err_msg[1024];
    kiln_status last;     /* what next() last failed with */
};

kiln_loader_config kiln_loader_defaults(void) {
    kiln_loader_config c;
    memset(&c, 0, sizeof c);
    c.batch_size = 64;
    c.shuffle = 1;
    c.workers = 2;
    c.prefetch = 2; /* PyTorch's prefetch_factor */
    c.next_epoch = 1;
    return c;
}

/* where batch `batch` of epoch e starts in its order */
static int64_t batch_pos(const kiln_loader *L, int64_t e, int64_t batch) {
    return L->cfg.batches ? L->start[e & 1][batch] : batch * L->cfg.batch_size;
}

/* samples in batch `batch` of epoch e */
static int64_t batch_n(const kiln_loader *L, int64_t e, int64_t batch) {
    if (L->cfg.batches) return L->start[e & 1][batch + 1] - L->start[e & 1][batch];
    int64_t n = L->epoch_len - batch * L->cfg.batch_size;
    return n < L->cfg.batch_size ? n : L->cfg.batch_size;
}

/* a batch sampler's epoch: its batches must tile the order, each of a width the dataset has */
static kiln_status check_batches(const kiln_loader *L, int p) {
    const int64_t *st = L->start[p], *w = L->width[p];
    int64_t nb = L->nbatches;
    int ok = st[0] == 0 && st[nb] == L->epoch_len;
    for (int64_t b = 0; ok && b < nb; b++)
        ok = st[b + 1] >= st[b] && w[b] >= 1 && w[b] <= L->numel && (st[b + 1] - st[b]) * w[b] <= L->cfg.batches->max_numel;
    return ok ? KILN_OK : kiln_fail(KILN_ERR_INVALID_ARG, "loader: the batch sampler's batches do not tile its %lld samples "
                                    "within %lld positions a batch", (long long)L->epoch_len, (long long)L->cfg.batches->max_numel);
}

static kiln_status order_of(kiln_loader *L, int64_t e, int p) {
    const kiln_batch_sampler *bs = L->cfg.batches;
    if (!bs) return L->sampler.order(&L->sampler, L->ds->len, e, L->order[p]);
    kiln_status st = bs->order(bs, e, L->order[p], L->start[p], L->width[p]);
    return st == KILN_OK ? check_batches(L, p) : st;
}

/* the order of epoch e in its parity's buffer, computed unless already there */
static kiln_status ensure_order(kiln_loader *L, int64_t e) {
    int p = (int)(e & 1);
    if (L->order_epoch[p] == e) return KILN_OK;
    L->order_epoch[p] = -1;
    kiln_status st = order_of(L, e, p);
    if (st != KILN_OK) return st;
    for (int64_t i = 0; i < L->epoch_len; i++)
        if (L->order[p][i] < 0 || L->order[p][i] >= L->ds->len)
            return kiln_fail(KILN_ERR_INVALID_ARG, "loader: the sampler gave index %lld for %s of %lld samples",
                             (long long)L->order[p][i], L->ds->name ? L->ds->name : "a dataset", (long long)L->ds->len);
    L->order_epoch[p] = e;
    return KILN_OK;
}

/* the first error of the epoch, kept for the consumer; the caller holds the lock */
static void record_error(kiln_loader *L, kiln_status st, const char *msg) {
    if (L->err != KILN_OK) return;
    L->err = st;
    snprintf(L->err_msg, sizeof L->err_msg, "%s", msg);
    L->active = 0; /* no new work: the run is over */
    pthread_cond_broadcast(&L->ready);
}

/* Gives the next batch a free slot, moving into the next epoch when allowed;
 * 0 when there is nothing to assign now. The caller holds the lock. */
static int open_batch(kiln_loader *L) {
    if (L->a_batch >= L->nbatches) {
        int may = L->a_epoch < L->d_epoch || (L->cfg.next_epoch && L->a_epoch == L->d_epoch && L->cfg.workers > 0);
        if (!may) return 0;
        kiln_status st = ensure_order(L, L->a_epoch + 1);
        if (st != KILN_OK) {
            record_error(L, st, kiln_last_error());
            return 0;
        }
        L->a_epoch++;
        L->a_batch = 0;
        if (L->nbatches == 0) return 0;
    }
    slot *s = NULL;
    for (int i = 0; i < L->nslots && !s; i++)
        if (L->slots[i].state == SLOT_FREE) s = &L->slots[i];
    if (!s) return 0;
    s->epoch = L->a_epoch;
    s->batch = L->a_batch++;
    s->n = batch_n(L, s->epoch, s->batch);
    s->width = L->cfg.batches ? L->width[s->epoch & 1][s->batch] : 0;
    s->claimed = s->done = 0;
    s->gen = L->gen;
    s->state = SLOT_FILLING;
    L->a_slot = s;
    return 1;
}

/* a sample to load: its slot, position in the batch, dataset index and key;
 * 0 when none can be claimed now. The caller holds the lock. */
typedef struct claim {
    slot *s;
    int64_t i, index;
    uint64_t key;
    int64_t hint_epoch, hint_from, hint_to; /* batches to name to the dataset's will_need (from < to) */
} claim;

/* Read-ahead: when a batch is opened with fewer than HINT_AHEAD batches after
 * it named, the dataset hears of the batches up to the refilled window's end
 * in one call, so a remote dataset fetches them (several ranges of a shard
 * per request) while the batches before are loaded. The caller holds the
 * lock; the hints go out after it is dropped. */
static void plan_hints(kiln_loader *L, claim *c) {
    const slot *s = L->a_slot;
    if (!L->ds->will_need) return;
    if (L->hint_epoch != s->epoch || L->hint_next < s->batch) {
        L->hint_epoch = s->epoch;
        L->hint_next = s->batch;
    }
    c->hint_epoch = s->epoch;
    c->hint_from = c->hint_to = L->hint_next;
    int64_t bs = L->cfg.batch_size;
    int64_t low = (HINT_AHEAD + bs - 1) / bs < 2 ? 2 : (HINT_AHEAD + bs - 1) / bs;
    if (L->hint_next >= s->batch + low) return; /* enough named ahead */
    int64_t ahead = (HINT_SAMPLES + bs - 1) / bs;
    if (ahead < low + 2) ahead = low + 2;
    int64_t to = s->batch + ahead < L->nbatches ? s->batch + ahead : L->nbatches;
    c->hint_from = L->hint_next;
    c->hint_to = to > L->hint_next ? to : L->hint_next;
    L->hint_next = c->hint_to;
}

/* the hints take(...) planned; no lock needed (the orders of the two epochs in flight stay put) */
static void send_hints(kiln_loader *L, const claim *c) {
    if (c->hint_from >= c->hint_to) return;
    int64_t a = batch_pos(L, c->hint_epoch, c->hint_from); /* an epoch's batches lie one after another in its order */
    int64_t b = batch_pos(L, c->hint_epoch, c->hint_to - 1) + batch_n(L, c->hint_epoch, c->hint_to - 1);
    L->ds->will_need(L->ds, L->order[c->hint_epoch & 1] + a, b - a);
}

static int take(kiln_loader *L, claim *c) {
    if (!L->active) return 0;
    c->hint_from = c->hint_to = 0;
    if (!L->a_slot || L->a_slot->claimed == L->a_slot->n) {
        L->a_slot = NULL;
        if (!open_batch(L)) return 0;
        plan_hints(L, c);
    }
    slot *s = L->a_slot;
    int64_t pos = batch_pos(L, s->epoch, s->batch) + s->claimed;
    c->s = s;
    c->i = s->claimed++;
    c->index = L->order[s->epoch & 1][pos];
    c->key = kiln_rng_key(L->cfg.seed, (uint64_t)s->epoch, (uint64_t)pos);
    L->busy++;
    return 1;
}

static kiln_status get(kiln_loader *L, int64_t index, const claim *c) {
    double t0 = kiln_trace_on() ? kiln_trace_now() : 0;
    const slot *s = c->s;
    kiln_status st = s->width ? L->ds->get_width(L->ds, index, c->key, s->width, s->x + c->i * s->width, s->y + c->i * s->width)
                              : L->ds->get(L->ds, index, c->key, s->x + c->i * L->numel, s->y + c->i * L->lnumel);
    if (t0 > 0) {
        /* a flow from the batch's first sample to the step that trains on it */
        if (c->i == 0) kiln_trace_flow(1, ((uint64_t)s->epoch << 32) | (uint64_t)s->batch, t0);
        kiln_trace_span("sample", "loader", t0, kiln_trace_now());
    }
    return st;
}

/* Loads one claimed sample; no lock held. With skip_bad a corrupt sample
 * (a FORMAT error: a bad file, never an I/O error such as a server that is
 * gone) is replaced by the next readable one, up to SKIP_RUN in a row. */
static kiln_status load(kiln_loader *L, const claim *c) {
    kiln_status st = get(L, c->index, c);
    int64_t tries = L->ds->len < SKIP_RUN ? L->ds->len : SKIP_RUN;
    for (int64_t k = 1; st == KILN_ERR_FORMAT && L->cfg.skip_bad && k < tries; k++) {
        long long n = atomic_fetch_add(&L->skipped, 1) + 1;
        if (n <= SKIP_WARNINGS)
            kiln_log(KILN_LOG_WARN, "--bad-samples skip: %s; taking the next sample instead%s", kiln_last_error(),
                     n == SKIP_WARNINGS ? " (later skips are only counted)" : "");
        st = get(L, (c->index + k) % L->ds->len, c);
    }
    if (st == KILN_ERR_FORMAT && L->cfg.skip_bad) {
        char msg[1024]; /* kiln_fail formats into the buffer kiln_last_error reads */
        snprintf(msg, sizeof msg, "%s", kiln_last_error());
        return kiln_fail(st, "%s (and the %lld samples before it were bad too: --bad-samples skip gives up)", msg,
                         (long long)tries - 1);
    }
    return st;
}

/* a loaded (or failed) sample goes back; the caller holds the lock */
static void finish(kiln_loader *L, const claim *c, kiln_status st, const char *msg) {
    slot *s = c->s;
    L->busy--;
    s->done++;
    if (s->gen == L->gen && st != KILN_OK) record_error(L, st, msg);
    if (s->gen != L->gen) {
        if (s->done == s->claimed) s->state = SLOT_FREE; /* cancelled; nothing more will be claimed from it */
        pthread_cond_signal(&L->work);
    } else if (s->done == s->n && L->err == KILN_OK) {
        s->state = SLOT_READY;
        pthread_cond_broadcast(&L->ready);
    }
    if (L->busy == 0) pthread_cond_broadcast(&L->idle);
}

typedef struct worker_arg {
    kiln_loader *L;
    int id;
} worker_arg;

/* A run started under a real-time policy (chrt -f, as the benchmarks time) gives its
 * workers the compute threads' policy and priority, where nice counts for nothing:
 * a worker then runs whenever a compute thread yields (an MPI wait that polls) and
 * keeps the core until its batch is done, holding up the poll. One real-time
 * priority below them, a compute thread that wakes takes its core back at once,
 * and the workers still run before every ordinary process (a busy machine does
 * not starve the loader); at the lowest priority, ordinary scheduling. */
static void below_compute(void) {
    int policy;
    struct sched_param p;
    if (pthread_getschedparam(pthread_self(), &policy, &p) != 0 || (policy != SCHED_FIFO && policy != SCHED_RR)) return;
    if (p.sched_priority > sched_get_priority_min(policy)) {
        p.sched_priority--;
    } else {
        policy = SCHED_OTHER;
        p.sched_priority = 0;
    }
    (void)pthread_setschedparam(pthread_self(), policy, &p);
}

static void *worker_main(void *arg) {
    kiln_loader *L = ((worker_arg *)arg)->L;
    int id = ((worker_arg *)arg)->id;
    free(arg);
    /* On Linux the nice value is per thread; best effort, an unprivileged
     * process may always lower its own priority but never fails the run. */
    below_compute();
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), WORKER_NICE);
    char name[32];
    snprintf(name, sizeof name, "loader worker %d", id);
    kiln_trace_thread(name);
    pthread_mutex_lock(&L->mu);
    for (;;) {
        if (L->stop) break;
        claim c;
        if (id >= L->want || !take(L, &c)) {
            pthread_cond_wait(&L->work, &L->mu); /* parked, the ring is full, or no epoch */
            continue;
        }
        pthread_mutex_unlock(&L->mu);
        send_hints(L, &c);
        kiln_status st = load(L, &c);
        pthread_mutex_lock(&L->mu);
        finish(L, &c, st, st == KILN_OK ? "" : kiln_last_error());
    }
    pthread_mutex_unlock(&L->mu);
    return NULL;
}

static void free_slot_memory(kiln_loader *L, slot *s) {
    if (s->locked) {
        munlock(s->x, L->xb);
        munlock(s->y, L->yb);
    }
    if (L->cfg.host_free) {
        L->cfg.host_free(s->x);
        L->cfg.host_free(s->y);
    } else {
        kiln_free(s->x);
        kiln_free(s->y);
    }
}

static void destroy(kiln_loader *L) {
    if (L->threads) {
        pthread_mutex_lock(&L->mu);
        L->stop = 1;
        pthread_cond_broadcast(&L->work);
        pthread_mutex_unlock(&L->mu);
        for (int i = 0; i < L->nthreads; i++) pthread_join(L->threads[i], NULL);
        free(L->threads);
    }
    if (L->slots) {
        for (int i = 0; i < L->nslots; i++) free_slot_memory(L, &L->slots[i]);
        free(L->slots);
    }
    for (int p = 0; p < 2; p++) {
        free(L->order[p]);
        free(L->start[p]);
        free(L->width[p]);
    }
    pthread_cond_destroy(&L->work);
    pthread_cond_destroy(&L->ready);
    pthread_cond_destroy(&L->idle);
    pthread_mutex_destroy(&L->mu);
    free(L);
}

static kiln_status check_config(const kiln_dataset *ds, const kiln_loader_config *cfg) {
    if (!ds || !cfg || !ds->get) return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_loader_new: NULL dataset or config");
    const char *name = ds->name ? ds->name : "?";
    if (cfg->batch_size < 1) return kiln_fail(KILN_ERR_INVALID_ARG, "loader: batch size must be >= 1 (got %lld)", (long long)cfg->batch_size);
    if (cfg->workers < 0 || cfg->workers > MAX_WORKERS || cfg->max_workers < 0 || cfg->max_workers > MAX_WORKERS)
        return kiln_fail(KILN_ERR_INVALID_ARG, "loader: workers must be in 0..%d (got %d)", MAX_WORKERS,
                         cfg->workers > cfg->max_workers ? cfg->workers : cfg->max_workers);
    if (cfg->prefetch < 1 || cfg->prefetch > 64)
        return kiln_fail(KILN_ERR_INVALID_ARG, "loader: prefetch must be in 1..64 (got %d)", cfg->prefetch);
    if (cfg->world > 1 && (cfg->rank < 0 || cfg->rank >= cfg->world))
        return kiln_fail(KILN_ERR_INVALID_ARG, "loader: rank %d is not in 0..%d", cfg->rank, cfg->world - 1);
    if (ds->len < 0) return kiln_fail(KILN_ERR_INVALID_ARG, "loader: dataset %s has negative length", name);
    if (cfg->world > 1 && ds->len == 0) return kiln_fail(KILN_ERR_INVALID_ARG, "loader: dataset %s is empty", name);
    if (kiln_shape_numel(ds->sample_ndim, ds->sample_shape) < 1 || ds->label_numel < 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "loader: dataset %s has empty samples", name);
    const kiln_batch_sampler *bs = cfg->batches;
    if (bs && (!ds->get_width || ds->sample_ndim != 1 || ds->label_numel != ds->sample_shape[0]))
        return kiln_fail(KILN_ERR_INVALID_ARG, "loader: dataset %s has no variable-length samples for a batch sampler "
                         "(--batch-tokens wants token documents)", name);
    if (bs && (!bs->order || bs->nbatches < 0 || bs->samples < 0 || bs->max_numel < 1))
        return kiln_fail(KILN_ERR_INVALID_ARG, "loader: a batch sampler without batches");
    return KILN_OK;
}

/* the ring: every slot's memory, mlocked when asked (best effort, one warning) */
static kiln_status make_ring(kiln_loader *L) {
    const kiln_loader_config *cfg = &L->cfg;
    int64_t per = cfg->batch_size < L->epoch_len ? cfg->batch_size : (L->epoch_len > 0 ? L->epoch_len : 1);
    L->xb = (size_t)per * (size_t)L->numel * sizeof(float);
    L->yb = (size_t)per * (size_t)L->lnumel * sizeof(int32_t);
    if (cfg->batches) {
        L->xb = (size_t)cfg->batches->max_numel * sizeof(float);
        L->yb = (size_t)cfg->batches->max_numel * sizeof(int32_t);
    }
    int warned = 0;
    for (int i = 0; i < L->nslots; i++) {
        slot *s = &L->slots[i];
        s->x = cfg->host_alloc ? cfg->host_alloc(L->xb) : kiln_alloc(L->xb);
        s->y = cfg->host_alloc ? cfg->host_alloc(L->yb) : kiln_alloc(L->yb);
        if (!s->x || !s->y)
            return kiln_fail(KILN_ERR_NOMEM, "loader: cannot allocate %d batch slots of %zu bytes", L->nslots, L->xb + L->yb);
        if (!cfg->lock_memory || cfg->host_alloc) continue; /* page-locked already */
        if (mlock(s->x, L->xb) == 0) {
            if (mlock(s->y, L->yb) == 0) s->locked = 1;
            else munlock(s->x, L->xb);
        }
        if (!s->locked && !warned) {
            kiln_log(KILN_LOG_WARN, "loader: cannot lock %zu bytes of batch buffers in memory (%s); continuing unlocked",
                     (L->xb + L->yb) * (size_t)L->nslots, strerror(errno));
            warned = 1;
        }
    }
    return KILN_OK;
}

static kiln_status start_threads(kiln_loader *L, int upto) {
    for (int i = L->nthreads; i < upto; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (!a) return kiln_fail(KILN_ERR_NOMEM, "loader: out of memory");
        *a = (worker_arg){L, i};
        int e = pthread_create(&L->threads[i], NULL, worker_main, a);
        if (e != 0) {
            free(a);
            return kiln_fail(KILN_ERR_NOMEM, "loader: cannot start worker thread %d: %s", i, strerror(e));
        }
        L->nthreads++;
    }
    return KILN_OK;
}

kiln_status kiln_loader_new(kiln_dataset *ds, const kiln_loader_config *cfg, kiln_loader **out) {
    *out = NULL;
    kiln_status st = check_config(ds, cfg);
    if (st != KILN_OK) return st;
    kiln_loader *L = calloc(1, sizeof *L);
    if (!L) return kiln_fail(KILN_ERR_NOMEM, "loader: out of memory");
    pthread_mutex_init(&L->mu, NULL);
    pthread_cond_init(&L->work, NULL);
    pthread_cond_init(&L->ready, NULL);
    pthread_cond_init(&L->idle, NULL);
    L->ds = ds;
    L->cfg = *cfg;
    if (L->cfg.max_workers < L->cfg.workers) L->cfg.max_workers = L->cfg.workers;
    L->sampler = cfg->sampler ? *cfg->sampler : kiln_sampler_of(&L->cfg);
    L->numel = kiln_shape_numel(ds->sample_ndim, ds->sample_shape);
    L->lnumel = ds->label_numel > 0 ? ds->label_numel : 1;
    L->epoch_len = cfg->batches ? cfg->batches->samples : L->sampler.len(&L->sampler, ds->len);
    L->nbatches = cfg->drop_last ? L->epoch_len / cfg->batch_size : (L->epoch_len + cfg->batch_size - 1) / cfg->batch_size;
    if (cfg->batches) L->nbatches = cfg->batches->nbatches;
    L->nslots = L->cfg.max_workers * cfg->prefetch;
    if (L->nslots < 2) L->nslots = 2;
    L->want = cfg->workers;
    L->order_epoch[0] = L->order_epoch[1] = -1;
    L->hint_epoch = -1;
    size_t on = (size_t)(ds->len > L->epoch_len ? ds->len : L->epoch_len) + 1;
    L->order[0] = malloc(sizeof(int64_t) * on);
    L->order[1] = malloc(sizeof(int64_t) * on);
    for (int p = 0; p < 2 && cfg->batches; p++) {
        L->start[p] = malloc(sizeof(int64_t) * (size_t)(L->nbatches + 1));
        L->width[p] = malloc(sizeof(int64_t) * (size_t)(L->nbatches + 1));
        if (!L->start[p] || !L->width[p]) st = kiln_fail(KILN_ERR_NOMEM, "loader: out of memory");
    }
    L->slots = calloc((size_t)L->nslots, sizeof(slot));
    L->threads = L->cfg.max_workers > 0 ? calloc((size_t)L->cfg.max_workers, sizeof(pthread_t)) : NULL;
    if (!L->order[0] || !L->order[1] || !L->slots || (L->cfg.max_workers > 0 && !L->threads))
        st = kiln_fail(KILN_ERR_NOMEM, "loader: out of memory");
    if (st == KILN_OK) st = make_ring(L);
    if (st == KILN_OK) st = start_threads(L, cfg->workers);
    if (st != KILN_OK) {
        destroy(L);
        return st;
    }
    *out = L;
    return KILN_OK;
}

kiln_status kiln_loader_set_workers(kiln_loader *L, int workers) {
    if (workers < 0 || workers > L->cfg.max_workers || (L->cfg.workers == 0 && workers > 0))
        return kiln_fail(KILN_ERR_INVALID_ARG, "loader: cannot run %d workers (this loader was made for %d..%d)", workers,
                         L->cfg.workers == 0 ? 0 : 1, L->cfg.max_workers);
    pthread_mutex_lock(&L->mu);
    kiln_status st = start_threads(L, workers);
    L->want = workers;
    pthread_cond_broadcast(&L->work);
    pthread_mutex_unlock(&L->mu);
    return st;
}

int kiln_loader_workers(const kiln_loader *L) {
    pthread_mutex_lock((pthread_mutex_t *)&L->mu);
    int w = L->want;
    pthread_mutex_unlock((pthread_mutex_t *)&L->mu);
    return w;
}

/* drops every batch in flight: new claims stop, stale READY slots are freed,
 * FILLING ones once no sample is being loaded; the caller holds the lock */
static void cancel(kiln_loader *L) {
    L->active = 0;
    L->gen++;
    L->a_slot = NULL;
    L->hint_epoch = -1; /* a new position: name its batches again */
    while (L->busy > 0) pthread_cond_wait(&L->idle, &L->mu);
    for (int i = 0; i < L->nslots; i++)
        if (L->slots[i].state == SLOT_READY || L->slots[i].state == SLOT_FILLING) L->slots[i].state = SLOT_FREE;
}

kiln_status kiln_loader_start_epoch(kiln_loader *L, int64_t epoch, int64_t first_batch) {
    if (!L) return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_loader_start_epoch: NULL loader");
    if (epoch < 0 || first_batch < 0 || first_batch > L->nbatches)
        return kiln_fail(KILN_ERR_INVALID_ARG, "loader: cannot start epoch %lld at batch %lld (epoch has %lld batches)",
                         (long long)epoch, (long long)first_batch, (long long)L->nbatches);
    pthread_mutex_lock(&L->mu);
    kiln_status st = KILN_OK;
    int follows = L->started && L->err == KILN_OK && L->active && epoch == L->d_epoch + 1 && first_batch == 0 &&
                  L->d_batch >= L->nbatches;
    if (follows) { /* the work already done for this epoch is kept */
        L->d_epoch = epoch;
        L->d_batch = 0;
        st = ensure_order(L, epoch); /* done already when the workers went on into it */
        if (st != KILN_OK) record_error(L, st, kiln_last_error());
    } else {
        cancel(L);
        st = ensure_order(L, epoch);
        L->d_epoch = L->a_epoch = epoch;
        L->d_batch = L->a_batch = first_batch;
        L->err = KILN_OK;
        L->active = st == KILN_OK;
        L->started = 1;
    }
    pthread_cond_broadcast(&L->work);
    pthread_mutex_unlock(&L->mu);
    return st;
}

/* with 0 workers: the training thread loads batch d_batch itself; the lock is
 * held (no worker competes, and start_epoch cannot run concurrently) */
static int fill_here(kiln_loader *L, slot **out) {
    L->a_slot = NULL;
    L->a_epoch = L->d_epoch;
    L->a_batch = L->d_batch;
    L->active = 1;
    claim c;
    slot *s = NULL;
    while ((!s || s->claimed < s->n) && take(L, &c)) {
        s = c.s;
        send_hints(L, &c); /* the lock is held, but no worker competes here */
        kiln_status st = load(L, &c);
        finish(L, &c, st, st == KILN_OK ? "" : kiln_last_error());
    }
    L->a_slot = NULL;
    *out = s;
    return s != NULL;
}

/* the slot of the batch the consumer waits for, once READY; NULL on an error
 * (L->last set). The caller holds the lock. */
static slot *await(kiln_loader *L) {
    for (;;) {
        int held = 0;
        for (int i = 0; i < L->nslots; i++) {
            slot *c = &L->slots[i];
            if (c->state == SLOT_HELD) held++;
            if (c->state == SLOT_READY && c->gen == L->gen && c->epoch == L->d_epoch && c->batch == L->d_batch) return c;
        }
        if (L->err != KILN_OK) {
            L->last = kiln_fail(L->err, "%s", L->err_msg);
            return NULL;
        }
        if (held == L->nslots) {
            L->last = kiln_fail(KILN_ERR_INVALID_ARG, "loader: all %d batch slots are held; release a batch before "
                                "asking for the next", L->nslots);
            return NULL;
        }
        pthread_cond_wait(&L->ready, &L->mu);
    }
}

int kiln_loader_next(kiln_loader *L, kiln_batch *b) {
    double t0 = kiln_trace_now();
    int rc = 1;
    pthread_mutex_lock(&L->mu);
    if (!L->started) {
        L->last = kiln_fail(KILN_ERR_INVALID_ARG, "loader: kiln_loader_next before kiln_loader_start_epoch");
        rc = -1;
    }
    slot *s = NULL;
    if (rc == 1 && L->d_batch >= L->nbatches) rc = 0;
    if (rc == 1) {
        if (L->cfg.workers == 0) {
            if (L->err == KILN_OK && !fill_here(L, &s))
                L->last = kiln_fail(KILN_ERR_INVALID_ARG, "loader: all %d batch slots are held; release a batch before "
                                    "asking for the next", L->nslots);
            if (L->err != KILN_OK) {
                if (s) s->state = SLOT_FREE;
                s = NULL;
                L->last = kiln_fail(L->err, "%s", L->err_msg);
            }
        } else {
            s = await(L);
        }
        if (s) L->d_batch++;
        else rc = -1;
    }
    if (rc == 1) {
        s->state = SLOT_HELD;
        *b = (kiln_batch){s->x, s->y, s->n, s->batch, s->width, (int)(s - L->slots)};
    }
    double t1 = kiln_trace_now();
    L->wait_s += t1 - t0;
    pthread_mutex_unlock(&L->mu);
    kiln_trace_span("data-wait", "train", t0, t1);
    return rc;
}

void kiln_loader_release(kiln_loader *L, const kiln_batch *b) {
    if (!L || !b) return;
    pthread_mutex_lock(&L->mu);
    if (b->slot >= 0 && b->slot < L->nslots && L->slots[b->slot].state == SLOT_HELD) {
        L->slots[b->slot].state = SLOT_FREE;
        pthread_cond_broadcast(&L->work);
        pthread_cond_broadcast(&L->ready); /* not ready, but a consumer may be waiting on "all held" */
    } else {
        kiln_log(KILN_LOG_WARN, "loader: release of slot %d which is not held; ignored", b->slot);
    }
    pthread_mutex_unlock(&L->mu);
}

int64_t kiln_loader_batches_per_epoch(const kiln_loader *L) { return L->nbatches; }

kiln_status kiln_loader_status(const kiln_loader *L) { return L->last; }

static double locked_double(const kiln_loader *L, const double *p) {
    pthread_mutex_lock((pthread_mutex_t *)&L->mu);
    double v = *p;
    pthread_mutex_unlock((pthread_mutex_t *)&L->mu);
    return v;
}

double kiln_loader_wait_seconds(const kiln_loader *L) { return locked_double(L, &L->wait_s); }

int64_t kiln_loader_skipped(const kiln_loader *L) { return atomic_load((atomic_llong *)&L->skipped); }

int kiln_loader_ring_slots(const kiln_loader *L) { return L->nslots; }
size_t kiln_loader_ring_bytes(const kiln_loader *L) { return (size_t)L->nslots * (L->xb + L->yb); }

void kiln_loader_free(kiln_loader *L) {
    if (L) destroy(L);
}
