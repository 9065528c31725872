/* The loader's scheduling: prefetch across the epoch boundary, samplers
 * (sequential, random, distributed by rank), --bad-samples skip, changing
 * the worker count mid-run, several labels per sample, the will_need hint,
 * and the trace recorder. Batches are compared with a 0-worker reference, so
 * any scheduling bug that changes a batch shows. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/internal/trace.h"
#include "kiln/data.h"
#include "kiln/trace.h"
#include "train/internal/auto_workers.h"
#include "testutil.h"

#define N 157
#define NUMEL 5
#define LABELS 3
#define BS 8
#define NB ((N + BS - 1) / BS)

static atomic_int g_gets;         /* gets served */
static atomic_int g_slow_us;
static atomic_int g_bad_every;    /* > 0: index % g_bad_every == 1 is corrupt */
static atomic_int g_io_fail;      /* 1: every get is an I/O error */
static atomic_int g_all_bad;      /* 1: every sample is corrupt */
static atomic_llong g_hinted;     /* samples named by will_need */
static uint64_t g_salt;           /* random per run: samples are never a fixed pattern */

static kiln_status syn_get(const kiln_dataset *ds, int64_t index, uint64_t key, float *x, int32_t *y) {
    (void)ds;
    atomic_fetch_add(&g_gets, 1);
    if (g_slow_us) usleep((useconds_t)g_slow_us);
    if (g_io_fail) return kiln_fail(KILN_ERR_IO, "http://loopback/sample-%lld: connection refused", (long long)index);
    if (g_all_bad || (g_bad_every && index % g_bad_every == 1))
        return kiln_fail(KILN_ERR_FORMAT, "sample-%lld.jpg: corrupt JPEG", (long long)index);
    for (int j = 0; j < NUMEL; j++) x[j] = (float)((index * 7919 + (int64_t)(g_salt % 1000) + j) % 100003) + (float)(key >> 44);
    for (int j = 0; j < LABELS; j++) y[j] = (int32_t)(index * LABELS + j);
    return KILN_OK;
}

static void syn_will_need(const kiln_dataset *ds, const int64_t *index, int64_t n) {
    (void)ds;
    (void)index;
    atomic_fetch_add(&g_hinted, n);
}

static kiln_dataset g_syn = {"synthetic", N, 1, {NUMEL}, 10, LABELS, syn_get, NULL, syn_will_need, NULL, NULL, NULL};

typedef struct {
    int64_t nb, n[NB * 2];
    float x[NB * 2 * BS * NUMEL];
    int32_t y[NB * 2 * BS * LABELS];
} rec;

/* epoch e from its start into r (appending), with a pause per batch */
static int take_epoch(kiln_loader *L, int64_t e, rec *r, int pause_us) {
    if (kiln_loader_start_epoch(L, e, 0) != KILN_OK) return -1;
    kiln_batch b;
    int rc;
    while ((rc = kiln_loader_next(L, &b)) == 1) {
        if (r->nb >= NB * 2 || b.n > BS) return -2;
        r->n[r->nb] = b.n;
        memcpy(r->x + r->nb * BS * NUMEL, b.x, sizeof(float) * (size_t)(b.n * NUMEL));
        memcpy(r->y + r->nb * BS * LABELS, b.y, sizeof(int32_t) * (size_t)(b.n * LABELS));
        r->nb++;
        kiln_loader_release(L, &b);
        if (pause_us) usleep((useconds_t)pause_us);
    }
    return rc;
}

static int same(const rec *a, const rec *b) { return memcmp(a, b, sizeof *a) == 0; }

static rec g_ref, g_got;

static int two_epochs(const kiln_loader_config *c, rec *r, int pause_us) {
    memset(r, 0, sizeof *r);
    kiln_loader *L = NULL;
    if (kiln_loader_new(&g_syn, c, &L) != KILN_OK) return -1;
    int rc = take_epoch(L, 3, r, pause_us);
    if (rc == 0) rc = take_epoch(L, 4, r, pause_us);
    kiln_loader_free(L);
    return rc;
}

