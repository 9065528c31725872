/* CIFAR-10's binary batches and llm.c's token files (fixtures from
 * tests/ref/make_data_fixtures.py, numpy's arrays and torchvision's
 * transforms of them): every sample against torchvision (ToTensor + Normalize
 * exactly, grey as PIL's convert('L'), Resize + CenterCrop within 1/255), the
 * flip, RandomResizedCrop's shape, batches identical for 0 and 2 workers;
 * token windows (test: consecutive, training: at random offsets drawn from the
 * key), the writer byte for byte against numpy's file; corrupt, truncated and
 * missing files named in the error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "imagetest.h"
#include "kiln/data.h"
#include "testutil.h"

#define FIX "ref/fixtures/formats/"
static char g_tmp[64];

static int contains(const char *hay, const char *needle) { return hay && strstr(hay, needle) != NULL; }

static float *load_f32(const char *name, size_t want) {
    char p[256];
    snprintf(p, sizeof p, FIX "%s", name);
    size_t n = 0;
    uint8_t *b = slurp(p, &n);
    CHECK_MSG(b && n == want * 4, "%s: %zu bytes, expected %zu", p, n, want * 4);
    if (b && n != want * 4) free(b), b = NULL;
    return (float *)b;
}

static int load_ints(const char *name, int64_t *v, int max) {
    char p[256];
    snprintf(p, sizeof p, FIX "%s", name);
    FILE *f = fopen(p, "r");
    int n = 0;
    while (f && n < max && fscanf(f, "%lld", (long long *)&v[n]) == 1) n++;
    if (f) fclose(f);
    return n;
}

/* every sample of a split of `set` (cifar: 7 training and 3 test samples, idx: 5 and 3) against torchvision's
 * tensors (tolerance tol) */
static void against_set(const char *set, const char *data, int train, const kiln_data_config *dc, const char *ref,
                        double tol) {
    kiln_dataset *ds = NULL;
    kiln_status st = kiln_dataset_open_config(data, train, dc, &ds);
    CHECK_MSG(st == KILN_OK, "%s: %s", ref, kiln_last_error());
    if (st != KILN_OK) return;
    int64_t labels[16];
    char lname[64];
    snprintf(lname, sizeof lname, "%s_labels_%s.txt", set, train ? "train" : "test");
    int nl = load_ints(lname, labels, 16);
    int64_t numel = kiln_shape_numel(ds->sample_ndim, ds->sample_shape);
    CHECK(ds->len == nl && ds->len == (train ? (strcmp(set, "idx") ? 7 : 5) : 3) && ds->num_classes == 10);
    float *want = load_f32(ref, (size_t)(ds->len * numel)), *x = malloc((size_t)numel * 4);
    double worst = 0;
    for (int64_t i = 0; want && i < ds->len; i++) {
        int32_t y = -1;
        CHECK_OK(ds->get(ds, i, 99, x, &y));
        CHECK_MSG(y == labels[i], "%s sample %lld: label %d, expected %lld", ref, (long long)i, y, (long long)labels[i]);
        for (int64_t k = 0; k < numel; k++) {
            double d = fabs((double)x[k] - want[i * numel + k]);
            worst = d > worst ? d : worst;
        }
    }
    CHECK_MSG(want && worst <= tol, "%s: differs from torchvision by %g (tolerance %g)", ref, worst, tol);
    free(want);
    free(x);
    kiln_dataset_free(ds);
}

static void against(const char *data, int train, const kiln_data_config *dc, const char *ref, double tol) {
    against_set("cifar", data, train, dc, ref, tol);
}

static kiln_data_config norm3(void) {
    kiln_data_config dc = kiln_data_defaults();
    CHECK_OK(kiln_data_parse_normalize("0.49,0.48,0.45/0.25,0.24,0.26", &dc));
    return dc;
}

