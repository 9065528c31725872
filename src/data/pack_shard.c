/* kiln pack --format shard: a dataset (IDX data or an image folder) written
 * as shards of N samples and the manifest index.json (manifest.h). An image
 * folder's files go in as they are (no re-encoding; each is checked to be a
 * JPEG or PNG of sane size first); IDX images become PNG files (lossless).
 * With --decoded, records are 8-bit pixels instead. Records of one shard are
 * made on every core, then written in order; each shard is written
 * atomically, the manifest last, and a failure removes the shards already
 * written, so OUT never holds a partial index.json. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "data/internal/folder.h"
#include "data/internal/manifest.h"
#include "data/internal/pack.h"
#include "data/internal/records.h"
#include "data/internal/shard.h"

#define DEFAULT_SHARD_SIZE 4096

typedef struct {
    kiln_pack_src src;
    int decoded;
} pack_src;

typedef struct {
    uint8_t *data;
    int64_t n;
} packed;

/* a copy of the bytes (and a decoded record's size header first) */
static kiln_status keep(const kiln_image *im, const uint8_t *bytes, size_t n, packed *out) {
    int64_t head = im ? KILN_SHARD_PIXEL_HEADER : 0, body = im ? (int64_t)im->w * im->h * im->c : (int64_t)n;
    out->data = malloc((size_t)(head + body));
    if (!out->data) return kiln_fail(KILN_ERR_NOMEM, "kiln pack: out of memory");
    if (im) kiln_shard_pixel_header(im, out->data);
    memcpy(out->data + head, im ? im->px : bytes, (size_t)body);
    out->n = head + body;
    return KILN_OK;
}

/* record i: a folder's file as it is, IDX data's image as PNG, or (decoded) the pixels */
static kiln_status make_record(const pack_src *p, int64_t i, kiln_pack_thread *t, packed *out) {
    kiln_image im;
    kiln_record rec;
    const uint8_t *data;
    size_t n;
    int fmt, w, h;
    kiln_status st;
    if (p->src.r && !p->decoded) {
        st = p->src.r->read(p->src.r, i, t->ctx, t->name, &rec);
        if (st == KILN_OK) st = kiln_image_info(t->ctx, rec.data, rec.n, t->name, &fmt, &w, &h); /* an image, of sane size */
        return st == KILN_OK ? keep(NULL, rec.data, rec.n, out) : st;
    }
    if ((st = kiln_pack_src_image(&p->src, i, t, &im)) != KILN_OK) return st;
    if (p->decoded) return keep(&im, NULL, 0, out);
    st = kiln_image_encode(t->ctx, &im, KILN_IMAGE_PNG, 0, &data, &n);
    return st == KILN_OK ? keep(NULL, data, n, out) : st;
}

typedef struct {
    const pack_src *p;
    packed *recs;
    int64_t a;
} record_job;

static kiln_status record_one(void *ctx, int64_t i, kiln_pack_thread *t) {
    record_job *j = ctx;
    return make_record(j->p, i, t, &j->recs[i - j->a]);
}

static kiln_status write_shard(const pack_src *p, const char *to, const char *file, int64_t a, int64_t b) {
    packed *recs = calloc((size_t)(b - a), sizeof *recs);
    if (!recs) return kiln_fail(KILN_ERR_NOMEM, "kiln pack: out of memory");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", to, file);
    kiln_shard_writer *w = NULL;
    record_job job = {p, recs, a};
    kiln_status st = kiln_pack_each(&p->src, a, b, record_one, &job); /* records made on every core, written in order */
    if (st == KILN_OK) st = kiln_shard_writer_new(path, p->decoded ? KILN_SHARD_DECODED : KILN_SHARD_ENCODED, b - a, &w);
    for (int64_t i = a; st == KILN_OK && i < b; i++) st = kiln_shard_writer_add(w, kiln_pack_src_label(&p->src, i), recs[i - a].data, recs[i - a].n);
    if (st == KILN_OK) st = kiln_shard_writer_finish(w);
    else kiln_shard_writer_abort(w);
    for (int64_t i = 0; i < b - a; i++) free(recs[i].data);
    free(recs);
    return st;
}

