/* The loader benchmark (the guide's "dataloading benchmark"): fetch batches as
 * fast as the loader makes them, with no training step between, and report
 * images per second. Epochs wrap, so a small dataset still gives a long
 * measurement; the warm-up batches let workers start and the ring fill, so the
 * figure is the steady rate, not the start-up cost. */
#include <time.h>
#include "kiln/data.h"

/* steady-state timing when the caller gives no batch count: ~2 s or 200 batches */
#define AUTO_BATCHES 200
#define AUTO_SECONDS 2.0

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* the next batch, starting a new epoch when one ends; *n gets its sample count */
static kiln_status next_batch(kiln_loader *L, int64_t *epoch, int64_t *n) {
    kiln_batch b;
    int r = kiln_loader_next(L, &b);
    if (r == 0) {
        kiln_status st = kiln_loader_start_epoch(L, ++*epoch, 0);
        if (st != KILN_OK) return st;
        r = kiln_loader_next(L, &b);
    }
    if (r < 0) return kiln_loader_status(L);
    if (r == 0) return kiln_fail(KILN_ERR_INVALID_ARG, "bench loader: an epoch gave no batch");
    *n = b.n;
    kiln_loader_release(L, &b);
    return KILN_OK;
}

/* times `batches` fetches (0: until AUTO_SECONDS or AUTO_BATCHES) */
static kiln_status timed(kiln_loader *L, int64_t *epoch, int64_t batches, double *images_per_s, int64_t *done) {
    int64_t images = 0, k = 0;
    double t0 = now_s(), dt = 0;
    for (; batches > 0 ? k < batches : (k < AUTO_BATCHES && dt < AUTO_SECONDS); k++) {
        int64_t n = 0;
        kiln_status st = next_batch(L, epoch, &n);
        if (st != KILN_OK) return st;
        images += n;
        dt = now_s() - t0;
    }
    *images_per_s = dt > 0 ? (double)images / dt : 0;
    *done = k;
    return KILN_OK;
}

kiln_status kiln_loader_bench(kiln_dataset *ds, const kiln_loader_config *cfg, int64_t warmup, int64_t batches,
                              double *images_per_s, int64_t *measured) {
    if (!images_per_s || warmup < 0 || batches < 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "bench loader: warm-up and batch counts must be >= 0");
    *images_per_s = 0;
    kiln_loader *L = NULL;
    kiln_status st = kiln_loader_new(ds, cfg, &L);
    if (st != KILN_OK) return st;
    if (kiln_loader_batches_per_epoch(L) < 1) {
        kiln_loader_free(L);
        return kiln_fail(KILN_ERR_INVALID_ARG, "bench loader: %s has no full batch", ds->name ? ds->name : "the dataset");
    }
    int64_t epoch = 0, n = 0, done = 0;
    st = kiln_loader_start_epoch(L, epoch, 0);
    for (int64_t i = 0; st == KILN_OK && i < warmup; i++) st = next_batch(L, &epoch, &n);
    if (st == KILN_OK) st = timed(L, &epoch, batches, images_per_s, &done);
    if (measured) *measured = done;
    kiln_loader_free(L);
    return st;
}

kiln_status kiln_loader_bench_epochs(kiln_dataset *ds, const kiln_loader_config *cfg, int64_t epochs, double *images_per_s,
                                     int64_t *batches) {
    if (epochs < 1) return kiln_fail(KILN_ERR_INVALID_ARG, "bench loader: --epochs must be >= 1");
    kiln_loader *L = NULL;
    kiln_status st = kiln_loader_new(ds, cfg, &L);
    for (int64_t e = 0; st == KILN_OK && e < epochs; e++) {
        int64_t images = 0, k = 0;
        double t0 = now_s();
        kiln_batch b;
        int r = 0;
        if ((st = kiln_loader_start_epoch(L, e, 0)) != KILN_OK) break;
        while ((r = kiln_loader_next(L, &b)) == 1) {
            images += b.n, k++;
            kiln_loader_release(L, &b);
        }
        if (r < 0) st = kiln_loader_status(L);
        double dt = now_s() - t0;
        images_per_s[e] = dt > 0 ? (double)images / dt : 0;
        batches[e] = k;
    }
    kiln_loader_free(L);
    return st;
}
