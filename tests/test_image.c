/* Image decoding, transforms and image folders, against PIL and torchvision
 * (fixtures from tests/ref/make_image_fixtures.py): JPEG and PNG decoding
 * (grey and RGB, DCT-scaled), Resize / CenterCrop / resized crops within one
 * level of 255, RandomResizedCrop's boxes for torchvision's own draws;
 * corrupt, truncated and hostile files; image folders (layouts, errors, the
 * sample shape); batches identical for 0, 1, 2 and 4 workers; a worker's
 * error reaching the training thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "data/internal/image.h"
#include "data/internal/transform.h"
#include "imagetest.h"
#include "kiln/data.h"
#include "testutil.h"

#define FIX "ref/fixtures/images/"
static char g_tmp[64];

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* largest difference between a and the raw file `ref` of n bytes; -1 when missing */
static int max_diff(const uint8_t *a, const char *ref, size_t n, int *nonconst) {
    char p[256];
    snprintf(p, sizeof p, FIX "%s", ref);
    size_t m = 0;
    uint8_t *b = slurp(p, &m);
    int worst = -1;
    if (b && m == n) {
        worst = 0;
        *nonconst = 0;
        for (size_t i = 0; i < n; i++) {
            int d = abs((int)a[i] - (int)b[i]);
            if (d > worst) worst = d;
            *nonconst |= b[i] != b[0];
        }
    }
    free(b);
    return worst;
}

/* ---------- decoding, resizing, crops against PIL and torchvision ---------- */

static kiln_image_ctx *g_ctx;

static int decode_file(const char *name, int channels, double scale, kiln_image *im) {
    char p[256];
    snprintf(p, sizeof p, FIX "%s", name);
    const uint8_t *d;
    size_t n;
    if (kiln_image_read(g_ctx, p, &d, &n) != KILN_OK) return -1;
    return kiln_image_decode(g_ctx, d, n, p, channels, scale, im) == KILN_OK ? 0 : -1;
}

static void case_decode(const char *line) {
    char file[64], ref[128];
    int c, w, h, tol;
    double scale;
    if (sscanf(line, "decode %63s %d %lf %d %d %127s %d", file, &c, &scale, &w, &h, ref, &tol) != 7) {
        CHECK_MSG(0, "bad line %s", line);
        return;
    }
    kiln_image im;
    CHECK_MSG(decode_file(file, c, scale, &im) == 0, "%s: %s", file, kiln_last_error());
    if (im.w != w || im.h != h || im.c != c) {
        CHECK_MSG(0, "%s at %g: %dx%dx%d, PIL %dx%dx%d", file, scale, im.w, im.h, im.c, w, h, c);
        return;
    }
    int varied = 0, d = max_diff(im.px, ref, (size_t)w * h * c, &varied);
    CHECK_MSG(d >= 0 && d <= tol && varied, "%s channels %d scale %g: differs from PIL by %d (tolerance %d)", file, c, scale, d,
              tol);
}

/* kiln_tf_apply into u8, for comparison with PIL's 8-bit results */
static int resample_u8(const kiln_image *im, const kiln_tf_box *b, uint8_t *out) {
    kiln_tf t;
    kiln_data_config dc = kiln_data_defaults();
    kiln_tf_init(&t, &dc, 0);
    kiln_tf_scratch s = {0};
    kiln_status st = kiln_tf_apply(im, b, &t, &s, NULL, out);
    kiln_tf_scratch_free(&s);
    return st == KILN_OK ? 0 : -1;
}