static kiln_status pack_split(const pack_src *p, const char *to, int train, int64_t shard_size, kiln_manifest *m) {
    kiln_status st = KILN_OK;
    for (int64_t a = 0, k = 0; st == KILN_OK && a < p->src.len; a += shard_size, k++) {
        int64_t b = a + shard_size < p->src.len ? a + shard_size : p->src.len;
        char file[64];
        snprintf(file, sizeof file, "%s-%05lld.kshard", train ? "train" : "test", (long long)k);
        st = write_shard(p, to, file, a, b);
        if (st == KILN_OK) st = kiln_manifest_add(m, train, file, b - a);
    }
    return st;
}

/* the manifest's class names, from the first split */
static kiln_status set_classes(kiln_manifest *m, const kiln_pack_src *p) {
    if (m->classes) return KILN_OK;
    if (!(m->classes = calloc((size_t)p->num_classes, sizeof *m->classes))) return kiln_fail(KILN_ERR_NOMEM, "kiln pack: out of memory");
    for (int i = 0; i < p->num_classes; i++) {
        char num[16];
        if (!(m->classes[m->num_classes++] = strdup(kiln_pack_src_class(p, i, num, sizeof num))))
            return kiln_fail(KILN_ERR_NOMEM, "kiln pack: out of memory");
    }
    return KILN_OK;
}

static kiln_status check(const char *to, int folder, int decoded, int64_t shard_size, int size, int channels, int *made) {
    if (shard_size < 1 || shard_size > KILN_SHARD_MAX_COUNT)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--shard-size is %lld; use 1..%lld", (long long)shard_size, (long long)KILN_SHARD_MAX_COUNT);
    if (size < 0 || size > 4096) return kiln_fail(KILN_ERR_INVALID_ARG, "--size is %d; use 1..4096 (0: as the data)", size);
    if (channels != 0 && channels != 1 && channels != 3) return kiln_fail(KILN_ERR_INVALID_ARG, "--channels is %d; use 1 or 3", channels);
    if (folder && !decoded && (size || channels))
        return kiln_fail(KILN_ERR_INVALID_ARG, "--size and --channels remake the images: from an image folder they need --decoded "
                         "(encoded shards keep each file's bytes as they are)");
    char p[PATH_MAX];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", to, KILN_MANIFEST_NAME);
    if (stat(p, &sb) == 0) return kiln_fail(KILN_ERR_INVALID_ARG, "%s already exists: remove it or choose another --to", p);
    *made = mkdir(to, 0777) == 0;
    if (!*made && errno != EEXIST) return kiln_fail(KILN_ERR_IO, "%s: cannot create: %s", to, strerror(errno));
    return KILN_OK;
}

/* after a failure: the shards already written go */
static void remove_shards(const char *to, const kiln_manifest *m) {
    char p[PATH_MAX];
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < m->split[s].nshards; i++) {
            snprintf(p, sizeof p, "%s/%s", to, m->split[s].files[i]);
            unlink(p);
        }
}

kiln_status kiln_pack_shards(const char *from, const char *to, int decoded, int64_t shard_size, int size, int channels,
                             int64_t *written) {
    *written = 0;
    int folder = kiln_pack_is_folder(from);
    if (!shard_size) shard_size = DEFAULT_SHARD_SIZE;
    int made = 0;
    kiln_status st = check(to, folder, decoded, shard_size, size, channels, &made);
    if (st != KILN_OK) return st;
    kiln_manifest m;
    memset(&m, 0, sizeof m);
    m.decoded = decoded;
    for (int train = 1; st == KILN_OK && train >= 0; train--) {
        pack_src p = {.decoded = decoded};
        st = kiln_pack_src_open(from, train, size, channels, &p.src);
        if (st == KILN_OK && p.src.len) st = set_classes(&m, &p.src);
        if (st == KILN_OK && p.src.len) st = pack_split(&p, to, train, shard_size, &m);
        if (st == KILN_OK) *written += p.src.len;
        kiln_pack_src_close(&p.src);
    }
    if (st == KILN_OK) st = kiln_manifest_write(to, &m);
    if (st != KILN_OK) remove_shards(to, &m);
    if (st != KILN_OK && made) rmdir(to);
    kiln_manifest_free(&m);
    return st;
}
