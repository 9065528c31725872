/* Fuzz target: the IDX reader (src/data/idx.c), plain and gzip: the pair of
 * files a dataset folder holds, as kiln_dataset_open hands them to
 * kiln_dataset_idx_open.
 *
 * The input: one flags byte, a 4-byte little-endian length L, L bytes of the
 * image file, then the label file (L is clamped to what is there). Flags 1
 * and 2 gzip the image and the label file here (so mutations of the content
 * reach the reader with a valid gzip checksum; without them, gzip bytes in
 * the input are read as they are, checksum and trailer included); flag 4
 * makes the gzipped image file two members. An accepted dataset must hold
 * what it claims: every label in range, its first and last sample readable. */
#include <math.h>
#include <zlib.h>
#include "fuzz_util.h"
#include "kiln/data.h"

/* n bytes as one gzip member appended to out (out has room: deflateBound) */
static size_t gzip_into(const uint8_t *in, size_t n, uint8_t *out, size_t room) {
    z_stream z = {0};
    if (deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) abort();
    z.next_in = (Bytef *)in;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)room;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) abort();
    size_t len = z.total_out;
    deflateEnd(&z);
    return len;
}

/* the file's bytes: as given, or gzipped (in one or two members) */
static const char *put(fuzz_file *f, const char *name, const uint8_t *b, size_t n, int gz, int two) {
    if (!gz) return fuzz_file_put(f, name, b, n);
    size_t room = 2 * (n + 64) + 4096;
    uint8_t *out = malloc(room);
    if (!out) abort();
    size_t half = two ? n / 2 : n;
    size_t len = gzip_into(b, half, out, room);
    if (two) len += gzip_into(b + half, n - half, out + len, room - len);
    const char *path = fuzz_file_put(f, name, out, len);
    free(out);
    return path;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fuzz_file images, labels;
    static int init;
    if (!init) {
        fuzz_quiet();
        init = 1;
    }
    int flags;
    size_t L;
    if (!fuzz_two_parts(&data, &size, &flags, &L)) return 0;
    const char *ip = put(&images, "images", data, L, flags & 1, flags & 4);
    const char *lp = put(&labels, "labels", data + L, size - L, flags & 2, 0);
    kiln_dataset *ds = NULL;
    kiln_status st = kiln_dataset_idx_open(ip, lp, KILN_MNIST_MEAN, KILN_MNIST_STD, &ds);
    fuzz_check_error(st);
    if (st != KILN_OK) {
        if (ds) abort();
        return 0;
    }
    if (ds->len < 1 || ds->sample_ndim != 3 || ds->num_classes != 10) abort();
    int64_t numel = ds->sample_shape[0] * ds->sample_shape[1] * ds->sample_shape[2];
    if (numel < 1) abort();
    float *x = malloc((size_t)numel * sizeof *x);
    if (!x) abort();
    int64_t picks[2] = {0, ds->len - 1};
    for (int i = 0; i < 2; i++) {
        int32_t y = -1;
        if (ds->get(ds, picks[i], 0, x, &y) != KILN_OK) abort(); /* a validated IDX file serves every sample */
        if (y < 0 || y >= ds->num_classes || !isfinite(x[0]) || !isfinite(x[numel - 1])) abort();
    }
    free(x);
    kiln_dataset_free(ds);
    return 0;
}
