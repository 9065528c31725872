/* The decoded-sample cache (internal/cache.h). Samples arrive in shuffled
 * order from many threads, but a shard's records are in index order. The
 * first put fixes a slot size (its record's); every record of that size is
 * written straight to its place in the shard's layout (records_off + i *
 * slot) in a spill file, anything else past the slots (an atomic offset).
 * The put that completes the set finishes the shard: when every record sat
 * in its slot and the spill is an unnamed O_TMPFILE, by writing the header,
 * labels and index in front of them and linking the file in (a temporary
 * name, then rename: atomic); otherwise by copying the records in order
 * through the shard writer. Finishing runs in a thread of its own, so no
 * loader waits for the fsync; the result is opened and checked as any cache
 * file, then published; until then every get misses. Its fsync then runs at
 * SCHED_IDLE, beside the next epoch instead of taking cores from it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
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
    int spill;                  /* the spill file, unnamed (-1: none) */
    int tmpfile;                /* it is an O_TMPFILE: it can become the cache file itself */
    int64_t records_off;        /* where the slots start */
    atomic_llong slot, extra;   /* the slot size (0: not yet), the bytes past the slots */
    atomic_int overflow;        /* a record went past the slots */
    atomic_llong stored;
    pthread_t finisher;         /* finishes the file in the background once every sample is in */
    int finishing;
    atomic_uchar *taken;        /* per sample: its first put is under way or done */
    int64_t *off, *size;        /* per sample: its record in the spill file */
};