static void test_cifar_values(void) {
    const char *data = "cifar10:" FIX "cifar";
    kiln_data_config dc = norm3();
    against(data, 1, &dc, "cifar_norm3_train.f32", 1e-6);
    against(data, 0, &dc, "cifar_norm3_test.f32", 1e-6);
    dc = kiln_data_defaults();
    dc.channels = 1;
    CHECK_OK(kiln_data_parse_normalize("0.5/0.25", &dc));
    against(data, 1, &dc, "cifar_grey_train.f32", 1e-6);
    against(data, 0, &dc, "cifar_grey_test.f32", 1e-6);
    dc = kiln_data_defaults();
    dc.resize = 20, dc.center_crop = 16;
    against(data, 0, &dc, "cifar_resize_test.f32", 1.0 / 255 + 1e-6);
}

/* the flip: each draw is the sample or its mirror, both drawn over many keys */
static void test_cifar_flip_rrc(void) {
    kiln_data_config dc = norm3();
    dc.hflip = 1;
    kiln_dataset *ds = NULL;
    CHECK_OK(kiln_dataset_open_config("cifar10:" FIX "cifar", 1, &dc, &ds));
    float *want = load_f32("cifar_norm3_train.f32", 7 * 3072), x[3072];
    int plain = 0, mirrored = 0;
    for (uint64_t key = 1; ds && want && key <= 40; key++) {
        int32_t y;
        int64_t i = (int64_t)(key % 7);
        CHECK_OK(ds->get(ds, i, key, x, &y));
        const float *w = want + i * 3072;
        int same = memcmp(x, w, sizeof x) == 0, mirror = 1;
        for (int k = 0; k < 3072 && mirror; k++) mirror = x[k] == w[k - k % 32 + 31 - k % 32];
        plain += same, mirrored += mirror;
        CHECK_MSG(same || mirror, "key %llu: neither the sample nor its mirror", (unsigned long long)key);
    }
    CHECK_MSG(plain > 5 && mirrored > 5, "flips: %d plain, %d mirrored of 40", plain, mirrored);
    free(want);
    kiln_dataset_free(ds);
    /* RandomResizedCrop 24 with a flip: its shape, and the same batches for 0 and 2 workers */
    dc.random_resized_crop = 24;
    CHECK_OK(kiln_dataset_open_config("cifar10:" FIX "cifar", 1, &dc, &ds));
    if (!ds) return;
    CHECK(ds->sample_shape[0] == 3 && ds->sample_shape[1] == 24 && ds->sample_shape[2] == 24);
    int e0 = 0, e2 = 0;
    uint64_t h0 = loader_hash(ds, 0, 2, NULL, &e0), h2 = loader_hash(ds, 2, 2, NULL, &e2);
    CHECK_MSG(!e0 && !e2 && h0 == h2, "RandomResizedCrop batches differ for 0 and 2 workers: %s", kiln_last_error());
    kiln_dataset_free(ds);
    kiln_dataset *test = NULL;
    CHECK_OK(kiln_dataset_open_config("cifar10:" FIX "cifar", 0, &dc, &test)); /* Resize(24) + CenterCrop(24) */
    CHECK(test && test->sample_shape[1] == 24 && test->sample_shape[2] == 24);
    kiln_dataset_free(test);
}

