/* kiln pack: a dataset written as an image folder (OUT/train/<class>/<index>.jpg,
 * OUT/test/...), so tests and benchmarks have real JPEG and PNG files. The
 * images come from IDX data or another image folder (pack_source.c),
 * optionally resized with the transforms' resampler, and are encoded with
 * libturbojpeg (quality 90, 4:2:0 as PIL) or libspng, on every core. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/internal/file.h"
#include "data/internal/pack.h"

#define JPEG_QUALITY 90

typedef struct {
    kiln_pack_src src;
    int format;
    const char *dir, *ext;
} pack_job;

static kiln_status make_dir(const char *p) {
    if (mkdir(p, 0777) != 0 && errno != EEXIST) return kiln_fail(KILN_ERR_IO, "%s: cannot create: %s", p, strerror(errno));
    return KILN_OK;
}

/* OUT, OUT/<split> and a folder per class */
static kiln_status make_dirs(const char *to, const pack_job *j) {
    char p[PATH_MAX], num[16];
    kiln_status st = make_dir(to);
    if (st == KILN_OK) st = make_dir(j->dir);
    for (int c = 0; st == KILN_OK && c < j->src.num_classes; c++) {
        snprintf(p, sizeof p, "%s/%s", j->dir, kiln_pack_src_class(&j->src, c, num, sizeof num));
        if (mkdir(p, 0777) != 0) st = kiln_fail(KILN_ERR_IO, "%s: cannot create: %s", p, strerror(errno));
    }
    return st;
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

/* one image: made, encoded, written */
static kiln_status pack_one(void *ctx, int64_t i, kiln_pack_thread *t) {
    const pack_job *j = ctx;
    kiln_image im;
    const uint8_t *data;
    size_t n;
    char path[PATH_MAX], num[16];
    kiln_status st = kiln_pack_src_image(&j->src, i, t, &im);
    if (st == KILN_OK) st = kiln_image_encode(t->ctx, &im, j->format, JPEG_QUALITY, &data, &n);
    const char *cls = kiln_pack_src_class(&j->src, kiln_pack_src_label(&j->src, i), num, sizeof num);
    snprintf(path, sizeof path, "%s/%s/%lld.%s", j->dir, cls, (long long)i, j->ext);
    if (st == KILN_OK) st = write_file(path, data, n);
    return st;
}

static kiln_status check_args(const char *to, const char *format, int size, int channels, int *fmt) {
    *fmt = !strcmp(format, "jpeg") || !strcmp(format, "jpg") ? KILN_IMAGE_JPEG : !strcmp(format, "png") ? KILN_IMAGE_PNG : 0;
    if (!*fmt) return kiln_fail(KILN_ERR_INVALID_ARG, "--format: '%s' is not jpeg, png or shard", format);
    if (size < 0 || size > 4096) return kiln_fail(KILN_ERR_INVALID_ARG, "--size is %d; use 1..4096 (0: as the data)", size);
    if (channels != 0 && channels != 1 && channels != 3) return kiln_fail(KILN_ERR_INVALID_ARG, "--channels is %d; use 1 or 3", channels);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/train", to);
    struct stat sb;
    if (stat(p, &sb) == 0) return kiln_fail(KILN_ERR_INVALID_ARG, "%s already exists: remove it or choose another --to", p);
    return KILN_OK;
}

kiln_status kiln_pack_images(const char *from, const char *to, const char *format, int size, int channels, int64_t *written) {
    *written = 0;
    if (!strcmp(format, "shard")) return kiln_pack_shards(from, to, 0, 0, size, channels, written);
    int fmt;
    kiln_status st = check_args(to, format, size, channels, &fmt);
    for (int train = 1; st == KILN_OK && train >= 0; train--) {
        pack_job j = {.format = fmt, .ext = fmt == KILN_IMAGE_JPEG ? "jpg" : "png"};
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s/%s", to, train ? "train" : "test");
        j.dir = dir;
        st = kiln_pack_src_open(from, train, size, channels, &j.src);
        if (st == KILN_OK && j.src.len) st = make_dirs(to, &j);
        if (st == KILN_OK) st = kiln_pack_each(&j.src, 0, j.src.len, pack_one, &j);
        if (st == KILN_OK) *written += j.src.len;
        kiln_pack_src_close(&j.src);
    }
    return st;
}
