/* Cropped JPEG decoding (src/data/jpeg.c, kiln_tf_decode): on JPEGs PIL
 * encoded (tests/ref/fixtures/formats/jpeg: 4:2:0, 4:2:2, 4:4:4, grey,
 * progressive, odd sizes) and on the image fixtures, every DCT scale, grey
 * and RGB output, random regions: the region's pixels equal a full decode's
 * at the same scale exactly; transform outputs through kiln_tf_decode equal
 * those of a full decode; a file cut short still fails when the crop stops
 * above the cut. Prints how far the crop's outermost columns (never used)
 * differ from a full decode: fancy upsampling's edge effect. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data/internal/image.h"
#include "data/internal/transform.h"
#include "imagetest.h"
#include "testutil.h"

static kiln_image_ctx *g_ctx;
/* the largest difference from a full decode seen in the decoded columns outside the region:
 * the crop's outermost column (left, when not the image's; right likewise), and the others */
static int g_edge_worst[3];

/* every region pixel equal to the full decode's; the columns outside the region measured */
static void compare_region(const char *file, int c, int num, const kiln_image *full, const int r[4]) {
    kiln_image part;
    int ox = -1, oy = -1;
    const uint8_t *d;
    size_t n;
    char p[256];
    snprintf(p, sizeof p, "%s", file);
    if (kiln_image_read(g_ctx, p, &d, &n) != KILN_OK) return;
    kiln_status st = kiln_image_decode_region(g_ctx, d, n, p, c, 0, 0, num / 8.0, r, &part, &ox, &oy);
    CHECK_MSG(st == KILN_OK, "%s: %s", file, kiln_last_error());
    if (st != KILN_OK) return;
    int covers = ox >= 0 && oy >= 0 && ox <= r[0] && oy <= r[1] && ox + part.w >= r[2] && oy + part.h >= r[3] && part.c == c;
    CHECK_MSG(covers, "%s c%d %d/8: region %d,%d..%d,%d, decoded %dx%d at %d,%d", file, c, num, r[0], r[1], r[2], r[3], part.w,
              part.h, ox, oy);
    if (!covers) return;
    int bad = 0;
    for (int y = 0; y < part.h; y++)
        for (int x = 0; x < part.w; x++)
            for (int k = 0; k < c; k++) {
                int a = part.px[((size_t)y * part.w + x) * c + k];
                int b = full->px[((size_t)(y + oy) * full->w + x + ox) * c + k];
                int in = x + ox >= r[0] && x + ox < r[2] && y + oy >= r[1] && y + oy < r[3];
                int where = x == 0 && ox > 0 ? 0 : (x == part.w - 1 && ox + part.w < full->w ? 1 : 2);
                if (in) bad += a != b;
                else if (abs(a - b) > g_edge_worst[where]) g_edge_worst[where] = abs(a - b);
            }
    CHECK_MSG(bad == 0, "%s c%d scale %d/8 region %d,%d..%d,%d: %d values differ from the full decode", file, c, num, r[0],
              r[1], r[2], r[3], bad);
}

static void test_regions(const char *file) {
    for (int c = 1; c <= 3; c += 2)
        for (int num = 1; num <= 8; num++) {
            const uint8_t *d;
            size_t n;
            kiln_image im;
            if (kiln_image_read(g_ctx, file, &d, &n) != KILN_OK || kiln_image_decode(g_ctx, d, n, file, c, num / 8.0, &im) != KILN_OK) {
                CHECK_MSG(0, "%s: %s", file, kiln_last_error());
                return;
            }
            kiln_image full = im;
            full.px = malloc((size_t)im.w * im.h * c);
            memcpy(full.px, im.px, (size_t)im.w * im.h * c);
            for (int t = 0; t < 12; t++) {
                int r[4];
                r[0] = (int)tu_int(0, full.w - 1), r[2] = (int)tu_int(r[0] + 1, full.w);
                r[1] = (int)tu_int(0, full.h - 1), r[3] = (int)tu_int(r[1] + 1, full.h);
                if (t == 0) r[0] = 0, r[1] = 0, r[2] = full.w, r[3] = full.h; /* the whole image */
                compare_region(file, c, num, &full, r);
            }
            free(full.px);
        }
}

