/* IDX datasets (MNIST, Fashion-MNIST). A file is read as a byte stream that
 * is either plain or gzip (inflated with zlib, every member's CRC and length
 * checked, nothing but another member allowed after one), after checks that
 * never wait and never trust the header: the file must be a regular file,
 * and the data the header claims must fit what the file can hold (exactly,
 * when plain; within deflate's greatest ratio, when gzipped) before anything
 * is allocated. Pixels stay uint8 in memory (47 MB for the Fashion-MNIST
 * train split instead of 188 MB as float) and are normalised by `get`:
 * through a table alone, or, when resizes, crops, flips or three channels are
 * asked for (as torchvision's FashionMNIST takes any transform of its PIL
 * image), through the image folders' transform code (raw_transform.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "base/internal/file.h"
#include "data/internal/folder.h"
#include "data/internal/raw_transform.h"
#include "data/internal/source.h"
#include "kiln/data.h"

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_CLASSES 10
/* 2^36 pixels: far beyond any IDX data set; guards the size arithmetic. */
#define IDX_MAX_BYTES ((uint64_t)1 << 36)
/* deflate expands at most about 1032:1 (RFC 1951 limits); a gzipped file
 * claiming more than that of its size is lying */
#define DEFLATE_MAX_RATIO 1032

typedef struct idx_impl {
    kiln_dataset ds;
    uint8_t *pixels; /* [len, rows, cols] */
    uint8_t *labels; /* [len] */
    int64_t numel;   /* rows * cols */
    int rows, cols;
    float lut[256];  /* normalised value of each pixel value */
    kiln_tf tf;      /* the transforms, when any (get is idx_get_tf) */
    kiln_raw_pool pool;
    int transformed; /* the pool was made */
    char name[PATH_MAX + 16];
} idx_impl;

static kiln_status idx_get(const kiln_dataset *ds, int64_t index, uint64_t key, float *x, int32_t *y) {
    (void)key;
    const idx_impl *d = ds->impl;
    if (index < 0 || index >= ds->len)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s: sample %lld is out of range (0..%lld)", d->name, (long long)index,
                         (long long)ds->len - 1);
    const uint8_t *p = d->pixels + index * d->numel;
    for (int64_t i = 0; i < d->numel; i++) x[i] = d->lut[p[i]];
    *y = d->labels[index];
    return KILN_OK;
}

/* a resize, crop, flip or three channels: the grey sample as an HWC image through kiln_tf_apply */
static kiln_status idx_get_tf(const kiln_dataset *ds, int64_t index, uint64_t key, float *x, int32_t *y) {
    idx_impl *d = ds->impl;
    if (index < 0 || index >= ds->len)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s: sample %lld is out of range (0..%lld)", d->name, (long long)index,
                         (long long)ds->len - 1);
    kiln_tf_box b;
    kiln_status st = kiln_tf_plan(&d->tf, d->cols, d->rows, key, d->name, &b);
    if (st != KILN_OK) return st;
    kiln_raw_buf *buf = kiln_raw_pool_take(&d->pool);
    if (!buf) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", d->name);
    const uint8_t *p = d->pixels + index * d->numel;
    int C = d->tf.channels; /* 3: the grey value thrice, as PIL's convert('RGB') */
    for (int64_t i = 0; i < d->numel; i++)
        for (int c = 0; c < C; c++) buf->hwc[i * C + c] = p[i];
    kiln_image im = {buf->hwc, d->cols, d->rows, C};
    st = kiln_tf_apply(&im, &b, &d->tf, &buf->tf, x, NULL);
    kiln_raw_pool_give(&d->pool, buf);
    *y = d->labels[index];
    return st;
}

/* the raw pixels and labels, for kiln pack (data/internal/idx.h) */
static void idx_destroy(kiln_dataset *ds);