static void case_resize(const char *line) {
    char file[64], ref[128];
    int c, size, crop, w, h;
    if (sscanf(line, "resize %63s %d %d %d %d %d %127s", file, &c, &size, &crop, &w, &h, ref) != 7) {
        CHECK_MSG(0, "bad line %s", line);
        return;
    }
    kiln_image im;
    if (decode_file(file, c, 1, &im) != 0) {
        CHECK_MSG(0, "%s: %s", file, kiln_last_error());
        return;
    }
    kiln_data_config dc = kiln_data_defaults();
    dc.resize = size;
    dc.center_crop = crop;
    dc.channels = c;
    kiln_tf t;
    kiln_tf_init(&t, &dc, 0);
    kiln_tf_box b;
    CHECK_OK(kiln_tf_plan(&t, im.w, im.h, 0, file, &b));
    if (b.x.out != w || b.y.out != h) {
        CHECK_MSG(0, "%s resize %d crop %d: %dx%d, torchvision %dx%d", file, size, crop, b.x.out, b.y.out, w, h);
        return;
    }
    uint8_t *out = malloc((size_t)w * h * c);
    int varied = 0, d = out && resample_u8(&im, &b, out) == 0 ? max_diff(out, ref, (size_t)w * h * c, &varied) : -1;
    int tol = size == (im.w < im.h ? im.w : im.h) ? 0 : 1; /* no resampling: a crop is exact */
    CHECK_MSG(d >= 0 && d <= tol && varied, "%s resize %d crop %d channels %d: differs from torchvision by %d/255 (tolerance %d)",
              file, size, crop, c, d, tol);
    free(out);
}

/* torchvision's draws, replayed in order */
typedef struct {
    double v[32];
    int n, at;
} replay;
static double replay_draw(void *ctx, int what, double lo, double hi) {
    (void)what, (void)lo, (void)hi;
    replay *r = ctx;
    return r->at < r->n ? r->v[r->at++] : -1;
}

static void case_rrc(const char *line) {
    int w, h, want[4], off = 0;
    double scale[2], ratio[2] = {3.0 / 4.0, 4.0 / 3.0};
    replay r = {{0}, 0, 0};
    if (sscanf(line, "rrc %d %d %lf %lf %d %d %d %d %d%n", &w, &h, &scale[0], &scale[1], &want[0], &want[1], &want[2], &want[3],
               &r.n, &off) != 9 || r.n > 32) {
        CHECK_MSG(0, "bad line %s", line);
        return;
    }
    const char *p = line + off;
    for (int i = 0; i < r.n; i++) {
        char *end;
        r.v[i] = strtod(p, &end);
        p = end;
    }
    int box[4];
    kiln_rrc_box(w, h, scale, ratio, replay_draw, &r, box);
    CHECK_MSG(!memcmp(box, want, sizeof box) && r.at == r.n, "%dx%d: box %d,%d,%d,%d, torchvision %d,%d,%d,%d (%d of %d draws)",
              w, h, box[0], box[1], box[2], box[3], want[0], want[1], want[2], want[3], r.at, r.n);
}

static void case_crop(const char *line) {
    char file[64], ref[128];
    int c, box[4], size;
    if (sscanf(line, "crop %63s %d %d %d %d %d %d %127s", file, &c, &box[0], &box[1], &box[2], &box[3], &size, ref) != 8) {
        CHECK_MSG(0, "bad line %s", line);
        return;
    }
    kiln_image im;
    if (decode_file(file, c, 1, &im) != 0) {
        CHECK_MSG(0, "%s: %s", file, kiln_last_error());
        return;
    }
    kiln_tf_box b;
    memset(&b, 0, sizeof b);
    kiln_tf_crop_box(box, size, &b);
    uint8_t *out = malloc((size_t)size * size * c);
    int varied = 0, d = out && resample_u8(&im, &b, out) == 0 ? max_diff(out, ref, (size_t)size * size * c, &varied) : -1;
    CHECK_MSG(d >= 0 && d <= 1 && varied, "%s resized crop %d,%d,%d,%d to %d: differs from torchvision by %d/255", file, box[0],
              box[1], box[2], box[3], size, d);
    free(out);
}

/* A crop at scale 1 takes kiln_tf_apply's copy path: pixels one for one, in u8 and
 * through ToTensor + Normalize (flipped too), and a crop one pixel wider resamples */
