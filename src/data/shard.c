/* The shard format (internal/shard.h): reading a header, the label column and
 * the index through a source, each checked before use so a corrupt or
 * truncated shard is an error naming it, never a wild read; and writing one
 * atomically (a temporary, fsync, rename). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/internal/file.h"
#include "data/internal/shard.h"

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static int64_t le64(const uint8_t *p) { return (int64_t)((uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32); }
static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i);
}
static void put64(uint8_t *p, int64_t v) {
    put32(p, (uint32_t)(uint64_t)v);
    put32(p + 4, (uint32_t)((uint64_t)v >> 32));
}

void kiln_shard_layout(int64_t count, int64_t *labels, int64_t *index, int64_t *records) {
    *labels = KILN_SHARD_HEADER;
    *index = (KILN_SHARD_HEADER + 4 * count + 7) / 8 * 8;
    *records = *index + 8 * (count + 1);
}

kiln_status kiln_shard_open(kiln_source *src, kiln_shard *sh) {
    memset(sh, 0, sizeof *sh);
    sh->src = src;
    uint8_t h[KILN_SHARD_HEADER];
    if (src->size < KILN_SHARD_HEADER)
        return kiln_fail(KILN_ERR_FORMAT, "%s: %lld bytes, shorter than a shard's %d-byte header: truncated or not a shard",
                         src->name, (long long)src->size, KILN_SHARD_HEADER);
    kiln_status st = kiln_source_read(src, 0, KILN_SHARD_HEADER, h);
    if (st != KILN_OK) return st;
    if (memcmp(h, KILN_SHARD_MAGIC, 8) != 0) return kiln_fail(KILN_ERR_FORMAT, "%s: not a kiln shard (bad magic)", src->name);
    if (le32(h + 8) != KILN_SHARD_VERSION)
        return kiln_fail(KILN_ERR_FORMAT, "%s: shard version %u; this kiln reads version %u", src->name, le32(h + 8),
                         KILN_SHARD_VERSION);
    uint32_t kind = le32(h + 12);
    int64_t count = le64(h + 16), lo, io, ro;
    if (kind > KILN_SHARD_DECODED) return kiln_fail(KILN_ERR_FORMAT, "%s: unknown record kind %u", src->name, kind);
    if (count < 1 || count > KILN_SHARD_MAX_COUNT)
        return kiln_fail(KILN_ERR_FORMAT, "%s: %lld records; a shard holds 1..%lld", src->name, (long long)count,
                         (long long)KILN_SHARD_MAX_COUNT);
    kiln_shard_layout(count, &lo, &io, &ro);
    if (le64(h + 24) != lo || le64(h + 32) != io || le64(h + 40) != ro)
        return kiln_fail(KILN_ERR_FORMAT, "%s: its header's offsets do not match %lld records: corrupt", src->name, (long long)count);
    if (le64(h + 48) != src->size)
        return kiln_fail(KILN_ERR_FORMAT, "%s: %lld bytes, but its header says %lld: truncated or corrupt", src->name,
                         (long long)src->size, (long long)le64(h + 48));
    if (src->size < ro) return kiln_fail(KILN_ERR_FORMAT, "%s: ends inside its index: truncated", src->name);
    *sh = (kiln_shard){src, (int)kind, count, lo, io, ro, NULL};
    return KILN_OK;
}

kiln_status kiln_shard_read_labels(const kiln_shard *sh, int num_classes, int32_t *labels) {
    uint8_t *raw = (uint8_t *)labels; /* read in place, then decoded from little-endian */
    kiln_status st = kiln_source_read(sh->src, sh->labels_off, 4 * sh->count, raw);
    for (int64_t i = 0; st == KILN_OK && i < sh->count; i++) {
        uint32_t v = le32(raw + 4 * i);
        if (v >= (uint32_t)num_classes)
            return kiln_fail(KILN_ERR_FORMAT, "%s: record %lld has label %d; the manifest names %d classes", sh->src->name,
                             (long long)i, (int32_t)v, num_classes);
        labels[i] = (int32_t)v;
    }
    return st;
}

