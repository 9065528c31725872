/* Datasets and the loader: IDX reading (gzip and plain) with every kind of bad
 * input, normalisation, and loader determinism across worker counts, epochs,
 * resumption and restarts. */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "kiln/data.h"
#include "testutil.h"

static char g_tmp[64];

/* ---------- writing IDX files ---------- */

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void write_bytes(const char *path, const uint8_t *b, size_t n, int gz) {
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f) { perror(path); exit(1); }
        if (n && gzwrite(f, b, (unsigned)n) != (int)n) { fprintf(stderr, "gzwrite %s\n", path); exit(1); }
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        if (!f) { perror(path); exit(1); }
        if (n && fwrite(b, 1, n, f) != n) { perror(path); exit(1); }
        fclose(f);
    }
}

/* an image file image: header + pixels; returns total bytes */
static size_t make_images(uint8_t *buf, uint32_t magic, uint32_t n, uint32_t rows, uint32_t cols, const uint8_t *px) {
    put_be32(buf, magic);
    put_be32(buf + 4, n);
    put_be32(buf + 8, rows);
    put_be32(buf + 12, cols);
    memcpy(buf + 16, px, (size_t)n * rows * cols);
    return 16 + (size_t)n * rows * cols;
}

static size_t make_labels(uint8_t *buf, uint32_t n, const uint8_t *lab) {
    put_be32(buf, 0x00000801);
    put_be32(buf + 4, n);
    memcpy(buf + 8, lab, n);
    return 8 + n;
}

static char *path_of(char *out, const char *name) {
    snprintf(out, 256, "%s/%s", g_tmp, name);
    return out;
}

#define NI 37
#define NR 5
#define NC 7
static uint8_t g_px[NI * NR * NC], g_lab[NI];
static uint8_t g_img_file[16 + NI * NR * NC + 64], g_lab_file[8 + NI + 64];
static size_t g_img_len, g_lab_len;

static void make_data(void) {
    tu_seed(11);
    for (int i = 0; i < NI * NR * NC; i++) g_px[i] = (uint8_t)tu_u64();
    g_px[0] = 0;
    g_px[1] = 255; /* both ends of the range */
    g_px[2] = 1;   /* never all zero */
    for (int i = 0; i < NI; i++) g_lab[i] = (uint8_t)(tu_u64() % 10);
    g_img_len = make_images(g_img_file, 0x00000803, NI, NR, NC, g_px);
    g_lab_len = make_labels(g_lab_file, NI, g_lab);
}

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* expects failure `want` whose message holds every non-NULL needle */
static void expect_fail(const char *img, const char *lab, kiln_status want, const char *n1, const char *n2) {
    kiln_dataset *ds = (kiln_dataset *)1;
    kiln_clear_error();
    kiln_status s = kiln_dataset_idx_open(img, lab, KILN_MNIST_MEAN, KILN_MNIST_STD, &ds);
    const char *m = kiln_last_error();
    CHECK_MSG(s == want, "status %s, want %s (%s)", kiln_status_name(s), kiln_status_name(want), m);
    CHECK(ds == NULL);
    if (n1) CHECK_MSG(contains(m, n1), "message \"%s\" lacks \"%s\"", m, n1);
    if (n2) CHECK_MSG(contains(m, n2), "message \"%s\" lacks \"%s\"", m, n2);
    if (s == KILN_OK) kiln_dataset_free(ds);
}

static void check_contents(kiln_dataset *ds) {
    CHECK(ds->len == NI);
    CHECK(ds->sample_ndim == 3 && ds->sample_shape[0] == 1 && ds->sample_shape[1] == NR && ds->sample_shape[2] == NC);
    CHECK(ds->num_classes == 10);
    float x[NR * NC];
    int bad = 0;
    for (int i = 0; i < NI; i++) {
        int32_t y = -1;
        CHECK_OK(ds->get(ds, i, 0, x, &y));
        if (y != g_lab[i]) bad++;
        for (int j = 0; j < NR * NC; j++) {
            /* exactly torchvision's float32 ToTensor + Normalize */
            float want = ((float)g_px[i * NR * NC + j] / 255.0f - KILN_MNIST_MEAN) / KILN_MNIST_STD;
            if (x[j] != want) bad++;
        }
    }
    CHECK_MSG(bad == 0, "%d values differ", bad);
    CHECK_OK(ds->get(ds, 0, 0, x, &(int32_t){0}));
    CHECK(fabsf(x[0] - (-0.1307f / 0.3081f)) < 1e-6f);
    CHECK(fabsf(x[1] - ((1.0f - 0.1307f) / 0.3081f)) < 1e-6f);
}

