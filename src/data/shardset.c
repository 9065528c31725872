/* Packed shards as a dataset: OUT/index.json names the splits' shard files;
 * each shard's header, label column and index are read and checked at open
 * (one small read each), its records stay where they are (in the shared
 * memory map of a local file) and are handed to imageset.c, which decodes and
 * transforms them exactly as an image folder's files. The manifest and the
 * shards are opened through one opener, `open_part`, the only place that
 * knows whether the base is a folder or a URL. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "data/internal/folder.h"
#include "data/internal/manifest.h"
#include "data/internal/records.h"
#include "data/internal/shard.h"

typedef struct shard_records {
    kiln_records r;
    kiln_manifest m;
    const kiln_manifest_split *split;
    char base[PATH_MAX];
    kiln_http_client *http; /* a URL base: one connection pool for the manifest and every shard */
    char *manifest;         /* its text, for the fingerprint */
    size_t manifest_len;
    int n;                  /* shards */
    kiln_source **src;
    kiln_shard *sh;
    int64_t *first;         /* [n + 1]: the first sample of each shard */
} shard_records;

/* base/name as a source */
static kiln_status open_part(const shard_records *s, const char *name, kiln_source **out) {
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%s", s->base, name) >= (int)sizeof p) return kiln_fail(KILN_ERR_IO, "%s/%s: path too long", s->base, name);
    return s->http ? kiln_source_open_url(s->http, p, out) : kiln_source_open_file(p, out);
}

static kiln_status read_manifest(shard_records *s) {
    kiln_source *src = NULL;
    kiln_status st = open_part(s, KILN_MANIFEST_NAME, &src);
    if (st != KILN_OK) return st;
    if (src->size > KILN_MANIFEST_MAX_BYTES)
        st = kiln_fail(KILN_ERR_FORMAT, "%s: %lld bytes is too large for a manifest", src->name, (long long)src->size);
    if (st == KILN_OK && !(s->manifest = malloc((size_t)src->size + 1))) st = kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", src->name);
    if (st == KILN_OK) st = kiln_source_read(src, 0, src->size, s->manifest);
    if (st == KILN_OK) s->manifest_len = (size_t)src->size;
    if (st == KILN_OK) st = kiln_manifest_parse(s->manifest, s->manifest_len, src->name, &s->m);
    kiln_source_close(src);
    return st;
}

/* shard k: its header, index and label column, checked against the manifest */
static kiln_status open_shard(shard_records *s, int k) {
    kiln_status st = open_part(s, s->split->files[k], &s->src[k]);
    if (st == KILN_OK) st = kiln_shard_open(s->src[k], &s->sh[k]);
    if (st != KILN_OK) return st;
    const kiln_shard *sh = &s->sh[k];
    if (sh->count != s->split->counts[k] || sh->kind != (s->m.decoded ? KILN_SHARD_DECODED : KILN_SHARD_ENCODED))
        return kiln_fail(KILN_ERR_FORMAT, "%s: holds %lld %s records; the manifest says %lld %s", sh->src->name, (long long)sh->count,
                         sh->kind ? "decoded" : "encoded", (long long)s->split->counts[k], s->m.decoded ? "decoded" : "encoded");
    st = kiln_shard_read_index(&s->sh[k]);
    if (st == KILN_OK) st = kiln_shard_read_labels(sh, s->m.num_classes, s->r.labels + s->first[k]);
    return st;
}