static void test_copy_crop(void) {
    enum { W = 37, H = 29, C = 3, S = 20 };
    uint8_t px[W * H * C], out[S * S * C];
    float x[C * S * S];
    uint32_t r = 12345;
    for (int i = 0; i < W * H * C; i++) px[i] = (uint8_t)((r = r * 1103515245u + 12345u) >> 24);
    kiln_image im = {.px = px, .w = W, .h = H, .c = C};
    kiln_data_config dc = kiln_data_defaults();
    CHECK_OK(kiln_data_parse_normalize("imagenet", &dc));
    kiln_tf t;
    kiln_tf_init(&t, &dc, 0);
    kiln_tf_scratch s = {0};
    for (int flip = 0; flip < 2; flip++) {
        int box[4] = {4, 11, S, S}, bad = 0; /* top, left, height, width */
        kiln_tf_box b;
        kiln_tf_crop_box(box, S, &b);
        b.flip = flip;
        CHECK_OK(kiln_tf_apply(&im, &b, &t, &s, x, out));
        for (int y = 0; y < S; y++)
            for (int i = 0; i < S; i++)
                for (int c = 0; c < C; c++) {
                    uint8_t v = px[((box[0] + y) * W + box[1] + i) * C + c];
                    int xi = flip ? S - 1 - i : i;
                    bad += out[(y * S + i) * C + c] != v || x[(c * S + y) * S + xi] != t.lut[c][v];
                }
        CHECK_MSG(bad == 0, "a scale-1 crop (flip %d): %d values are not the source's pixels", flip, bad);
    }
    /* one channel, whole rows (--resize N of N-pixel grey images): the whole plane in one loop, then flipped */
    kiln_tf t1;
    dc.channels = 1;
    kiln_tf_init(&t1, &dc, 0);
    kiln_image grey = {.px = px, .w = S, .h = H, .c = 1};
    for (int flip = 0; flip < 2; flip++) {
        int box[4] = {5, 0, S, S}, bad = 0;
        kiln_tf_box b;
        kiln_tf_crop_box(box, S, &b);
        b.flip = flip;
        CHECK_OK(kiln_tf_apply(&grey, &b, &t1, &s, x, NULL));
        for (int y = 0; y < S; y++)
            for (int i = 0; i < S; i++) bad += x[y * S + (flip ? S - 1 - i : i)] != t1.lut[0][px[(box[0] + y) * S + i]];
        CHECK_MSG(bad == 0, "a one-channel scale-1 crop of whole rows (flip %d): %d values are not the source's", flip, bad);
    }
    int box[4] = {4, 11, S + 1, S + 1}, same = 1;
    kiln_tf_box b;
    kiln_tf_crop_box(box, S, &b);
    CHECK_OK(kiln_tf_apply(&im, &b, &t, &s, NULL, out));
    for (int y = 0; y < S && same; y++)
        same = memcmp(out + y * S * C, px + ((box[0] + y) * W + box[1]) * C, S * C) == 0;
    CHECK_MSG(!same, "a %dx%d crop resized to %d copied pixels instead of resampling", S + 1, S + 1, S);
    kiln_tf_scratch_free(&s);
}

static void test_fixtures(void) {
    FILE *f = fopen(FIX "manifest.txt", "r");
    CHECK_MSG(f != NULL, "missing %smanifest.txt (tests/ref/make_image_fixtures.py)", FIX);
    if (!f) return;
    char line[2048];
    int n[4] = {0};
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "decode ", 7)) case_decode(line), n[0]++;
        else if (!strncmp(line, "resize ", 7)) case_resize(line), n[1]++;
        else if (!strncmp(line, "rrc ", 4)) case_rrc(line), n[2]++;
        else if (!strncmp(line, "crop ", 5)) case_crop(line), n[3]++;
    }
    fclose(f);
    CHECK_MSG(n[0] >= 10 && n[1] >= 9 && n[2] >= 20 && n[3] >= 3, "cases: %d decode, %d resize, %d rrc, %d crop", n[0], n[1],
              n[2], n[3]);
}

