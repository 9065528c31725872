/* The batch loader: a ring of preallocated, 64-byte aligned batch slots that
 * persistent worker threads fill in place, handed to the training thread
 * strictly in batch order.
 *
 * Determinism: batch k of epoch e holds samples perm_e[k*bs .. k*bs+n) and
 * sample i of the epoch gets the transform key kiln_rng_key(seed, e, i). Which
 * worker fills a batch, and when, therefore changes nothing.
 *
 * Slot life: FREE -> FILLING (a worker took batch `batch`) -> READY -> HELD
 * (returned by next) -> FREE (release). Work is assigned in batch order, so the
 * batch the consumer waits for is always either FILLING/READY or the next to be
 * assigned, and the ring cannot deadlock unless the caller holds every slot.
 * A new start_epoch bumps `gen`: stale READY slots are freed at once and stale
 * FILLING slots when their worker finishes; it waits for running fills before
 * it rewrites the permutation they read.
 *
 * Errors: a fill that fails (a corrupt file) records the first error's status
 * and message (the message is thread-local, so it is copied) and stops new
 * assignments; the consumer's next() returns -1 with that message set on its
 * own thread, whichever batch it was waiting for, so it never waits forever. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "base/internal/rng.h"
#include "kiln/data.h"

#define MAX_WORKERS 256
/* nice value of the workers: loading must yield to the compute threads */
#define WORKER_NICE 10

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD };

typedef struct slot {
    float *x;
    int32_t *y;
    int64_t batch;
    int64_t n;
    uint64_t gen;
    int state;
    int locked; /* mlock succeeded */
} slot;

struct kiln_loader {
    kiln_dataset *ds;
    kiln_loader_config cfg;
    int64_t numel;      /* floats per sample */
    int64_t nbatches;
    int nslots;
    slot *slots;
    int64_t *perm;      /* this epoch's order; read by workers without the lock */

    pthread_mutex_t mu;
    pthread_cond_t work;  /* workers: a slot is free or an epoch started, or stop */
    pthread_cond_t ready; /* consumer: a slot became READY */
    pthread_cond_t idle;  /* start_epoch: a fill finished */
    pthread_t *threads;
    int nthreads;
    int stop;
    int active;          /* an epoch is running: workers may assign */
    int started;         /* start_epoch was called */
    uint64_t gen;
    int64_t epoch;
    int64_t next_assign; /* next batch for a worker */
    int64_t next_deliver;/* next batch for the consumer */
    int busy;            /* fills running now */
    double wait_s;
    kiln_status err;     /* the first fill error of this epoch (KILN_OK: none) */
    char err_msg[1024];
    kiln_status last;    /* what next() last failed with */
};

kiln_loader_config kiln_loader_defaults(void) {
    kiln_loader_config c;
    memset(&c, 0, sizeof c);
    c.batch_size = 64;
    c.shuffle = 1;
    c.drop_last = 0;
    c.seed = 0;
    c.workers = 2;
    c.prefetch = 2; /* PyTorch's prefetch_factor */
    c.lock_memory = 0;
    return c;
}

/* Uniform integer in [0, range) for draw `i` of stream `key`: Lemire's
 * multiply-shift on 64-bit words with rejection, so it is exactly unbiased; a
 * rejected word moves to the next word of the same counter, then to the next
 * counter (ctr_hi = attempt), all still a pure function of (key, i). */
static uint64_t bounded(uint64_t key, uint64_t i, uint64_t range) {
    uint64_t threshold = (0 - range) % range; /* 2^64 mod range */
    for (uint64_t attempt = 0;; attempt++) {
        kiln_philox_out o = kiln_philox4x32(key, attempt, i);
        for (int w = 0; w < 4; w += 2) {
            uint64_t r = (uint64_t)o.v[w] << 32 | o.v[w + 1];
            unsigned __int128 m = (unsigned __int128)r * range;
            if ((uint64_t)m >= threshold) return (uint64_t)(m >> 64);
        }
    }
}