/* a complete cache file of exactly these samples, every record's size header checked */
static kiln_status load(kiln_cache *c, const char *file) {
    kiln_status st = kiln_source_open_file(file, &c->src);
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
    for (int64_t i = 0; st == KILN_OK && i < c->len; i++) {
        const uint8_t *rec = c->src->map + c->sh.index[i];
        int64_t n = c->sh.index[i + 1] - c->sh.index[i];
        if (!kiln_shard_failed_record(rec, n)) st = kiln_shard_pixels(rec, n, c->path, &im);
    }
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
    c->spill = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
    c->tmpfile = c->spill >= 0;
    if (c->spill < 0 && errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
        return kiln_fail(KILN_ERR_IO, "--cache %s: cannot write there: %s", dir, strerror(errno));
    if (c->spill < 0) { /* a file system without O_TMPFILE: a new file, unlinked at once */
        char tmp[PATH_MAX + 32];
        snprintf(tmp, sizeof tmp, "%s.spill.%ld", c->path, (long)getpid());
        c->spill = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (c->spill < 0) return kiln_fail(KILN_ERR_IO, "--cache %s: cannot write there: %s", dir, strerror(errno));
        unlink(tmp);
    }
    int64_t lo, io;
    kiln_shard_layout(c->len, &lo, &io, &c->records_off);
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
        if (load(c, c->path) == KILN_OK) {
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

/* every record in its slot: the head in front of them */
static kiln_status in_place(kiln_cache *c, int64_t slot) {
    int64_t *index = malloc((size_t)(c->len + 1) * sizeof *index);
    if (!index) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", c->path);
    for (int64_t i = 0; i <= c->len; i++) index[i] = c->records_off + i * slot;
    kiln_status st = kiln_shard_write_head(c->spill, c->path, KILN_SHARD_DECODED, c->len, c->labels, index);
    free(index);
    return st;
}

/* The fsync writes the dirty pages out in the calling thread: at SCHED_IDLE
 * that work takes only what the loader's workers and the compute team leave
 * of the cores, so the epoch reading the cache meanwhile runs as fast as a
 * later one. Best effort: a refusal leaves the thread as it was. */
static void background_priority(void) {
    struct sched_param p = {0};
    (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &p);
}

/* the complete unnamed file, made durable, then linked in as the cache file for later runs */
static kiln_status link_in(kiln_cache *c, const char *proc) {
    kiln_status st = KILN_OK;
    if (fsync(c->spill) != 0) st = kiln_fail(KILN_ERR_IO, "%s: cannot write: %s", c->path, strerror(errno));
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", c->path, (long)getpid());
    unlink(tmp);
    if (st == KILN_OK && linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) != 0)
        st = kiln_fail(KILN_ERR_IO, "%s: cannot link the spill file in: %s", tmp, strerror(errno));
    if (st == KILN_OK && rename(tmp, c->path) != 0) {
        st = kiln_fail(KILN_ERR_IO, "%s: cannot rename %s to it: %s", c->path, tmp, strerror(errno));
        unlink(tmp);
    }
    return st;
}

/* records out of their slots: all copied in index order through the shard writer */
static kiln_status copied(kiln_cache *c, int64_t total) {
    uint8_t *map = mmap(NULL, (size_t)total, PROT_READ, MAP_SHARED, c->spill, 0);
    if (map == MAP_FAILED) return kiln_fail(KILN_ERR_IO, "%s: cannot map the spill file", c->path);
    kiln_shard_writer *w = NULL;
    kiln_status st = kiln_shard_writer_new(c->path, KILN_SHARD_DECODED, c->len, &w);
    for (int64_t i = 0; st == KILN_OK && i < c->len; i++) st = kiln_shard_writer_add(w, c->labels[i], map + c->off[i], c->size[i]);
    if (st == KILN_OK) st = kiln_shard_writer_finish(w);
    else kiln_shard_writer_abort(w);
    munmap(map, (size_t)total);
    return st;
}

/* background: in the finisher thread (not a loader's, which finishes it when no thread starts) */
static void complete(kiln_cache *c, int background) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int64_t slot = atomic_load(&c->slot), total = c->records_off + c->len * slot + atomic_load(&c->extra);
    int fast = c->tmpfile && !atomic_load(&c->overflow);
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", c->spill);
    /* in place: the unnamed file is read at once (through /proc), and made durable and
     * named while the next epoch already reads it (the fsync of 700 MB took 0.55 s,
     * in which every sample missed the cache and was decoded again) */
    kiln_status st = fast ? in_place(c, slot) : KILN_OK;
    if (fast && st == KILN_OK && (st = load(c, proc)) == KILN_OK) {
        atomic_store_explicit(&c->ready, 1, memory_order_release);
        if (background) background_priority();
        if ((st = link_in(c, proc)) != KILN_OK)
            kiln_log(KILN_LOG_WARN, "cache: %s; this run reads it, later runs will build it again", kiln_last_error());
        st = KILN_OK;
    } else if (fast) { /* e.g. no /proc: the records are still where the copy reads them */
        kiln_log(KILN_LOG_DEBUG, "cache: %s; copying instead", kiln_last_error());
        fast = 0;
    }
    if (!fast && (st = copied(c, total)) == KILN_OK) st = load(c, c->path);
    if (st != KILN_OK) {
        give_up(c, kiln_last_error());
        return;
    }
    close(c->spill);
    c->spill = -1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    kiln_log(KILN_LOG_INFO, "cache: wrote %s (%lld samples, %.0f MB, %s, in %.2f s)", c->path, (long long)c->len,
             total / 1048576.0, fast ? "in place" : "copied in order",
             (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    atomic_store_explicit(&c->ready, 1, memory_order_release);
}

static void *finish(void *c) {
    complete(c, 1);
    return NULL;
}

/* sample i's record: the 12-byte header h, then n - 12 bytes of body */
static void put_record(kiln_cache *c, int64_t i, const uint8_t *h, const void *body, int64_t n) {
    if (kiln_cache_ready(c) || atomic_load(&c->failed) || atomic_exchange(&c->taken[i], 1)) return;
    long long first = 0;
    atomic_compare_exchange_strong(&c->slot, &first, n); /* the first put fixes the slot size */
    int64_t slot = atomic_load(&c->slot);
    int64_t off = c->records_off + i * slot;
    if (n != slot) {
        atomic_store(&c->overflow, 1);
        off = c->records_off + c->len * slot + atomic_fetch_add(&c->extra, n);
    }
    kiln_status st = kiln_pwrite_all(c->spill, c->path, h, KILN_SHARD_PIXEL_HEADER, off);
    if (st == KILN_OK) st = kiln_pwrite_all(c->spill, c->path, body, n - KILN_SHARD_PIXEL_HEADER, off + KILN_SHARD_PIXEL_HEADER);
    if (st != KILN_OK) {
        give_up(c, kiln_last_error());
        return;
    }
    c->off[i] = off;
    c->size[i] = n;
    if (atomic_fetch_add(&c->stored, 1) + 1 != c->len) return;
    /* the fsync and checks take a while: off the loader's path; gets miss until the file is ready */
    if (pthread_create(&c->finisher, NULL, finish, c) == 0) c->finishing = 1;
    else complete(c, 0);
}

void kiln_cache_put(kiln_cache *c, int64_t i, const kiln_image *im) {
    uint8_t h[KILN_SHARD_PIXEL_HEADER];
    kiln_shard_pixel_header(im, h);
    put_record(c, i, h, im->px, KILN_SHARD_PIXEL_HEADER + (int64_t)im->w * im->h * im->c);
}

void kiln_cache_put_failure(kiln_cache *c, int64_t i, const char *message) {
    const uint8_t h[KILN_SHARD_PIXEL_HEADER] = {0};
    size_t n = strnlen(message, KILN_SHARD_MAX_MESSAGE);
    put_record(c, i, h, message, KILN_SHARD_PIXEL_HEADER + (int64_t)n);
}

void kiln_cache_free(kiln_cache *c) {
    if (!c) return;
    if (c->finishing) pthread_join(c->finisher, NULL);
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
