/* Token files in llm.c's layout (`--data tokens:FILE`): a header of 256
 * little-endian int32 (magic 20240520, version 1, token count, the rest 0),
 * then the tokens as little-endian uint16. The file is memory-mapped, checked
 * whole at open (header, size, the largest token) and shared by every worker.
 * A sample is a window of block + 1 tokens: x the first block tokens as float
 * (exact: every uint16 is a float), the labels the block tokens after each.
 * Training windows start at an offset drawn from the sample's key (so batches
 * are the same for any worker count), (count - 1) / block of them per epoch;
 * the test split is the consecutive windows of block + 1 tokens from the
 * start of the val file beside it (X.val.tokens, kiln tokenize's held-out
 * tail) or, without one, of the file itself; a partial last one dropped.
 *
 * With dc->documents a sample is a document of the index beside the file
 * (docs.c; documents of one token have nothing to predict and are left out):
 * its first block + 1 tokens, or for training a window of them at an offset
 * drawn from the key when it is longer; shorter ones are padded (x 0, labels
 * -1) to the width the caller asks for (get_width; get pads to block). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "base/internal/file.h"
#include "base/internal/rng.h"
#include "data/internal/folder.h"

#define HEADER_INTS 256
#define HEADER_BYTES (HEADER_INTS * 4)
/* a window far beyond any context length; bounds x and the labels per sample */
#define MAX_BLOCK (1 << 24)

typedef struct tokens {
    kiln_dataset ds;
    const uint8_t *tok; /* [count] little-endian uint16, inside the mapping */
    void *map;
    size_t map_len;
    int64_t count;
    int block, train;
    int64_t *doc_off;  /* documents: the index's offsets */
    int64_t *doc;      /* documents: sample -> document (those of 2 tokens or more) */
    char name[PATH_MAX + 32];
} tokens;

static inline uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline int32_t le32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static kiln_status tokens_get(const kiln_dataset *ds, int64_t index, uint64_t key, float *x, int32_t *y) {
    const tokens *d = ds->impl;
    if (index < 0 || index >= ds->len)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s: sample %lld is out of range (0..%lld)", d->name, (long long)index,
                         (long long)ds->len - 1);
    int64_t start = d->train ? (int64_t)kiln_rng_bounded(key, 0x746f6b6eull /* "tokn" */, (uint64_t)(d->count - d->block)) : index * (d->block + 1);
    const uint8_t *p = d->tok + 2 * start;
    for (int i = 0; i < d->block; i++) {
        x[i] = (float)le16(p + 2 * i);
        y[i] = le16(p + 2 * (i + 1));
    }
    return KILN_OK;
}

/* documents: sample index's first token and its positions (tokens - 1, at most block) */
static int64_t doc_positions(const tokens *d, int64_t index, int64_t *first) {
    int64_t k = d->doc[index], len = d->doc_off[k + 1] - d->doc_off[k];
    *first = d->doc_off[k];
    return len - 1 < d->block ? len - 1 : d->block;
}

static int64_t doc_len(const kiln_dataset *ds, int64_t index) {
    int64_t first;
    return index >= 0 && index < ds->len ? doc_positions(ds->impl, index, &first) : 0;
}

static kiln_status doc_get_width(const kiln_dataset *ds, int64_t index, uint64_t key, int64_t width, float *x, int32_t *y) {
    const tokens *d = ds->impl;
    if (index < 0 || index >= ds->len || width < 1 || width > d->block)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s: sample %lld of width %lld is out of range (0..%lld, 1..%d)", d->name,
                         (long long)index, (long long)width, (long long)ds->len - 1, d->block);
    int64_t first, n = doc_positions(d, index, &first), k = d->doc[index];
    int64_t spare = d->doc_off[k + 1] - first - (n + 1); /* tokens beyond the window: a longer document */
    if (d->train && spare > 0) first += (int64_t)kiln_rng_bounded(key, 0x646f6373ull /* "docs" */, (uint64_t)spare + 1);
    const uint8_t *p = d->tok + 2 * first;
    for (int64_t i = 0; i < width; i++) {
        x[i] = i < n ? (float)le16(p + 2 * i) : 0.0f;
        y[i] = i < n ? le16(p + 2 * (i + 1)) : -1;
    }
    return KILN_OK;
}

static kiln_status doc_get(const kiln_dataset *ds, int64_t index, uint64_t key, float *x, int32_t *y) {
    return doc_get_width(ds, index, key, ((const tokens *)ds->impl)->block, x, y);
}