static void test_idx_read(void) {
    char a[256], b[256];
    write_bytes(path_of(a, "img.gz"), g_img_file, g_img_len, 1);
    write_bytes(path_of(b, "lab"), g_lab_file, g_lab_len, 0);
    kiln_dataset *ds = NULL;
    CHECK_OK(kiln_dataset_idx_open(a, b, KILN_MNIST_MEAN, KILN_MNIST_STD, &ds));
    if (ds) {
        check_contents(ds);
        CHECK(ds->name && contains(ds->name, "img.gz"));
        kiln_dataset_free(ds);
    }
    write_bytes(path_of(a, "img"), g_img_file, g_img_len, 0);
    write_bytes(path_of(b, "lab.gz"), g_lab_file, g_lab_len, 1);
    ds = NULL;
    CHECK_OK(kiln_dataset_idx_open(a, b, KILN_MNIST_MEAN, KILN_MNIST_STD, &ds));
    if (ds) {
        check_contents(ds);
        kiln_dataset_free(ds);
    }
    /* other mean / std */
    ds = NULL;
    CHECK_OK(kiln_dataset_idx_open(a, b, 0.5f, 0.25f, &ds));
    if (ds) {
        float x[NR * NC];
        int32_t y;
        CHECK_OK(ds->get(ds, 3, 0, x, &y));
        CHECK(x[4] == ((float)g_px[3 * NR * NC + 4] / 255.0f - 0.5f) / 0.25f);
        kiln_dataset_free(ds);
    }
}