/* IDX data through the image transforms, against torchvision's FashionMNIST over the same files */
static void test_idx_transforms(void) {
    const char *data = FIX "idx";
    kiln_data_config dc = kiln_data_defaults();
    dc.resize = 32, dc.channels = 3;
    CHECK_OK(kiln_data_parse_normalize("0.3,0.4,0.5/0.2,0.25,0.3", &dc));
    against_set("idx", data, 1, &dc, "idx_resize3_train.f32", 1.0 / 255 + 1e-6);
    against_set("idx", data, 0, &dc, "idx_resize3_test.f32", 1.0 / 255 + 1e-6);
    dc = kiln_data_defaults(); /* a crop resamples nothing: exact, with IDX's default normalisation */
    dc.center_crop = 20;
    against_set("idx", data, 1, &dc, "idx_crop_train.f32", 1e-6);
    against_set("idx", data, 0, &dc, "idx_crop_test.f32", 1e-6);
    /* RandomResizedCrop and a flip: the shape, and the same batches for 0 and 2 workers */
    dc = kiln_data_defaults();
    CHECK_OK(kiln_data_parse_rrc("24", &dc));
    dc.hflip = 1, dc.channels = 3;
    kiln_dataset *ds = NULL;
    CHECK_OK(kiln_dataset_open_config(data, 1, &dc, &ds));
    if (!ds) return;
    CHECK(ds->sample_shape[0] == 3 && ds->sample_shape[1] == 24 && ds->sample_shape[2] == 24);
    int e0 = 0, e2 = 0;
    uint64_t h0 = loader_hash(ds, 0, 2, NULL, &e0), h2 = loader_hash(ds, 2, 2, NULL, &e2);
    CHECK_MSG(!e0 && !e2 && h0 == h2, "IDX RandomResizedCrop batches differ for 0 and 2 workers: %s", kiln_last_error());
    kiln_dataset_free(ds);
}

/* ---------- CIFAR errors ---------- */

static void copy_file(const char *from, const char *to, long cut, int label_at, int label) {
    size_t n = 0;
    uint8_t *b = slurp(from, &n);
    CHECK_MSG(b != NULL, "cannot read %s", from);
    if (!b) return;
    if (label_at >= 0 && (size_t)label_at < n) b[label_at] = (uint8_t)label;
    spit(to, b, cut > 0 && (size_t)cut < n ? n - (size_t)cut : n);
    free(b);
}

/* the fixture batches in dir (one of them cut by `cut` bytes, or one record's label changed) */
static void cifar_copy(const char *dir, const char *odd, long cut, int label_at, int label) {
    mkdir(dir, 0777);
    const char *files[6] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                            "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};
    for (int i = 0; i < 6; i++) {
        char from[256], to[256];
        snprintf(from, sizeof from, FIX "cifar/%s", files[i]);
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        int is_odd = odd && strcmp(odd, files[i]) == 0;
        copy_file(from, to, is_odd ? cut : 0, is_odd ? label_at : -1, label);
    }
}

static void expect_fail(const char *data, int train, const kiln_data_config *dc, kiln_status code, const char *w1,
                        const char *w2) {
    kiln_dataset *ds = NULL;
    kiln_status st = kiln_dataset_open_config(data, train, dc, &ds);
    const char *m = kiln_last_error();
    CHECK_MSG(st == code && !ds && contains(m, w1) && contains(m, w2), "%s: status %d, message '%s' (expected %d naming '%s', '%s')",
              data, (int)st, m ? m : "", (int)code, w1, w2);
    kiln_dataset_free(ds);
}