/* the shard holding sample i */
static int shard_of(const shard_records *s, int64_t i) {
    int lo = 0, hi = s->n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->first[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static void range(const shard_records *s, int64_t i, int *k, int64_t *off, int64_t *len) {
    *k = shard_of(s, i);
    int64_t j = i - s->first[*k];
    *off = s->sh[*k].index[j];
    *len = s->sh[*k].index[j + 1] - *off;
}

static kiln_status shards_read(const kiln_records *r, int64_t i, kiln_image_ctx *ctx, char *name, kiln_record *out) {
    const shard_records *s = (const shard_records *)r;
    int k;
    int64_t off, len;
    range(s, i, &k, &off, &len);
    kiln_source *src = s->src[k];
    snprintf(name, KILN_RECORD_NAME, "%s, record %lld", src->name, (long long)(i - s->first[k]));
    if (len > KILN_IMAGE_MAX_FILE) return kiln_fail(KILN_ERR_FORMAT, "%s: %lld bytes is too large for a record", name, (long long)len);
    out->n = (size_t)len;
    if (src->map) {
        out->data = src->map + off;
        return KILN_OK;
    }
    uint8_t *buf = kiln_image_buffer(ctx, (size_t)len);
    if (!buf) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", name);
    out->data = buf;
    return kiln_source_read(src, off, len, buf);
}

/* the records' byte ranges to their shards' sources: one call per shard for
 * each slice of HINT_SLICE records, slice after slice. A remote source queues
 * ranges in the order it hears of them and asks for one shard's queued ranges
 * together, so the earliest-needed records of every shard go out first; one
 * call per shard for a whole 2,048-record hint queued shard 0's last records
 * before shard 14's first, and the workers waited for them. */
#define HINT_SLICE 64
static void hint_slice(const shard_records *s, const int64_t *index, int64_t n) {
    int ks[HINT_SLICE];
    int64_t off[HINT_SLICE], len[HINT_SLICE], o[HINT_SLICE], l[HINT_SLICE];
    for (int64_t j = 0; j < n; j++) range(s, index[j], &ks[j], &off[j], &len[j]);
    for (int64_t j = 0; j < n; j++) {
        int k = ks[j];
        if (k < 0 || !s->src[k]->ops->will_need) continue;
        int c = 0;
        for (int64_t q = j; q < n; q++)
            if (ks[q] == k) o[c] = off[q], l[c++] = len[q], ks[q] = -1;
        s->src[k]->ops->will_need(s->src[k], c, o, l);
    }
}

static void shards_will_need(const kiln_records *r, const int64_t *index, int64_t n) {
    const shard_records *s = (const shard_records *)r;
    for (int64_t a = 0; a < n; a += HINT_SLICE) hint_slice(s, index + a, n - a < HINT_SLICE ? n - a : HINT_SLICE);
}

/* the manifest's text and each shard's name, size and (local files) modification time */
static kiln_status shards_fingerprint(const kiln_records *r, uint64_t *h) {
    const shard_records *s = (const shard_records *)r;
    *h = kiln_hash(*h, s->manifest, s->manifest_len);
    for (int k = 0; k < s->n; k++) {
        struct stat sb;
        int64_t id[3] = {s->src[k]->size, 0, 0};
        if (stat(s->src[k]->name, &sb) == 0) id[1] = (int64_t)sb.st_mtim.tv_sec, id[2] = (int64_t)sb.st_mtim.tv_nsec;
        *h = kiln_hash(kiln_hash(*h, s->src[k]->name, strlen(s->src[k]->name) + 1), id, sizeof id);
    }
    return KILN_OK;
}

static void shards_destroy(kiln_records *r) {
    shard_records *s = (shard_records *)r;
    for (int k = 0; k < s->n; k++) {
        kiln_shard_close(&s->sh[k]);
        kiln_source_close(s->src[k]);
    }
    kiln_http_client_free(s->http);
    free(s->src);
    free(s->sh);
    free(s->first);
    free(s->r.labels);
    free(s->manifest);
    kiln_manifest_free(&s->m); /* r.classes are the manifest's */
    free(s);
}

int kiln_shards_detect(const char *folder) {
    char p[PATH_MAX];
    struct stat sb;
    if (kiln_source_is_url(folder)) return 1;
    return snprintf(p, sizeof p, "%s/%s", folder, KILN_MANIFEST_NAME) < (int)sizeof p && stat(p, &sb) == 0 && !S_ISDIR(sb.st_mode);
}

static kiln_status open_split(shard_records *s, const char *base, int train, const kiln_data_config *dc) {
    if (dc->val_split > 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s holds shards with their own splits: --val-split applies to DIR/<class>/... folders", base);
    kiln_status st = read_manifest(s);
    if (st != KILN_OK) return st;
    s->split = &s->m.split[train ? 1 : 0];
    if (!s->split->present)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s/%s lists no test split (packed from DIR/<class>/...): give --no-test", base,
                         KILN_MANIFEST_NAME);
    int n = s->split->nshards;
    s->src = calloc((size_t)n, sizeof *s->src);
    s->sh = calloc((size_t)n, sizeof *s->sh);
    s->first = calloc((size_t)n + 1, sizeof *s->first);
    s->r.labels = malloc((size_t)s->split->count * sizeof *s->r.labels);
    if (!s->src || !s->sh || !s->first || !s->r.labels) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", base);
    s->n = n;
    for (int k = 0; k < s->n; k++) s->first[k + 1] = s->first[k] + s->split->counts[k];
    for (int k = 0; st == KILN_OK && k < s->n; k++) st = open_shard(s, k);
    s->r.len = s->split->count;
    s->r.num_classes = s->m.num_classes;
    s->r.classes = s->m.classes;
    s->r.decoded = s->m.decoded;
    return st;
}

kiln_status kiln_shards_open(const char *base, int train, const kiln_data_config *dc, kiln_dataset **out) {
    *out = NULL;
    shard_records *s = calloc(1, sizeof *s);
    if (!s) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", base);
    s->r = (kiln_records){.read = shards_read, .will_need = shards_will_need, .fingerprint = shards_fingerprint,
                          .destroy = shards_destroy};
    size_t n = strlen(base);
    while (n > 1 && base[n - 1] == '/') n--; /* base/ and base name the same folder */
    snprintf(s->base, sizeof s->base, "%.*s", (int)n, base);
    kiln_status st = kiln_source_is_url(base) ? kiln_http_client_new(&s->http) : KILN_OK;
    if (st == KILN_OK) st = open_split(s, base, train, dc);
    if (st != KILN_OK) {
        shards_destroy(&s->r);
        return st;
    }
    char name[PATH_MAX + 16];
    snprintf(name, sizeof name, "%.*s %s", PATH_MAX - 1, s->base, train ? "train" : "test");
    return kiln_imageset_open(&s->r, name, train, dc, out);
}
