/* Packed shards and the decoded cache: the shard format round trip (random
 * records, both kinds) and its checks (truncated, bad magic, version, index,
 * labels); a labels-only read touches only the label column (a counting
 * source); loaders over encoded shards give the batches of the image folder
 * they were packed from, and decoded shards those of a PNG folder, at 0 and 2
 * workers; the cache holds exactly a fresh decode, and its epochs equal the
 * uncached ones (random crops from PNGs; Resize + CenterCrop from JPEGs); a
 * changed file makes a new cache, a corrupt one is rebuilt with a warning,
 * an unwritable --cache folder is an error naming it. */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "data/internal/folder.h"
#include "data/internal/image.h"
#include "data/internal/records.h"
#include "data/internal/shard.h"
#include "imagetest.h"
#include "kiln/data.h"
#include "testutil.h"

static char g_tmp[64];
static kiln_image_ctx *g_ctx;

static int has(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* ---------- the format ---------- */

static void expect_open_fail(const char *path, const char *w1, const char *w2) {
    kiln_source *src = NULL;
    kiln_shard sh;
    memset(&sh, 0, sizeof sh);
    kiln_status st = kiln_source_open_file(path, &src);
    if (st == KILN_OK) st = kiln_shard_open(src, &sh);
    if (st == KILN_OK) st = kiln_shard_read_index(&sh);
    int32_t lab[64];
    if (st == KILN_OK) st = sh.count <= 64 ? kiln_shard_read_labels(&sh, 5, lab) : KILN_ERR_FORMAT;
    CHECK_MSG(st != KILN_OK && has(kiln_last_error(), w1) && has(kiln_last_error(), w2), "'%s' lacks '%s' / '%s'", kiln_last_error(), w1, w2);
    kiln_shard_close(&sh);
    kiln_source_close(src);
}

static void test_format(void) {
    char path[256], bad[256];
    snprintf(path, sizeof path, "%s/a.kshard", g_tmp);
    snprintf(bad, sizeof bad, "%s/bad.kshard", g_tmp);
    for (int kind = 0; kind < 2; kind++) {
        enum { N = 37 };
        uint8_t *rec[N];
        int64_t len[N];
        int32_t lab[N];
        kiln_shard_writer *w = NULL;
        CHECK_OK(kiln_shard_writer_new(path, kind, N, &w));
        for (int i = 0; w && i < N; i++) {
            kiln_image im = {NULL, (int)tu_int(1, 9), (int)tu_int(1, 9), tu_int(0, 1) ? 3 : 1};
            len[i] = kind ? KILN_SHARD_PIXEL_HEADER + im.w * im.h * im.c : tu_int(1, 300);
            rec[i] = malloc((size_t)len[i]);
            for (int64_t j = 0; j < len[i]; j++) rec[i][j] = (uint8_t)tu_u64();
            lab[i] = (int32_t)tu_int(0, 4);
            if (kind) kiln_shard_pixel_header(&im, rec[i]), im.px = rec[i] + KILN_SHARD_PIXEL_HEADER;
            CHECK_OK(kind ? kiln_shard_writer_add_pixels(w, lab[i], &im) : kiln_shard_writer_add(w, lab[i], rec[i], len[i]));
        }
        CHECK_OK(kiln_shard_writer_finish(w));
        kiln_source *src = NULL;
        kiln_shard sh;
        int32_t got[N];
        CHECK_OK(kiln_source_open_file(path, &src));
        CHECK_OK(kiln_shard_open(src, &sh));
        CHECK_OK(kiln_shard_read_index(&sh));
        CHECK_OK(kiln_shard_read_labels(&sh, 5, got));
        CHECK(sh.count == N && sh.kind == kind && memcmp(got, lab, sizeof lab) == 0);
        int same = 1;
        for (int i = 0; i < N && sh.index; i++) {
            same &= sh.index[i + 1] - sh.index[i] == len[i] && memcmp(src->map + sh.index[i], rec[i], (size_t)len[i]) == 0;
            kiln_image im;
            if (kind) same &= kiln_shard_pixels(src->map + sh.index[i], len[i], "r", &im) == KILN_OK;
        }
        CHECK_MSG(same, "kind %d: records differ after the round trip", kind);
        /* too few classes for the labels */
        CHECK(kiln_shard_read_labels(&sh, 1, got) != KILN_OK && has(kiln_last_error(), path) && has(kiln_last_error(), "label"));
        size_t n = 0;
        uint8_t *b = slurp(path, &n);
        /* truncated anywhere, a wrong magic, version or index entry: an error naming the file */
        spit(bad, b, n - 1), expect_open_fail(bad, bad, "truncated");
        spit(bad, b, 40), expect_open_fail(bad, bad, "shorter than");
        spit(bad, b, (size_t)sh.records_off - 5), expect_open_fail(bad, bad, "bytes");
        b[0] ^= 1, spit(bad, b, n), expect_open_fail(bad, bad, "magic"), b[0] ^= 1;
        b[8] = 9, spit(bad, b, n), expect_open_fail(bad, bad, "version"), b[8] = 1;
        b[16] = 200, spit(bad, b, n), expect_open_fail(bad, bad, "offsets"), b[16] = N;
        int64_t at = sh.index_off + 8 * 5;
        uint8_t keep = b[at + 3];
        b[at + 3] ^= 0x40, spit(bad, b, n), expect_open_fail(bad, bad, "index entry 5"), b[at + 3] = keep;
        b[sh.labels_off + 4 * 3] = 7, spit(bad, b, n), expect_open_fail(bad, bad, "label 7");
        /* a decoded record whose size header lies */
        kiln_image im;
        if (kind) CHECK(kiln_shard_pixels(rec[0], len[0] - 1, "rec", &im) != KILN_OK && has(kiln_last_error(), "do not fit"));
        free(b);
        kiln_shard_close(&sh);
        kiln_source_close(src);
        for (int i = 0; i < N; i++) free(rec[i]);
    }
    /* a record count the writer did not get */
    kiln_shard_writer *w = NULL;
    CHECK_OK(kiln_shard_writer_new(path, 0, 3, &w));
    CHECK_OK(kiln_shard_writer_add(w, 0, "abc", 3));
    CHECK(kiln_shard_writer_finish(w) != KILN_OK && has(kiln_last_error(), "1 of its 3"));
}

/* ---------- a labels-only read: a source that counts the bytes read through it ---------- */

typedef struct {
    kiln_source s;
    kiln_source *inner;
    atomic_llong bytes;
} counting;

static kiln_status count_read(kiln_source *s, int64_t off, int64_t len, void *dst) {
    counting *c = (counting *)s;
    atomic_fetch_add(&c->bytes, len);
    return kiln_source_read(c->inner, off, len, dst);
}
static void count_close(kiln_source *s) { kiln_source_close(((counting *)s)->inner); }
static const kiln_source_ops count_ops = {count_read, NULL, count_close};

static void test_labels_only(const char *shards) {
    char p[512];
    snprintf(p, sizeof p, "%s/train-00001.kshard", shards); /* its 7 samples span two classes */
    counting c = {{&count_ops, p, 0, NULL}, NULL, 0};
    CHECK_OK(kiln_source_open_file(p, &c.inner));
    if (!c.inner) return;
    c.s.size = c.inner->size;
    kiln_shard sh;
    int32_t lab[64];
    CHECK_OK(kiln_shard_open(&c.s, &sh));
    CHECK(sh.count <= 64);
    CHECK_OK(kiln_shard_read_labels(&sh, 3, lab));
    CHECK_MSG(atomic_load(&c.bytes) == KILN_SHARD_HEADER + 4 * sh.count, "%lld bytes read for %lld labels",
              (long long)atomic_load(&c.bytes), (long long)sh.count);
    int varied = 0;
    for (int64_t i = 1; i < sh.count; i++) varied |= lab[i] != lab[0];
    CHECK(varied);
    count_close(&c.s);
}

/* ---------- folders of random images ---------- */

/* DIR/train/<3 classes>/ and DIR/test/..., 24x20 (w x h) random RGB images; jpeg: JPEGs and PNGs mixed, else PNGs,
 * every fourth 22x21 (so the cache meets records of two sizes) */
static void make_folder(const char *dir, int per_class, int jpeg) {
    char p[512];
    const char *cls[3] = {"cat", "dog", "emu"};
    mk(dir);
    uint8_t px[24 * 20 * 3];
    for (int split = 0; split < 2; split++) {
        snprintf(p, sizeof p, "%s/%s", dir, split ? "test" : "train"), mk(p);
        for (int k = 0; k < 3; k++) {
            snprintf(p, sizeof p, "%s/%s/%s", dir, split ? "test" : "train", cls[k]), mk(p);
            for (int i = 0; i < per_class; i++) {
                int png = !jpeg || i % 3 == 0;
                snprintf(p, sizeof p, "%s/%s/%s/%02d.%s", dir, split ? "test" : "train", cls[k], i, png ? "png" : "jpg");
                for (size_t j = 0; j < sizeof px; j++) px[j] = (uint8_t)(tu_u64() % 256);
                kiln_image im = {px, 24, 20, 3};
                if (!jpeg && i % 4 == 1) im.w = 22, im.h = 21;
                const uint8_t *d;
                size_t n;
                CHECK_OK(kiln_image_encode(g_ctx, &im, png ? KILN_IMAGE_PNG : KILN_IMAGE_JPEG, 90, &d, &n));
                spit(p, d, n);
            }
        }
    }
}

static kiln_data_config random_crops(void) {
    kiln_data_config dc = kiln_data_defaults();
    CHECK_OK(kiln_data_parse_rrc("16,0.3,1", &dc));
    CHECK_OK(kiln_data_parse_normalize("imagenet", &dc));
    dc.hflip = 1;
    return dc;
}

/* both splits of a and b give the same batches at 0 and 2 workers */
static void expect_same(const char *a, const char *b, const kiln_data_config *dc, const char *what) {
    for (int train = 1; train >= 0; train--) {
        kiln_dataset *da = NULL, *db = NULL;
        CHECK_OK(kiln_dataset_open_config(a, train, dc, &da));
        CHECK_OK(kiln_dataset_open_config(b, train, dc, &db));
        if (!da || !db) continue;
        CHECK(da->len == db->len && da->num_classes == db->num_classes && da->sample_shape[1] == db->sample_shape[1]);
        for (int w = 0; w <= 2; w += 2) {
            int ea = 0, eb = 0;
            uint64_t ha = loader_hash(da, w, 2, NULL, &ea), hb = loader_hash(db, w, 2, NULL, &eb);
            CHECK_MSG(!ea && !eb && ha == hb, "%s, %s split, %d workers: %016llx against %016llx (%s)", what, train ? "train" : "test", w,
                      (unsigned long long)ha, (unsigned long long)hb, kiln_last_error());
        }
        kiln_dataset_free(da);
        kiln_dataset_free(db);
    }
}

static void test_equal_batches(const char *mixed, const char *pngs) {
    char enc[256], dec[256];
    snprintf(enc, sizeof enc, "%s/enc", g_tmp);
    snprintf(dec, sizeof dec, "%s/dec", g_tmp);
    int64_t n = 0;
    CHECK_OK(kiln_pack_shards(mixed, enc, 0, 7, 0, 0, &n));
    CHECK(n == 2 * 3 * 9);
    CHECK_OK(kiln_pack_shards(pngs, dec, 1, 5, 0, 0, &n));
    kiln_data_config dc = random_crops();
    expect_same(mixed, enc, &dc, "encoded shards, random crops");
    expect_same(pngs, dec, &dc, "decoded shards, random crops");
    dc = kiln_data_defaults();
    dc.resize = 14, dc.center_crop = 12, dc.channels = 1;
    expect_same(mixed, enc, &dc, "encoded shards, resize + crop, grey");
    expect_same(pngs, dec, &dc, "decoded shards (RGB records), resize + crop, grey");
    test_labels_only(enc);
    /* the shards were made once: a second pack into the same folder is refused */
    CHECK(kiln_pack_shards(mixed, enc, 0, 7, 0, 0, &n) != KILN_OK && has(kiln_last_error(), "index.json") &&
          has(kiln_last_error(), "already exists"));
}

/* ---------- the cache ---------- */

static char g_warning[1024];
static void capture(kiln_log_level level, const char *msg, void *user) {
    (void)user;
    if (level >= KILN_LOG_WARN) snprintf(g_warning, sizeof g_warning, "%s", msg);
}

static int count_files(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls '%s' 2>/dev/null | grep -c kshard", dir);
    FILE *f = popen(cmd, "r");
    int n = -1;
    if (f && fscanf(f, "%d", &n) != 1) n = -1;
    if (f) pclose(f);
    return n;
}

/* epochs 1 and 2 of the training split, without and with the cache: the same */
static void expect_cache_same(const char *data, kiln_data_config dc, const char *cache, const char *what) {
    kiln_dataset *plain = NULL, *cached = NULL;
    CHECK_OK(kiln_dataset_open_config(data, 1, &dc, &plain));
    dc.cache = cache;
    CHECK_OK(kiln_dataset_open_config(data, 1, &dc, &cached));
    if (!plain || !cached) return;
    for (int w = 0; w <= 2; w += 2) {
        uint64_t a[2], b[2];
        int ea = 0, eb = 0;
        loader_hash(plain, w, 2, a, &ea);
        loader_hash(cached, w, 2, b, &eb);
        CHECK_MSG(!ea && !eb && a[0] == b[0] && a[1] == b[1] && a[0] != a[1], "%s, %d workers: epochs %016llx %016llx against %016llx %016llx",
                  what, w, (unsigned long long)a[0], (unsigned long long)a[1], (unsigned long long)b[0], (unsigned long long)b[1]);
    }
    kiln_dataset_free(plain);
    kiln_dataset_free(cached);
}

/* every record of the newest cache file in dir is the full decode of the folder's file */
static void expect_cache_is_decode(const char *cache, const char *folder) {
    char cmd[512], path[512] = "";
    snprintf(cmd, sizeof cmd, "ls -t '%s'/train-*.kshard", cache);
    FILE *f = popen(cmd, "r");
    if (f && !fgets(path, sizeof path, f)) path[0] = 0;
    if (f) pclose(f);
    path[strcspn(path, "\n")] = 0;
    kiln_source *src = NULL;
    kiln_shard sh;
    kiln_records *r = NULL;
    kiln_data_config dc = kiln_data_defaults();
    CHECK_OK(kiln_source_open_file(path, &src));
    if (!src) return;
    CHECK_OK(kiln_shard_open(src, &sh));
    CHECK_OK(kiln_shard_read_index(&sh));
    CHECK_OK(kiln_imagefolder_records(folder, 1, &dc, &r));
    int same = sh.index && r && sh.count == r->len, pixels = 0;
    char name[KILN_RECORD_NAME];
    for (int64_t i = 0; same && i < sh.count; i++) {
        kiln_record rec;
        kiln_image a, b;
        same &= kiln_shard_pixels(src->map + sh.index[i], sh.index[i + 1] - sh.index[i], path, &a) == KILN_OK;
        same &= r->read(r, i, g_ctx, name, &rec) == KILN_OK;
        same &= kiln_image_decode(g_ctx, rec.data, rec.n, name, 3, 1.0, &b) == KILN_OK;
        same &= a.w == b.w && a.h == b.h && a.c == b.c && memcmp(a.px, b.px, (size_t)a.w * a.h * a.c) == 0;
        pixels += a.w * a.h * a.c;
    }
    CHECK_MSG(same && pixels == 3 * (7 * 24 * 20 + 2 * 22 * 21) * 3, "%s: records differ from a fresh decode", path);
    if (r) r->destroy(r);
    kiln_shard_close(&sh);
    kiln_source_close(src);
}

static void test_cache(const char *mixed, const char *pngs) {
    char cache[256], cache2[256], p[512];
    snprintf(cache, sizeof cache, "%s/cache", g_tmp);
    snprintf(cache2, sizeof cache2, "%s/cache2", g_tmp);
    kiln_log_set_sink(capture, NULL);
    /* random crops from PNGs: the full decode is kept, the crop drawn every epoch */
    expect_cache_same(pngs, random_crops(), cache, "PNG folder, random crops");
    CHECK(count_files(cache) == 1);
    expect_cache_is_decode(cache, pngs);
    /* the complete cache is read by the next run: still the same batches, no new file */
    expect_cache_same(pngs, random_crops(), cache, "PNG folder, random crops, cache complete");
    CHECK(count_files(cache) == 1 && !g_warning[0]);
    /* Resize + CenterCrop (+ flip) from JPEGs: the resized pixels are kept; shards the same */
    kiln_data_config dc = kiln_data_defaults();
    dc.resize = 14, dc.center_crop = 12, dc.hflip = 1;
    expect_cache_same(mixed, dc, cache2, "mixed folder, resize + crop");
    CHECK(count_files(cache2) == 1);
    snprintf(p, sizeof p, "%s/enc", g_tmp);
    expect_cache_same(p, dc, cache2, "encoded shards, resize + crop");
    CHECK(count_files(cache2) == 2);
    /* a changed file (its modification time) is other data: a new cache */
    snprintf(p, sizeof p, "%s/train/dog/04.png", pngs);
    struct timespec ts[2] = {{0, UTIME_OMIT}, {1234567, 0}};
    CHECK(utimensat(AT_FDCWD, p, ts, 0) == 0);
    expect_cache_same(pngs, random_crops(), cache, "PNG folder, one file touched");
    CHECK(count_files(cache) == 2);
    /* a corrupt cache file is named in a warning and rebuilt */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "for f in '%s'/train-*.kshard; do truncate -s 9999 \"$f\"; done", cache);
    CHECK(system(cmd) == 0);
    g_warning[0] = 0;
    expect_cache_same(pngs, random_crops(), cache, "PNG folder, cache rebuilt");
    CHECK_MSG(has(g_warning, cache) && has(g_warning, "rebuilding"), "warning: '%s'", g_warning);
    expect_cache_is_decode(cache, pngs);
    /* a corrupt file is remembered: the cache completes, and both epochs fail that sample naming the file */
    char bad[256], cache3[256];
    snprintf(bad, sizeof bad, "%s/bad", g_tmp);
    snprintf(cache3, sizeof cache3, "%s/cache3", g_tmp);
    make_folder(bad, 3, 0);
    snprintf(p, sizeof p, "%s/train/dog/01.png", bad);
    size_t n = 0;
    uint8_t *b = slurp(p, &n);
    if (b) spit(p, b, n / 2);
    free(b);
    dc = random_crops();
    dc.cache = cache3;
    kiln_dataset *ds = NULL;
    /* the cache is finished (linked in) by a background thread: count its file once the dataset is freed,
     * then read the complete cache again in a new dataset */
    for (int pass = 0; pass < 3; pass++) {
        if (pass != 1) CHECK_OK(kiln_dataset_open_config(bad, 1, &dc, &ds));
        if (!ds) break;
        int failed = 0, named = 0;
        float x[3 * 16 * 16];
        int32_t y;
        for (int64_t i = 0; i < ds->len; i++)
            if (ds->get(ds, i, (uint64_t)i, x, &y) != KILN_OK) failed++, named += has(kiln_last_error(), p) && has(kiln_last_error(), "PNG");
        CHECK_MSG(failed == 1 && named == 1, "pass %d: %d failed, %d named %s", pass, failed, named, p);
        if (pass == 0) continue;
        kiln_dataset_free(ds);
        ds = NULL;
        CHECK_MSG(count_files(cache3) == 1, "pass %d: %d cache files", pass, count_files(cache3));
    }
    /* an unwritable place, and IDX data */
    dc = random_crops();
    snprintf(p, sizeof p, "%s/dec/index.json/sub", g_tmp);
    dc.cache = p;
    CHECK(kiln_dataset_open_config(pngs, 1, &dc, &ds) != KILN_OK && has(kiln_last_error(), "--cache") && has(kiln_last_error(), p));
    dc = kiln_data_defaults();
    dc.cache = cache;
    CHECK(kiln_dataset_open_config("fashion-mnist", 1, &dc, &ds) != KILN_OK && has(kiln_last_error(), "--cache"));
    kiln_log_set_sink(NULL, NULL);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/kiln_test_shard_XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
    tu_seed(41);
    kiln_log_set_level(KILN_LOG_WARN);
    g_ctx = kiln_image_ctx_new();
    test_format();
    char mixed[256], pngs[256];
    snprintf(mixed, sizeof mixed, "%s/mixed", g_tmp);
    snprintf(pngs, sizeof pngs, "%s/pngs", g_tmp);
    make_folder(mixed, 9, 1);
    make_folder(pngs, 9, 0);
    test_equal_batches(mixed, pngs);
    test_cache(mixed, pngs);
    kiln_image_ctx_free(g_ctx);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
    return tu_finish("test_shard");
}