static void test_cifar_errors(void) {
    char dir[128], data[160], file[192];
    kiln_data_config dc = kiln_data_defaults();
    snprintf(dir, sizeof dir, "%s/cut", g_tmp);
    cifar_copy(dir, "data_batch_3.bin", 5, -1, 0);
    snprintf(data, sizeof data, "cifar10:%s", dir);
    snprintf(file, sizeof file, "%s/data_batch_3.bin", dir);
    expect_fail(data, 1, &dc, KILN_ERR_FORMAT, file, "6141 bytes is not a whole number");
    kiln_dataset *ds = NULL;
    CHECK_OK(kiln_dataset_open_config(data, 0, &dc, &ds)); /* the test split does not read the training files */
    kiln_dataset_free(ds);

    snprintf(dir, sizeof dir, "%s/label", g_tmp);
    cifar_copy(dir, "test_batch.bin", 0, 2 * 3073, 10);
    snprintf(data, sizeof data, "cifar10:%s", dir);
    snprintf(file, sizeof file, "%s/test_batch.bin", dir);
    expect_fail(data, 0, &dc, KILN_ERR_FORMAT, file, "label 10 of record 2");

    snprintf(dir, sizeof dir, "%s/missing", g_tmp);
    cifar_copy(dir, NULL, 0, -1, 0);
    snprintf(file, sizeof file, "%s/data_batch_4.bin", dir);
    CHECK(unlink(file) == 0);
    snprintf(data, sizeof data, "cifar10:%s", dir);
    expect_fail(data, 1, &dc, KILN_ERR_IO, file, "cifar-10-binary.tar.gz");
    expect_fail("cifar10:/nonexistent/cifar", 0, &dc, KILN_ERR_IO, "/nonexistent/cifar/test_batch.bin", "not package");

    /* CIFAR-100's 3074-byte records are named as such */
    snprintf(dir, sizeof dir, "%s/c100", g_tmp);
    mkdir(dir, 0777);
    uint8_t rec[2 * 3074];
    for (size_t i = 0; i < sizeof rec; i++) rec[i] = (uint8_t)(i * 7 + 3);
    snprintf(file, sizeof file, "%s/test_batch.bin", dir);
    spit(file, rec, sizeof rec);
    snprintf(data, sizeof data, "cifar10:%s", dir);
    expect_fail(data, 0, &dc, KILN_ERR_FORMAT, file, "CIFAR-100");
    /* the archive's own folder inside DIR is found */
    snprintf(dir, sizeof dir, "%s/outer", g_tmp);
    mkdir(dir, 0777);
    snprintf(file, sizeof file, "%s/outer/cifar-10-batches-bin", g_tmp);
    cifar_copy(file, NULL, 0, -1, 0);
    snprintf(data, sizeof data, "cifar10:%s", dir);
    CHECK_OK(kiln_dataset_open_config(data, 1, &dc, &ds));
    CHECK(ds && ds->len == 7);
    kiln_dataset_free(ds);

    dc.val_split = 0.1f;
    expect_fail("cifar10:" FIX "cifar", 1, &dc, KILN_ERR_INVALID_ARG, "--val-split", "test_batch.bin");
    dc = kiln_data_defaults();
    dc.center_crop = 40;
    expect_fail("cifar10:" FIX "cifar", 0, &dc, KILN_ERR_FORMAT, "40x40 crop is larger", "cifar10:");
    expect_fail("cifar10:", 0, &dc, KILN_ERR_INVALID_ARG, "cifar10:", "folder");
}

/* ---------- token files ---------- */

static int64_t g_tok[1000];

static void test_tokens_read(void) {
    CHECK(load_ints("tokens.txt", g_tok, 1000) == 1000);
    int64_t top = 0;
    for (int i = 0; i < 1000; i++) top = g_tok[i] > top ? g_tok[i] : top;
    kiln_data_config dc = kiln_data_defaults();
    dc.block = 16;
    kiln_dataset *ds = NULL;
    CHECK_OK(kiln_dataset_open_config("tokens:" FIX "tokens.bin", 0, &dc, &ds));
    if (!ds) return;
    CHECK(ds->len == 1000 / 17 && ds->sample_ndim == 1 && ds->sample_shape[0] == 16 && ds->label_numel == 16);
    CHECK_MSG(ds->num_classes == top + 1, "num_classes %d, largest token %lld", ds->num_classes, (long long)top);
    float x[16];
    int32_t y[16];
    int bad = 0;
    for (int64_t i = 0; i < ds->len; i++) {
        CHECK_OK(ds->get(ds, i, 5, x, y));
        for (int k = 0; k < 16; k++) bad += x[k] != (float)g_tok[i * 17 + k] || y[k] != g_tok[i * 17 + k + 1];
    }
    CHECK_MSG(bad == 0, "%d test tokens differ from numpy's", bad);
    kiln_dataset_free(ds);

    /* training: (count - 1) / block windows at offsets drawn from the key */
    CHECK_OK(kiln_dataset_open_config("tokens:" FIX "tokens.bin", 1, &dc, &ds));
    if (!ds) return;
    CHECK(ds->len == 999 / 16 && ds->label_numel == 16);
    int64_t lo = 1000, hi = -1;
    for (uint64_t key = 1; key <= 3000; key++) {
        CHECK_OK(ds->get(ds, (int64_t)(key % 62), key * 0x9E3779B97F4A7C15ull, x, y));
        int64_t at = -1; /* the window's offset: where x starts and y follows */
        for (int64_t o = 0; o + 17 <= 1000 && at < 0; o++) {
            int same = 1;
            for (int k = 0; k < 16 && same; k++) same = x[k] == (float)g_tok[o + k] && y[k] == g_tok[o + k + 1];
            if (same) at = o;
        }
        if (at < 0) bad++;
        lo = at >= 0 && at < lo ? at : lo;
        hi = at > hi ? at : hi;
    }
    CHECK_MSG(bad == 0, "%d training windows are not windows of the file", bad);
    CHECK_MSG(lo <= 3 && hi >= 980, "offsets drawn span %lld..%lld of 0..983", (long long)lo, (long long)hi);
    float x2[16];
    int32_t y2[16];
    CHECK_OK(ds->get(ds, 3, 1234, x, y));
    CHECK_OK(ds->get(ds, 3, 1234, x2, y2));
    CHECK(memcmp(x, x2, sizeof x) == 0 && memcmp(y, y2, sizeof y) == 0);
    kiln_dataset_free(ds);
}

