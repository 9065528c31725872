/* kiln plot's library parts: round axis ticks, the metrics reader (values
 * back as written, every kind of bad line named FILE:LINE), and pictures: a
 * PNG that libspng decodes at the asked size with each run's colour drawn
 * (and no colour of a run not given), a refused output name, a bad input
 * leaving an earlier picture alone. Also TFRecord's masked CRC-32C against
 * the published check value. */
#include <errno.h>
#include <math.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"
#include "train/internal/plot.h"
#include "train/internal/tensorboard.h"

static char g_dir[64];

static void path_in(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_dir, name); }

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) abort();
    fputs(text, f);
    fclose(f);
}

static void test_axis(void) {
    kiln_axis a;
    char s[32];
    kiln_axis_nice(0, 937, 6, &a);
    CHECK(a.lo == 0 && a.hi == 1000 && a.step == 200 && a.nticks == 6);
    kiln_axis_label(&a, 5, s, sizeof s);
    CHECK_MSG(!strcmp(s, "1000"), "%s", s);
    kiln_axis_nice(0.1, 0.3, 6, &a); /* 0.1 + 2 * 0.05 must print as 0.20 */
    kiln_axis_label(&a, 2, s, sizeof s);
    CHECK_MSG(a.step == 0.05 && !strcmp(s, "0.20"), "step %g label %s", a.step, s);
    kiln_axis_nice(-3.7, 12.2, 6, &a);
    CHECK(a.lo == -5 && a.hi == 15 && a.step == 5);
    kiln_axis_label(&a, 1, s, sizeof s);
    CHECK_MSG(!strcmp(s, "0"), "no -0: %s", s);
    kiln_axis_nice(2.5, 2.5, 6, &a); /* one value: a range around it */
    CHECK(a.lo <= 2.25 && a.hi >= 2.75 && a.nticks >= 2);
    kiln_axis_nice(0, 0, 6, &a);
    CHECK(a.lo == 0 && a.hi == 1);
    kiln_axis_nice(1e15, 1e15 + 1, 6, &a); /* below the resolution of the numbers: still ends */
    CHECK(a.nticks >= 2 && a.nticks <= 50 && a.hi > a.lo);
    kiln_axis_nice(1.2e7, 1.26e7, 6, &a);
    kiln_axis_label(&a, 1, s, sizeof s);
    char t[32];
    kiln_axis_label(&a, 2, t, sizeof t);
    CHECK_MSG(strcmp(s, t) != 0, "neighbouring ticks labelled alike: %s %s", s, t);
    /* random ranges: ticks at whole steps covering the range, 1 or 2 or 5 times a power of ten */
    for (int k = 0; k < 200; k++) {
        double lo = tu_uniform(-1e4, 1e4), hi = lo + pow(10, tu_uniform(-4, 6));
        kiln_axis_nice(lo, hi, 6, &a);
        double m = a.step / pow(10, floor(log10(a.step)) );
        int round = fabs(m - 1) < 1e-9 || fabs(m - 2) < 1e-9 || fabs(m - 5) < 1e-9;
        CHECK_MSG(a.lo <= lo && a.hi >= hi && round && a.nticks >= 2 && a.nticks <= 12, "[%g, %g]: %g..%g by %g (%d)", lo,
                  hi, a.lo, a.hi, a.step, a.nticks);
    }
}

/* a metrics file as kiln train writes it, with random values: steps every 5, an epoch line every 40 steps */
static void write_run(const char *path, int nsteps, double scale) {
    FILE *f = fopen(path, "w");
    if (!f) abort();
    for (int s = 5; s <= nsteps; s += 5) {
        fprintf(f, "{\"kind\":\"step\",\"step\":%d,\"epoch\":%d,\"loss\":%.9g,\"lr\":0.5,\"images_per_s\":%.9g,"
                   "\"data_wait\":%.9g,\"time_s\":%.9g}\n",
                s, 1 + s / 40, scale * tu_uniform(0.2, 2), tu_uniform(1000, 5000), tu_uniform(0, 0.3), s * 0.01);
        if (s % 40 == 0)
            fprintf(f, "{\"kind\":\"epoch\",\"epoch\":%d,\"step\":%d,\"train_loss\":%.9g,\"lr\":0.5,\"images_per_s\":3000,"
                       "\"data_wait\":0.1,\"time_s\":%g,\"test_loss\":%.9g,\"test_accuracy\":%.9g}\n",
                    s / 40, s, scale * tu_uniform(0.3, 1), s * 0.01, scale * tu_uniform(0.3, 1), tu_uniform(0.5, 0.9));
    }
    fclose(f);
}

