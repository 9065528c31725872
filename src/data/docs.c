/* The document index beside a token file (FILE.docs, written by kiln
 * tokenize): where each document starts, so `--batch-tokens` can make one
 * sample of each document. llm.c marks a boundary with GPT-2's end-of-text
 * token inside the stream; a byte vocabulary has no token to spare, and a side
 * file leaves the token file exactly as llm.c reads it (and old token files
 * readable: without an index there are no documents, and the flags that need
 * them say so).
 *
 * Layout, little-endian: 4 int32 (magic 20240521, version 1, the document
 * count n, 0), then n + 1 int64 token offsets: document i is the tokens
 * [off[i], off[i+1]); off[0] = 0, strictly increasing, off[n] = the token
 * file's count. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/internal/file.h"
#include "data/internal/folder.h"

#define DOCS_HEAD 16

kiln_status kiln_tokens_docs_path(const char *tokens_path, char *out, size_t len) {
    int w = snprintf(out, len, "%s.docs", tokens_path);
    if (w < 0 || (size_t)w >= len) return kiln_fail(KILN_ERR_INVALID_ARG, "tokens: path too long: %s", tokens_path);
    return KILN_OK;
}

static void put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int k = 0; k < bytes; k++) p[k] = (uint8_t)(v >> 8 * k);
}

static uint64_t get_le(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int k = 0; k < bytes; k++) v |= (uint64_t)p[k] << 8 * k;
    return v;
}

typedef struct {
    const int64_t *starts;
    int64_t n, ntokens;
} docs_body;

static kiln_status write_docs(int fd, const void *ctx, const char *tmp) {
    const docs_body *d = ctx;
    uint8_t buf[4096];
    memset(buf, 0, DOCS_HEAD);
    put_le(buf, KILN_DOCS_MAGIC, 4);
    put_le(buf + 4, KILN_DOCS_VERSION, 4);
    put_le(buf + 8, (uint64_t)d->n, 4);
    kiln_status st = kiln_write_all(fd, buf, DOCS_HEAD, tmp);
    size_t used = 0;
    for (int64_t i = 0; st == KILN_OK && i <= d->n; i++) {
        put_le(buf + used, (uint64_t)(i < d->n ? d->starts[i] : d->ntokens), 8);
        used += 8;
        if (used == sizeof buf || i == d->n) {
            st = kiln_write_all(fd, buf, used, tmp);
            used = 0;
        }
    }
    return st;
}

kiln_status kiln_tokens_docs_write(const char *tokens_path, const int64_t *starts, int64_t n, int64_t ntokens) {
    char path[PATH_MAX];
    kiln_status st = kiln_tokens_docs_path(tokens_path, path, sizeof path);
    if (st != KILN_OK) return st;
    if (n < 0 || n > INT32_MAX || (n > 0 && (!starts || starts[0] != 0)))
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s: %lld documents (the first must start at 0)", path, (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (starts[i] >= (i + 1 < n ? starts[i + 1] : ntokens))
            return kiln_fail(KILN_ERR_INVALID_ARG, "%s: document %lld is empty or out of order", path, (long long)i);
    docs_body b = {starts, n, ntokens};
    return kiln_write_atomic(path, write_docs, &b);
}

/* the offsets of `path`'s n documents against a token file of `ntokens` */
static kiln_status parse_docs(const char *path, const uint8_t *buf, int64_t size, int64_t ntokens, int64_t *off, int64_t n) {
    (void)size; /* checked by the caller before it allocated off */
    for (int64_t i = 0; i <= n; i++) {
        off[i] = (int64_t)get_le(buf + DOCS_HEAD + 8 * i, 8);
        if ((i == 0 && off[i] != 0) || (i > 0 && off[i] <= off[i - 1]) || off[i] > ntokens)
            return kiln_fail(KILN_ERR_FORMAT, "%s: document offset %lld is %lld (want 0 first, then increasing up to the "
                             "token count %lld)", path, (long long)i, (long long)off[i], (long long)ntokens);
    }
    if (off[n] != ntokens)
        return kiln_fail(KILN_ERR_FORMAT, "%s: the documents end at token %lld, the token file holds %lld: the index is of "
                         "another file", path, (long long)off[n], (long long)ntokens);
    return KILN_OK;
}

kiln_status kiln_tokens_docs_read(const char *tokens_path, int64_t ntokens, int64_t **off, int64_t *ndocs) {
    *off = NULL;
    *ndocs = 0;
    char path[PATH_MAX];
    kiln_status st = kiln_tokens_docs_path(tokens_path, path, sizeof path);
    if (st != KILN_OK) return st;
    if (access(path, F_OK) != 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s has no document index (%s): make it with kiln tokenize, which records "
                         "each input file (or each --doc-separator line) as a document", tokens_path, path);
    int64_t size = 0;
    int fd = kiln_open_read(path, &size);
    if (fd < 0) return KILN_ERR_IO;
    uint8_t *buf = size >= DOCS_HEAD && size <= ((int64_t)1 << 34) ? malloc((size_t)size) : NULL;
    st = buf ? KILN_OK : kiln_fail(KILN_ERR_FORMAT, "%s: %lld bytes is no document index", path, (long long)size);
    for (int64_t got = 0; st == KILN_OK && got < size;) {
        ssize_t r = read(fd, buf + got, (size_t)(size - got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) st = kiln_fail(KILN_ERR_IO, "%s: cannot read: %s", path, r < 0 ? strerror(errno) : "short file");
        else got += r;
    }
    close(fd);
    int64_t n = st == KILN_OK ? (int64_t)(int32_t)get_le(buf + 8, 4) : 0;
    if (st == KILN_OK && (get_le(buf, 4) != KILN_DOCS_MAGIC || get_le(buf + 4, 4) != KILN_DOCS_VERSION || n < 0))
        st = kiln_fail(KILN_ERR_FORMAT, "%s: not a document index (magic %u version %u, want %d and %d)", path,
                       (unsigned)get_le(buf, 4), (unsigned)get_le(buf + 4, 4), KILN_DOCS_MAGIC, KILN_DOCS_VERSION);
    /* the file's size bounds the count before anything is allocated for it */
    if (st == KILN_OK && size != DOCS_HEAD + 8 * (n + 1))
        st = kiln_fail(KILN_ERR_FORMAT, "%s: %lld bytes, but %lld documents need %lld: truncated or corrupt", path,
                       (long long)size, (long long)n, (long long)(DOCS_HEAD + 8 * (n + 1)));
    int64_t *o = st == KILN_OK ? malloc(sizeof *o * (size_t)(n + 1)) : NULL;
    if (st == KILN_OK && !o) st = kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", path);
    if (st == KILN_OK) st = parse_docs(path, buf, size, ntokens, o, n);
    free(buf);
    if (st != KILN_OK) {
        free(o);
        return st;
    }
    *off = o;
    *ndocs = n;
    return KILN_OK;
}