kiln_status kiln_shard_read_index(kiln_shard *sh) {
    int64_t n = sh->count + 1;
    int64_t *ix = malloc((size_t)n * sizeof *ix);
    if (!ix) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory for its index", sh->src->name);
    kiln_status st = kiln_source_read(sh->src, sh->index_off, 8 * n, ix);
    for (int64_t i = 0; st == KILN_OK && i < n; i++) {
        ix[i] = le64((const uint8_t *)&ix[i]);
        int64_t want = i == 0 ? sh->records_off : i == n - 1 ? sh->src->size : -1;
        if ((want >= 0 && ix[i] != want) || (i > 0 && ix[i] < ix[i - 1]) || ix[i] > sh->src->size)
            st = kiln_fail(KILN_ERR_FORMAT, "%s: index entry %lld (%lld) is out of order or outside the file: corrupt", sh->src->name,
                           (long long)i, (long long)ix[i]);
    }
    if (st != KILN_OK) {
        free(ix);
        return st;
    }
    sh->index = ix;
    return KILN_OK;
}

void kiln_shard_close(kiln_shard *sh) {
    free(sh->index);
    sh->index = NULL;
}

int kiln_shard_failed_record(const uint8_t *rec, int64_t n) {
    return n >= KILN_SHARD_PIXEL_HEADER && n <= KILN_SHARD_PIXEL_HEADER + KILN_SHARD_MAX_MESSAGE && !le32(rec) && !le32(rec + 4) &&
           !le32(rec + 8);
}

kiln_status kiln_shard_pixels(const uint8_t *rec, int64_t n, const char *name, kiln_image *im) {
    if (n < KILN_SHARD_PIXEL_HEADER)
        return kiln_fail(KILN_ERR_FORMAT, "%s: %lld bytes, too short for decoded pixels", name, (long long)n);
    if (kiln_shard_failed_record(rec, n)) /* the message, printable bytes only */
        return kiln_fail(KILN_ERR_FORMAT, "%.*s (remembered by %s)", (int)strnlen((const char *)rec + KILN_SHARD_PIXEL_HEADER,
                         (size_t)(n - KILN_SHARD_PIXEL_HEADER)), (const char *)rec + KILN_SHARD_PIXEL_HEADER, name);
    int64_t h = le32(rec), w = le32(rec + 4), c = le32(rec + 8);
    if (h < 1 || w < 1 || h > KILN_IMAGE_MAX_SIDE || w > KILN_IMAGE_MAX_SIDE || h * w > KILN_IMAGE_MAX_PIXELS || (c != 1 && c != 3) ||
        h * w * c != n - KILN_SHARD_PIXEL_HEADER)
        return kiln_fail(KILN_ERR_FORMAT, "%s: %lldx%lldx%lld pixels do not fit its %lld bytes: corrupt", name, (long long)h,
                         (long long)w, (long long)c, (long long)n);
    *im = (kiln_image){(uint8_t *)rec + KILN_SHARD_PIXEL_HEADER, (int)w, (int)h, (int)c};
    return KILN_OK;
}

/* ---- writing ---- */

struct kiln_shard_writer {
    int fd, kind;
    int64_t count, added, pos;
    int32_t *labels;
    int64_t *index;
    char *path, *tmp;
};

kiln_status kiln_pwrite_all(int fd, const char *name, const void *data, int64_t n, int64_t off) {
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t r = pwrite(fd, p, (size_t)n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return kiln_fail(KILN_ERR_IO, "%s: cannot write: %s", name, r < 0 ? strerror(errno) : "no space");
        p += r, n -= r, off += r;
    }
    return KILN_OK;
}

static kiln_status put(kiln_shard_writer *w, const void *data, int64_t n, int64_t off) { return kiln_pwrite_all(w->fd, w->tmp, data, n, off); }

kiln_status kiln_shard_writer_new(const char *path, int kind, int64_t count, kiln_shard_writer **out) {
    *out = NULL;
    if (count < 1 || count > KILN_SHARD_MAX_COUNT)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s: a shard holds 1..%lld records, not %lld", path, (long long)KILN_SHARD_MAX_COUNT,
                         (long long)count);
    kiln_shard_writer *w = calloc(1, sizeof *w);
    size_t len = strlen(path) + 32;
    if (w) w->path = strdup(path), w->tmp = malloc(len);
    if (w) w->labels = malloc((size_t)count * 4), w->index = malloc((size_t)(count + 1) * 8);
    if (!w || !w->path || !w->tmp || !w->labels || !w->index) {
        if (w) free(w->path), free(w->tmp), free(w->labels), free(w->index);
        free(w);
        return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(w->tmp, len, "%s.tmp.%ld", path, (long)getpid());
    w->fd = -1;
    w->kind = kind;
    w->count = count;
    int64_t lo, io;
    kiln_shard_layout(count, &lo, &io, &w->pos);
    w->fd = kiln_open_write(w->tmp, 0);
    if (w->fd < 0) {
        kiln_status st = kiln_fail(KILN_ERR_IO, "%s", kiln_last_error());
        w->tmp[0] = 0;
        kiln_shard_writer_abort(w);
        return st;
    }
    *out = w;
    return KILN_OK;
}

