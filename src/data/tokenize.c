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

kiln_status kiln_tokenize(const char *const *paths, int npaths, const char *out, double val_fraction,
                          kiln_tokenize_result *r) {
    memset(r, 0, sizeof *r);
    if (npaths < 1 || !out || !*out) return kiln_fail(KILN_ERR_INVALID_ARG, "tokenize: needs --from FILE... and --to FILE");
    if (!(val_fraction >= 0 && val_fraction < 1))
        return kiln_fail(KILN_ERR_INVALID_ARG, "tokenize: --val-fraction %g (want 0 <= x < 1)", val_fraction);
    uint16_t *t = NULL;
    int64_t n = 0, cap = 0;
    kiln_status st = KILN_OK;
    for (int i = 0; i < npaths && st == KILN_OK; i++) st = read_tokens(paths[i], &t, &n, &cap);
    int64_t nval = (int64_t)((double)n * val_fraction);
    if (st == KILN_OK && n - nval < 2)
        st = kiln_fail(KILN_ERR_INVALID_ARG, "tokenize: %lld bytes of text leave %lld for training (want 2 or more)",
                       (long long)n, (long long)(n - nval));
    if (st == KILN_OK) st = kiln_tokens_write(out, t, n - nval);
    if (st == KILN_OK && nval > 0 && (st = kiln_tokens_val_path(out, r->val_path, sizeof r->val_path)) == KILN_OK)
        st = kiln_tokens_write(r->val_path, t + (n - nval), nval);
    if (st == KILN_OK) {
        r->train_tokens = n - nval;
        r->val_tokens = nval;
    }
    free(t);
    return st;
}