kiln_status kiln_idx_raw(const kiln_dataset *ds, const uint8_t **pixels, const uint8_t **labels, int *rows, int *cols) {
    if (ds->destroy != idx_destroy) return kiln_fail(KILN_ERR_INVALID_ARG, "%s is not IDX data", ds->name);
    const idx_impl *d = ds->impl;
    *pixels = d->pixels;
    *labels = d->labels;
    *rows = d->rows; /* the stored images' (the sample shape is the transforms') */
    *cols = d->cols;
    return KILN_OK;
}

static void idx_destroy(kiln_dataset *ds) {
    idx_impl *d = ds->impl;
    if (d->transformed) kiln_raw_pool_free(&d->pool);
    free(d->pixels);
    free(d->labels);
    free(d);
}

/* ---- the byte stream: plain or gzip ---- */

typedef struct {
    int fd;
    const char *path;
    int64_t size;       /* of the file */
    int gz, eof, ended; /* gzip; no more file bytes; the current member ended */
    z_stream z;
    uint8_t in[1 << 16];
} src;

static kiln_status fill(src *s) {
    if (s->z.avail_in || s->eof) return KILN_OK;
    ssize_t r;
    do r = read(s->fd, s->in, sizeof s->in);
    while (r < 0 && errno == EINTR);
    if (r < 0) return kiln_fail(KILN_ERR_IO, "%s: read error: %s", s->path, strerror(errno));
    s->z.next_in = s->in;
    s->z.avail_in = (uInt)r;
    s->eof = r == 0;
    return KILN_OK;
}

static kiln_status src_open(src *s, const char *path) {
    memset(s, 0, sizeof *s);
    s->path = path;
    if ((s->fd = kiln_open_read(path, &s->size)) < 0) return KILN_ERR_IO;
    kiln_status st = fill(s);
    s->gz = st == KILN_OK && s->z.avail_in >= 2 && s->in[0] == 0x1f && s->in[1] == 0x8b;
    if (st == KILN_OK && s->gz && inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK)
        st = kiln_fail(KILN_ERR_NOMEM, "%s: cannot start gzip decoding", path);
    return st;
}

static void src_close(src *s) {
    if (s->gz) inflateEnd(&s->z);
    if (s->fd >= 0) close(s->fd);
}

/* after a gzip member only another member may follow */
static kiln_status next_member(src *s, int *done) {
    kiln_status st = fill(s);
    if (st != KILN_OK) return st;
    if (!s->z.avail_in && s->eof) {
        *done = 1;
        return KILN_OK;
    }
    if (s->z.next_in[0] != 0x1f)
        return kiln_fail(KILN_ERR_FORMAT, "%s: garbage after the gzip data", s->path);
    inflateReset(&s->z);
    s->ended = 0;
    return KILN_OK;
}

/* up to n bytes into buf; *got says how many (fewer only at the end of the data) */
static kiln_status src_read(src *s, void *buf, uint64_t n, uint64_t *got) {
    *got = 0;
    kiln_status st = KILN_OK;
    while (*got < n && st == KILN_OK) {
        if (!s->gz) {
            uint64_t want = n - *got;
            if (s->z.avail_in) { /* what fill() read ahead */
                uint64_t k = want < s->z.avail_in ? want : s->z.avail_in;
                memcpy((char *)buf + *got, s->z.next_in, k);
                s->z.next_in += k;
                s->z.avail_in -= (uInt)k;
                *got += k;
                continue;
            }
            ssize_t r = read(s->fd, (char *)buf + *got, want > (1u << 30) ? (1u << 30) : want);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) return kiln_fail(KILN_ERR_IO, "%s: read error: %s", s->path, strerror(errno));
            if (r == 0) break;
            *got += (uint64_t)r;
            continue;
        }
        int done = 0;
        if (s->ended && ((st = next_member(s, &done)) != KILN_OK || done)) break;
        if ((st = fill(s)) != KILN_OK) break;
        uint64_t want = n - *got;
        s->z.next_out = (Bytef *)buf + *got;
        s->z.avail_out = want > (1u << 30) ? (1u << 30) : (uInt)want;
        uInt before = s->z.avail_out;
        int ret = inflate(&s->z, Z_NO_FLUSH);
        *got += before - s->z.avail_out;
        if (ret == Z_STREAM_END) s->ended = 1;
        else if (ret == Z_BUF_ERROR && s->eof && !s->z.avail_in)
            st = kiln_fail(KILN_ERR_FORMAT, "%s: truncated gzip data (the stream ends before its end marker and checksum)",
                           s->path);
        else if (ret != Z_OK && ret != Z_BUF_ERROR)
            st = kiln_fail(KILN_ERR_FORMAT, "%s: corrupt gzip data: %s", s->path, s->z.msg ? s->z.msg : "inflate failed");
    }
    return st;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* magic, dimensions and the size they imply, checked against what the file can hold */