static void test_idx_errors(void) {
    char img[256], lab[256], good_img[256], good_lab[256], msg[256];
    uint8_t buf[sizeof g_img_file];
    write_bytes(path_of(good_img, "good_img.gz"), g_img_file, g_img_len, 1);
    write_bytes(path_of(good_lab, "good_lab"), g_lab_file, g_lab_len, 0);
    size_t npx = (size_t)NI * NR * NC;

    /* bad magic */
    memcpy(buf, g_img_file, g_img_len);
    put_be32(buf, 0x12345678);
    write_bytes(path_of(img, "badmagic"), buf, g_img_len, 0);
    expect_fail(img, good_lab, KILN_ERR_FORMAT, "badmagic", "bad magic 0x12345678");
    /* an image file where labels belong */
    expect_fail(good_img, good_img, KILN_ERR_FORMAT, "good_img.gz", "dimensions");
    /* wrong ndim */
    put_be32(buf, 0x00000802);
    write_bytes(path_of(img, "ndim.gz"), buf, g_img_len, 1);
    expect_fail(img, good_lab, KILN_ERR_FORMAT, "ndim.gz", "dimensions");
    /* truncated pixel data, plain and gzipped */
    snprintf(msg, sizeof msg, "truncated: expected %zu bytes of pixel data, got %zu", npx, npx - 10);
    write_bytes(path_of(img, "trunc"), g_img_file, g_img_len - 10, 0);
    expect_fail(img, good_lab, KILN_ERR_FORMAT, "trunc", msg);
    write_bytes(path_of(img, "trunc.gz"), g_img_file, g_img_len - 10, 1);
    expect_fail(img, good_lab, KILN_ERR_FORMAT, "trunc.gz", msg);
    /* truncated labels */
    write_bytes(path_of(lab, "labtrunc"), g_lab_file, g_lab_len - 1, 0);
    expect_fail(good_img, lab, KILN_ERR_FORMAT, "labtrunc", "truncated");
    /* truncated header */
    write_bytes(path_of(img, "hdr"), g_img_file, 10, 0);
    expect_fail(img, good_lab, KILN_ERR_FORMAT, "hdr", "truncated header");
    write_bytes(path_of(img, "hdr2"), g_img_file, 2, 0);
    expect_fail(img, good_lab, KILN_ERR_FORMAT, "hdr2", "truncated header");
    /* empty file */
    write_bytes(path_of(img, "empty"), g_img_file, 0, 0);
    expect_fail(img, good_lab, KILN_ERR_FORMAT, "empty", "truncated header");
    /* trailing garbage */
    memcpy(buf, g_img_file, g_img_len);
    memset(buf + g_img_len, 7, 3);
    write_bytes(path_of(img, "trail.gz"), buf, g_img_len + 3, 1);
    expect_fail(img, good_lab, KILN_ERR_FORMAT, "trail.gz", "3 bytes of trailing data");
    /* zero dimension */
    memcpy(buf, g_img_file, g_img_len);
    put_be32(buf + 8, 0);
    write_bytes(path_of(img, "zerodim"), buf, g_img_len, 0);
    expect_fail(img, good_lab, KILN_ERR_FORMAT, "zerodim", "dimension 1 is 0");
    /* a corrupt gzip stream: a cut compressed file */
    {
        char full[256];
        write_bytes(path_of(full, "cut_src.gz"), g_img_file, g_img_len, 1);
        FILE *f = fopen(full, "rb");
        uint8_t z[4096];
        size_t zn = fread(z, 1, sizeof z, f);
        fclose(f);
        write_bytes(path_of(img, "cut.gz"), z, zn / 2, 0);
        expect_fail(img, good_lab, KILN_ERR_FORMAT, "cut.gz", NULL);
    }
    /* counts mismatch */
    uint8_t lb[sizeof g_lab_file];
    size_t ln = make_labels(lb, NI - 1, g_lab);
    write_bytes(path_of(lab, "fewlabels"), lb, ln, 0);
    snprintf(msg, sizeof msg, "holds %d images but", NI);
    expect_fail(good_img, lab, KILN_ERR_FORMAT, msg, "fewlabels holds 36 labels");
    /* label out of range */
    uint8_t l2[NI];
    memcpy(l2, g_lab, NI);
    l2[5] = 10;
    ln = make_labels(lb, NI, l2);
    write_bytes(path_of(lab, "badlabel.gz"), lb, ln, 1);
    expect_fail(good_img, lab, KILN_ERR_FORMAT, "badlabel.gz", "label 10 at index 5");
    /* missing file */
    expect_fail(path_of(img, "nonexistent"), good_lab, KILN_ERR_IO, "nonexistent", NULL);
    expect_fail(good_img, path_of(lab, "nolabels"), KILN_ERR_IO, "nolabels", NULL);
}