/* the workers go on into the next epoch before start_epoch asks for it, and
 * the batches are those a fresh start would give */
static void test_next_epoch(void) {
    kiln_loader_config c = kiln_loader_defaults();
    c.batch_size = BS;
    c.seed = g_salt;
    c.workers = 0;
    CHECK(two_epochs(&c, &g_ref, 0) == 0 && g_ref.nb == 2 * NB);
    for (int w = 1; w <= 3; w++)
        for (int ne = 0; ne <= 1; ne++) {
            c.workers = w;
            c.next_epoch = ne;
            CHECK_MSG(two_epochs(&c, &g_got, 50) == 0 && same(&g_got, &g_ref), "workers %d next_epoch %d", w, ne);
        }
    /* prefetch crosses the boundary: after the last batch of epoch 3, gets of epoch 4 happen before it starts */
    c.workers = 2;
    c.next_epoch = 1;
    kiln_loader *L = NULL;
    int start = atomic_load(&g_gets);
    CHECK_OK(kiln_loader_new(&g_syn, &c, &L));
    if (!L) return;
    memset(&g_got, 0, sizeof g_got);
    CHECK(take_epoch(L, 3, &g_got, 0) == 0);
    /* counted from the loader's start: the workers may be done with the early
     * gets before the last batch is taken, so a count from here can stay flat */
    for (int t = 0; t < 200 && atomic_load(&g_gets) - start <= N; t++) usleep(10000);
    CHECK_MSG(atomic_load(&g_gets) - start > N, "no sample of the next epoch was loaded early");
    CHECK(take_epoch(L, 4, &g_got, 0) == 0 && same(&g_got, &g_ref));
    /* a jump elsewhere (a resume) drops that work and is still exact */
    memset(&g_got, 0, sizeof g_got);
    CHECK(take_epoch(L, 3, &g_got, 0) == 0);
    CHECK(take_epoch(L, 4, &g_got, 0) == 0 && same(&g_got, &g_ref));
    kiln_loader_free(L);
    /* without it, nothing is loaded between epochs */
    c.next_epoch = 0;
    CHECK_OK(kiln_loader_new(&g_syn, &c, &L));
    if (!L) return;
    memset(&g_got, 0, sizeof g_got);
    CHECK(take_epoch(L, 3, &g_got, 0) == 0);
    usleep(20000);
    int before = atomic_load(&g_gets);
    usleep(50000);
    CHECK(atomic_load(&g_gets) == before);
    kiln_loader_free(L);
}

/* set_workers between batches changes no batch; parked workers come back */
static void test_set_workers(void) {
    kiln_loader_config c = kiln_loader_defaults();
    c.batch_size = BS;
    c.seed = g_salt;
    c.workers = 1;
    c.max_workers = 3;
    kiln_loader *L = NULL;
    CHECK_OK(kiln_loader_new(&g_syn, &c, &L));
    if (!L) return;
    CHECK(kiln_loader_ring_slots(L) == 6);
    CHECK(kiln_loader_ring_bytes(L) == 6 * (size_t)BS * (NUMEL * sizeof(float) + LABELS * sizeof(int32_t)));
    memset(&g_got, 0, sizeof g_got);
    CHECK_OK(kiln_loader_start_epoch(L, 3, 0));
    kiln_batch b;
    int k = 0, rc;
    int plan[] = {3, 1, 2, 0 /* refused: made with workers */, 3};
    while ((rc = kiln_loader_next(L, &b)) == 1) {
        memcpy(g_got.x + g_got.nb * BS * NUMEL, b.x, sizeof(float) * (size_t)(b.n * NUMEL));
        memcpy(g_got.y + g_got.nb * BS * LABELS, b.y, sizeof(int32_t) * (size_t)(b.n * LABELS));
        g_got.n[g_got.nb++] = b.n;
        kiln_loader_release(L, &b);
        if (k % 4 == 0 && k / 4 < 5) {
            int w = plan[k / 4];
            kiln_status st = kiln_loader_set_workers(L, w);
            CHECK(w == 0 ? st == KILN_OK : st == KILN_OK && kiln_loader_workers(L) == w);
        }
        k++;
        if (kiln_loader_workers(L) == 0) CHECK_OK(kiln_loader_set_workers(L, 2)); /* 0 parks them all: bring them back */
    }
    CHECK(rc == 0);
    CHECK(take_epoch(L, 4, &g_got, 0) == 0 && same(&g_got, &g_ref));
    CHECK(kiln_loader_set_workers(L, 4) == KILN_ERR_INVALID_ARG);
    kiln_loader_free(L);
    c.workers = 0;
    CHECK_OK(kiln_loader_new(&g_syn, &c, &L));
    if (L) CHECK(kiln_loader_set_workers(L, 1) == KILN_ERR_INVALID_ARG);
    kiln_loader_free(L);
}