static kiln_status read_header(src *s, uint32_t magic, int ndim, const char *what, uint32_t *dims, uint64_t *total) {
    uint8_t hdr[4 + 4 * 3];
    uint64_t hbytes = 4 + 4 * (uint64_t)ndim, got = 0, more = 0;
    kiln_status st = src_read(s, hdr, 4, &got);
    if (st == KILN_OK && got < 4)
        st = kiln_fail(KILN_ERR_FORMAT, "%s: truncated header: expected %llu bytes, got %llu", s->path,
                       (unsigned long long)hbytes, (unsigned long long)got);
    if (st != KILN_OK) return st;
    uint32_t m = be32(hdr);
    if (m != magic) {
        /* same u8 type but another rank: say so, it is the likelier mistake */
        if ((m & 0xffffff00u) == (magic & 0xffffff00u))
            return kiln_fail(KILN_ERR_FORMAT, "%s: wrong number of dimensions for an IDX %s file: %u (expected %d; magic 0x%08x)",
                             s->path, what, m & 0xffu, ndim, m);
        return kiln_fail(KILN_ERR_FORMAT, "%s: bad magic 0x%08x (expected 0x%08x, an IDX u8 %s file)", s->path, m, magic, what);
    }
    if ((st = src_read(s, hdr + 4, 4 * (uint64_t)ndim, &more)) != KILN_OK) return st;
    if (more < 4 * (uint64_t)ndim)
        return kiln_fail(KILN_ERR_FORMAT, "%s: truncated header: expected %llu bytes, got %llu", s->path,
                         (unsigned long long)hbytes, (unsigned long long)(4 + more));
    *total = 1;
    for (int i = 0; i < ndim; i++) {
        dims[i] = be32(hdr + 4 + 4 * i);
        if (dims[i] == 0) return kiln_fail(KILN_ERR_FORMAT, "%s: dimension %d is 0", s->path, i);
        *total *= dims[i];
        if (*total > IDX_MAX_BYTES)
            return kiln_fail(KILN_ERR_FORMAT, "%s: implausible dimensions (more than %llu bytes of data)", s->path,
                             (unsigned long long)IDX_MAX_BYTES);
    }
    const char *kind = ndim == 1 ? "label" : "pixel";
    uint64_t size = (uint64_t)s->size;
    if (!s->gz && size < hbytes + *total)
        return kiln_fail(KILN_ERR_FORMAT, "%s: truncated: expected %llu bytes of %s data, got %llu", s->path,
                         (unsigned long long)*total, kind, (unsigned long long)(size - hbytes));
    if (!s->gz && size > hbytes + *total)
        return kiln_fail(KILN_ERR_FORMAT, "%s: %llu bytes of trailing data after the expected %llu bytes (header + data)",
                         s->path, (unsigned long long)(size - hbytes - *total), (unsigned long long)(hbytes + *total));
    if (s->gz && hbytes + *total > size * DEFLATE_MAX_RATIO)
        return kiln_fail(KILN_ERR_FORMAT, "%s: the header claims %llu bytes of %s data, more than %llu gzipped bytes can hold",
                         s->path, (unsigned long long)*total, kind, (unsigned long long)size);
    return KILN_OK;
}

/* Opens `path`, checks magic and header, and reads the whole u8 payload into a
 * malloc'ed buffer; dims[0..ndim) receive the dimensions. Fails on a truncated
 * file and on trailing bytes, so a corrupt download never trains silently. */