static void test_read(void) {
    char p[128];
    path_in(p, sizeof p, "run.jsonl");
    write_text(p, "{\"kind\":\"step\",\"step\":4,\"epoch\":1,\"loss\":1.25,\"lr\":0.5,\"images_per_s\":100,\"data_wait\":null,"
                  "\"time_s\":2}\n\n"
                  "{\"kind\":\"eval\",\"step\":4}\n" /* a kind from a later version: skipped */
                  "{\"kind\":\"epoch\",\"epoch\":1,\"step\":8,\"train_loss\":0.75,\"lr\":0.25,\"images_per_s\":90,"
                  "\"data_wait\":0.5,\"time_s\":4,\"test_loss\":0.5,\"test_accuracy\":0.875}\n"
                  "{\"kind\":\"epoch\",\"epoch\":2,\"step\":16,\"train_loss\":0.5}");
    kiln_metrics_log l;
    CHECK_OK(kiln_metrics_read(p, &l));
    CHECK(l.nsteps == 1 && l.nepochs == 2);
    if (l.nsteps == 1 && l.nepochs == 2) {
        CHECK(l.steps[0].step == 4 && l.steps[0].epoch == 1 && l.steps[0].loss == 1.25 && l.steps[0].images_per_s == 100);
        CHECK(isnan(l.steps[0].data_wait) && isnan(l.steps[0].test_accuracy));
        CHECK(l.epochs[0].step == 8 && l.epochs[0].loss == 0.75 && l.epochs[0].test_loss == 0.5 &&
              l.epochs[0].test_accuracy == 0.875 && l.epochs[0].lr == 0.25);
        CHECK(l.epochs[1].step == 16 && l.epochs[1].loss == 0.5 && isnan(l.epochs[1].test_loss));
    }
    kiln_metrics_log_free(&l);

    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"{\"kind\":\"step\",\"step\":1}\n{\"kind\":\"step\",\"step\":2,\"lo", ":2: not JSON"},
        {"{\"kind\":\"step\",\"step\":1}\n{\"kind\":\"step\",\"step\":2,\"lo", "the last line is cut short"},
        {"{\"kind\":\"step\",\"step\":1}\n[1,2]\n", ":2: not a JSON object"},
        {"{\"step\":1}\n", ":1: no \"kind\""},
        {"{\"kind\":\"step\"}\n", ":1: \"step\" is missing"},
        {"{\"kind\":\"step\",\"step\":-3}\n", ":1: \"step\" is another value"},
        {"{\"kind\":\"step\",\"step\":1.5}\n", ":1: \"step\" is another value"},
        {"\n\n{\"kind\":\"step\",\"step\":1,\"loss\":\"low\"}\n", ":3: \"loss\" is not a number"},
        {"{\"kind\":\"epoch\",\"step\":1,\"test_accuracy\":[0.5]}\n", ":1: \"test_accuracy\" is not a number"},
        {"{\"kind\":\"step\",\"step\":1,\"step\":2}\n", ":1: not JSON"},
        {"{\"kind\":\"step\",\"step\":1,\"loss\":NaN}\n", ":1: not JSON"},
        {"", "no step or epoch lines"},
        {"{\"kind\":\"other\",\"step\":1}\n", "no step or epoch lines"},
        {"\x89PNG\r\n\x1a\n", ":1: not JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(p, bad[i].text);
        kiln_status st = kiln_metrics_read(p, &l);
        const char *m = kiln_last_error();
        CHECK_MSG(st == KILN_ERR_FORMAT && strstr(m, p) && strstr(m, bad[i].needle), "case %zu: %d '%s'", i, (int)st, m);
        CHECK(l.steps == NULL && l.epochs == NULL);
    }
    char fifo[128];
    path_in(fifo, sizeof fifo, "m.fifo");
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK_MSG(kiln_metrics_read(fifo, &l) == KILN_ERR_IO && strstr(kiln_last_error(), "FIFO"), "%s", kiln_last_error());
    path_in(p, sizeof p, "missing.jsonl");
    CHECK(kiln_metrics_read(p, &l) == KILN_ERR_IO && strstr(kiln_last_error(), p));
}

/* the PNG decoded to RGB; NULL when libspng refuses it */
static uint8_t *decode_png(const char *path, uint32_t *w, uint32_t *h) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    spng_ctx *ctx = spng_ctx_new(0);
    struct spng_ihdr ihdr;
    size_t n = 0;
    uint8_t *px = NULL;
    spng_set_png_file(ctx, f);
    if (spng_get_ihdr(ctx, &ihdr) == 0 && spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &n) == 0 && (px = malloc(n)) &&
        spng_decode_image(ctx, px, n, SPNG_FMT_RGB8, 0) == 0) {
        *w = ihdr.width, *h = ihdr.height;
    } else {
        free(px);
        px = NULL;
    }
    spng_ctx_free(ctx);
    fclose(f);
    return px;
}

/* pixels within a small distance of a colour (antialiased lines keep their colour at the centre) */
static int64_t near(const uint8_t *px, uint32_t w, uint32_t h, int r, int g, int b) {
    int64_t n = 0;
    for (size_t i = 0; i < (size_t)w * h; i++)
        if (abs(px[3 * i] - r) + abs(px[3 * i + 1] - g) + abs(px[3 * i + 2] - b) < 24) n++;
    return n;
}

