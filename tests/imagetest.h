/* Helpers shared by the image tests (test_image.c, test_shard.c): files in and
 * out, folders, and the checksum of a loader's epochs. Include after testutil.h. */
#ifndef KILN_IMAGETEST_H
#define KILN_IMAGETEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "kiln/data.h"
#include "testutil.h"

static inline uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)len + 1);
    *n = b ? fread(b, 1, (size_t)len, f) : 0;
    fclose(f);
    return b;
}

static inline void spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n) fprintf(stderr, "cannot write %s\n", path);
    if (f) fclose(f);
}

static inline void mk(const char *p) { CHECK_MSG(mkdir(p, 0777) == 0, "mkdir %s", p); }

/* FNV-1a over `epochs` epochs of a seeded shuffled loader (batch 4): every
 * float's bits and every label; per_epoch (may be NULL) gets each epoch's own
 * hash. *err is set when the loader fails (the message says why). */
static inline uint64_t loader_hash(kiln_dataset *ds, int workers, int epochs, uint64_t *per_epoch, int *err) {
    kiln_loader_config c = kiln_loader_defaults();
    c.batch_size = 4;
    c.workers = workers;
    c.seed = 7;
    kiln_loader *L = NULL;
    uint64_t h = 1469598103934665603ull;
    *err = 0;
    if (kiln_loader_new(ds, &c, &L) != KILN_OK) return *err = 1, 0;
    int64_t numel = kiln_shape_numel(ds->sample_ndim, ds->sample_shape);
    for (int e = 0; e < epochs && !*err; e++) {
        uint64_t he = 1469598103934665603ull;
        kiln_loader_start_epoch(L, e, 0);
        kiln_batch b;
        int rc;
        while ((rc = kiln_loader_next(L, &b)) == 1) {
            for (int64_t i = 0; i < b.n * numel; i++) {
                uint32_t u;
                memcpy(&u, &b.x[i], 4);
                h = (h ^ u) * 1099511628211ull, he = (he ^ u) * 1099511628211ull;
            }
            for (int64_t i = 0; i < b.n; i++) h = (h ^ (uint32_t)b.y[i]) * 1099511628211ull, he = (he ^ (uint32_t)b.y[i]) * 1099511628211ull;
            kiln_loader_release(L, &b);
        }
        if (rc < 0) *err = 1;
        if (per_epoch) per_epoch[e] = he;
    }
    kiln_loader_free(L);
    return h;
}

#endif
