/* IDX datasets (MNIST, Fashion-MNIST). Files are read through zlib's gzread,
 * which also reads uncompressed files transparently, so one code path serves
 * both. Pixels stay uint8 in memory (47 MB for the Fashion-MNIST train split
 * instead of 188 MB as float) and are normalised on the fly by `get`. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>
#include "kiln/data.h"

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_CLASSES 10
/* 2^36 pixels: far beyond any IDX data set; guards the size arithmetic. */
#define IDX_MAX_BYTES ((uint64_t)1 << 36)

typedef struct idx_impl {
    kiln_dataset ds;
    uint8_t *pixels; /* [len, rows, cols] */
    uint8_t *labels; /* [len] */
    int64_t numel;   /* rows * cols */
    float lut[256];  /* normalised value of each pixel value */
    char name[PATH_MAX + 16];
} idx_impl;

static void idx_get(const kiln_dataset *ds, int64_t index, uint64_t key, float *x, int32_t *y) {
    (void)key;
    const idx_impl *d = ds->impl;
    const uint8_t *p = d->pixels + index * d->numel;
    for (int64_t i = 0; i < d->numel; i++) x[i] = d->lut[p[i]];
    *y = d->labels[index];
}

static void idx_destroy(kiln_dataset *ds) {
    idx_impl *d = ds->impl;
    free(d->pixels);
    free(d->labels);
    free(d);
}