static kiln_status read_idx(const char *path, uint32_t magic, int ndim, const char *what, uint32_t *dims, uint8_t **out) {
    *out = NULL;
    src s;
    uint64_t total = 0, got = 0;
    kiln_status st = src_open(&s, path);
    if (st == KILN_OK) st = read_header(&s, magic, ndim, what, dims, &total);
    uint8_t *buf = st == KILN_OK ? malloc(total) : NULL;
    if (st == KILN_OK && !buf) st = kiln_fail(KILN_ERR_NOMEM, "%s: cannot allocate %llu bytes", path, (unsigned long long)total);
    if (st == KILN_OK) st = src_read(&s, buf, total, &got);
    if (st == KILN_OK && got < total)
        st = kiln_fail(KILN_ERR_FORMAT, "%s: truncated: expected %llu bytes of %s data, got %llu", path,
                       (unsigned long long)total, ndim == 1 ? "label" : "pixel", (unsigned long long)got);
    /* nothing may follow the data (and a gzip stream must end with its checksum) */
    uint64_t more = 0, r = 1;
    uint8_t extra[4096];
    while (st == KILN_OK && r > 0) {
        st = src_read(&s, extra, sizeof extra, &r);
        more += r;
    }
    if (st == KILN_OK && more > 0)
        st = kiln_fail(KILN_ERR_FORMAT, "%s: %llu bytes of trailing data after the expected %llu bytes (header + data)", path,
                       (unsigned long long)more, (unsigned long long)(total + 4 + 4 * (uint64_t)ndim));
    if (st == KILN_OK && s.gz && !s.ended)
        st = kiln_fail(KILN_ERR_FORMAT, "%s: truncated gzip data (the stream ends before its end marker and checksum)", path);
    src_close(&s);
    if (st != KILN_OK) free(buf);
    else *out = buf;
    return st;
}

kiln_status kiln_dataset_idx_open(const char *images_path, const char *labels_path, float mean, float std,
                                  kiln_dataset **out) {
    *out = NULL;
    if (!images_path || !labels_path) return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_dataset_idx_open: NULL path");
    if (!(std > 0.0f)) return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_dataset_idx_open: std must be > 0 (got %g)", std);
    uint32_t idims[3], ldims[1];
    uint8_t *pixels = NULL, *labels = NULL;
    kiln_status st = read_idx(images_path, IDX_MAGIC_IMAGES, 3, "image", idims, &pixels);
    if (st != KILN_OK) return st;
    st = read_idx(labels_path, IDX_MAGIC_LABELS, 1, "label", ldims, &labels);
    if (st != KILN_OK) {
        free(pixels);
        return st;
    }
    if (idims[0] != ldims[0]) {
        st = kiln_fail(KILN_ERR_FORMAT, "%s holds %u images but %s holds %u labels", images_path, idims[0],
                       labels_path, ldims[0]);
        goto fail;
    }
    for (uint32_t i = 0; i < ldims[0]; i++)
        if (labels[i] >= IDX_CLASSES) {
            st = kiln_fail(KILN_ERR_FORMAT, "%s: label %u at index %u is out of range (expected 0..%d)", labels_path,
                           labels[i], i, IDX_CLASSES - 1);
            goto fail;
        }
    idx_impl *d = calloc(1, sizeof *d);
    if (!d) {
        st = kiln_fail(KILN_ERR_NOMEM, "kiln_dataset_idx_open: out of memory");
        goto fail;
    }
    d->pixels = pixels;
    d->labels = labels;
    d->numel = (int64_t)idims[1] * idims[2];
    d->rows = (int)idims[1];
    d->cols = (int)idims[2];
    /* the exact float32 expression of torchvision's ToTensor + Normalize */
    for (int p = 0; p < 256; p++) d->lut[p] = ((float)p / 255.0f - mean) / std;
    snprintf(d->name, sizeof d->name, "%s", images_path);
    d->ds.name = d->name;
    d->ds.len = idims[0];
    d->ds.sample_ndim = 3;
    d->ds.sample_shape[0] = 1;
    d->ds.sample_shape[1] = idims[1];
    d->ds.sample_shape[2] = idims[2];
    d->ds.num_classes = IDX_CLASSES;
    d->ds.get = idx_get;
    d->ds.destroy = idx_destroy;
    d->ds.impl = d;
    *out = &d->ds;
    return KILN_OK;
fail:
    free(pixels);
    free(labels);
    return st;
}

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* exists and is not a folder (a FIFO or device in its place is refused when opened) */
static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && !S_ISDIR(sb.st_mode);
}

