/* CIFAR-10's binary version (`--data cifar10:DIR`): data_batch_1..5.bin (the
 * training split) and test_batch.bin, each a run of 3073-byte records: the
 * label byte, then 1024 red, 1024 green and 1024 blue values of a 32x32 image
 * in row-major order. The files are checked whole at open (sizes, labels);
 * pixels stay uint8 in memory, planar as stored (150 MB for the training
 * split instead of 600 MB as float), and become float in `get`: through the
 * per-channel table alone (and the flip) when no resize or crop is asked
 * for, else through the image folders' transform code (transform.c). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/internal/file.h"
#include "data/internal/folder.h"
#include "data/internal/raw_transform.h"

#define CIFAR_SIDE 32
#define CIFAR_PLANE (CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_PIXELS (3 * CIFAR_PLANE)
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
#define CIFAR_CLASSES 10
#define CIFAR_TRAIN_FILES 5
/* each real file is 30 MB; this bounds the arithmetic and the allocation */
#define CIFAR_MAX_FILE ((int64_t)1 << 31)
#define CIFAR_SOURCE "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"

typedef struct cifar {
    kiln_dataset ds;
    uint8_t *pixels; /* [len, 3, 32, 32] */
    uint8_t *labels; /* [len] */
    kiln_tf tf;
    int direct;      /* no resize or crop: only the table (and the flip) */
    kiln_raw_pool pool;
    char name[PATH_MAX + 32];
} cifar;

/* PIL's convert('L') of one pixel */
static inline uint8_t grey(const uint8_t *p, size_t i) {
    return (uint8_t)((p[i] * 19595u + p[CIFAR_PLANE + i] * 38470u + p[2 * CIFAR_PLANE + i] * 7471u + 0x8000u) >> 16);
}

/* planar u8 to the sample: the table of each channel, columns reversed when flipped */
static void write_direct(const cifar *d, const uint8_t *p, int flip, float *x) {
    int C = d->tf.channels;
    for (int c = 0; c < C; c++) {
        const float *lut = d->tf.lut[c];
        const uint8_t *src = p + (size_t)c * CIFAR_PLANE;
        float *dst = x + (size_t)c * CIFAR_PLANE;
        for (int y = 0; y < CIFAR_SIDE; y++)
            for (int i = 0; i < CIFAR_SIDE; i++) {
                size_t at = (size_t)y * CIFAR_SIDE + i;
                dst[(size_t)y * CIFAR_SIDE + (flip ? CIFAR_SIDE - 1 - i : i)] = lut[C == 1 ? grey(p, at) : src[at]];
            }
    }
}

/* resize and crops: the sample as an HWC image through kiln_tf_apply */
static kiln_status write_transformed(cifar *d, const uint8_t *p, const kiln_tf_box *b, float *x) {
    kiln_raw_buf *s = kiln_raw_pool_take(&d->pool);
    if (!s) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", d->name);
    int C = d->tf.channels;
    for (size_t i = 0; i < CIFAR_PLANE; i++)
        for (int c = 0; c < C; c++) s->hwc[i * C + c] = C == 1 ? grey(p, i) : p[(size_t)c * CIFAR_PLANE + i];
    kiln_image im = {s->hwc, CIFAR_SIDE, CIFAR_SIDE, C};
    kiln_status st = kiln_tf_apply(&im, b, &d->tf, &s->tf, x, NULL);
    kiln_raw_pool_give(&d->pool, s);
    return st;
}

static kiln_status cifar_get(const kiln_dataset *ds, int64_t index, uint64_t key, float *x, int32_t *y) {
    cifar *d = ds->impl;
    if (index < 0 || index >= ds->len)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s: sample %lld is out of range (0..%lld)", d->name, (long long)index,
                         (long long)ds->len - 1);
    kiln_tf_box b;
    kiln_status st = kiln_tf_plan(&d->tf, CIFAR_SIDE, CIFAR_SIDE, key, d->name, &b);
    const uint8_t *p = d->pixels + (size_t)index * CIFAR_PIXELS;
    if (st == KILN_OK && d->direct) write_direct(d, p, b.flip, x);
    else if (st == KILN_OK) st = write_transformed(d, p, &b, x);
    *y = d->labels[index];
    return st;
}

static void cifar_destroy(kiln_dataset *ds) {
    cifar *d = ds->impl;
    kiln_raw_pool_free(&d->pool);
    free(d->pixels);
    free(d->labels);
    free(d);
}

