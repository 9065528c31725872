/* kiln pack: an IDX dataset written as an image folder (OUT/train/<label>/<index>.jpg,
 * OUT/test/...), so tests and benchmarks have real JPEG and PNG files. Images
 * are optionally resized with the transforms' resampler and encoded with
 * libturbojpeg (quality 90, 4:2:0 as PIL) or libspng, on every core. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/internal/file.h"
#include "data/internal/folder.h"
#include "data/internal/pack.h"

#define JPEG_QUALITY 90

typedef struct {
    kiln_idx_images src;
    int format;
    const char *dir, *ext;
} pack_job;

static kiln_status make_dirs(const char *to, const char *split) {
    char p[PATH_MAX];
    const char *parts[2] = {to, split};
    for (int i = 0; i < 2; i++) {
        if (i == 0) snprintf(p, sizeof p, "%s", to);
        else snprintf(p, sizeof p, "%s/%s", to, parts[1]);
        if (mkdir(p, 0777) != 0 && errno != EEXIST) return kiln_fail(KILN_ERR_IO, "%s: cannot create: %s", p, strerror(errno));
    }
    for (int c = 0; c < 10; c++) {
        snprintf(p, sizeof p, "%s/%s/%d", to, split, c);
        if (mkdir(p, 0777) != 0) return kiln_fail(KILN_ERR_IO, "%s: cannot create: %s", p, strerror(errno));
    }
    return KILN_OK;
}

static kiln_status write_file(const char *path, const uint8_t *data, size_t n) {
    int fd = kiln_open_write(path, 0);
    if (fd < 0) return KILN_ERR_IO;
    size_t done = 0;
    while (done < n) {
        ssize_t r = write(fd, data + done, n - done);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            close(fd);
            return kiln_fail(KILN_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        }
        done += (size_t)r;
    }
    if (close(fd) != 0) return kiln_fail(KILN_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return KILN_OK;
}

kiln_status kiln_idx_images_init(kiln_idx_images *s, const kiln_dataset *ds, const char *from, int size, int channels) {
    memset(s, 0, sizeof *s);
    kiln_data_config dc = kiln_data_defaults();
    kiln_tf_init(&s->tf, &dc, 0);
    s->size = size;
    s->channels = channels;
    if (kiln_idx_raw(ds, &s->pixels, &s->labels, &s->rows, &s->cols) == KILN_OK) return KILN_OK;
    return kiln_fail(KILN_ERR_INVALID_ARG, "--from %s: kiln pack reads fashion-mnist, mnist or a folder of IDX files (and, for "
                     "--format shard, an image folder)", from);
}

int kiln_idx_images_side(const kiln_idx_images *s) { return s->size ? s->size : (s->rows > s->cols ? s->rows : s->cols); }

kiln_status kiln_pack_resize(const kiln_image *src, int size, const kiln_tf *tf, kiln_tf_scratch *s, uint8_t *buf, kiln_image *out) {
    kiln_tf_box b = {0}; /* the whole image, resized */
    b.x = (kiln_tf_axis){0, (double)src->w / size, 0, src->w, 0, size};
    b.y = (kiln_tf_axis){0, (double)src->h / size, 0, src->h, 0, size};
    *out = (kiln_image){buf, size, size, src->c};
    return kiln_tf_apply(src, &b, tf, s, NULL, buf);
}

kiln_status kiln_idx_image(const kiln_idx_images *s, int64_t i, kiln_tf_scratch *scratch, uint8_t *buf, kiln_image *out) {
    kiln_image im = {(uint8_t *)s->pixels + i * s->rows * s->cols, s->cols, s->rows, 1};
    if (s->size) {
        kiln_status st = kiln_pack_resize(&im, s->size, &s->tf, scratch, buf, &im);
        if (st != KILN_OK) return st;
    }
    if (s->channels == 3) { /* grey to RGB: every channel the same, as PIL's convert('RGB') */
        uint8_t *rgb = buf + (size_t)im.w * im.h;
        for (int64_t p = 0; p < (int64_t)im.w * im.h; p++) rgb[3 * p] = rgb[3 * p + 1] = rgb[3 * p + 2] = im.px[p];
        im = (kiln_image){rgb, im.w, im.h, 3};
    }
    *out = im;
    return KILN_OK;
}