/* ---------- corrupt, truncated and hostile files ---------- */

static char *tmp_path(char *out, const char *name) {
    snprintf(out, 256, "%s/%s", g_tmp, name);
    return out;
}

/* decoding `bytes` saved as `name` fails with a message naming the file and saying `why` */
static void expect_bad(const char *name, const uint8_t *bytes, size_t n, const char *why) {
    char p[256];
    spit(tmp_path(p, name), bytes, n);
    const uint8_t *d;
    size_t m;
    kiln_image im;
    kiln_status st = kiln_image_read(g_ctx, p, &d, &m);
    int fmt, w, h;
    kiln_status read = st;
    if (st == KILN_OK) st = kiln_image_info(g_ctx, d, m, p, &fmt, &w, &h);
    if (st == KILN_OK) st = kiln_image_decode(g_ctx, d, m, p, 3, 1, &im);
    CHECK_MSG(st == KILN_ERR_FORMAT, "%s: %s", name, st == KILN_OK ? "decoded" : kiln_last_error());
    CHECK_MSG(st == KILN_OK || (contains(kiln_last_error(), p) && contains(kiln_last_error(), why)), "%s: '%s' lacks '%s'", name,
              kiln_last_error(), why);
    /* the workers' way: the size peeked, then the region decoded (its header checked against that size) */
    int ox, oy, whole[4] = {0, 0, 1, 1};
    st = read;
    if (st == KILN_OK) st = kiln_image_peek(g_ctx, d, m, p, &fmt, &w, &h);
    if (st == KILN_OK) st = kiln_image_decode_region(g_ctx, d, m, p, 3, w, h, 1, whole, &im, &ox, &oy);
    CHECK_MSG(st == KILN_ERR_FORMAT, "%s (peeked): %s", name, st == KILN_OK ? "decoded" : kiln_last_error());
    CHECK_MSG(st == KILN_OK || (contains(kiln_last_error(), p) && contains(kiln_last_error(), why)),
              "%s (peeked): '%s' lacks '%s'", name, kiln_last_error(), why);
}

/* kiln_image_peek gives kiln_image_info's answer without libjpeg; a decode checks the size it was given */
static void test_peek(void) {
    const char *files[3] = {FIX "rgb.jpg", FIX "gray.jpg", FIX "rgb.png"};
    for (int i = 0; i < 3; i++) {
        size_t n = 0;
        uint8_t *b = slurp(files[i], &n);
        CHECK(b && n > 100);
        if (!b) continue;
        int f1 = -1, w1 = -1, h1 = -1, f2 = -2, w2 = -2, h2 = -2, ox, oy, r[4] = {0, 0, 4, 4};
        CHECK_OK(kiln_image_info(g_ctx, b, n, files[i], &f1, &w1, &h1));
        CHECK_OK(kiln_image_peek(g_ctx, b, n, files[i], &f2, &w2, &h2));
        CHECK_MSG(f1 == f2 && w1 == w2 && h1 == h2, "%s: peek %d %dx%d, info %d %dx%d", files[i], f2, w2, h2, f1, w1, h1);
        /* fill bytes before a marker, as libjpeg allows: the same size */
        uint8_t *fill = malloc(n + 3);
        memcpy(fill, b, 2);
        memset(fill + 2, 0xff, 3);
        memcpy(fill + 5, b + 2, n - 2);
        if (f1 == KILN_IMAGE_JPEG) {
            CHECK_OK(kiln_image_peek(g_ctx, fill, n + 3, files[i], &f2, &w2, &h2));
            CHECK_MSG(w2 == w1 && h2 == h1, "%s with fill bytes: %dx%d", files[i], w2, h2);
            kiln_image im;
            kiln_status st = kiln_image_decode_region(g_ctx, b, n, files[i], 3, w1 + 1, h1, 1, r, &im, &ox, &oy);
            CHECK_MSG(st == KILN_ERR_FORMAT && contains(kiln_last_error(), files[i]) && contains(kiln_last_error(), "header"),
                      "%s decoded as %dx%d: %s", files[i], w1 + 1, h1, st == KILN_OK ? "accepted" : kiln_last_error());
            CHECK_OK(kiln_image_decode_region(g_ctx, b, n, files[i], 3, w1, h1, 1, r, &im, &ox, &oy));
        }
        free(fill);
        free(b);
    }
}