/* ---- reading the batch files ---- */

static kiln_status missing(const char *path) {
    return kiln_fail(KILN_ERR_IO, "%s not found: --data cifar10:DIR takes the folder of CIFAR-10's binary version "
                     "(data_batch_1..5.bin, test_batch.bin), which Debian does not package: download %s and unpack it "
                     "(tar xzf; DIR may be the cifar-10-batches-bin folder or the one holding it)", path, CIFAR_SOURCE);
}

/* the file's record count, from its size (a whole number of records) */
static kiln_status records_of(const char *path, int64_t *count) {
    struct stat sb;
    if (stat(path, &sb) != 0) return errno == ENOENT ? missing(path) : kiln_fail(KILN_ERR_IO, "%s: %s", path, strerror(errno));
    int64_t size = (int64_t)sb.st_size;
    if (!S_ISREG(sb.st_mode)) return kiln_fail(KILN_ERR_IO, "%s: not a regular file (%s)", path, kiln_file_kind(sb.st_mode));
    if (size == 0 || size % CIFAR_RECORD != 0 || size > CIFAR_MAX_FILE)
        return kiln_fail(KILN_ERR_FORMAT, "%s: %lld bytes is not a whole number of CIFAR-10 records (%d bytes each: a label "
                         "byte, then 3072 pixel bytes)%s: truncated, or not CIFAR-10's binary version?", path, (long long)size,
                         CIFAR_RECORD, size % (CIFAR_RECORD + 1) == 0 && size ? " (3074-byte records are CIFAR-100's)" : "");
    *count = size / CIFAR_RECORD;
    return KILN_OK;
}

/* `count` records of `path` into pixels and labels; every label checked */
static kiln_status read_batch(const char *path, int64_t count, uint8_t *pixels, uint8_t *labels) {
    int64_t size = 0;
    int fd = kiln_open_read(path, &size); /* refuses a FIFO or device, sets the message */
    if (fd < 0) return KILN_ERR_IO;
    enum { CHUNK = 256 };
    uint8_t *buf = malloc((size_t)CHUNK * CIFAR_RECORD);
    kiln_status st = buf ? KILN_OK : kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", path);
    if (st == KILN_OK && size != count * CIFAR_RECORD)
        st = kiln_fail(KILN_ERR_IO, "%s: the file changed size while being opened", path);
    for (int64_t at = 0; st == KILN_OK && at < count; at += CHUNK) {
        int64_t n = count - at < CHUNK ? count - at : CHUNK;
        size_t want = (size_t)n * CIFAR_RECORD, got = 0;
        while (st == KILN_OK && got < want) {
            ssize_t r = read(fd, buf + got, want - got);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) st = kiln_fail(KILN_ERR_IO, "%s: read error: %s", path, strerror(errno));
            else if (r == 0) st = kiln_fail(KILN_ERR_FORMAT, "%s: truncated: the file shrank while being read", path);
            else got += (size_t)r;
        }
        for (int64_t i = 0; st == KILN_OK && i < n; i++) {
            const uint8_t *rec = buf + (size_t)i * CIFAR_RECORD;
            if (rec[0] >= CIFAR_CLASSES)
                st = kiln_fail(KILN_ERR_FORMAT, "%s: label %u of record %lld (at byte %lld) is out of range (0..%d): corrupt, or "
                               "not CIFAR-10's binary version?", path, rec[0], (long long)(at + i),
                               (long long)((at + i) * CIFAR_RECORD), CIFAR_CLASSES - 1);
            labels[at + i] = rec[0];
            memcpy(pixels + (size_t)(at + i) * CIFAR_PIXELS, rec + 1, CIFAR_PIXELS);
        }
    }
    free(buf);
    close(fd);
    return st;
}

/* DIR, or DIR/cifar-10-batches-bin as the archive unpacks */
static void batch_path(const char *dir, const char *base, char *out, size_t len) {
    snprintf(out, len, "%s/%s", dir, base);
    struct stat sb;
    if (stat(out, &sb) == 0) return;
    char nested[PATH_MAX + 64];
    snprintf(nested, sizeof nested, "%s/cifar-10-batches-bin/%s", dir, base);
    if (stat(nested, &sb) == 0) snprintf(out, len, "%s", nested);
}