static void test_open_folders(void) {
    char dir[256], p[512];
    /* a folder in the Debian layout, train gzipped, test plain */
    path_of(dir, "fashion-mnist");
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir);
    write_bytes(p, g_img_file, g_img_len, 1);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", dir);
    write_bytes(p, g_lab_file, g_lab_len, 1);
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte", dir);
    write_bytes(p, g_img_file, g_img_len, 0);
    kiln_dataset *ds = NULL;
    /* test split: labels missing, the message names both spellings */
    kiln_clear_error();
    CHECK(kiln_dataset_open(dir, 0, &ds) == KILN_ERR_IO && ds == NULL);
    CHECK_MSG(contains(kiln_last_error(), "t10k-labels-idx1-ubyte.gz") && contains(kiln_last_error(), dir),
              "%s", kiln_last_error());
    snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte", dir);
    write_bytes(p, g_lab_file, g_lab_len, 0);
    CHECK_OK(kiln_dataset_open(dir, 0, &ds));
    if (ds) {
        check_contents(ds);
        CHECK(contains(ds->name, "test"));
        kiln_dataset_free(ds);
    }
    ds = NULL;
    CHECK_OK(kiln_dataset_open(dir, 1, &ds));
    if (ds) {
        check_contents(ds);
        CHECK(contains(ds->name, "train"));
        kiln_dataset_free(ds);
    }
    /* missing images in a folder */
    char dir2[256];
    path_of(dir2, "onlylabels");
    mkdir(dir2, 0755);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", dir2);
    write_bytes(p, g_lab_file, g_lab_len, 1);
    ds = NULL;
    CHECK(kiln_dataset_open(dir2, 1, &ds) == KILN_ERR_IO && ds == NULL);
    CHECK_MSG(contains(kiln_last_error(), "train-images-idx3-ubyte.gz") && contains(kiln_last_error(), "onlylabels"),
              "%s", kiln_last_error());
    /* missing folder */
    path_of(p, "no/such/folder");
    CHECK(kiln_dataset_open(p, 1, &ds) == KILN_ERR_IO && ds == NULL);
    CHECK_MSG(contains(kiln_last_error(), p), "%s", kiln_last_error());

    /* KILN_DATA_ROOT replaces /usr/share/datasets */
    const char *old = getenv("KILN_DATA_ROOT");
    char *saved = old ? strdup(old) : NULL;
    setenv("KILN_DATA_ROOT", g_tmp, 1);
    CHECK_OK(kiln_dataset_open("fashion-mnist", 1, &ds));
    if (ds) {
        check_contents(ds);
        CHECK_MSG(strcmp(ds->name, "fashion-mnist train") == 0, "%s", ds->name);
        kiln_dataset_free(ds);
    }
    path_of(p, "emptyroot");
    setenv("KILN_DATA_ROOT", p, 1);
    ds = NULL;
    CHECK(kiln_dataset_open("fashion-mnist", 1, &ds) == KILN_ERR_IO && ds == NULL);
    CHECK_MSG(contains(kiln_last_error(), "emptyroot/fashion-mnist") && contains(kiln_last_error(), "dataset-fashion-mnist"),
              "%s", kiln_last_error());
    CHECK(kiln_dataset_open("mnist", 0, &ds) == KILN_ERR_IO && ds == NULL);
    CHECK_MSG(contains(kiln_last_error(), "emptyroot/mnist"), "%s", kiln_last_error());
    if (saved) setenv("KILN_DATA_ROOT", saved, 1);
    else unsetenv("KILN_DATA_ROOT");
    free(saved);
}

/* ---------- shuffling ---------- */