static kiln_status add_parts(kiln_shard_writer *w, int32_t label, const void *a, int64_t na, const void *b, int64_t nb) {
    if (w->added >= w->count) return kiln_fail(KILN_ERR_INVALID_ARG, "%s: more than its %lld records", w->path, (long long)w->count);
    kiln_status st = put(w, a, na, w->pos);
    if (st == KILN_OK && nb) st = put(w, b, nb, w->pos + na);
    if (st != KILN_OK) return st;
    w->labels[w->added] = label;
    w->index[w->added++] = w->pos;
    w->pos += na + nb;
    return KILN_OK;
}

kiln_status kiln_shard_writer_add(kiln_shard_writer *w, int32_t label, const void *data, int64_t n) {
    return add_parts(w, label, data, n, NULL, 0);
}

void kiln_shard_pixel_header(const kiln_image *im, uint8_t h[KILN_SHARD_PIXEL_HEADER]) {
    put32(h, (uint32_t)im->h);
    put32(h + 4, (uint32_t)im->w);
    put32(h + 8, (uint32_t)im->c);
}

kiln_status kiln_shard_writer_add_pixels(kiln_shard_writer *w, int32_t label, const kiln_image *im) {
    uint8_t h[KILN_SHARD_PIXEL_HEADER];
    kiln_shard_pixel_header(im, h);
    return add_parts(w, label, h, sizeof h, im->px, (int64_t)im->w * im->h * im->c);
}

kiln_status kiln_shard_write_head(int fd, const char *name, int kind, int64_t count, const int32_t *labels, const int64_t *index) {
    int64_t lo, io, n;
    kiln_shard_layout(count, &lo, &io, &n);
    uint8_t *b = calloc(1, (size_t)n);
    if (!b) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", name);
    memcpy(b, KILN_SHARD_MAGIC, 8);
    put32(b + 8, KILN_SHARD_VERSION);
    put32(b + 12, (uint32_t)kind);
    put64(b + 16, count);
    put64(b + 24, lo);
    put64(b + 32, io);
    put64(b + 40, n);
    put64(b + 48, index[count]);
    for (int64_t i = 0; i < count; i++) put32(b + lo + 4 * i, (uint32_t)labels[i]);
    for (int64_t i = 0; i <= count; i++) put64(b + io + 8 * i, index[i]);
    kiln_status st = kiln_pwrite_all(fd, name, b, n, 0);
    free(b);
    return st;
}

kiln_status kiln_shard_writer_finish(kiln_shard_writer *w) {
    kiln_status st = w->added == w->count ? KILN_OK
                                          : kiln_fail(KILN_ERR_INVALID_ARG, "%s: %lld of its %lld records written", w->path,
                                                      (long long)w->added, (long long)w->count);
    w->index[w->count] = w->pos;
    if (st == KILN_OK) st = kiln_shard_write_head(w->fd, w->tmp, w->kind, w->count, w->labels, w->index);
    if (st == KILN_OK && fsync(w->fd) != 0) st = kiln_fail(KILN_ERR_IO, "%s: cannot write: %s", w->tmp, strerror(errno));
    if (close(w->fd) != 0 && st == KILN_OK) st = kiln_fail(KILN_ERR_IO, "%s: cannot write: %s", w->tmp, strerror(errno));
    w->fd = -1;
    if (st == KILN_OK && rename(w->tmp, w->path) != 0) st = kiln_fail(KILN_ERR_IO, "%s: cannot rename %s to it: %s", w->path, w->tmp, strerror(errno));
    if (st == KILN_OK) w->tmp[0] = 0; /* nothing left to remove */
    kiln_shard_writer_abort(w);
    return st;
}

void kiln_shard_writer_abort(kiln_shard_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (w->tmp && w->tmp[0]) unlink(w->tmp);
    free(w->labels);
    free(w->index);
    free(w->path);
    free(w->tmp);
    free(w);
}