/* the records of files[0..n) one after the other */
static kiln_status load(cifar *d, const char *const *files, int n) {
    int64_t counts[CIFAR_TRAIN_FILES], total = 0;
    for (int f = 0; f < n; f++) {
        kiln_status st = records_of(files[f], &counts[f]);
        if (st != KILN_OK) return st;
        total += counts[f];
    }
    d->pixels = malloc((size_t)total * CIFAR_PIXELS);
    d->labels = malloc((size_t)total);
    if (!d->pixels || !d->labels)
        return kiln_fail(KILN_ERR_NOMEM, "%s: cannot allocate %lld bytes", d->name, (long long)total * CIFAR_RECORD);
    int64_t at = 0;
    for (int f = 0; f < n; f++) {
        kiln_status st = read_batch(files[f], counts[f], d->pixels + (size_t)at * CIFAR_PIXELS, d->labels + at);
        if (st != KILN_OK) return st;
        at += counts[f];
    }
    d->ds.len = total;
    return KILN_OK;
}

/* ---- opening ---- */

static kiln_status check_config(const kiln_data_config *dc, const char *dir) {
    if (dc->val_split > 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "cifar10:%s has its own test split (test_batch.bin): --val-split applies to "
                         "image folders", dir);
    if (dc->cache && dc->cache[0])
        return kiln_fail(KILN_ERR_INVALID_ARG, "cifar10:%s is decoded already, in memory: --cache applies to image folders "
                         "and shards", dir);
    if (dc->channels == 1 && dc->normalize == 3 && (dc->mean[1] != dc->mean[0] || dc->std[1] != dc->std[0]))
        return kiln_fail(KILN_ERR_INVALID_ARG, "cifar10:%s with --channels 1 is one channel: --normalize takes one mean and "
                         "one std (m/s)", dir);
    return KILN_OK;
}

/* the sample shape: the deterministic transforms of a 32x32 image (a crop too large fails here, at open) */
static kiln_status shape(cifar *d) {
    d->ds.sample_ndim = 3;
    return kiln_raw_shape(&d->tf, CIFAR_SIDE, CIFAR_SIDE, d->name, d->ds.sample_shape, &d->direct);
}

kiln_status kiln_cifar_open_files(const char *const *files, int n, const char *name, int train, const kiln_data_config *dc,
                                  kiln_dataset **out) {
    *out = NULL;
    if (n < 1 || n > CIFAR_TRAIN_FILES) return kiln_fail(KILN_ERR_INVALID_ARG, "%s: %d batch files (1..%d)", name, n, CIFAR_TRAIN_FILES);
    cifar *d = calloc(1, sizeof *d);
    if (!d) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", name);
    kiln_raw_pool_init(&d->pool, CIFAR_PIXELS);
    snprintf(d->name, sizeof d->name, "%s", name);
    d->ds = (kiln_dataset){.name = d->name, .num_classes = CIFAR_CLASSES, .get = cifar_get, .destroy = cifar_destroy,
                           .impl = d};
    kiln_tf_init(&d->tf, dc, train);
    kiln_status st = load(d, files, n);
    if (st == KILN_OK) st = shape(d);
    if (st != KILN_OK) {
        cifar_destroy(&d->ds);
        return st;
    }
    *out = &d->ds;
    return KILN_OK;
}

kiln_status kiln_cifar_open(const char *dir, int train, const kiln_data_config *dc, kiln_dataset **out) {
    *out = NULL;
    if (!*dir) return kiln_fail(KILN_ERR_INVALID_ARG, "cifar10: needs a folder (--data cifar10:DIR)");
    kiln_status st = check_config(dc, dir);
    if (st != KILN_OK) return st;
    int n = train ? CIFAR_TRAIN_FILES : 1;
    char paths[CIFAR_TRAIN_FILES][PATH_MAX + 64], name[PATH_MAX + 32];
    const char *files[CIFAR_TRAIN_FILES];
    for (int f = 0; f < n; f++) {
        char base[32];
        if (train) snprintf(base, sizeof base, "data_batch_%d.bin", f + 1);
        else snprintf(base, sizeof base, "test_batch.bin");
        batch_path(dir, base, paths[f], sizeof paths[f]);
        files[f] = paths[f];
    }
    snprintf(name, sizeof name, "cifar10:%s %s", dir, train ? "train" : "test");
    return kiln_cifar_open_files(files, n, name, train, dc, out);
}