static void fix_png_crc(uint8_t *b, size_t at, size_t len) { /* chunk type + data at `at`, CRC after */
    uint32_t c = (uint32_t)crc32(0, b + at, (uInt)(len + 4));
    uint8_t *q = b + at + 4 + len;
    q[0] = (uint8_t)(c >> 24), q[1] = (uint8_t)(c >> 16), q[2] = (uint8_t)(c >> 8), q[3] = (uint8_t)c;
}

static void test_bad_files(void) {
    size_t nj = 0, np = 0;
    uint8_t *jpg = slurp(FIX "rgb.jpg", &nj), *png = slurp(FIX "rgb.png", &np);
    CHECK(jpg && png && nj > 200 && np > 100);
    if (!jpg || !png) return;
    expect_bad("cut.jpg", jpg, nj / 2, "JPEG");
    expect_bad("cut.png", png, np / 2, "PNG");
    expect_bad("header.jpg", jpg, 20, "JPEG");
    expect_bad("header.png", png, 30, "PNG");
    uint8_t junk[300];
    for (int i = 0; i < 300; i++) junk[i] = (uint8_t)(i * 37 + 11);
    expect_bad("junk.jpg", junk, sizeof junk, "not a JPEG or PNG");
    expect_bad("empty.png", junk, 0, "not a JPEG or PNG");
    /* corrupt entropy data in the middle of the scan */
    uint8_t *bad = malloc(nj);
    memcpy(bad, jpg, nj);
    for (size_t i = nj / 2; i < nj / 2 + 40; i++) bad[i] = 0xff;
    expect_bad("scan.jpg", bad, nj, "JPEG");
    /* a PNG claiming 30000 x 30000 (valid CRC): refused before 2.7 GB are allocated */
    uint8_t *big = malloc(np);
    memcpy(big, png, np);
    big[16] = 0, big[17] = 0, big[18] = 0x75, big[19] = 0x30, big[20] = 0, big[21] = 0, big[22] = 0x75, big[23] = 0x30;
    fix_png_crc(big, 12, 13);
    expect_bad("huge.png", big, np, "implausible image size 30000x30000");
    /* a JPEG whose frame header claims 30000 x 30000 */
    memcpy(bad, jpg, nj);
    for (size_t i = 2; i + 9 < nj; i++)
        if (bad[i] == 0xff && bad[i + 1] == 0xc0) { /* SOF0: length, precision, height, width */
            bad[i + 5] = 0x75, bad[i + 6] = 0x30, bad[i + 7] = 0x75, bad[i + 8] = 0x30;
            break;
        }
    expect_bad("huge.jpg", bad, nj, "implausible image size 30000x30000");
    free(bad);
    free(big);
    free(jpg);
    free(png);
}

/* kiln_image_read: one read settles a short file; a long one, a FIFO or a folder where a
 * file belongs go on to the fstat (the file whole, the others refused by kind) */