/* samples through kiln_tf_decode against a full-size decode with the box rescaled: the same values */
static void test_transform(const char *file, int random, int size) {
    kiln_data_config dc = kiln_data_defaults();
    if (random) dc.random_resized_crop = size, dc.hflip = 1;
    else dc.resize = size + size / 7, dc.center_crop = size;
    int worst = 0, exact = 0, total = 0;
    for (int c = 1; c <= 3; c += 2) {
        dc.channels = c;
        kiln_tf t;
        kiln_tf_init(&t, &dc, random);
        kiln_tf_scratch s = {0};
        uint8_t *a = malloc((size_t)size * size * 3), *b = malloc((size_t)size * size * 3);
        for (uint64_t key = 1; key <= 25; key++) {
            const uint8_t *d;
            size_t n;
            int fmt, w, h;
            kiln_tf_box b1, b2;
            kiln_image im;
            if (kiln_image_read(g_ctx, file, &d, &n) != KILN_OK || kiln_image_info(g_ctx, d, n, file, &fmt, &w, &h) != KILN_OK ||
                kiln_tf_plan(&t, w, h, key, file, &b1) != KILN_OK) {
                CHECK_MSG(0, "%s: %s", file, kiln_last_error());
                break;
            }
            b2 = b1;
            CHECK_OK(kiln_tf_decode(g_ctx, d, n, file, c, fmt, w, h, &b1, &im));
            CHECK_OK(kiln_tf_apply(&im, &b1, &t, &s, NULL, a));
            double need = b2.x.s > b2.y.s ? 1.0 / b2.y.s : 1.0 / b2.x.s;
            CHECK_OK(kiln_image_decode(g_ctx, d, n, file, c, need, &im));
            if (im.w != w || im.h != h) kiln_tf_rescale(&b2, w, h, im.w, im.h);
            CHECK_OK(kiln_tf_apply(&im, &b2, &t, &s, NULL, b));
            int e = 1;
            for (int i = 0; i < size * size * c; i++) {
                int diff = abs(a[i] - b[i]);
                worst = diff > worst ? diff : worst;
                e &= diff == 0;
            }
            exact += e, total++;
        }
        free(a);
        free(b);
        kiln_tf_scratch_free(&s);
    }
    CHECK_MSG(worst <= 1, "%s %s %d: cropped decoding changes samples by %d levels", file, random ? "RandomResizedCrop" : "CenterCrop",
              size, worst);
    printf("test_jpeg_crop: %s %s %d: %d of %d samples identical to a full decode's, worst %d\n", file,
           random ? "RandomResizedCrop" : "Resize+CenterCrop", size, exact, total, worst);
}

/* a file cut short fails even when the crop stops above the cut */
static void test_cut(const char *file) {
    size_t n = 0;
    uint8_t *b = slurp(file, &n);
    CHECK(b && n > 1000);
    if (!b) return;
    size_t cut = n * 3 / 4;
    int fmt, w, h, ox, oy;
    kiln_image im;
    CHECK_OK(kiln_image_info(g_ctx, b, cut, file, &fmt, &w, &h));
    int top[4] = {0, 0, w / 2, 4};
    kiln_status st = kiln_image_decode_region(g_ctx, b, cut, file, 3, w, h, 1.0, top, &im, &ox, &oy);
    CHECK_MSG(st == KILN_ERR_FORMAT && strstr(kiln_last_error(), file) && strstr(kiln_last_error(), "truncated"),
              "%s cut to %zu bytes, top rows: status %d (%s)", file, cut, (int)st, kiln_last_error());
    CHECK_OK(kiln_image_decode_region(g_ctx, b, n, file, 3, w, h, 1.0, top, &im, &ox, &oy)); /* whole, it decodes */
    free(b);
}

int main(void) {
    tu_seed(77);
    g_ctx = kiln_image_ctx_new();
    const char *files[] = {"ref/fixtures/formats/jpeg/rgb420.jpg", "ref/fixtures/formats/jpeg/rgb422.jpg",
                           "ref/fixtures/formats/jpeg/rgb444.jpg", "ref/fixtures/formats/jpeg/grey.jpg",
                           "ref/fixtures/formats/jpeg/prog420.jpg", "ref/fixtures/images/rgb.jpg",
                           "ref/fixtures/images/gray.jpg"};
    for (int i = 0; i < 7; i++) test_regions(files[i]);
    printf("test_jpeg_crop: decoded pixels outside the regions (never used) differ from a full decode by up to %d levels in "
           "the crop's first column, %d in its last, %d elsewhere\n", g_edge_worst[0], g_edge_worst[1], g_edge_worst[2]);
    CHECK(g_edge_worst[2] == 0);
    for (int i = 0; i < 7; i++) {
        test_transform(files[i], 1, 24);
        test_transform(files[i], 0, 20);
    }
    test_cut("ref/fixtures/formats/jpeg/rgb420.jpg");
    test_cut("ref/fixtures/formats/jpeg/rgb444.jpg");
    kiln_image_ctx_free(g_ctx);
    return tu_finish("test_jpeg_crop");
}