/* whole epochs with every label: equal for 0 and 2 workers, and y holds block labels per sample */
static uint64_t token_epochs(int workers, int *err) {
    kiln_data_config dc = kiln_data_defaults();
    dc.block = 8;
    kiln_dataset *ds = NULL;
    *err = kiln_dataset_open_config("tokens:" FIX "tokens.bin", 1, &dc, &ds) != KILN_OK;
    kiln_loader_config c = kiln_loader_defaults();
    c.batch_size = 5, c.workers = workers, c.seed = 3;
    kiln_loader *L = NULL;
    if (!*err) *err = kiln_loader_new(ds, &c, &L) != KILN_OK;
    uint64_t h = 1469598103934665603ull;
    for (int e = 0; e < 2 && !*err; e++) {
        kiln_loader_start_epoch(L, e, 0);
        kiln_batch b;
        int rc;
        while ((rc = kiln_loader_next(L, &b)) == 1) {
            for (int64_t i = 0; i < b.n * 8; i++) {
                /* y[k] is the token after x[k]: x[k+1] == y[k] inside a window */
                if (i % 8 < 7 && b.x[i + 1] != (float)b.y[i]) *err = 1;
                h = (h ^ (uint32_t)b.y[i]) * 1099511628211ull;
                h = (h ^ (uint32_t)b.x[i]) * 1099511628211ull;
            }
            kiln_loader_release(L, &b);
        }
        if (rc < 0) *err = 1;
    }
    kiln_loader_free(L);
    kiln_dataset_free(ds);
    return h;
}

static void test_tokens_loader(void) {
    int e0 = 0, e2 = 0;
    uint64_t h0 = token_epochs(0, &e0), h2 = token_epochs(2, &e2);
    CHECK_MSG(!e0 && !e2 && h0 == h2, "token batches: errors %d %d, hashes %llx %llx (%s)", e0, e2, (unsigned long long)h0,
              (unsigned long long)h2, kiln_last_error());
}