static void test_read(void) {
    enum { BIG = 200000 }; /* beyond the first read's 64 KiB */
    char p[256];
    uint8_t *big = malloc(BIG);
    for (int i = 0; i < BIG; i++) big[i] = (uint8_t)(i * 131 + (i >> 9));
    const size_t sizes[3] = {1, 777, BIG};
    for (int k = 0; k < 3; k++) { /* the short file last read after the long one: the grown buffer */
        snprintf(p, sizeof p, "%s/read%d.jpg", g_tmp, k);
        spit(p, big, sizes[k]);
        const uint8_t *d;
        size_t n = 0;
        CHECK_OK(kiln_image_read(g_ctx, p, &d, &n));
        CHECK_MSG(n == sizes[k] && memcmp(d, big, n) == 0, "%s: %zu bytes read of %zu, or not its bytes", p, n, sizes[k]);
    }
    free(big);
    const uint8_t *d;
    size_t n;
    tmp_path(p, "pipe.jpg");
    CHECK(mkfifo(p, 0600) == 0);
    CHECK_MSG(kiln_image_read(g_ctx, p, &d, &n) == KILN_ERR_IO && contains(kiln_last_error(), "not a regular file (a FIFO)"),
              "a FIFO: %s", kiln_last_error());
    unlink(p);
    tmp_path(p, "dir.jpg");
    mk(p);
    CHECK_MSG(kiln_image_read(g_ctx, p, &d, &n) == KILN_ERR_IO && contains(kiln_last_error(), "a folder"), "a folder: %s",
              kiln_last_error());
    rmdir(p);
    tmp_path(p, "missing.jpg");
    CHECK_MSG(kiln_image_read(g_ctx, p, &d, &n) == KILN_ERR_IO && contains(kiln_last_error(), "cannot open"), "missing: %s",
              kiln_last_error());
}

/* ---------- image folders ---------- */

/* an image for class k, sample i: a seeded pattern, never constant */
static void put_image(const char *path, int w, int h, int c, int seed, int format) {
    uint8_t *px = malloc((size_t)w * h * c);
    for (int i = 0; i < w * h * c; i++) px[i] = (uint8_t)(20 + (i * 7 + seed * 31 + (i / (w * c)) * 5) % 200);
    kiln_image im = {px, w, h, c};
    const uint8_t *d;
    size_t n;
    CHECK_OK(kiln_image_encode(g_ctx, &im, format, 90, &d, &n));
    spit(path, d, n);
    free(px);
}

/* DIR/train/<a|b|c>/ and DIR/test/..., 20x24 (w x h) images, JPEG and PNG mixed */
static void make_folder(const char *dir, int per_class) {
    char p[512];
    const char *cls[3] = {"b_shoe", "a_bag", "c_coat"}; /* made out of order: classes are sorted */
    mk(dir);
    for (int split = 0; split < 2; split++) {
        snprintf(p, sizeof p, "%s/%s", dir, split ? "test" : "train");
        mk(p);
        for (int k = 0; k < 3; k++) {
            snprintf(p, sizeof p, "%s/%s/%s", dir, split ? "test" : "train", cls[k]);
            mk(p);
            for (int i = 0; i < per_class; i++) {
                snprintf(p, sizeof p, "%s/%s/%s/%02d.%s", dir, split ? "test" : "train", cls[k], i, i % 2 ? "png" : "JPG");
                put_image(p, 20, 24, 3, k * 100 + i, i % 2 ? KILN_IMAGE_PNG : KILN_IMAGE_JPEG);
            }
        }
    }
}