/* Reads up to n bytes; returns bytes read, or -1 on a gzip/IO error (message set). */
static int64_t read_all(gzFile f, const char *path, void *buf, uint64_t n, kiln_status *err) {
    uint64_t got = 0;
    while (got < n) {
        uint64_t want = n - got;
        if (want > (1u << 30)) want = 1u << 30; /* gzread takes an unsigned, returns an int */
        int r = gzread(f, (char *)buf + got, (unsigned)want);
        if (r < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            if (zerr == Z_ERRNO) {
                *err = kiln_fail(KILN_ERR_IO, "%s: read error: %s", path, strerror(errno));
            } else {
                *err = kiln_fail(KILN_ERR_FORMAT, "%s: corrupt gzip data: %s", path, msg);
            }
            return -1;
        }
        if (r == 0) break; /* end of data (a truncated gzip stream also ends here) */
        got += (uint64_t)r;
    }
    return (int64_t)got;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Opens `path`, checks magic and header, and reads the whole u8 payload into a
 * malloc'ed buffer; dims[0..ndim) receive the dimensions. Fails on a truncated
 * file and on trailing bytes, so a corrupt download never trains silently. */
static kiln_status read_idx(const char *path, uint32_t magic, int ndim, const char *what,
                            uint32_t *dims, uint8_t **out) {
    *out = NULL;
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) return kiln_fail(KILN_ERR_IO, "%s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
    gzbuffer(f, 1 << 17);
    kiln_status st = KILN_OK;
    uint8_t hdr[4 + 4 * 3];
    int64_t hbytes = 4 + 4 * (int64_t)ndim;
    int64_t got = read_all(f, path, hdr, 4, &st);
    if (got < 0) goto done;
    if (got < 4) {
        st = kiln_fail(KILN_ERR_FORMAT, "%s: truncated header: expected %lld bytes, got %lld", path,
                       (long long)hbytes, (long long)got);
        goto done;
    }
    uint32_t m = be32(hdr);
    if (m != magic) {
        /* same u8 type but another rank: say so, it is the likelier mistake */
        if ((m & 0xffffff00u) == (magic & 0xffffff00u))
            st = kiln_fail(KILN_ERR_FORMAT, "%s: wrong number of dimensions for an IDX %s file: %u (expected %d; magic 0x%08x)",
                           path, what, m & 0xffu, ndim, m);
        else
            st = kiln_fail(KILN_ERR_FORMAT, "%s: bad magic 0x%08x (expected 0x%08x, an IDX u8 %s file)", path, m,
                           magic, what);
        goto done;
    }
    got = read_all(f, path, hdr + 4, (uint64_t)(4 * ndim), &st);
    if (got < 0) goto done;
    if (got < 4 * ndim) {
        st = kiln_fail(KILN_ERR_FORMAT, "%s: truncated header: expected %lld bytes, got %lld", path,
                       (long long)hbytes, (long long)(4 + got));
        goto done;
    }
    uint64_t total = 1;
    for (int i = 0; i < ndim; i++) {
        dims[i] = be32(hdr + 4 + 4 * i);
        if (dims[i] == 0) {
            st = kiln_fail(KILN_ERR_FORMAT, "%s: dimension %d is 0", path, i);
            goto done;
        }
        total *= dims[i];
        if (total > IDX_MAX_BYTES) {
            st = kiln_fail(KILN_ERR_FORMAT, "%s: implausible dimensions (more than %llu bytes of data)", path,
                           (unsigned long long)IDX_MAX_BYTES);
            goto done;
        }
    }
    uint8_t *buf = malloc(total);
    if (!buf) {
        st = kiln_fail(KILN_ERR_NOMEM, "%s: cannot allocate %llu bytes", path, (unsigned long long)total);
        goto done;
    }
    got = read_all(f, path, buf, total, &st);
    if (got >= 0 && (uint64_t)got < total)
        st = kiln_fail(KILN_ERR_FORMAT, "%s: truncated: expected %llu bytes of %s data, got %lld", path,
                       (unsigned long long)total, ndim == 1 ? "label" : "pixel", (long long)got);
    if (got >= 0 && st == KILN_OK) {
        uint8_t extra[4096];
        int64_t more = 0, r;
        while ((r = read_all(f, path, extra, sizeof extra, &st)) > 0) more += r;
        if (r < 0) got = -1;
        else if (more > 0)
            st = kiln_fail(KILN_ERR_FORMAT, "%s: %lld bytes of trailing data after the expected %llu bytes (%s)", path,
                           (long long)more, (unsigned long long)(total + (uint64_t)hbytes), "header + data");
    }
    if (st != KILN_OK) free(buf);
    else *out = buf;
done:
    gzclose(f);
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

kiln_status kiln_dataset_open(const char *name_or_folder, int train, kiln_dataset **out) {
    *out = NULL;
    if (!name_or_folder || !*name_or_folder) return kiln_fail(KILN_ERR_INVALID_ARG, "kiln_dataset_open: empty dataset name");
    const char *root = getenv("KILN_DATA_ROOT");
    if (!root || !*root) root = "/usr/share/datasets";
    int named = strcmp(name_or_folder, "fashion-mnist") == 0 || strcmp(name_or_folder, "mnist") == 0;
    char folder[PATH_MAX];
    if (named) snprintf(folder, sizeof folder, "%s/%s", root, name_or_folder);
    else snprintf(folder, sizeof folder, "%s", name_or_folder);
    if (!is_dir(folder)) {
        if (!named)
            return kiln_fail(KILN_ERR_IO, "dataset folder %s not found (--data takes a folder of IDX files, or "
                                          "fashion-mnist: the Debian package dataset-fashion-mnist)", folder);
        if (strcmp(name_or_folder, "fashion-mnist") == 0)
            return kiln_fail(KILN_ERR_IO, "dataset folder %s not found: install the Debian package dataset-fashion-mnist "
                                          "(run scripts/install-deps.sh or apt-get install dataset-fashion-mnist)", folder);
        /* Debian packages Fashion-MNIST only */
        return kiln_fail(KILN_ERR_IO, "dataset folder %s not found: MNIST is not packaged; put the {train,t10k}-*-ubyte.gz "
                                      "files there or pass a folder, or use fashion-mnist (apt-get install dataset-fashion-mnist)",
                         folder);
    }
    const char *split = train ? "train" : "t10k";
    char base[64], images[PATH_MAX + 80], labels[PATH_MAX + 80];
    snprintf(base, sizeof base, "%s-images-idx3-ubyte", split);
    kiln_status st = find_file(folder, base, images, sizeof images);
    if (st != KILN_OK) return st;
    snprintf(base, sizeof base, "%s-labels-idx1-ubyte", split);
    st = find_file(folder, base, labels, sizeof labels);
    if (st != KILN_OK) return st;
    st = kiln_dataset_idx_open(images, labels, KILN_MNIST_MEAN, KILN_MNIST_STD, out);
    if (st != KILN_OK) return st;
    idx_impl *d = (*out)->impl;
    snprintf(d->name, sizeof d->name, "%s %s", named ? name_or_folder : folder, train ? "train" : "test");
    return KILN_OK;
}

void kiln_dataset_free(kiln_dataset *ds) {
    if (ds && ds->destroy) ds->destroy(ds);
}
