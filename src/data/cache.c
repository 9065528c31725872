/* The decoded-sample cache (internal/cache.h). Samples arrive in shuffled
 * order from many threads, but a shard's records are in index order: each put
 * appends its record to a spill file (an atomic offset, pwrite) and notes
 * where; the put that completes the set copies the records in order into the
 * shard writer (temporary, fsync, rename), opens the result as any shard is
 * opened (checked) and publishes it. Until then every get misses. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "data/internal/cache.h"
#include "data/internal/shard.h"

struct kiln_cache {
    char path[PATH_MAX];
    int64_t len;
    const int32_t *labels;
    kiln_source *src;           /* the complete cache file */
    kiln_shard sh;
    atomic_int ready, failed;
    int spill;                  /* the unlinked spill file (-1: none) */
    atomic_llong spill_pos, stored;
    atomic_uchar *taken;        /* per sample: its first put is under way or done */
    int64_t *off, *size;        /* per sample: its record in the spill file */
};

/* a complete cache file of exactly these samples, every record's size header checked */
static kiln_status load(kiln_cache *c) {
    kiln_status st = kiln_source_open_file(c->path, &c->src);
    if (st == KILN_OK) st = kiln_shard_open(c->src, &c->sh);
    if (st == KILN_OK && (c->sh.kind != KILN_SHARD_DECODED || c->sh.count != c->len))
        st = kiln_fail(KILN_ERR_FORMAT, "%s: holds %lld %s records, not the %lld decoded samples of this data", c->path,
                       (long long)c->sh.count, c->sh.kind ? "decoded" : "encoded", (long long)c->len);
    if (st == KILN_OK) st = kiln_shard_read_index(&c->sh);
    int32_t *lab = st == KILN_OK ? malloc((size_t)c->len * sizeof *lab) : NULL;
    if (st == KILN_OK && !lab) st = kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", c->path);
    if (st == KILN_OK) st = kiln_shard_read_labels(&c->sh, INT32_MAX, lab);
    if (st == KILN_OK && memcmp(lab, c->labels, (size_t)c->len * sizeof *lab) != 0)
        st = kiln_fail(KILN_ERR_FORMAT, "%s: its labels differ from the data's", c->path);
    free(lab);
    kiln_image im;
    for (int64_t i = 0; st == KILN_OK && i < c->len; i++)
        st = kiln_shard_pixels(c->src->map + c->sh.index[i], c->sh.index[i + 1] - c->sh.index[i], c->path, &im);
    if (st != KILN_OK) {
        kiln_shard_close(&c->sh);
        kiln_source_close(c->src);
        c->src = NULL;
    }
    return st;
}

/* an unlinked file in dir for the records of the first epoch: nothing is left behind if the run dies */
static kiln_status open_spill(kiln_cache *c, const char *dir) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return kiln_fail(KILN_ERR_IO, "--cache %s: cannot create the folder: %s", dir, strerror(errno));
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.spill.%ld", c->path, (long)getpid());
    c->spill = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600); /* new: nothing else can be in its place */
    if (c->spill < 0) return kiln_fail(KILN_ERR_IO, "--cache %s: cannot write there: %s", dir, strerror(errno));
    unlink(tmp);
    c->taken = calloc((size_t)c->len, sizeof *c->taken);
    c->off = malloc((size_t)c->len * sizeof *c->off);
    c->size = malloc((size_t)c->len * sizeof *c->size);
    if (!c->taken || !c->off || !c->size) return kiln_fail(KILN_ERR_NOMEM, "--cache %s: out of memory", dir);
    return KILN_OK;
}

kiln_status kiln_cache_open(const char *dir, const char *split, uint64_t key, int64_t len, const int32_t *labels,
                            kiln_cache **out) {
    *out = NULL;
    kiln_cache *c = calloc(1, sizeof *c);
    if (!c) return kiln_fail(KILN_ERR_NOMEM, "--cache %s: out of memory", dir);
    c->spill = -1;
    c->len = len;
    c->labels = labels;
    if (snprintf(c->path, sizeof c->path, "%s/%s-%016llx.kshard", dir, split, (unsigned long long)key) >= (int)sizeof c->path) {
        free(c);
        return kiln_fail(KILN_ERR_INVALID_ARG, "--cache %s: path too long", dir);
    }
    struct stat sb;
    kiln_status st = KILN_OK;
    if (stat(c->path, &sb) == 0) {
        if (load(c) == KILN_OK) {
            atomic_store(&c->ready, 1);
            kiln_log(KILN_LOG_INFO, "cache: reading decoded samples from %s", c->path);
            *out = c;
            return KILN_OK;
        }
        kiln_log(KILN_LOG_WARN, "cache: %s; rebuilding it", kiln_last_error());
        unlink(c->path);
    }
    st = open_spill(c, dir);
    if (st != KILN_OK) {
        kiln_cache_free(c);
        return st;
    }
    kiln_log(KILN_LOG_INFO, "cache: the first epoch writes decoded samples to %s", c->path);
    *out = c;
    return KILN_OK;
}