void kiln_shuffle_indices(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch) {
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    /* "shuf" keeps this stream apart from other users of (seed, epoch) */
    uint64_t key = kiln_rng_key(seed ^ 0x73687566ull, (uint64_t)epoch, 0x5045524dull);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)bounded(key, (uint64_t)i, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Writes batch `batch` of the current epoch into s; perm must be stable. */
static kiln_status fill(kiln_loader *L, slot *s, int64_t batch, int64_t epoch) {
    int64_t bs = L->cfg.batch_size, first = batch * bs, n = L->ds->len - first;
    if (n > bs) n = bs;
    for (int64_t i = 0; i < n; i++) {
        int64_t pos = first + i;
        uint64_t key = kiln_rng_key(L->cfg.seed, (uint64_t)epoch, (uint64_t)pos);
        kiln_status st = L->ds->get(L->ds, L->perm[pos], key, s->x + i * L->numel, s->y + i);
        if (st != KILN_OK) return st;
    }
    s->n = n;
    return KILN_OK;
}

/* the first error of the epoch, kept for the consumer; the caller holds the lock */
static void record_error(kiln_loader *L, kiln_status st) {
    if (L->err != KILN_OK) return;
    L->err = st;
    snprintf(L->err_msg, sizeof L->err_msg, "%s", kiln_last_error());
    L->active = 0; /* no new work: the run is over */
}

static void *worker_main(void *arg) {
    kiln_loader *L = arg;
    /* On Linux the nice value is per thread; best effort, an unprivileged
     * process may always lower its own priority but never fails the run. */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), WORKER_NICE);
    pthread_mutex_lock(&L->mu);
    for (;;) {
        if (L->stop) break;
        slot *s = NULL;
        if (L->active && L->next_assign < L->nbatches)
            for (int i = 0; i < L->nslots; i++)
                if (L->slots[i].state == SLOT_FREE) {
                    s = &L->slots[i];
                    break;
                }
        if (!s) {
            pthread_cond_wait(&L->work, &L->mu); /* sleep: the ring is full or no epoch */
            continue;
        }
        int64_t batch = L->next_assign++;
        uint64_t gen = L->gen;
        int64_t epoch = L->epoch;
        s->state = SLOT_FILLING;
        s->batch = batch;
        s->gen = gen;
        L->busy++;
        pthread_mutex_unlock(&L->mu);
        kiln_status st = fill(L, s, batch, epoch);
        pthread_mutex_lock(&L->mu);
        L->busy--;
        if (st != KILN_OK && s->gen == L->gen) {
            record_error(L, st);
            s->state = SLOT_FREE;
            pthread_cond_broadcast(&L->ready);
        } else if (s->gen == L->gen) {
            s->state = SLOT_READY;
            pthread_cond_broadcast(&L->ready);
        } else {
            s->state = SLOT_FREE; /* the epoch was restarted meanwhile */
            pthread_cond_signal(&L->work);
        }
        if (L->busy == 0) pthread_cond_broadcast(&L->idle);
    }
    pthread_mutex_unlock(&L->mu);
    return NULL;
}

/* a slot holds one batch, which never holds more samples than the dataset */
static int64_t slot_samples(const kiln_loader *L) {
    return L->cfg.batch_size < L->ds->len ? L->cfg.batch_size : (L->ds->len > 0 ? L->ds->len : 1);
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
        size_t xb = (size_t)slot_samples(L) * (size_t)L->numel * sizeof(float);
        size_t yb = (size_t)slot_samples(L) * sizeof(int32_t);
        for (int i = 0; i < L->nslots; i++) {
            slot *s = &L->slots[i];
            if (s->locked) {
                munlock(s->x, xb);
                munlock(s->y, yb);
            }
            if (L->cfg.host_free) {
                L->cfg.host_free(s->x);
                L->cfg.host_free(s->y);
            } else {
                kiln_free(s->x);
                kiln_free(s->y);
            }
        }
        free(L->slots);
    }
    free(L->perm);
    pthread_cond_destroy(&L->work);
    pthread_cond_destroy(&L->ready);
    pthread_cond_destroy(&L->idle);
    pthread_mutex_destroy(&L->mu);
    free(L);
}