/* documents mode: the index, and the samples (documents with something to predict) */
static kiln_status open_docs(tokens *d, const char *path) {
    int64_t n = 0;
    kiln_status st = kiln_tokens_docs_read(path, d->count, &d->doc_off, &n);
    if (st != KILN_OK) return st;
    d->doc = malloc(sizeof *d->doc * (size_t)(n ? n : 1));
    if (!d->doc) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", path);
    int64_t m = 0;
    for (int64_t k = 0; k < n; k++)
        if (d->doc_off[k + 1] - d->doc_off[k] >= 2) d->doc[m++] = k;
    if (m == 0) return kiln_fail(KILN_ERR_FORMAT, "%s: no document of 2 tokens or more", path);
    d->ds.len = m;
    d->ds.get = doc_get;
    d->ds.get_width = doc_get_width;
    d->ds.sample_len = doc_len;
    return KILN_OK;
}

static void tokens_destroy(kiln_dataset *ds) {
    tokens *d = ds->impl;
    free(d->doc_off);
    free(d->doc);
    if (d->map) munmap(d->map, d->map_len);
    free(d);
}

/* ---- opening ---- */

static kiln_status check_config(const kiln_data_config *dc, const char *path) {
    if (dc->resize || dc->center_crop || dc->random_resized_crop || dc->hflip || dc->normalize || dc->channels ||
        dc->val_split > 0 || (dc->cache && dc->cache[0]))
        return kiln_fail(KILN_ERR_INVALID_ARG, "tokens:%s holds tokens, not images: --resize, --center-crop, "
                         "--random-resized-crop, --hflip, --normalize, --channels, --val-split and --cache do not apply", path);
    if (dc->block < 1 || dc->block > MAX_BLOCK)
        return kiln_fail(KILN_ERR_INVALID_ARG, "tokens:%s needs a block size of 1..%d tokens per sample (--block N; got %d)",
                         path, MAX_BLOCK, dc->block);
    return KILN_OK;
}

/* the header's magic, version and count against the file's size */
static kiln_status check_header(const char *path, const uint8_t *h, int64_t size, int64_t *count) {
    int32_t magic = le32(h), version = le32(h + 4), n = le32(h + 8);
    if (magic != KILN_TOKENS_MAGIC)
        return kiln_fail(KILN_ERR_FORMAT, "%s: bad magic %d (a token file in llm.c's layout starts with %d)", path, magic,
                         KILN_TOKENS_MAGIC);
    if (version != KILN_TOKENS_VERSION)
        return kiln_fail(KILN_ERR_FORMAT, "%s: token file version %d (kiln reads version %d: uint16 tokens)", path, version,
                         KILN_TOKENS_VERSION);
    if (n < 0) return kiln_fail(KILN_ERR_FORMAT, "%s: the header's token count is negative (%d): corrupt", path, n);
    int64_t want = HEADER_BYTES + 2 * (int64_t)n;
    if (size < want)
        return kiln_fail(KILN_ERR_FORMAT, "%s: truncated: the header says %d tokens (%lld bytes), the file holds %lld bytes of "
                         "tokens", path, n, (long long)(2 * (int64_t)n), (long long)(size - HEADER_BYTES));
    if (size > want)
        return kiln_fail(KILN_ERR_FORMAT, "%s: %lld bytes of trailing data after the %d tokens the header counts", path,
                         (long long)(size - want), n);
    *count = n;
    return KILN_OK;
}