/* DistributedSampler: the ranks' shares are disjoint and cover the epoch,
 * padding repeats its start, every rank sees the same permutation */
static void test_distributed(void) {
    for (int shuffle = 0; shuffle <= 1; shuffle++)
        for (int world = 2; world <= 4; world++)
            for (int drop = 0; drop <= 1; drop++) {
                int seen[N] = {0};
                int64_t total = 0, per = drop ? N / world : (N + world - 1) / world;
                int64_t full[N];
                if (shuffle) kiln_shuffle_indices(full, N, g_salt, 6);
                else
                    for (int64_t i = 0; i < N; i++) full[i] = i;
                int ok = 1;
                for (int rank = 0; rank < world; rank++) {
                    kiln_loader_config c = kiln_loader_defaults();
                    c.shuffle = shuffle;
                    c.seed = g_salt;
                    c.world = world;
                    c.rank = rank;
                    c.drop_last = drop;
                    kiln_sampler s = kiln_sampler_of(&c);
                    int64_t out[N];
                    CHECK(s.len(&s, N) == per);
                    CHECK_OK(s.order(&s, N, 6, out));
                    for (int64_t k = 0; k < per; k++) {
                        ok &= out[k] == full[(rank + k * world) % N];
                        seen[out[k]]++;
                        total++;
                    }
                }
                int covered = 1, twice = 0;
                for (int i = 0; i < N; i++) {
                    if (!drop && seen[i] == 0) covered = 0;
                    twice += seen[i] > 1;
                }
                CHECK_MSG(ok && covered && total == per * world && twice == (drop ? 0 : (int)(per * world - N)),
                          "shuffle %d world %d drop %d", shuffle, world, drop);
            }
    kiln_loader_config c = kiln_loader_defaults();
    c.world = 3;
    c.rank = 3;
    kiln_loader *L = NULL;
    CHECK(kiln_loader_new(&g_syn, &c, &L) == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "rank 3"));
}

/* skip: a corrupt sample becomes the next readable one, batches keep their
 * size and match across worker counts; an I/O error is never skipped */
