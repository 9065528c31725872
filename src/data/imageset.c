/* One dataset implementation for every kind of image records (records.h):
 * a sample is read (a file, or a shard's record), decoded (a JPEG at the
 * smallest DCT scale its transform box allows), transformed in one
 * resampling pass straight into the batch slot. Each thread takes a decoder
 * and its buffers from a pool and gives them back, so nothing is allocated per
 * sample once the buffers have grown.
 *
 * With a cache, the transform is split in two: the deterministic part
 * (`det`: a decode at full size when the training crop is random; Resize +
 * CenterCrop into 8-bit pixels otherwise) is stored once, and the rest
 * (`rest`: RandomResizedCrop, flip, ToTensor, Normalize; or only flip and
 * normalisation) runs on the stored pixels every epoch, with the same random
 * draws as without a cache. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/internal/trace.h"
#include "data/internal/cache.h"
#include "data/internal/records.h"
#include "data/internal/shard.h"
#include "data/internal/transform.h"

#define POOL_MAX 300

typedef struct worker_state {
    kiln_image_ctx *img;
    kiln_tf_scratch scratch;
    uint8_t *px;   /* the deterministic part's pixels, on their way into the cache */
    size_t cap;
    char name[KILN_RECORD_NAME];
} worker_state;

typedef struct imageset {
    kiln_dataset ds;
    kiln_records *r;
    kiln_tf tf, det, rest;
    kiln_cache *cache;
    int skip_bad;
    pthread_mutex_t mu;
    worker_state *pool[POOL_MAX];
    int npool;
    char name[PATH_MAX + 16];
} imageset;