static void test_tokens_write(void) {
    uint16_t t[1000];
    for (int i = 0; i < 1000; i++) t[i] = (uint16_t)g_tok[i];
    char path[128];
    snprintf(path, sizeof path, "%s/written.bin", g_tmp);
    CHECK_OK(kiln_tokens_write(path, t, 1000));
    size_t na = 0, nb = 0;
    uint8_t *a = slurp(path, &na), *b = slurp(FIX "tokens.bin", &nb);
    CHECK_MSG(a && b && na == nb && memcmp(a, b, na) == 0, "the writer's file differs from numpy's (%zu, %zu bytes)", na, nb);
    free(a);
    free(b);
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    CHECK(access(tmp, F_OK) != 0);
    CHECK(kiln_tokens_write("/nonexistent/dir/t.bin", t, 10) == KILN_ERR_IO && contains(kiln_last_error(), "/nonexistent/dir/t.bin"));
    CHECK(access("/nonexistent/dir/t.bin", F_OK) != 0);
    CHECK(kiln_tokens_write(path, t, -1) == KILN_ERR_INVALID_ARG);
}

/* the fixture's bytes with an edit, into g_tmp/name */
static const char *token_file(const char *name, int word, int32_t value, long cut, long add) {
    static char path[160];
    size_t n = 0;
    uint8_t *b = slurp(FIX "tokens.bin", &n);
    if (!b) return "missing";
    b = realloc(b, n + (size_t)add + 1);
    if (word >= 0) memcpy(b + 4 * word, &value, 4);
    for (long i = 0; i < add; i++) b[n + (size_t)i] = (uint8_t)(i + 1);
    snprintf(path, sizeof path, "%s/%s", g_tmp, name);
    spit(path, b, n - (size_t)cut + (size_t)add);
    free(b);
    return path;
}

static void test_tokens_errors(void) {
    kiln_data_config dc = kiln_data_defaults();
    dc.block = 16;
    char data[200];
    const char *p;
#define TOK_FAIL(path, code, w2)                               \
    snprintf(data, sizeof data, "tokens:%s", path);            \
    expect_fail(data, 1, &dc, code, path, w2)
    p = token_file("magic.bin", 0, 20240521, 0, 0);
    TOK_FAIL(p, KILN_ERR_FORMAT, "bad magic 20240521");
    p = token_file("version.bin", 1, 2, 0, 0);
    TOK_FAIL(p, KILN_ERR_FORMAT, "version 2");
    p = token_file("cut.bin", -1, 0, 3, 0);
    TOK_FAIL(p, KILN_ERR_FORMAT, "truncated: the header says 1000 tokens (2000 bytes), the file holds 1997");
    p = token_file("more.bin", -1, 0, 0, 6);
    TOK_FAIL(p, KILN_ERR_FORMAT, "6 bytes of trailing data");
    p = token_file("negative.bin", 2, -5, 0, 0);
    TOK_FAIL(p, KILN_ERR_FORMAT, "negative");
    p = token_file("header.bin", -1, 0, 3000 - 100, 0);
    TOK_FAIL(p, KILN_ERR_FORMAT, "truncated header: 124 bytes");
    p = FIX "tokens.bin";
    dc.block = 1000; /* 1001 tokens per window, 1000 in the file */
    TOK_FAIL(p, KILN_ERR_FORMAT, "fewer than one sample's window of block + 1 = 1001");
    dc.block = 999;
    kiln_dataset *ds = NULL;
    CHECK_OK(kiln_dataset_open_config("tokens:" FIX "tokens.bin", 0, &dc, &ds)); /* exactly one window */
    CHECK(ds && ds->len == 1);
    kiln_dataset_free(ds);
    dc.block = 0;
    TOK_FAIL(p, KILN_ERR_INVALID_ARG, "--block");
    dc.block = 16;
    dc.hflip = 1;
    TOK_FAIL(p, KILN_ERR_INVALID_ARG, "--hflip");
    dc = kiln_data_defaults();
    dc.block = 16;
    TOK_FAIL("/nonexistent/tokens.bin", KILN_ERR_IO, "cannot open");
#undef TOK_FAIL
}

/* ---------- documents ---------- */

static void put_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* kiln tokenize's document index: separator lines end documents and are left
 * out, each file is a document, the val file starts with the cut one's rest;
 * the dataset serves each document padded with -1 labels */