static void test_skip_bad(void) {
    rec *ref = calloc(1, sizeof *ref), *got = calloc(1, sizeof *got);
    if (!ref || !got) return;
    kiln_loader_config c = kiln_loader_defaults();
    c.batch_size = BS;
    c.seed = g_salt;
    c.skip_bad = 1;
    c.next_epoch = 0; /* the count is of this epoch's samples only */
    atomic_store(&g_bad_every, 10);
    for (int w = 0; w <= 2; w++) {
        c.workers = w;
        kiln_loader *L = NULL;
        CHECK_OK(kiln_loader_new(&g_syn, &c, &L));
        if (!L) continue;
        memset(got, 0, sizeof *got);
        CHECK(take_epoch(L, 0, got, 0) == 0 && got->nb == NB);
        int sizes = 1, clean = 1;
        for (int64_t k = 0; k < got->nb; k++) sizes &= got->n[k] == (k == NB - 1 ? N - (NB - 1) * BS : BS);
        for (int64_t i = 0; i < N; i++) clean &= (got->y[i * LABELS] / LABELS) % 10 != 1;
        CHECK_MSG(sizes && clean, "workers %d", w);
        CHECK_MSG(kiln_loader_skipped(L) == (N + 8) / 10, "workers %d: %lld skipped", w, (long long)kiln_loader_skipped(L));
        if (w == 0) memcpy(ref, got, sizeof *ref);
        else CHECK_MSG(same(got, ref), "skip with %d workers differs from 0", w);
        kiln_loader_free(L);
    }
    /* every sample bad: skip gives up after a run of them, naming one */
    atomic_store(&g_bad_every, 0);
    atomic_store(&g_all_bad, 1);
    kiln_loader *L = NULL;
    CHECK_OK(kiln_loader_new(&g_syn, &c, &L));
    if (L) {
        kiln_batch b;
        CHECK_OK(kiln_loader_start_epoch(L, 0, 0));
        CHECK(kiln_loader_next(L, &b) < 0 && kiln_loader_status(L) == KILN_ERR_FORMAT &&
              strstr(kiln_last_error(), "corrupt JPEG") && strstr(kiln_last_error(), "gives up"));
        kiln_loader_free(L);
    }
    atomic_store(&g_all_bad, 0);
    /* an I/O error (a server gone) fails at once, even with skip */
    atomic_store(&g_io_fail, 1);
    c.workers = 2;
    CHECK_OK(kiln_loader_new(&g_syn, &c, &L));
    if (L) {
        kiln_batch b;
        CHECK_OK(kiln_loader_start_epoch(L, 0, 0));
        CHECK(kiln_loader_next(L, &b) < 0 && kiln_loader_status(L) == KILN_ERR_IO && strstr(kiln_last_error(), "connection refused"));
        CHECK(kiln_loader_skipped(L) == 0);
        kiln_loader_free(L);
    }
    atomic_store(&g_io_fail, 0);
    free(ref);
    free(got);
}

/* every batch's samples are named to the dataset, with or without workers */
static void test_will_need(void) {
    for (int w = 0; w <= 2; w += 2) {
        kiln_loader_config c = kiln_loader_defaults();
        c.batch_size = BS;
        c.workers = w;
        c.next_epoch = 0;
        atomic_store(&g_hinted, 0);
        memset(&g_got, 0, sizeof g_got);
        kiln_loader *L = NULL;
        CHECK_OK(kiln_loader_new(&g_syn, &c, &L));
        if (!L) return;
        CHECK(take_epoch(L, 0, &g_got, 0) == 0);
        CHECK_MSG(atomic_load(&g_hinted) == N, "%d workers: %lld hinted", w, (long long)atomic_load(&g_hinted));
        kiln_loader_free(L);
    }
}

/* the trace: valid JSON (checked by the shell test) with spans from every thread */
static void *span_thread(void *arg) {
    (void)arg;
    kiln_trace_thread("helper thread");
    double t = kiln_trace_now();
    kiln_trace_span("decode", "loader", t, t + 1e-4);
    return NULL;
}

static void test_trace(void) {
    char path[] = "/tmp/kiln_test_trace_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return;
    close(fd);
    CHECK_OK(kiln_trace_start(path));
    CHECK(kiln_trace_start(path) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_trace_on());
    kiln_trace_thread("main");
    double t = kiln_trace_now();
    kiln_trace_span("forward", "train", t, t + 2e-3);
    pthread_t th;
    pthread_create(&th, NULL, span_thread, NULL);
    pthread_join(th, NULL);
    long long n = 0;
    CHECK_OK(kiln_trace_stop(&n));
    CHECK(n == 2 && !kiln_trace_on());
    FILE *f = fopen(path, "r");
    char buf[4096] = {0};
    if (f) {
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        buf[got] = 0;
        fclose(f);
    }
    CHECK_MSG(strstr(buf, "\"traceEvents\"") && strstr(buf, "\"name\":\"forward\"") && strstr(buf, "\"helper thread\"") &&
              strstr(buf, "\"ph\":\"X\"") && strstr(buf, "\"dur\":2000"), "%s", buf);
    kiln_trace_span("late", "train", t, t); /* off: not kept, no crash */
    remove(path);
    CHECK(kiln_trace_start("/nonexistent-dir/x.json") == KILN_ERR_IO && strstr(kiln_last_error(), "/nonexistent-dir/x.json"));
}