static void test_folder_open(const char *dir) {
    kiln_data_config dc = kiln_data_defaults();
    kiln_dataset *ds = NULL;
    CHECK_OK(kiln_dataset_open_config(dir, 1, &dc, &ds)); /* no transforms: 3 x 24 x 20 as the files */
    if (ds) {
        CHECK(ds->len == 18 && ds->num_classes == 3 && ds->sample_ndim == 3);
        CHECK_MSG(ds->sample_shape[0] == 3 && ds->sample_shape[1] == 24 && ds->sample_shape[2] == 20, "%lld %lld %lld",
                  (long long)ds->sample_shape[0], (long long)ds->sample_shape[1], (long long)ds->sample_shape[2]);
        float x[3 * 24 * 20];
        int32_t y = -1;
        /* sorted classes: a_bag is 0, b_shoe 1, c_coat 2; sample 7 is b_shoe's second (a PNG) */
        CHECK_OK(ds->get(ds, 7, 0, x, &y));
        CHECK_MSG(y == 1, "label %d", y);
        /* the PNG's pixels exactly, as ToTensor scales them */
        uint8_t px[3 * 24 * 20];
        for (int i = 0; i < 3 * 24 * 20; i++) px[i] = (uint8_t)(20 + (i * 7 + 1 * 31 + (i / 60) * 5) % 200); /* seed 1: b_shoe is made first */
        int bad = 0;
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < 24 * 20; i++) bad += x[c * 480 + i] != (float)px[i * 3 + c] / 255.0f;
        CHECK_MSG(bad == 0, "%d values differ from the PNG's pixels", bad);
        kiln_dataset_free(ds);
    }
    /* resize + center crop, one channel, normalised: the test split has the same shape */
    dc.resize = 12;
    dc.center_crop = 10;
    dc.channels = 1;
    CHECK_OK(kiln_data_parse_normalize("0.5/0.25", &dc));
    CHECK_OK(kiln_dataset_open_config(dir, 0, &dc, &ds));
    if (ds) {
        CHECK(ds->len == 18 && ds->sample_shape[0] == 1 && ds->sample_shape[1] == 10 && ds->sample_shape[2] == 10);
        float x[100];
        int32_t y = -1;
        CHECK_OK(ds->get(ds, 17, 0, x, &y));
        int inside = 1, varied = 0;
        for (int i = 0; i < 100; i++) inside &= x[i] >= -2.0f && x[i] <= 2.0f, varied |= x[i] != x[0];
        CHECK(y == 2 && inside && varied);
        kiln_dataset_free(ds);
    }
}

/* a failing open names what is wrong */
static void expect_open_fail(const char *dir, int train, const kiln_data_config *dc, const char *w1, const char *w2) {
    kiln_dataset *ds = (kiln_dataset *)1;
    kiln_status st = kiln_dataset_open_config(dir, train, dc, &ds);
    CHECK_MSG(st != KILN_OK && ds == NULL, "%s opened", dir);
    CHECK_MSG(contains(kiln_last_error(), w1) && (!w2 || contains(kiln_last_error(), w2)), "'%s' lacks '%s' / '%s'",
              kiln_last_error(), w1, w2 ? w2 : "");
}

static void test_folder_errors(void) {
    char d[256], p[512];
    kiln_data_config dc = kiln_data_defaults();
    /* an empty class folder */
    snprintf(d, sizeof d, "%s/emptyclass", g_tmp);
    mk(d);
    snprintf(p, sizeof p, "%s/cat", d), mk(p);
    snprintf(p, sizeof p, "%s/cat/1.png", d), put_image(p, 8, 8, 1, 1, KILN_IMAGE_PNG);
    snprintf(p, sizeof p, "%s/dog", d), mk(p);
    snprintf(p, sizeof p, "%s/dog/notes.txt", d), spit(p, "x", 1);
    expect_open_fail(d, 1, &dc, "dog", "empty class folder");
    /* mixed sizes without a resize: the file is named, and a resize + crop fixes it */
    snprintf(p, sizeof p, "%s/dog/2.png", d), put_image(p, 9, 8, 1, 2, KILN_IMAGE_PNG);
    expect_open_fail(d, 1, &dc, "dog/2.png", "--resize");
    dc.resize = dc.center_crop = 8;
    kiln_dataset *ds = NULL;
    CHECK_OK(kiln_dataset_open_config(d, 1, &dc, &ds));
    if (ds) CHECK(ds->len == 2 && ds->num_classes == 2 && ds->sample_shape[0] == 3);
    kiln_dataset_free(ds);
    /* no test/ and no --val-split; then a seeded split */
    expect_open_fail(d, 0, &dc, d, "--val-split");
    for (int i = 3; i < 23; i++) snprintf(p, sizeof p, "%s/cat/%d.png", d, i), put_image(p, 8, 8, 1, i, KILN_IMAGE_PNG);
    dc.val_split = 0.25f;
    kiln_dataset *tr = NULL, *te = NULL;
    CHECK_OK(kiln_dataset_open_config(d, 1, &dc, &tr));
    CHECK_OK(kiln_dataset_open_config(d, 0, &dc, &te));
    if (tr && te) CHECK_MSG(tr->len == 16 && te->len == 6, "split %lld + %lld", (long long)tr->len, (long long)te->len);
    kiln_dataset_free(tr);
    kiln_dataset_free(te);
    /* a folder of files only */
    snprintf(p, sizeof p, "%s/emptyclass/cat", g_tmp);
    dc = kiln_data_defaults();
    expect_open_fail(p, 1, &dc, p, "idx3");
    /* what IDX data (its own test split) refuses */
    dc.val_split = 0.2f;
    expect_open_fail("fashion-mnist", 1, &dc, "fashion-mnist", "image folders");
}

