/* kiln tokenize: byte-level tokens (vocabulary 256, every byte its own token,
 * any UTF-8 or binary text) written as llm.c's token files. With a validation
 * share, the last share of the concatenated text goes to the val file (the
 * train file's name with ".tokens" replaced by ".val.tokens"), which the test
 * split of `--data tokens:TRAIN` reads when it exists. Files are read whole,
 * each capped so the total stays within a token file's 2^31 - 1 tokens. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data/internal/folder.h"

/* appends the bytes of path to *buf as tokens */
static kiln_status read_tokens(const char *path, uint16_t **buf, int64_t *n, int64_t *cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return kiln_fail(KILN_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    unsigned char chunk[1 << 16];
    size_t got;
    kiln_status st = KILN_OK;
    while (st == KILN_OK && (got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (*n + (int64_t)got > INT32_MAX) {
            st = kiln_fail(KILN_ERR_INVALID_ARG, "%s: more than %d tokens in all", path, INT32_MAX);
            break;
        }
        if (*n + (int64_t)got > *cap) {
            int64_t nc = (*cap ? *cap * 2 : 1 << 20) + (int64_t)got;
            uint16_t *nb = realloc(*buf, (size_t)nc * sizeof *nb);
            if (!nb) {
                st = kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            *buf = nb;
            *cap = nc;
        }
        for (size_t i = 0; i < got; i++) (*buf)[(*n)++] = chunk[i];
    }
    if (st == KILN_OK && ferror(f)) st = kiln_fail(KILN_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    fclose(f);
    return st;
}

kiln_status kiln_tokens_val_path(const char *train_path, char *out, size_t len) {
    size_t n = strlen(train_path), ext = strlen(".tokens");
    int has_ext = n > ext && strcmp(train_path + n - ext, ".tokens") == 0;
    int w = snprintf(out, len, "%.*s.val.tokens", (int)(has_ext ? n - ext : n), train_path);
    if (w < 0 || (size_t)w >= len) return kiln_fail(KILN_ERR_INVALID_ARG, "tokenize: path too long: %s", train_path);
    return KILN_OK;
}

typedef struct {
    int64_t *at;
    int64_t n, cap;
} starts;

static kiln_status push(starts *d, int64_t at) {
    if (d->n == d->cap) {
        int64_t nc = d->cap ? 2 * d->cap : 1024;
        int64_t *na = realloc(d->at, sizeof *na * (size_t)nc);
        if (!na) return kiln_fail(KILN_ERR_NOMEM, "tokenize: out of memory for the document index");
        d->at = na;
        d->cap = nc;
    }
    d->at[d->n++] = at;
    return KILN_OK;
}

static int is_separator(const uint16_t *t, int64_t len, const char *sep) {
    if (!sep || (int64_t)strlen(sep) != len) return 0;
    for (int64_t k = 0; k < len; k++)
        if (t[k] != (unsigned char)sep[k]) return 0;
    return 1;
}

/* The documents of one file's tokens t[from, *n): a line equal to the
 * separator ends one and is taken out (t compacted in place, *n lowered);
 * without a separator the file is one document. Empty documents are not recorded. */
static kiln_status split_docs(uint16_t *t, int64_t from, int64_t *n, const char *sep, starts *d) {
    int64_t w = from, doc = from;
    kiln_status st = KILN_OK;
    for (int64_t i = from; i < *n && sep && st == KILN_OK;) {
        int64_t e = i;
        while (e < *n && t[e] != '\n') e++;
        int64_t next = e < *n ? e + 1 : e;
        if (is_separator(t + i, e - i, sep)) {
            if (w > doc) st = push(d, doc);
            doc = w;
        } else {
            memmove(t + w, t + i, (size_t)(next - i) * sizeof *t);
            w += next - i;
        }
        i = next;
    }
    if (!sep) w = *n;
    if (st == KILN_OK && w > doc) st = push(d, doc);
    *n = w;
    return st;
}

/* the index of one written file: the documents starting in [from, to), shifted
 * to the file's start (a document the cut splits begins the later file too) */
static kiln_status write_index(const char *path, const starts *d, int64_t from, int64_t to, int64_t *ndocs) {
    starts part = {0};
    kiln_status st = KILN_OK;
    for (int64_t i = 0; i < d->n && st == KILN_OK; i++) {
        int64_t s = d->at[i];
        if (s >= from && s < to && !(s == from && part.n)) st = push(&part, s - from);
        else if (s < from && (i + 1 == d->n || d->at[i + 1] > from) && !part.n) st = push(&part, 0);
    }
    if (st == KILN_OK) st = kiln_tokens_docs_write(path, part.at, part.n, to - from);
    *ndocs = part.n;
    free(part.at);
    return st;
}

kiln_status kiln_tokenize(const char *const *paths, int npaths, const char *out, double val_fraction,
                          kiln_tokenize_result *r) {
    return kiln_tokenize_docs(paths, npaths, out, val_fraction, NULL, r);
}

kiln_status kiln_tokenize_docs(const char *const *paths, int npaths, const char *out, double val_fraction,
                               const char *separator, kiln_tokenize_result *r) {
    memset(r, 0, sizeof *r);
    if (npaths < 1 || !out || !*out) return kiln_fail(KILN_ERR_INVALID_ARG, "tokenize: needs --from FILE... and --to FILE");
    if (!(val_fraction >= 0 && val_fraction < 1))
        return kiln_fail(KILN_ERR_INVALID_ARG, "tokenize: --val-fraction %g (want 0 <= x < 1)", val_fraction);
    if (separator && (!*separator || strchr(separator, '\n')))
        return kiln_fail(KILN_ERR_INVALID_ARG, "tokenize: --doc-separator must be a non-empty line (got '%s')", separator);
    uint16_t *t = NULL;
    int64_t n = 0, cap = 0;
    starts docs = {0};
    kiln_status st = KILN_OK;
    for (int i = 0; i < npaths && st == KILN_OK; i++) {
        int64_t from = n;
        st = read_tokens(paths[i], &t, &n, &cap);
        if (st == KILN_OK) st = split_docs(t, from, &n, separator, &docs);
    }
    int64_t nval = (int64_t)((double)n * val_fraction);
    if (st == KILN_OK && n - nval < 2)
        st = kiln_fail(KILN_ERR_INVALID_ARG, "tokenize: %lld bytes of text leave %lld for training (want 2 or more)",
                       (long long)n, (long long)(n - nval));
    if (st == KILN_OK) st = kiln_tokens_write(out, t, n - nval);
    if (st == KILN_OK) st = write_index(out, &docs, 0, n - nval, &r->train_docs);
    if (st == KILN_OK && nval > 0 && (st = kiln_tokens_val_path(out, r->val_path, sizeof r->val_path)) == KILN_OK)
        st = kiln_tokens_write(r->val_path, t + (n - nval), nval);
    if (st == KILN_OK && nval > 0) st = write_index(r->val_path, &docs, n - nval, n, &r->val_docs);
    if (st == KILN_OK) {
        r->train_tokens = n - nval;
        r->val_tokens = nval;
    }
    free(docs.at);
    free(t);
    return st;
}
