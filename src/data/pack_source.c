/* The data kiln pack reads (internal/pack.h): IDX data (fashion-mnist, mnist,
 * a folder of IDX files), whose grey images are resized and copied to RGB as
 * asked, or an image folder, whose files are decoded (and resized). Both
 * packers, image folders (pack.c) and shards (pack_shard.c), take their
 * images from here. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "data/internal/folder.h"
#include "data/internal/pack.h"

int kiln_pack_is_folder(const char *from) {
    return strcmp(from, "fashion-mnist") != 0 && strcmp(from, "mnist") != 0 && kiln_imagefolder_detect(from);
}

static int is_dir_at(const char *a, const char *b) {
    char p[PATH_MAX];
    struct stat sb;
    return snprintf(p, sizeof p, "%s/%s", a, b) < (int)sizeof p && stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static kiln_status open_idx(const char *from, int train, kiln_pack_src *p) {
    kiln_status st = kiln_dataset_open(from, train, &p->ds);
    if (st == KILN_OK && kiln_idx_raw(p->ds, &p->pixels, &p->labels8, &p->rows, &p->cols) != KILN_OK)
        st = kiln_fail(KILN_ERR_INVALID_ARG, "--from %s: kiln pack reads fashion-mnist, mnist, a folder of IDX files or an "
                       "image folder", from);
    if (st != KILN_OK) return st;
    p->len = p->ds->len;
    p->num_classes = 10;
    p->side = p->size ? p->size : (p->rows > p->cols ? p->rows : p->cols);
    return KILN_OK;
}

kiln_status kiln_pack_src_open(const char *from, int train, int size, int channels, kiln_pack_src *p) {
    memset(p, 0, sizeof *p);
    int folder = kiln_pack_is_folder(from);
    kiln_data_config dc = kiln_data_defaults();
    kiln_tf_init(&p->tf, &dc, 0);
    p->size = size;
    p->channels = channels ? channels : folder ? 3 : 1;
    if (!folder) return open_idx(from, train, p);
    if (!train && !(is_dir_at(from, "train") && is_dir_at(from, "test"))) return KILN_OK; /* DIR/<class>/...: train only */
    kiln_status st = kiln_imagefolder_records(from, train, &dc, &p->r);
    if (st != KILN_OK) return st;
    p->len = p->r->len;
    p->num_classes = p->r->num_classes;
    p->classes = p->r->classes;
    p->side = size ? size : 1;
    return KILN_OK;
}

void kiln_pack_src_close(kiln_pack_src *p) {
    kiln_dataset_free(p->ds);
    if (p->r) p->r->destroy(p->r);
    memset(p, 0, sizeof *p);
}

int32_t kiln_pack_src_label(const kiln_pack_src *p, int64_t i) { return p->r ? p->r->labels[i] : p->labels8[i]; }

const char *kiln_pack_src_class(const kiln_pack_src *p, int k, char *buf, size_t len) {
    if (p->classes) return p->classes[k];
    snprintf(buf, len, "%d", k);
    return buf;
}

kiln_status kiln_pack_thread_init(kiln_pack_thread *t, const kiln_pack_src *p) {
    memset(t, 0, sizeof *t);
    t->ctx = kiln_image_ctx_new();
    t->buf = malloc((size_t)p->side * p->side * 4);
    return t->ctx && t->buf ? KILN_OK : kiln_fail(KILN_ERR_NOMEM, "kiln pack: out of memory");
}

void kiln_pack_thread_free(kiln_pack_thread *t) {
    kiln_image_ctx_free(t->ctx);
    kiln_tf_scratch_free(&t->scratch);
    free(t->buf);
}

/* src resized to size x size (bilinear, antialiased, as Resize((size, size))) into buf */
static kiln_status resize(const kiln_pack_src *p, const kiln_image *src, kiln_pack_thread *t, uint8_t *buf, kiln_image *out) {
    kiln_tf_box b = {0}; /* the whole image, resized */
    b.x = (kiln_tf_axis){0, (double)src->w / p->size, 0, src->w, 0, p->size};
    b.y = (kiln_tf_axis){0, (double)src->h / p->size, 0, src->h, 0, p->size};
    kiln_image resized = {buf, p->size, p->size, src->c}; /* out may be src: set it after reading src */
    kiln_status st = kiln_tf_apply(src, &b, &p->tf, &t->scratch, NULL, buf);
    *out = resized;
    return st;
}

kiln_status kiln_pack_each(const kiln_pack_src *p, int64_t a, int64_t b, kiln_pack_fn one, void *ctx) {
    kiln_status first = KILN_OK;
    char msg[1024] = "";
#pragma omp parallel
    {
        kiln_pack_thread t;
        kiln_status st = kiln_pack_thread_init(&t, p);
#pragma omp for schedule(dynamic, 64)
        for (int64_t i = a; i < b; i++)
            if (st == KILN_OK) st = one(ctx, i, &t);
        if (st != KILN_OK) {
#pragma omp critical
            if (first == KILN_OK) {
                first = st;
                snprintf(msg, sizeof msg, "%s", kiln_last_error());
            }
        }
        kiln_pack_thread_free(&t);
    }
    return first == KILN_OK ? KILN_OK : kiln_fail(first, "%s", msg);
}

kiln_status kiln_pack_src_image(const kiln_pack_src *p, int64_t i, kiln_pack_thread *t, kiln_image *out) {
    kiln_status st = KILN_OK;
    if (p->r) {
        kiln_record rec;
        st = p->r->read(p->r, i, t->ctx, t->name, &rec);
        if (st == KILN_OK) st = kiln_image_decode(t->ctx, rec.data, rec.n, t->name, p->channels, 1.0, out);
        return st == KILN_OK && p->size ? resize(p, out, t, t->buf, out) : st;
    }
    snprintf(t->name, sizeof t->name, "%s sample %lld", p->ds->name, (long long)i);
    kiln_image im = {(uint8_t *)p->pixels + i * p->rows * p->cols, p->cols, p->rows, 1};
    if (p->size && (st = resize(p, &im, t, t->buf, &im)) != KILN_OK) return st;
    if (p->channels == 3) { /* grey to RGB: every channel the same, as PIL's convert('RGB') */
        uint8_t *rgb = t->buf + (size_t)im.w * im.h;
        for (int64_t q = 0; q < (int64_t)im.w * im.h; q++) rgb[3 * q] = rgb[3 * q + 1] = rgb[3 * q + 2] = im.px[q];
        im = (kiln_image){rgb, im.w, im.h, 3};
    }
    *out = im;
    return KILN_OK;
}