/* folder/base.gz, else folder/base (Debian ships .gz; a hand download may be unpacked) */
static kiln_status find_file(const char *folder, const char *base, char *out, size_t len) {
    snprintf(out, len, "%s/%s.gz", folder, base);
    if (is_file(out)) return KILN_OK;
    snprintf(out, len, "%s/%s", folder, base);
    if (is_file(out)) return KILN_OK;
    return kiln_fail(KILN_ERR_IO, "%s: missing %s.gz (or uncompressed %s)", folder, base, base);
}

/* the transforms' values, checked once for any dataset */
static kiln_status check_config(const kiln_data_config *dc) {
    const int sizes[3] = {dc->resize, dc->center_crop, dc->random_resized_crop};
    const char *names[3] = {"--resize", "--center-crop", "--random-resized-crop"};
    for (int i = 0; i < 3; i++)
        if (sizes[i] < 0 || sizes[i] > 32768)
            return kiln_fail(KILN_ERR_INVALID_ARG, "%s is %d; use 0..32768 (0: none)", names[i], sizes[i]);
    if (dc->channels != 0 && dc->channels != 1 && dc->channels != 3)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--channels is %d; use 1 or 3", dc->channels);
    if (!(dc->val_split >= 0 && dc->val_split < 1))
        return kiln_fail(KILN_ERR_INVALID_ARG, "--val-split is %g; use a fraction in [0, 1)", dc->val_split);
    if (dc->center_crop && dc->random_resized_crop && dc->center_crop != dc->random_resized_crop)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--center-crop %d and --random-resized-crop %d would give test and training samples "
                         "of different sizes", dc->center_crop, dc->random_resized_crop);
    return KILN_OK;
}

/* IDX data has its own test split and is in memory already: --val-split and --cache do not apply */
static kiln_status check_idx_config(const kiln_data_config *dc, const char *folder) {
    if (dc->val_split > 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s is IDX data with its own test split (t10k-*): --val-split applies to image "
                         "folders", folder);
    if (dc->cache && dc->cache[0])
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s is IDX data (decoded already, in memory): --cache applies to image folders and shards", folder);
    if (dc->normalize > 1 && dc->channels != 3)
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s is IDX data (one channel): --normalize takes one mean and one std (m/s), "
                         "or three with --channels 3", folder);
    return KILN_OK;
}

/* any transform beyond the table: a resize, a crop, a flip, three channels */
static int idx_transformed(const kiln_data_config *dc) {
    return dc->resize || dc->center_crop || dc->random_resized_crop || dc->hflip || dc->channels == 3;
}

/* switches an opened IDX dataset to the transform path; normalisation as the table's (mean, std) unless given */
static kiln_status idx_set_transforms(idx_impl *d, const kiln_data_config *dc, int train, float mean, float std) {
    kiln_data_config t = *dc;
    if (!t.normalize) {
        t.normalize = 1;
        for (int c = 0; c < 3; c++) {
            t.mean[c] = mean;
            t.std[c] = std;
        }
    }
    if (!t.channels) t.channels = 1;
    kiln_tf_init(&d->tf, &t, train);
    int direct;
    kiln_status st = kiln_raw_shape(&d->tf, d->cols, d->rows, d->name, d->ds.sample_shape, &direct);
    if (st != KILN_OK) return st;
    kiln_raw_pool_init(&d->pool, (size_t)d->numel * (size_t)d->tf.channels);
    d->transformed = 1;
    d->ds.get = idx_get_tf;
    return KILN_OK;
}