static const int run_rgb[3][3] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44}}; /* the palette's first three */

static void test_png(void) {
    char runs[3][128], png[128];
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "run%d.jsonl", i);
        path_in(runs[i], sizeof runs[i], name);
        write_run(runs[i], 100 + 60 * i, 1 + i);
    }
    const char *names[3] = {runs[0], runs[1], runs[2]};
    path_in(png, sizeof png, "three.png");
    CHECK_OK(kiln_plot(names, 3, png, 640, 420));
    uint32_t w = 0, h = 0;
    uint8_t *px = decode_png(png, &w, &h);
    CHECK_MSG(px && w == 640 && h == 420, "decoded %ux%u", w, h);
    for (int i = 0; px && i < 3; i++) {
        int64_t n = near(px, w, h, run_rgb[i][0], run_rgb[i][1], run_rgb[i][2]);
        CHECK_MSG(n > 200, "run %d's colour: %lld pixels", i, (long long)n);
    }
    free(px);
    path_in(png, sizeof png, "one.PNG"); /* the extension in any case */
    CHECK_OK(kiln_plot(names, 1, png, 300, 200));
    px = decode_png(png, &w, &h);
    CHECK_MSG(px && w == 300 && h == 200, "decoded %ux%u", w, h);
    if (px) CHECK(near(px, w, h, 31, 119, 180) > 50 && near(px, w, h, 255, 127, 14) == 0 && near(px, w, h, 44, 160, 44) == 0);
    free(px);

    /* a bad metrics file: FORMAT naming it, and the earlier picture is still there, whole */
    struct stat before, after;
    CHECK(stat(png, &before) == 0);
    char bad[128];
    path_in(bad, sizeof bad, "bad.jsonl");
    write_text(bad, "{\"kind\":\"step\",\"step\":1}\n{\"kind\":\"step\",\"step\":2}\n{\"kind\":\"st");
    const char *two[2] = {runs[0], bad};
    CHECK(kiln_plot(two, 2, png, 300, 200) == KILN_ERR_FORMAT && strstr(kiln_last_error(), "bad.jsonl:3:"));
    CHECK(stat(png, &after) == 0 && after.st_size == before.st_size && after.st_mtime == before.st_mtime);

    char txt[128];
    path_in(txt, sizeof txt, "curves.txt");
    CHECK(kiln_plot(names, 1, txt, 300, 200) == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), ".png or .svg"));
    CHECK(access(txt, F_OK) != 0);
    CHECK(kiln_plot(names, 1, png, 100, 200) == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "100 x 200"));
    CHECK(kiln_plot(names, 0, png, 300, 200) == KILN_ERR_INVALID_ARG);
    path_in(png, sizeof png, "nodir/x.png");
    CHECK(kiln_plot(names, 1, png, 300, 200) == KILN_ERR_IO && strstr(kiln_last_error(), png));
}

/* logs with nothing to draw in some panels, values out of any sensible range, names that are not UTF-8 */
static void test_odd_logs(void) {
    kiln_metrics_row steps[3] = {{.step = 1, .loss = 1e300, .lr = NAN, .images_per_s = NAN, .data_wait = NAN},
                                 {.step = INT64_MAX / 2, .loss = 2, .images_per_s = -5, .data_wait = 0},
                                 {.step = 0, .loss = NAN, .images_per_s = 1e-300, .data_wait = 1e6}};
    for (int i = 0; i < 3; i++) steps[i].test_loss = steps[i].test_accuracy = NAN;
    kiln_metrics_log l = {.steps = steps, .nsteps = 3};
    const char *names[1] = {"r\xff\xfe\x01un"};
    char svg[128];
    path_in(svg, sizeof svg, "odd.svg");
    CHECK_OK(kiln_plot_logs(&l, names, 1, KILN_PLOT_SVG, svg, 200, 200));
    FILE *f = fopen(svg, "r");
    char head[64] = {0};
    if (f) {
        CHECK(fread(head, 1, sizeof head - 1, f) > 0);
        fclose(f);
    }
    CHECK_MSG(strstr(head, "<?xml") == head, "%s", head);
}

static void test_crc32c(void) {
    /* CRC-32C("123456789") = 0xe3069283 (RFC 3720's check value), masked as TFRecord does */
    uint32_t c = 0xe3069283u, want = ((c >> 15) | (c << 17)) + 0xa282ead8u;
    CHECK(kiln_crc32c_masked((const uint8_t *)"123456789", 9) == want);
}

int main(void) {
    kiln_log_set_level(KILN_LOG_WARN);
    snprintf(g_dir, sizeof g_dir, "/tmp/kiln_test_plot.XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    test_axis();
    test_read();
    test_png();
    test_odd_logs();
    kiln_plot_release(); /* after kiln_plot_logs, which keeps cairo's font caches */
    test_crc32c();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "test_plot: could not remove %s\n", g_dir);
    return tu_finish("test_plot");
}