/* maps `path` and checks it; d->tok and d->count on success */
static kiln_status map_file(tokens *d, const char *path) {
    int64_t size = 0;
    int fd = kiln_open_read(path, &size); /* refuses a FIFO or device, sets the message */
    if (fd < 0) return KILN_ERR_IO;
    kiln_status st = KILN_OK;
    if (size < HEADER_BYTES)
        st = kiln_fail(KILN_ERR_FORMAT, "%s: truncated header: %lld bytes (a token file starts with a %d-byte header)", path,
                       (long long)size, HEADER_BYTES);
    if (st == KILN_OK) {
        d->map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (d->map == MAP_FAILED) {
            d->map = NULL;
            st = kiln_fail(KILN_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
        } else d->map_len = (size_t)size;
    }
    close(fd);
    if (st == KILN_OK) st = check_header(path, d->map, size, &d->count);
    if (st == KILN_OK) d->tok = (const uint8_t *)d->map + HEADER_BYTES;
    return st;
}

kiln_status kiln_tokens_open(const char *path, int train, const kiln_data_config *dc, kiln_dataset **out) {
    *out = NULL;
    if (!*path) return kiln_fail(KILN_ERR_INVALID_ARG, "tokens: needs a file (--data tokens:FILE)");
    char val[PATH_MAX];
    if (!train && kiln_tokens_val_path(path, val, sizeof val) == KILN_OK && access(val, F_OK) == 0)
        path = val; /* the held-out tail kiln tokenize wrote beside it */
    kiln_status st = check_config(dc, path);
    if (st != KILN_OK) return st;
    tokens *d = calloc(1, sizeof *d);
    if (!d) return kiln_fail(KILN_ERR_NOMEM, "tokens:%s: out of memory", path);
    snprintf(d->name, sizeof d->name, "tokens:%s %s", path, train ? "train" : "test");
    d->ds = (kiln_dataset){.name = d->name, .sample_ndim = 1, .get = tokens_get, .destroy = tokens_destroy, .impl = d};
    d->block = dc->block;
    d->train = train;
    if ((st = map_file(d, path)) == KILN_OK && !dc->documents && d->count < (int64_t)d->block + 1)
        st = kiln_fail(KILN_ERR_FORMAT, "%s: %lld tokens are fewer than one sample's window of block + 1 = %d: use a smaller "
                       "--block or more data", path, (long long)d->count, d->block + 1);
    if (st != KILN_OK) {
        tokens_destroy(&d->ds);
        return st;
    }
    uint16_t top = 0; /* the labels' range, so a model with fewer outputs is refused before training */
    for (int64_t i = 0; i < d->count; i++) {
        uint16_t t = le16(d->tok + 2 * i);
        top = t > top ? t : top;
    }
    d->ds.len = train ? (d->count - 1) / d->block : d->count / (d->block + 1);
    if (dc->documents && (st = open_docs(d, path)) != KILN_OK) {
        tokens_destroy(&d->ds);
        return st;
    }
    d->ds.sample_shape[0] = d->block;
    d->ds.label_numel = d->block;
    d->ds.num_classes = top + 1;
    *out = &d->ds;
    return KILN_OK;
}

/* ---- writing ---- */

kiln_status kiln_write_all(int fd, const uint8_t *b, size_t n, const char *tmp) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = write(fd, b + done, n - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return kiln_fail(KILN_ERR_IO, "%s: cannot write: %s", tmp, r < 0 ? strerror(errno) : "no space");
        done += (size_t)r;
    }
    return KILN_OK;
}

/* the header, then the tokens in chunks as little-endian uint16 */
static kiln_status write_body(int fd, const uint16_t *t, int64_t n, const char *tmp) {
    uint8_t buf[1 << 16];
    memset(buf, 0, HEADER_BYTES);
    const int32_t head[3] = {KILN_TOKENS_MAGIC, KILN_TOKENS_VERSION, (int32_t)n};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++) buf[4 * i + k] = (uint8_t)((uint32_t)head[i] >> 8 * k);
    kiln_status st = kiln_write_all(fd, buf, HEADER_BYTES, tmp);
    for (int64_t at = 0; st == KILN_OK && at < n; at += sizeof buf / 2) {
        int64_t m = n - at < (int64_t)(sizeof buf / 2) ? n - at : (int64_t)(sizeof buf / 2);
        for (int64_t i = 0; i < m; i++) buf[2 * i] = (uint8_t)t[at + i], buf[2 * i + 1] = (uint8_t)(t[at + i] >> 8);
        st = kiln_write_all(fd, buf, (size_t)m * 2, tmp);
    }
    return st;
}

/* a temporary beside path, written by body, synced and renamed over path */
kiln_status kiln_write_atomic(const char *path, kiln_status (*body)(int fd, const void *ctx, const char *tmp), const void *ctx) {
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = kiln_open_write(tmp, 0);
    if (fd < 0) return KILN_ERR_IO;
    kiln_status st = body(fd, ctx, tmp);
    if (st == KILN_OK && fsync(fd) != 0) st = kiln_fail(KILN_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == KILN_OK) st = kiln_fail(KILN_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
    if (st == KILN_OK && rename(tmp, path) != 0)
        st = kiln_fail(KILN_ERR_IO, "%s: cannot rename %s to it: %s", path, tmp, strerror(errno));
    if (st != KILN_OK) unlink(tmp);
    return st;
}

typedef struct {
    const uint16_t *t;
    int64_t n;
} token_body;

static kiln_status write_tokens(int fd, const void *ctx, const char *tmp) {
    const token_body *b = ctx;
    return write_body(fd, b->t, b->n, tmp);
}

kiln_status kiln_tokens_write(const char *path, const uint16_t *tokens, int64_t n) {
    if (!path || !*path || (n > 0 && !tokens))
        return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_tokens_write: no path or no tokens");
    if (n < 0 || n > INT32_MAX)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s: %lld tokens do not fit a token file (its header counts 0..%d)", path,
                         (long long)n, INT32_MAX);
    token_body b = {tokens, n};
    return kiln_write_atomic(path, write_tokens, &b);
}