kiln_status kiln_dataset_open(const char *name_or_folder, int train, kiln_dataset **out) {
    return kiln_dataset_open_config(name_or_folder, train, NULL, out);
}

kiln_status kiln_dataset_open_config(const char *name_or_folder, int train, const kiln_data_config *dcfg, kiln_dataset **out) {
    *out = NULL;
    if (!name_or_folder || !*name_or_folder) return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_dataset_open: empty dataset name");
    kiln_data_config dc = dcfg ? *dcfg : kiln_data_defaults();
    kiln_status cs = check_config(&dc);
    if (cs != KILN_OK) return cs;
    const char *root = getenv("KILN_DATA_ROOT");
    if (!root || !*root) root = "/usr/share/datasets";
    int named = strcmp(name_or_folder, "fashion-mnist") == 0 || strcmp(name_or_folder, "mnist") == 0;
    if (strncmp(name_or_folder, "cifar10:", 8) == 0) return kiln_cifar_open(name_or_folder + 8, train, &dc, out);
    if (strncmp(name_or_folder, "tokens:", 7) == 0) return kiln_tokens_open(name_or_folder + 7, train, &dc, out);
    if (kiln_source_is_url(name_or_folder)) return kiln_shards_open(name_or_folder, train, &dc, out); /* shards over HTTP */
    char folder[PATH_MAX];
    if (named) snprintf(folder, sizeof folder, "%s/%s", root, name_or_folder);
    else snprintf(folder, sizeof folder, "%s", name_or_folder);
    if (!is_dir(folder)) {
        if (!named)
            return kiln_fail(KILN_ERR_IO, "dataset folder %s not found (--data takes a folder of IDX files, an image folder "
                                          "(DIR/train/<class>/*.jpg), or fashion-mnist: the Debian package dataset-fashion-mnist)",
                             folder);
        if (strcmp(name_or_folder, "fashion-mnist") == 0)
            return kiln_fail(KILN_ERR_IO, "dataset folder %s not found: install the Debian package dataset-fashion-mnist "
                                          "(run scripts/install-deps.sh or apt-get install dataset-fashion-mnist)", folder);
        /* Debian packages Fashion-MNIST only */
        return kiln_fail(KILN_ERR_IO, "dataset folder %s not found: MNIST is not packaged; put the {train,t10k}-*-ubyte.gz "
                                      "files there or pass a folder, or use fashion-mnist (apt-get install dataset-fashion-mnist)",
                         folder);
    }
    if (!named && kiln_shards_detect(folder)) return kiln_shards_open(folder, train, &dc, out);
    if (!named && kiln_imagefolder_detect(folder)) return kiln_imagefolder_open(folder, train, &dc, out);
    if ((cs = check_idx_config(&dc, named ? name_or_folder : folder)) != KILN_OK) return cs;
    float mean = dc.normalize ? dc.mean[0] : KILN_MNIST_MEAN, std = dc.normalize ? dc.std[0] : KILN_MNIST_STD;
    const char *split = train ? "train" : "t10k";
    char base[64], images[PATH_MAX + 80], labels[PATH_MAX + 80];
    snprintf(base, sizeof base, "%s-images-idx3-ubyte", split);
    kiln_status st = find_file(folder, base, images, sizeof images);
    if (st != KILN_OK) return st;
    snprintf(base, sizeof base, "%s-labels-idx1-ubyte", split);
    st = find_file(folder, base, labels, sizeof labels);
    if (st != KILN_OK) return st;
    st = kiln_dataset_idx_open(images, labels, mean, std, out);
    if (st != KILN_OK) return st;
    idx_impl *d = (*out)->impl;
    snprintf(d->name, sizeof d->name, "%s %s", named ? name_or_folder : folder, train ? "train" : "test");
    if (idx_transformed(&dc) && (st = idx_set_transforms(d, &dc, train, mean, std)) != KILN_OK) {
        kiln_dataset_free(*out);
        *out = NULL;
    }
    return st;
}

void kiln_dataset_free(kiln_dataset *ds) {
    if (ds && ds->destroy) ds->destroy(ds);
}