uint64_t kiln_hash(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* ---- the decoder pool ---- */

static worker_state *take(imageset *d) {
    pthread_mutex_lock(&d->mu);
    worker_state *w = d->npool ? d->pool[--d->npool] : NULL;
    pthread_mutex_unlock(&d->mu);
    if (!w && (w = calloc(1, sizeof *w)) && !(w->img = kiln_image_ctx_new())) {
        free(w);
        w = NULL;
    }
    return w;
}

static void worker_free(worker_state *w) {
    kiln_image_ctx_free(w->img);
    kiln_tf_scratch_free(&w->scratch);
    free(w->px);
    free(w);
}

static void give(imageset *d, worker_state *w) {
    pthread_mutex_lock(&d->mu);
    if (d->npool < POOL_MAX) d->pool[d->npool++] = w, w = NULL;
    pthread_mutex_unlock(&d->mu);
    if (w) worker_free(w);
}

/* ---- one sample ---- */

static kiln_status mixed(const imageset *d, const char *name, int iw, int ih, const kiln_tf_box *b) {
    if (b->x.out == d->ds.sample_shape[2] && b->y.out == d->ds.sample_shape[1]) return KILN_OK;
    return kiln_fail(KILN_ERR_FORMAT, "%s: %dx%d gives a %dx%d sample, but the first images give %lldx%lld: images of mixed "
                     "sizes need --resize N --center-crop N (or --random-resized-crop N)", name, iw, ih, b->x.out, b->y.out,
                     (long long)d->ds.sample_shape[2], (long long)d->ds.sample_shape[1]);
}

/* a decoded record's pixels, with the transform's channels */
static kiln_status pixels(const imageset *d, worker_state *w, const kiln_record *rec, kiln_image *im) {
    kiln_image raw;
    kiln_status st = kiln_shard_pixels(rec->data, (int64_t)rec->n, w->name, &raw);
    return st == KILN_OK ? kiln_image_convert(w->img, &raw, d->tf.channels, w->name, im) : st;
}

/* --trace spans of a worker's sample: read, decode, augment (0 when not tracing) */
static double span_start(void) { return kiln_trace_on() ? kiln_trace_now() : 0; }
static void span_end(const char *name, double t0) {
    if (t0 > 0) kiln_trace_span(name, "loader", t0, kiln_trace_now());
}

/* transform t of decoded pixels, into x (float CHW) or x_u8 (u8 HWC) */
static kiln_status from_image(const imageset *d, worker_state *w, const kiln_tf *t, const kiln_image *im, uint64_t key,
                              const char *name, float *x, uint8_t *x_u8) {
    kiln_tf_box b;
    kiln_status st = kiln_tf_plan(t, im->w, im->h, key, name, &b);
    if (st == KILN_OK) st = mixed(d, name, im->w, im->h, &b);
    if (st != KILN_OK) return st;
    double t0 = span_start();
    st = kiln_tf_apply(im, &b, t, &w->scratch, x, x_u8);
    span_end("augment", t0);
    return st;
}

/* transform t of an image file: planned first, so a JPEG is decoded at the smallest DCT scale the box
 * allows, and only the part of it the box reads */
static kiln_status from_file(const imageset *d, worker_state *w, const kiln_tf *t, const kiln_record *rec, uint64_t key,
                             float *x, uint8_t *x_u8) {
    int fmt, iw, ih;
    kiln_tf_box b;
    kiln_image im;
    double t0 = span_start();
    kiln_status st = kiln_image_peek(w->img, rec->data, rec->n, w->name, &fmt, &iw, &ih);
    if (st == KILN_OK) st = kiln_tf_plan(t, iw, ih, key, w->name, &b);
    if (st == KILN_OK) st = mixed(d, w->name, iw, ih, &b);
    if (st != KILN_OK) return st;
    st = kiln_tf_decode(w->img, rec->data, rec->n, w->name, t->channels, fmt, iw, ih, &b, &im);
    span_end("decode", t0);
    if (st != KILN_OK) return st;
    t0 = span_start();
    st = kiln_tf_apply(&im, &b, t, &w->scratch, x, x_u8);
    span_end("augment", t0);
    return st;
}

static kiln_status fresh(const imageset *d, worker_state *w, const kiln_record *rec, uint64_t key, float *x) {
    if (!d->r->decoded) return from_file(d, w, &d->tf, rec, key, x, NULL);
    kiln_image im;
    kiln_status st = pixels(d, w, rec, &im);
    return st == KILN_OK ? from_image(d, w, &d->tf, &im, key, w->name, x, NULL) : st;
}

/* the part of the transform the cache keeps: the full decode, or the resized and cropped pixels */
static kiln_status deterministic(const imageset *d, worker_state *w, const kiln_record *rec, kiln_image *im) {
    if (d->tf.random && d->r->decoded) return pixels(d, w, rec, im);
    if (d->tf.random) return kiln_image_decode(w->img, rec->data, rec->n, w->name, d->tf.channels, 1.0, im);
    int C = d->tf.channels, ow = (int)d->ds.sample_shape[2], oh = (int)d->ds.sample_shape[1];
    size_t need = (size_t)ow * oh * C;
    if (need > w->cap) {
        uint8_t *p = realloc(w->px, need);
        if (!p) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", w->name);
        w->px = p, w->cap = need;
    }
    kiln_status st = KILN_OK;
    kiln_image src;
    if (!d->r->decoded) st = from_file(d, w, &d->det, rec, 0, NULL, w->px);
    else if ((st = pixels(d, w, rec, &src)) == KILN_OK) st = from_image(d, w, &d->det, &src, 0, w->name, NULL, w->px);
    *im = (kiln_image){w->px, ow, oh, C};
    return st;
}

static kiln_status get_sample(const imageset *d, worker_state *w, int64_t i, uint64_t key, float *x) {
    kiln_image im;
    const char *name;
    kiln_status st;
    double t0 = span_start();
    if (d->cache && kiln_cache_ready(d->cache)) {
        st = kiln_cache_get(d->cache, i, &im, &name);
        span_end("read", t0);
        return st == KILN_OK ? from_image(d, w, &d->rest, &im, key, name, x, NULL) : st;
    }
    kiln_record rec;
    st = d->r->read(d->r, i, w->img, w->name, &rec);
    span_end("read", t0);
    if (st != KILN_OK && st != KILN_ERR_FORMAT) return st;
    if (!d->cache) return st == KILN_OK ? fresh(d, w, &rec, key, x) : st;
    if (st == KILN_OK) st = deterministic(d, w, &rec, &im);
    if (st == KILN_ERR_FORMAT) kiln_cache_put_failure(d->cache, i, kiln_last_error()); /* corrupt for good, until the file changes */
    if (st != KILN_OK) return st;
    kiln_cache_put(d->cache, i, &im);
    return from_image(d, w, &d->rest, &im, key, w->name, x, NULL);
}

static kiln_status set_get(const kiln_dataset *ds, int64_t index, uint64_t key, float *x, int32_t *y) {
    imageset *d = ds->impl;
    if (index < 0 || index >= ds->len)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s: sample %lld is out of range", d->name, (long long)index);
    worker_state *w = take(d);
    if (!w) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", d->name);
    kiln_status st = get_sample(d, w, index, key, x);
    give(d, w);
    *y = d->r->labels[index];
    return st;
}

static void set_will_need(const kiln_dataset *ds, const int64_t *index, int64_t n) {
    const imageset *d = ds->impl;
    if (d->r->will_need && !(d->cache && kiln_cache_ready(d->cache))) d->r->will_need(d->r, index, n);
}

static void set_destroy(kiln_dataset *ds) {
    imageset *d = ds->impl;
    for (int i = 0; i < d->npool; i++) worker_free(d->pool[i]);
    pthread_mutex_destroy(&d->mu);
    kiln_cache_free(d->cache);
    d->r->destroy(d->r);
    free(d);
}

/* ---- opening ---- */

static kiln_status dims(worker_state *w, const kiln_records *r, const kiln_record *rec, int *iw, int *ih) {
    kiln_image im;
    int fmt;
    if (!r->decoded) return kiln_image_info(w->img, rec->data, rec->n, w->name, &fmt, iw, ih);
    kiln_status st = kiln_shard_pixels(rec->data, (int64_t)rec->n, w->name, &im);
    *iw = im.w, *ih = im.h;
    return st;
}

/* the sample shape from the deterministic transforms of each class's first sample */
static kiln_status probe(imageset *d, worker_state *w) {
    const kiln_records *r = d->r;
    kiln_tf fixed = d->tf;
    fixed.random = fixed.hflip = 0;
    unsigned char *seen = calloc((size_t)r->num_classes, 1);
    if (!seen) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", d->name);
    int out_w = -1, out_h = -1, first = 0, nseen = 0;
    kiln_status st = KILN_OK;
    for (int64_t i = 0; st == KILN_OK && i < r->len && nseen < r->num_classes; i++) {
        int k = r->labels[i], iw = 0, ih = 0;
        if (seen[k]) continue;
        seen[k] = 1, nseen++;
        kiln_record rec;
        kiln_tf_box b;
        st = r->read(r, i, w->img, w->name, &rec);
        if (st == KILN_OK) st = dims(w, r, &rec, &iw, &ih);
        if (st == KILN_ERR_FORMAT && d->skip_bad) { /* the class's next file tells its size instead */
            kiln_log(KILN_LOG_WARN, "--bad-samples skip: %s", kiln_last_error());
            seen[k] = 0, nseen--;
            st = KILN_OK;
            continue;
        }
        if (st == KILN_OK) st = kiln_tf_plan(&fixed, iw, ih, 0, w->name, &b);
        if (st != KILN_OK) break;
        if (d->tf.random) b.x.out = b.y.out = d->tf.rrc;
        if (out_w < 0) out_w = b.x.out, out_h = b.y.out, first = k;
        else if (b.x.out != out_w || b.y.out != out_h)
            st = kiln_fail(KILN_ERR_FORMAT, "%s: %dx%d gives a %dx%d sample, but class '%s' starts with %dx%d: images of mixed "
                           "sizes need --resize N --center-crop N (or --random-resized-crop N)", w->name, iw, ih, b.x.out,
                           b.y.out, r->classes[first], out_w, out_h);
    }
    free(seen);
    d->ds.sample_ndim = 3;
    d->ds.sample_shape[0] = d->tf.channels;
    d->ds.sample_shape[1] = out_h;
    d->ds.sample_shape[2] = out_w;
    return st;
}

/* the cache's key: the data's identity and the settings of the part it keeps */
static kiln_status open_cache(imageset *d, const char *dir, int train) {
    uint64_t h = kiln_hash(KILN_HASH_SEED, "kiln-cache-1", 12);
    kiln_status st = d->r->fingerprint(d->r, &h);
    if (st != KILN_OK) return st;
    const int32_t settings[6] = {train, d->tf.channels, d->tf.random, d->tf.random ? 0 : d->tf.resize,
                                 d->tf.random ? 0 : d->tf.crop, d->r->decoded};
    h = kiln_hash(h, settings, sizeof settings);
    return kiln_cache_open(dir, train ? "train" : "test", h, d->ds.len, d->r->labels, &d->cache);
}

kiln_status kiln_imageset_open(kiln_records *r, const char *name, int train, const kiln_data_config *dc, kiln_dataset **out) {
    *out = NULL;
    imageset *d = calloc(1, sizeof *d);
    if (!d) {
        r->destroy(r);
        return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", name);
    }
    pthread_mutex_init(&d->mu, NULL);
    d->r = r;
    snprintf(d->name, sizeof d->name, "%s", name);
    d->ds = (kiln_dataset){.name = d->name, .len = r->len, .num_classes = r->num_classes, .get = set_get,
                           .destroy = set_destroy, .will_need = set_will_need, .impl = d};
    kiln_tf_init(&d->tf, dc, train);
    d->skip_bad = dc->skip_bad;
    d->det = d->tf;
    d->det.hflip = 0;
    d->rest = d->tf;
    if (!d->tf.random) d->rest.resize = d->rest.crop = 0; /* the stored pixels are resized and cropped already */
    worker_state *w = take(d);
    kiln_status st = w ? probe(d, w) : kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", name);
    if (w) give(d, w);
    if (st == KILN_OK && dc->cache && dc->cache[0]) st = open_cache(d, dc->cache, train);
    if (st != KILN_OK) {
        set_destroy(&d->ds);
        return st;
    }
    *out = &d->ds;
    return KILN_OK;
}