kiln_status kiln_loader_new(kiln_dataset *ds, const kiln_loader_config *cfg, kiln_loader **out) {
    *out = NULL;
    if (!ds || !cfg || !ds->get) return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_loader_new: NULL dataset or config");
    if (cfg->batch_size < 1) return kiln_fail(KILN_ERR_INVALID_ARG, "loader: batch size must be >= 1 (got %lld)", (long long)cfg->batch_size);
    if (cfg->workers < 0 || cfg->workers > MAX_WORKERS)
        return kiln_fail(KILN_ERR_INVALID_ARG, "loader: workers must be in 0..%d (got %d)", MAX_WORKERS, cfg->workers);
    if (cfg->prefetch < 1 || cfg->prefetch > 64)
        return kiln_fail(KILN_ERR_INVALID_ARG, "loader: prefetch must be in 1..64 (got %d)", cfg->prefetch);
    if (ds->len < 0) return kiln_fail(KILN_ERR_INVALID_ARG, "loader: dataset %s has negative length", ds->name ? ds->name : "?");
    int64_t numel = kiln_shape_numel(ds->sample_ndim, ds->sample_shape);
    if (numel < 1) return kiln_fail(KILN_ERR_INVALID_ARG, "loader: dataset %s has empty samples", ds->name ? ds->name : "?");

    kiln_loader *L = calloc(1, sizeof *L);
    if (!L) return kiln_fail(KILN_ERR_NOMEM, "loader: out of memory");
    pthread_mutex_init(&L->mu, NULL);
    pthread_cond_init(&L->work, NULL);
    pthread_cond_init(&L->ready, NULL);
    pthread_cond_init(&L->idle, NULL);
    L->ds = ds;
    L->cfg = *cfg;
    L->numel = numel;
    L->nbatches = cfg->drop_last ? ds->len / cfg->batch_size : (ds->len + cfg->batch_size - 1) / cfg->batch_size;
    L->nslots = cfg->workers * cfg->prefetch;
    if (L->nslots < 2) L->nslots = 2;
    L->perm = malloc(sizeof(int64_t) * (size_t)(ds->len > 0 ? ds->len : 1));
    L->slots = calloc((size_t)L->nslots, sizeof(slot));
    if (!L->perm || !L->slots) {
        destroy(L);
        return kiln_fail(KILN_ERR_NOMEM, "loader: out of memory");
    }
    size_t xb = (size_t)slot_samples(L) * (size_t)numel * sizeof(float);
    size_t yb = (size_t)slot_samples(L) * sizeof(int32_t);
    int warned = 0;
    for (int i = 0; i < L->nslots; i++) {
        slot *s = &L->slots[i];
        s->x = cfg->host_alloc ? cfg->host_alloc(xb) : kiln_alloc(xb);
        s->y = cfg->host_alloc ? cfg->host_alloc(yb) : kiln_alloc(yb);
        if (!s->x || !s->y) {
            destroy(L);
            return kiln_fail(KILN_ERR_NOMEM, "loader: cannot allocate %d batch slots of %zu bytes", L->nslots, xb + yb);
        }
        if (cfg->lock_memory && !cfg->host_alloc) { /* page-locked already */
            if (mlock(s->x, xb) == 0) {
                if (mlock(s->y, yb) == 0) s->locked = 1;
                else munlock(s->x, xb);
            }
            if (!s->locked && !warned) {
                kiln_log(KILN_LOG_WARN, "loader: cannot lock %zu bytes of batch buffers in memory (%s); continuing unlocked",
                         (xb + yb) * (size_t)L->nslots, strerror(errno));
                warned = 1;
            }
        }
    }
    if (cfg->workers > 0) {
        L->threads = calloc((size_t)cfg->workers, sizeof(pthread_t));
        if (!L->threads) {
            destroy(L);
            return kiln_fail(KILN_ERR_NOMEM, "loader: out of memory");
        }
        for (int i = 0; i < cfg->workers; i++) {
            int e = pthread_create(&L->threads[i], NULL, worker_main, L);
            if (e != 0) {
                destroy(L);
                return kiln_fail(KILN_ERR_NOMEM, "loader: cannot start worker thread %d: %s", i, strerror(e));
            }
            L->nthreads++;
        }
    }
    *out = L;
    return KILN_OK;
}