/* --workers auto's decisions on made-up measurements: (wait, step) seconds so far */
static void test_auto_workers(void) {
    kiln_loader_config c = kiln_loader_defaults();
    c.batch_size = BS;
    char why[256];
    kiln_auto_workers a;
    kiln_auto_workers_begin(&a, 4, why, sizeof why, &c);
    CHECK(c.workers == 1 && c.max_workers == 4);
    kiln_loader *L = NULL;
    CHECK_OK(kiln_loader_new(&g_syn, &c, &L));
    if (!L) return;
    double w = 0, s = 0;
    int64_t b = 0;
    /* feeds batches until the next check, each with `wait` seconds of waiting per second of steps */
#define FEED(wait) for (int64_t end = a.next_check; b <= end; b++) { w += (wait) * 0.01; s += 0.01; kiln_auto_workers_step(&a, L, b, w, s); }
    FEED(0.5);  /* start-up: nothing decided */
    CHECK(kiln_loader_workers(L) == 1);
    FEED(0.25); /* 20% waiting: one more */
    CHECK_MSG(kiln_loader_workers(L) == 2, "%d: %s", kiln_loader_workers(L), why);
    FEED(0.05); /* better: 4.8%, still high: one more */
    CHECK_MSG(kiln_loader_workers(L) == 3, "%d: %s", kiln_loader_workers(L), why);
    FEED(0.049); /* no better: taken back, and no more tried */
    CHECK_MSG(kiln_loader_workers(L) == 2 && a.gave_up && strstr(why, "taken back"), "%d: %s", kiln_loader_workers(L), why);
    FEED(0.3);
    CHECK(kiln_loader_workers(L) == 2 && a.decided && strstr(why, "kept"));
    kiln_loader_free(L);

    /* low from the start: one worker; the watch goes on and adds one when the wait rises later */
    c = kiln_loader_defaults();
    c.batch_size = BS;
    kiln_auto_workers_begin(&a, 2, why, sizeof why, &c);
    CHECK_OK(kiln_loader_new(&g_syn, &c, &L));
    if (!L) return;
    w = s = 0;
    b = 0;
    FEED(0.001);
    FEED(0.001);
    CHECK_MSG(kiln_loader_workers(L) == 1 && a.decided && strstr(why, "0.1% with 1: low enough"), "%s", why);
    FEED(0.1);
    CHECK_MSG(kiln_loader_workers(L) == 2, "the watch did not add a worker: %s", why);
    FEED(0.03); /* it helped (2.9%, from 9.1%) but is still high: at the most already (2 cores) */
    CHECK_MSG(kiln_loader_workers(L) == 2, "%s", why);
    kiln_loader_free(L);
#undef FEED
    /* the reasons never overrun their buffer */
    char tiny[8];
    c = kiln_loader_defaults();
    kiln_auto_workers_begin(&a, 2, tiny, sizeof tiny, &c);
    CHECK_OK(kiln_loader_new(&g_syn, &c, &L));
    if (L) {
        for (int64_t k = 0; k < 400; k++) kiln_auto_workers_step(&a, L, k, (double)k, (double)k);
        kiln_auto_workers_end(&a, L);
        CHECK(strlen(tiny) < sizeof tiny);
        kiln_loader_free(L);
    }
}

int main(void) {
    FILE *r = fopen("/dev/urandom", "rb");
    if (!r || fread(&g_salt, sizeof g_salt, 1, r) != 1) g_salt = (uint64_t)getpid();
    if (r) fclose(r);
    g_salt &= 0xffffffffull;
    printf("test_loader: salt %llu\n", (unsigned long long)g_salt);
    test_next_epoch();
    test_set_workers();
    test_distributed();
    test_skip_bad();
    test_will_need();
    test_auto_workers();
    test_trace();
    return tu_finish("test_loader");
}