int kiln_cache_ready(const kiln_cache *c) { return atomic_load_explicit(&c->ready, memory_order_acquire); }

kiln_status kiln_cache_get(const kiln_cache *c, int64_t i, kiln_image *im, const char **name) {
    *name = c->path;
    return kiln_shard_pixels(c->src->map + c->sh.index[i], c->sh.index[i + 1] - c->sh.index[i], c->path, im);
}

static void give_up(kiln_cache *c, const char *why) {
    if (atomic_exchange(&c->failed, 1) == 0) kiln_log(KILN_LOG_WARN, "cache: %s; going on without the cache", why);
}

/* the spill's records, in index order, into the cache file; then it is opened as any cache file */
static void complete(kiln_cache *c) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int64_t total = atomic_load(&c->spill_pos);
    uint8_t *map = total ? mmap(NULL, (size_t)total, PROT_READ, MAP_SHARED, c->spill, 0) : NULL;
    kiln_shard_writer *w = NULL;
    kiln_status st = map == MAP_FAILED ? kiln_fail(KILN_ERR_IO, "%s: cannot map the spill file", c->path)
                                       : kiln_shard_writer_new(c->path, KILN_SHARD_DECODED, c->len, &w);
    for (int64_t i = 0; st == KILN_OK && i < c->len; i++) st = kiln_shard_writer_add(w, c->labels[i], map + c->off[i], c->size[i]);
    if (st == KILN_OK) st = kiln_shard_writer_finish(w);
    else kiln_shard_writer_abort(w);
    if (map && map != MAP_FAILED) munmap(map, (size_t)total);
    if (st == KILN_OK) st = load(c);
    if (st != KILN_OK) {
        give_up(c, kiln_last_error());
        return;
    }
    close(c->spill);
    c->spill = -1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    kiln_log(KILN_LOG_INFO, "cache: wrote %s (%lld samples, %.0f MB, in %.2f s)", c->path, (long long)c->len, total / 1048576.0,
             (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    atomic_store_explicit(&c->ready, 1, memory_order_release);
}

static kiln_status spill_write(kiln_cache *c, const uint8_t *p, int64_t n, int64_t off) {
    while (n > 0) {
        ssize_t r = pwrite(c->spill, p, (size_t)n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return kiln_fail(KILN_ERR_IO, "%s: cannot write its spill file: %s", c->path, r < 0 ? strerror(errno) : "no space");
        p += r, n -= r, off += r;
    }
    return KILN_OK;
}

void kiln_cache_put(kiln_cache *c, int64_t i, const kiln_image *im) {
    if (kiln_cache_ready(c) || atomic_load(&c->failed) || atomic_exchange(&c->taken[i], 1)) return;
    int64_t n = (int64_t)im->w * im->h * im->c;
    uint8_t h[KILN_SHARD_PIXEL_HEADER];
    kiln_shard_pixel_header(im, h);
    int64_t off = atomic_fetch_add(&c->spill_pos, KILN_SHARD_PIXEL_HEADER + n);
    kiln_status st = spill_write(c, h, KILN_SHARD_PIXEL_HEADER, off);
    if (st == KILN_OK) st = spill_write(c, im->px, n, off + KILN_SHARD_PIXEL_HEADER);
    if (st != KILN_OK) {
        give_up(c, kiln_last_error());
        return;
    }
    c->off[i] = off;
    c->size[i] = KILN_SHARD_PIXEL_HEADER + n;
    if (atomic_fetch_add(&c->stored, 1) + 1 == c->len) complete(c);
}

void kiln_cache_free(kiln_cache *c) {
    if (!c) return;
    if (c->src) {
        kiln_shard_close(&c->sh);
        kiln_source_close(c->src);
    }
    if (c->spill >= 0) close(c->spill);
    free(c->taken);
    free(c->off);
    free(c->size);
    free(c);
}