static int is_perm(const int64_t *p, int64_t n) {
    char *seen = calloc((size_t)n + 1, 1);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        if (p[i] < 0 || p[i] >= n || seen[p[i]]) ok = 0;
        else seen[p[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_shuffle(void) {
    enum { N = 1000 };
    static int64_t a[N], b[N], c[N], d[N];
    kiln_shuffle_indices(a, N, 1, 0);
    kiln_shuffle_indices(b, N, 1, 0);
    kiln_shuffle_indices(c, N, 1, 1);
    kiln_shuffle_indices(d, N, 2, 0);
    CHECK(is_perm(a, N) && is_perm(c, N) && is_perm(d, N));
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    CHECK(memcmp(a, d, sizeof a) != 0);
    int fixed = 0;
    for (int i = 0; i < N; i++) fixed += a[i] == i;
    CHECK_MSG(fixed < 10, "%d fixed points", fixed); /* ~1 expected */
    int64_t one = 7;
    kiln_shuffle_indices(&one, 1, 3, 4);
    CHECK(one == 0);
    kiln_shuffle_indices(NULL, 0, 3, 4);
    /* rough uniformity: position of element 0 over many epochs, n = 3 */
    int count[3] = {0, 0, 0};
    for (int e = 0; e < 3000; e++) {
        int64_t p[3];
        kiln_shuffle_indices(p, 3, 9, e);
        for (int i = 0; i < 3; i++)
            if (p[i] == 0) count[i]++;
    }
    CHECK_MSG(count[0] > 850 && count[1] > 850 && count[2] > 850, "%d %d %d", count[0], count[1], count[2]);
}

/* ---------- the loader ---------- */

/* a synthetic dataset whose samples name their index and key, optionally slow */
#define SN 203
#define SNUMEL 6
static _Atomic int g_slow_us; /* set by the test thread, read by workers */
static kiln_status syn_get(const kiln_dataset *ds, int64_t index, uint64_t key, float *x, int32_t *y) {
    (void)ds;
    if (g_slow_us) usleep((useconds_t)g_slow_us);
    x[0] = (float)index;
    x[1] = (float)(key >> 40); /* 24 bits: exact in float */
    for (int j = 2; j < SNUMEL; j++) x[j] = (float)index * 0.25f + (float)j;
    *y = (int32_t)index;
    return KILN_OK;
}
static kiln_dataset g_syn = {"synthetic", SN, 2, {2, 3}, 10, 0, syn_get, NULL, NULL, NULL, NULL, NULL};

#define BS 16
#define MAXB ((SN + BS - 1) / BS)
typedef struct {
    int64_t nb;
    int64_t n[MAXB], index[MAXB];
    float x[MAXB * BS * SNUMEL];
    int32_t y[MAXB * BS];
} epoch_rec;

/* runs epoch `e` from `first` into r; returns 0 on success */
static int run_epoch(kiln_loader *L, int64_t e, int64_t first, epoch_rec *r, int64_t numel) {
    memset(r, 0, sizeof *r);
    if (kiln_loader_start_epoch(L, e, first) != KILN_OK) return -1;
    kiln_batch b;
    int rc;
    while ((rc = kiln_loader_next(L, &b)) == 1) {
        if (r->nb >= MAXB || b.n > BS || ((uintptr_t)b.x & 63)) return -2;
        r->n[r->nb] = b.n;
        r->index[r->nb] = b.index;
        memcpy(r->x + r->nb * BS * numel, b.x, sizeof(float) * (size_t)(b.n * numel));
        memcpy(r->y + r->nb * BS, b.y, sizeof(int32_t) * (size_t)b.n);
        r->nb++;
        kiln_loader_release(L, &b);
    }
    return rc;
}

static int same_rec(const epoch_rec *a, const epoch_rec *b) {
    return a->nb == b->nb && memcmp(a->n, b->n, sizeof a->n) == 0 && memcmp(a->index, b->index, sizeof a->index) == 0 &&
           memcmp(a->x, b->x, sizeof a->x) == 0 && memcmp(a->y, b->y, sizeof a->y) == 0;
}

static epoch_rec g_ref[2], g_got[2], g_tmpr;

static void test_loader_determinism(void) {
    kiln_loader_config c = kiln_loader_defaults();
    c.batch_size = BS;
    c.seed = 5;
    kiln_loader *L = NULL;
    c.workers = 0;
    c.prefetch = 1;
    CHECK_OK(kiln_loader_new(&g_syn, &c, &L));
    if (!L) return;
    CHECK(kiln_loader_batches_per_epoch(L) == MAXB);
    CHECK(run_epoch(L, 0, 0, &g_ref[0], SNUMEL) == 0);
    CHECK(run_epoch(L, 1, 0, &g_ref[1], SNUMEL) == 0);
    CHECK(kiln_loader_wait_seconds(L) > 0);
    kiln_loader_free(L);
    for (int e = 0; e < 2; e++) {
        epoch_rec *r = &g_ref[e];
        CHECK(r->nb == MAXB);
        for (int64_t k = 0; k < r->nb; k++) CHECK(r->index[k] == k && r->n[k] == (k == MAXB - 1 ? SN % BS : BS));
        /* every index exactly once, labels and pixels agree */
        int64_t perm[SN], m = 0;
        int consistent = 1;
        for (int64_t k = 0; k < r->nb; k++)
            for (int64_t i = 0; i < r->n[k]; i++) {
                perm[m++] = r->y[k * BS + i];
                if (r->x[(k * BS + i) * SNUMEL] != (float)r->y[k * BS + i]) consistent = 0;
            }
        CHECK(m == SN && is_perm(perm, SN));
        CHECK(consistent);
        /* the order is kiln_shuffle_indices' */
        int64_t want[SN];
        kiln_shuffle_indices(want, SN, 5, e);
        CHECK(memcmp(want, perm, sizeof want) == 0);
    }
    CHECK(memcmp(g_ref[0].y, g_ref[1].y, sizeof g_ref[0].y) != 0);

    for (int w = 0; w <= 2; w++)
        for (int pf = 1; pf <= 4; pf++) {
            c.workers = w;
            c.prefetch = pf;
            L = NULL;
            CHECK_OK(kiln_loader_new(&g_syn, &c, &L));
            if (!L) continue;
            int ok = run_epoch(L, 0, 0, &g_got[0], SNUMEL) == 0 && run_epoch(L, 1, 0, &g_got[1], SNUMEL) == 0;
            CHECK_MSG(ok && same_rec(&g_got[0], &g_ref[0]) && same_rec(&g_got[1], &g_ref[1]),
                      "workers %d prefetch %d differ from workers 0", w, pf);
            kiln_loader_free(L);
        }

    /* another seed, another order */
    c.workers = 2;
    c.prefetch = 2;
    c.seed = 6;
    L = NULL;
    CHECK_OK(kiln_loader_new(&g_syn, &c, &L));
    if (L) {
        CHECK(run_epoch(L, 0, 0, &g_got[0], SNUMEL) == 0);
        CHECK(memcmp(g_got[0].y, g_ref[0].y, sizeof g_ref[0].y) != 0);
        kiln_loader_free(L);
    }
    /* no shuffle: in order; drop_last: only full batches */
    c.shuffle = 0;
    c.drop_last = 1;
    L = NULL;
    CHECK_OK(kiln_loader_new(&g_syn, &c, &L));
    if (L) {
        CHECK(kiln_loader_batches_per_epoch(L) == SN / BS);
        CHECK(run_epoch(L, 3, 0, &g_got[0], SNUMEL) == 0);
        CHECK(g_got[0].nb == SN / BS);
        int inorder = 1;
        for (int64_t k = 0; k < g_got[0].nb; k++) {
            if (g_got[0].n[k] != BS) inorder = 0;
            for (int i = 0; i < BS; i++)
                if (g_got[0].y[k * BS + i] != k * BS + i) inorder = 0;
        }
        CHECK(inorder);
        kiln_loader_free(L);
    }
}

static void test_loader_resume_restart(void) {
    kiln_loader_config c = kiln_loader_defaults();
    c.batch_size = BS;
    c.seed = 5;
    for (int w = 0; w <= 2; w += 2) {
        c.workers = w;
        c.prefetch = 3;
        kiln_loader *L = NULL;
        CHECK_OK(kiln_loader_new(&g_syn, &c, &L));
        if (!L) continue;
        /* resume at batch 5 of epoch 1: the tail of the full epoch */
        CHECK(run_epoch(L, 1, 5, &g_tmpr, SNUMEL) == 0);
        int ok = g_tmpr.nb == MAXB - 5;
        for (int64_t k = 0; ok && k < g_tmpr.nb; k++)
            ok = g_tmpr.index[k] == k + 5 && g_tmpr.n[k] == g_ref[1].n[k + 5] &&
                 memcmp(g_tmpr.y + k * BS, g_ref[1].y + (k + 5) * BS, sizeof(int32_t) * BS) == 0 &&
                 memcmp(g_tmpr.x + k * BS * SNUMEL, g_ref[1].x + (k + 5) * BS * SNUMEL, sizeof(float) * BS * SNUMEL) == 0;
        CHECK_MSG(ok, "resume with workers %d", w);
        /* resume at the very end: no batches */
        CHECK(run_epoch(L, 1, MAXB, &g_tmpr, SNUMEL) == 0 && g_tmpr.nb == 0);
        CHECK(kiln_loader_start_epoch(L, 1, MAXB + 1) == KILN_ERR_INVALID_ARG);

        /* restart mid-epoch with a batch still held, and slow workers in flight */
        g_slow_us = 20;
        CHECK_OK(kiln_loader_start_epoch(L, 0, 0));
        kiln_batch b, held;
        CHECK(kiln_loader_next(L, &b) == 1);
        kiln_loader_release(L, &b);
        CHECK(kiln_loader_next(L, &held) == 1 && held.index == 1);
        CHECK_OK(kiln_loader_start_epoch(L, 1, 0));
        CHECK_OK(kiln_loader_start_epoch(L, 0, 3)); /* twice in a row */
        CHECK(kiln_loader_next(L, &b) == 1 && b.index == 3 &&
              memcmp(b.y, g_ref[0].y + 3 * BS, sizeof(int32_t) * BS) == 0);
        kiln_loader_release(L, &held); /* a batch of the old epoch comes back late */
        kiln_loader_release(L, &b);
        g_slow_us = 0;
        CHECK(run_epoch(L, 1, 0, &g_got[1], SNUMEL) == 0);
        CHECK_MSG(same_rec(&g_got[1], &g_ref[1]), "restart with workers %d", w);

        /* holding every slot is an error, not a hang */
        CHECK_OK(kiln_loader_start_epoch(L, 0, 0));
        kiln_batch hold[16];
        int nh = 0, rc;
        while (nh < 16 && (rc = kiln_loader_next(L, &hold[nh])) == 1) nh++;
        CHECK(rc == -1 && contains(kiln_last_error(), "release"));
        for (int i = 0; i < nh; i++) kiln_loader_release(L, &hold[i]);
        CHECK(kiln_loader_next(L, &b) == 1 && b.index == nh);
        kiln_loader_release(L, &b);
        kiln_loader_free(L); /* with work in flight */
    }
    /* next before any epoch */
    kiln_loader *L = NULL;
    c.workers = 1;
    CHECK_OK(kiln_loader_new(&g_syn, &c, &L));
    kiln_batch b;
    if (L) CHECK(kiln_loader_next(L, &b) == -1);
    kiln_loader_free(L);
    /* bad configs */
    c.batch_size = 0;
    CHECK(kiln_loader_new(&g_syn, &c, &L) == KILN_ERR_INVALID_ARG && L == NULL);
    c.batch_size = 4;
    c.prefetch = 0;
    CHECK(kiln_loader_new(&g_syn, &c, &L) == KILN_ERR_INVALID_ARG);
    /* lock_memory is best effort: works or warns */
    c.prefetch = 2;
    c.batch_size = BS;
    c.lock_memory = 1;
    kiln_log_set_level(KILN_LOG_ERROR);
    CHECK_OK(kiln_loader_new(&g_syn, &c, &L));
    kiln_log_set_level(KILN_LOG_INFO);
    if (L) {
        CHECK(run_epoch(L, 0, 0, &g_tmpr, SNUMEL) == 0 && g_tmpr.nb == MAXB);
        kiln_loader_free(L);
    }
}

/* the real IDX dataset through workers: same bytes as loading it directly */
static void test_loader_idx(void) {
    char a[256], b[256];
    kiln_dataset *ds = NULL;
    CHECK_OK(kiln_dataset_idx_open(path_of(a, "img.gz"), path_of(b, "lab"), KILN_MNIST_MEAN, KILN_MNIST_STD, &ds));
    if (!ds) return;
    kiln_loader_config c = kiln_loader_defaults();
    c.batch_size = 8;
    c.seed = 2;
    c.workers = 2;
    kiln_loader *L = NULL;
    CHECK_OK(kiln_loader_new(ds, &c, &L));
    if (L) {
        int64_t perm[NI];
        kiln_shuffle_indices(perm, NI, 2, 4);
        CHECK_OK(kiln_loader_start_epoch(L, 4, 0));
        kiln_batch bt;
        int64_t pos = 0, bad = 0;
        float x[NR * NC];
        int32_t y;
        while (kiln_loader_next(L, &bt) == 1) {
            for (int64_t i = 0; i < bt.n; i++, pos++) {
                CHECK_OK(ds->get(ds, perm[pos], 0, x, &y));
                if (y != bt.y[i] || memcmp(x, bt.x + i * NR * NC, sizeof x) != 0) bad++;
            }
            kiln_loader_release(L, &bt);
        }
        CHECK(pos == NI && bad == 0);
        kiln_loader_free(L);
    }
    kiln_dataset_free(ds);
}

/* a dataset whose sample 150 fails: the error reaches the consumer, never a hang */
static kiln_status failing_get(const kiln_dataset *ds, int64_t index, uint64_t key, float *x, int32_t *y) {
    if (index == 150) return kiln_fail(KILN_ERR_FORMAT, "sample-150.jpg: corrupt JPEG (test)");
    return syn_get(ds, index, key, x, y);
}

static void test_loader_errors(void) {
    kiln_dataset bad = g_syn;
    bad.get = failing_get;
    for (int w = 0; w <= 3; w++) {
        kiln_loader_config c = kiln_loader_defaults();
        c.batch_size = BS;
        c.workers = w;
        c.shuffle = 0; /* sample 150 is in batch 9 */
        kiln_loader *L = NULL;
        CHECK_OK(kiln_loader_new(&bad, &c, &L));
        if (!L) continue;
        for (int round = 0; round < 2; round++) { /* a new epoch starts clean and fails again */
            CHECK_OK(kiln_loader_start_epoch(L, round, 0));
            kiln_batch b;
            int rc, got = 0;
            while ((rc = kiln_loader_next(L, &b)) == 1) {
                got++;
                kiln_loader_release(L, &b);
            }
            CHECK_MSG(rc < 0 && got <= 9, "%d workers: rc %d after %d batches", w, rc, got);
            CHECK_MSG(kiln_loader_status(L) == KILN_ERR_FORMAT && strstr(kiln_last_error(), "sample-150.jpg"),
                      "%d workers: status %d, '%s'", w, (int)kiln_loader_status(L), kiln_last_error());
        }
        kiln_loader_free(L);
    }
}

static void test_fashion_mnist(void) {
    struct stat sb;
    if (getenv("KILN_DATA_ROOT") || stat("/usr/share/datasets/fashion-mnist", &sb) != 0) {
        printf("test_data: note: /usr/share/datasets/fashion-mnist absent, skipping the real data set\n");
        return;
    }
    kiln_dataset *tr = NULL, *te = NULL;
    CHECK_OK(kiln_dataset_open("fashion-mnist", 1, &tr));
    CHECK_OK(kiln_dataset_open("fashion-mnist", 0, &te));
    if (tr) {
        CHECK(tr->len == 60000 && tr->sample_ndim == 3 && tr->sample_shape[0] == 1 && tr->sample_shape[1] == 28 &&
              tr->sample_shape[2] == 28 && tr->num_classes == 10);
        float x[784];
        int32_t y = -1;
        CHECK_OK(tr->get(tr, 0, 0, x, &y));
        CHECK_MSG(y == 9, "first train label %d", y); /* an ankle boot */
        int nz = 0;
        for (int i = 0; i < 784; i++) nz += x[i] != x[0];
        CHECK(nz > 0);
        /* one epoch: 938 batches of 64, the last holds 60000 % 64 = 32 */
        kiln_loader_config c = kiln_loader_defaults();
        c.batch_size = 64;
        c.workers = 2;
        kiln_loader *L = NULL;
        CHECK_OK(kiln_loader_new(tr, &c, &L));
        if (L) {
            CHECK(kiln_loader_batches_per_epoch(L) == 938);
            CHECK_OK(kiln_loader_start_epoch(L, 0, 0));
            kiln_batch b;
            int64_t nb = 0, last = 0, total = 0;
            while (kiln_loader_next(L, &b) == 1) {
                nb++;
                last = b.n;
                total += b.n;
                kiln_loader_release(L, &b);
            }
            CHECK(nb == 938 && last == 32 && total == 60000);
            kiln_loader_free(L);
        }
        kiln_dataset_free(tr);
    }
    if (te) {
        CHECK(te->len == 10000);
        kiln_dataset_free(te);
    }
}

static void rm_tree(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/kiln_test_data_XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
    make_data();
    test_idx_read();
    test_idx_errors();
    test_open_folders();
    test_shuffle();
    test_loader_determinism();
    test_loader_resume_restart();
    test_loader_idx();
    test_loader_errors();
    test_fashion_mnist();
    rm_tree();
    return tu_finish("test_data");
}