/* one image: made, encoded, written */
static kiln_status pack_one(const pack_job *j, int64_t i, kiln_image_ctx *ctx, kiln_tf_scratch *s, uint8_t *buf) {
    kiln_image im;
    const uint8_t *data;
    size_t n;
    kiln_status st = kiln_idx_image(&j->src, i, s, buf, &im);
    if (st == KILN_OK) st = kiln_image_encode(ctx, &im, j->format, JPEG_QUALITY, &data, &n);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%d/%lld.%s", j->dir, j->src.labels[i], (long long)i, j->ext);
    if (st == KILN_OK) st = write_file(path, data, n);
    return st;
}

/* every image of one split, split across the OpenMP team; the first error wins */
static kiln_status pack_split(const pack_job *j, int64_t count) {
    kiln_status first = KILN_OK;
    char msg[1024] = "";
    int side = kiln_idx_images_side(&j->src);
#pragma omp parallel
    {
        kiln_image_ctx *ctx = kiln_image_ctx_new();
        kiln_tf_scratch s = {0};
        uint8_t *buf = malloc((size_t)side * side * 4);
        kiln_status st = ctx && buf ? KILN_OK : kiln_fail(KILN_ERR_NOMEM, "kiln pack: out of memory");
#pragma omp for schedule(dynamic, 256)
        for (int64_t i = 0; i < count; i++)
            if (st == KILN_OK) st = pack_one(j, i, ctx, &s, buf);
        if (st != KILN_OK) {
#pragma omp critical
            if (first == KILN_OK) {
                first = st;
                snprintf(msg, sizeof msg, "%s", kiln_last_error());
            }
        }
        kiln_image_ctx_free(ctx);
        kiln_tf_scratch_free(&s);
        free(buf);
    }
    return first == KILN_OK ? KILN_OK : kiln_fail(first, "%s", msg);
}

static kiln_status check_args(const char *to, const char *format, int size, int channels, int *fmt) {
    *fmt = !strcmp(format, "jpeg") || !strcmp(format, "jpg") ? KILN_IMAGE_JPEG : !strcmp(format, "png") ? KILN_IMAGE_PNG : 0;
    if (!*fmt) return kiln_fail(KILN_ERR_INVALID_ARG, "--format: '%s' is not jpeg, png or shard", format);
    if (size < 0 || size > 4096) return kiln_fail(KILN_ERR_INVALID_ARG, "--size is %d; use 1..4096 (0: as the data)", size);
    if (channels != 1 && channels != 3) return kiln_fail(KILN_ERR_INVALID_ARG, "--channels is %d; use 1 or 3", channels);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/train", to);
    struct stat sb;
    if (stat(p, &sb) == 0) return kiln_fail(KILN_ERR_INVALID_ARG, "%s already exists: remove it or choose another --to", p);
    return KILN_OK;
}

kiln_status kiln_pack_images(const char *from, const char *to, const char *format, int size, int channels, int64_t *written) {
    *written = 0;
    if (!strcmp(format, "shard")) return kiln_pack_shards(from, to, 0, 0, size, channels, written);
    if (!channels) channels = 1;
    int fmt;
    kiln_status st = check_args(to, format, size, channels, &fmt);
    for (int train = 1; st == KILN_OK && train >= 0; train--) {
        kiln_dataset *ds = NULL;
        if ((st = kiln_dataset_open(from, train, &ds)) != KILN_OK) break;
        pack_job j;
        memset(&j, 0, sizeof j);
        if ((st = kiln_idx_images_init(&j.src, ds, from, size, channels)) != KILN_OK) {
            kiln_dataset_free(ds);
            break;
        }
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s/%s", to, train ? "train" : "test");
        j.dir = dir;
        j.format = fmt;
        j.ext = fmt == KILN_IMAGE_JPEG ? "jpg" : "png";
        st = make_dirs(to, train ? "train" : "test");
        if (st == KILN_OK) st = pack_split(&j, ds->len);
        if (st == KILN_OK) *written += ds->len;
        kiln_dataset_free(ds);
    }
    return st;
}