/* ---------- the loader over an image folder ---------- */

static uint64_t epoch_checksum(kiln_dataset *ds, int workers, int *err) { return loader_hash(ds, workers, 2, NULL, err); }

static void test_determinism(const char *dir) {
    kiln_data_config dc = kiln_data_defaults();
    CHECK_OK(kiln_data_parse_rrc("16,0.3,1", &dc));
    dc.hflip = 1;
    CHECK_OK(kiln_data_parse_normalize("imagenet", &dc));
    kiln_dataset *ds = NULL;
    CHECK_OK(kiln_dataset_open_config(dir, 1, &dc, &ds));
    if (!ds) return;
    CHECK(ds->sample_shape[0] == 3 && ds->sample_shape[1] == 16 && ds->sample_shape[2] == 16);
    int err = 0;
    uint64_t ref = epoch_checksum(ds, 0, &err);
    CHECK_MSG(!err, "%s", kiln_last_error());
    const int counts[3] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        uint64_t h = epoch_checksum(ds, counts[i], &err);
        CHECK_MSG(!err && h == ref, "%d workers: checksum %016llx, 0 workers %016llx", counts[i], (unsigned long long)h,
                  (unsigned long long)ref);
    }
    /* the random transforms do change with the key: two keys, two samples */
    float a[768], b[768];
    int32_t y;
    CHECK_OK(ds->get(ds, 0, 1, a, &y));
    CHECK_OK(ds->get(ds, 0, 2, b, &y));
    CHECK(memcmp(a, b, sizeof a) != 0);
    kiln_dataset_free(ds);
}

/* a truncated file fails the epoch on the training thread, naming the file, for any worker count */
static void test_worker_error(const char *dir) {
    char p[512];
    snprintf(p, sizeof p, "%s/train/b_shoe/03.png", dir);
    size_t n = 0;
    uint8_t *b = slurp(p, &n);
    CHECK(b && n > 40);
    if (!b) return;
    spit(p, b, n / 2);
    kiln_data_config dc = kiln_data_defaults();
    dc.resize = 16;
    dc.center_crop = 16;
    kiln_dataset *ds = NULL;
    CHECK_OK(kiln_dataset_open_config(dir, 1, &dc, &ds));
    for (int w = 0; ds && w <= 4; w += 2) {
        int err = 0;
        epoch_checksum(ds, w, &err);
        CHECK_MSG(err && contains(kiln_last_error(), p) && contains(kiln_last_error(), "PNG"), "%d workers: err %d, '%s'", w,
                  err, kiln_last_error());
    }
    kiln_dataset_free(ds);
    spit(p, b, n);
    free(b);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/kiln_test_image_XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
    g_ctx = kiln_image_ctx_new();
    test_fixtures();
    test_peek();
    test_copy_crop();
    test_bad_files();
    test_read();
    char dir[256];
    snprintf(dir, sizeof dir, "%s/folder", g_tmp);
    make_folder(dir, 6);
    test_folder_open(dir);
    test_folder_errors();
    test_determinism(dir);
    test_worker_error(dir);
    kiln_image_ctx_free(g_ctx);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
    return tu_finish("test_image");
}