kiln_status kiln_loader_start_epoch(kiln_loader *L, int64_t epoch, int64_t first_batch) {
    if (!L) return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_loader_start_epoch: NULL loader");
    if (epoch < 0 || first_batch < 0 || first_batch > L->nbatches)
        return kiln_fail(KILN_ERR_INVALID_ARG, "loader: cannot start epoch %lld at batch %lld (epoch has %lld batches)",
                         (long long)epoch, (long long)first_batch, (long long)L->nbatches);
    pthread_mutex_lock(&L->mu);
    /* cancel: no new assignments, stale work is dropped, running fills finish
     * before the permutation they read is rewritten */
    L->active = 0;
    L->gen++;
    for (int i = 0; i < L->nslots; i++)
        if (L->slots[i].state == SLOT_READY) L->slots[i].state = SLOT_FREE;
    while (L->busy > 0) pthread_cond_wait(&L->idle, &L->mu);
    if (L->cfg.shuffle) kiln_shuffle_indices(L->perm, L->ds->len, L->cfg.seed, epoch);
    else
        for (int64_t i = 0; i < L->ds->len; i++) L->perm[i] = i;
    L->epoch = epoch;
    L->err = KILN_OK;
    L->next_assign = L->next_deliver = first_batch;
    L->active = 1;
    L->started = 1;
    pthread_cond_broadcast(&L->work);
    pthread_mutex_unlock(&L->mu);
    return KILN_OK;
}

int kiln_loader_next(kiln_loader *L, kiln_batch *b) {
    double t0 = now_s();
    int rc = 1;
    pthread_mutex_lock(&L->mu);
    if (!L->started) {
        L->last = kiln_fail(KILN_ERR_INVALID_ARG, "loader: kiln_loader_next before kiln_loader_start_epoch");
        rc = -1;
        goto out;
    }
    if (L->next_deliver >= L->nbatches) {
        rc = 0;
        goto out;
    }
    slot *s = NULL;
    if (L->cfg.workers == 0) {
        for (int i = 0; i < L->nslots && !s; i++)
            if (L->slots[i].state == SLOT_FREE) s = &L->slots[i];
        if (!s) goto all_held;
        /* the lock is kept: no worker competes, and start_epoch cannot run concurrently */
        s->batch = L->next_deliver;
        s->gen = L->gen;
        kiln_status st = fill(L, s, s->batch, L->epoch);
        if (st != KILN_OK) {
            L->last = st;
            rc = -1;
            goto out;
        }
        L->next_assign = L->next_deliver + 1;
    } else {
        for (;;) {
            int held = 0;
            for (int i = 0; i < L->nslots; i++) {
                slot *c = &L->slots[i];
                if (c->state == SLOT_HELD) held++;
                if (c->state == SLOT_READY && c->gen == L->gen && c->batch == L->next_deliver) s = c;
            }
            if (s) break;
            if (L->err != KILN_OK) {
                L->last = kiln_fail(L->err, "%s", L->err_msg);
                rc = -1;
                goto out;
            }
            if (held == L->nslots) goto all_held;
            pthread_cond_wait(&L->ready, &L->mu);
        }
    }
    s->state = SLOT_HELD;
    L->next_deliver++;
    b->x = s->x;
    b->y = s->y;
    b->n = s->n;
    b->index = s->batch;
    b->slot = (int)(s - L->slots);
    goto out;
all_held:
    L->last = kiln_fail(KILN_ERR_INVALID_ARG, "loader: all %d batch slots are held; release a batch before asking for the next",
                        L->nslots);
    rc = -1;
out:
    L->wait_s += now_s() - t0;
    pthread_mutex_unlock(&L->mu);
    return rc;
}

void kiln_loader_release(kiln_loader *L, const kiln_batch *b) {
    if (!L || !b) return;
    pthread_mutex_lock(&L->mu);
    if (b->slot >= 0 && b->slot < L->nslots && L->slots[b->slot].state == SLOT_HELD) {
        L->slots[b->slot].state = SLOT_FREE;
        pthread_cond_signal(&L->work);
        pthread_cond_broadcast(&L->ready); /* not ready, but a consumer may be waiting on "all held" */
    } else {
        kiln_log(KILN_LOG_WARN, "loader: release of slot %d which is not held; ignored", b->slot);
    }
    pthread_mutex_unlock(&L->mu);
}

int64_t kiln_loader_batches_per_epoch(const kiln_loader *L) { return L->nbatches; }

kiln_status kiln_loader_status(const kiln_loader *L) { return L->last; }

double kiln_loader_wait_seconds(const kiln_loader *L) {
    pthread_mutex_lock((pthread_mutex_t *)&L->mu);
    double w = L->wait_s;
    pthread_mutex_unlock((pthread_mutex_t *)&L->mu);
    return w;
}

void kiln_loader_free(kiln_loader *L) {
    if (L) destroy(L);
}