static void test_tokens_docs(void) {
    char a[160], b[160], out[160], val[200];
    snprintf(a, sizeof a, "%s/a.txt", g_tmp);
    snprintf(b, sizeof b, "%s/b.txt", g_tmp);
    snprintf(out, sizeof out, "%s/d.tokens", g_tmp);
    put_text(a, "one\n%\n%\ntwo two\n%\nthree\n");
    put_text(b, "four four four four\n");
    const char *files[2] = {a, b};
    kiln_tokenize_result r;
    CHECK_OK(kiln_tokenize_docs(files, 2, out, 0.25, "%", &r));
    /* "one\n" "two two\n" "three\n" "four four four four\n": 4 + 8 + 6 + 20 = 38 tokens, 9 held out */
    CHECK_MSG(r.train_tokens == 29 && r.val_tokens == 9 && r.train_docs == 4 && r.val_docs == 1,
              "tokens %lld + %lld, docs %lld + %lld", (long long)r.train_tokens, (long long)r.val_tokens,
              (long long)r.train_docs, (long long)r.val_docs);
    CHECK_OK(kiln_tokens_val_path(out, val, sizeof val));
    CHECK(access(val, F_OK) == 0 && unlink(val) == 0); /* the test split reads the file itself: the documents above */
    kiln_data_config dc = kiln_data_defaults();
    dc.block = 6;
    dc.documents = 1;
    kiln_dataset *ds = NULL;
    CHECK_OK(kiln_dataset_open_config((snprintf(val, sizeof val, "tokens:%s", out), val), 0, &dc, &ds));
    if (!ds) return;
    CHECK(ds->len == 4 && ds->sample_len && ds->get_width);
    int64_t want_len[4] = {3, 6, 5, 6};
    const char *want_x[4] = {"one", "two tw", "three", "four f"};
    for (int64_t i = 0; i < ds->len && i < 4; i++) {
        CHECK_MSG(ds->sample_len(ds, i) == want_len[i], "doc %lld has %lld positions", (long long)i, (long long)ds->sample_len(ds, i));
        float x[8];
        int32_t y[8];
        CHECK_OK(ds->get_width(ds, i, 7, 6, x, y));
        int bad = 0;
        for (int k = 0; k < 6; k++) {
            int in = k < want_len[i];
            bad += in ? x[k] != (float)want_x[i][k] || (k + 1 < (int)strlen(want_x[i]) && y[k] != want_x[i][k + 1])
                      : x[k] != 0 || y[k] != -1;
        }
        CHECK_MSG(bad == 0, "doc %lld: %d positions wrong", (long long)i, bad);
    }
    CHECK(ds->get_width(ds, 0, 7, 7, (float[8]){0}, (int32_t[8]){0}) == KILN_ERR_INVALID_ARG);
    kiln_dataset_free(ds);
    /* an old token file without an index: documents mode says how to make one */
    snprintf(val, sizeof val, "%s.docs", out);
    unlink(val);
    snprintf(val, sizeof val, "tokens:%s", out);
    expect_fail(val, 1, &dc, KILN_ERR_INVALID_ARG, "no document index", "kiln tokenize");
    /* a corrupt index is refused naming it */
    CHECK_OK(kiln_tokens_docs_write(out, (int64_t[]){0, 5}, 2, 28));
    expect_fail(val, 1, &dc, KILN_ERR_FORMAT, ".docs", "another file");
    CHECK(kiln_tokens_docs_write(out, (int64_t[]){0, 5, 5}, 3, 29) == KILN_ERR_INVALID_ARG);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/kiln_test_formats.XXXXXX");
    if (!mkdtemp(g_tmp)) return 1;
    kiln_log_set_level(KILN_LOG_OFF);
    test_cifar_values();
    test_cifar_flip_rrc();
    test_idx_transforms();
    test_cifar_errors();
    test_tokens_read();
    test_tokens_loader();
    test_tokens_write();
    test_tokens_errors();
    test_tokens_docs();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
    return tu_finish("test_formats");
}
