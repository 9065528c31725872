/* The HTTP source (src/data/http.c, http_header.c).
 *
 * Without arguments: what kiln parses from a server (Content-Range, header
 * lines, status lines) on random and malformed values, the check of a
 * ranged answer, and the errors that need no server (a malformed URL, a port
 * nobody listens on: the URL named, the tries counted).
 *
 * With `--ranges URL FILE SEED` (tests/test_http.sh, against nginx serving
 * FILE at URL): the size learnt at open, random ranges read one by one, from
 * four threads at once, and after will_need hints (some read, some not),
 * each compared with the local file; a range past the end is an error.
 *
 * With `--epoch DATA WORKERS`: one shuffled epoch of DATA's training split
 * (a folder or URL of shards; RandomResizedCrop 24, flip, grey) through the
 * loader, and prints a hash of every batch's pixels and labels in order, so
 * the test compares shards over HTTP with the same shards on disk. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/internal/http_header.h"
#include "kiln/data.h"
#include "data/internal/source.h"
#include "testutil.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static int64_t rnd_below(int64_t n) { return n > 0 ? (int64_t)(rnd() % (uint64_t)n) : 0; }

static int cr(const char *v, int64_t *a, int64_t *b, int64_t *t) { return kiln_http_parse_content_range(v, strlen(v), a, b, t); }

static void test_content_range(void) {
    int64_t a, b, t;
    for (int i = 0; i < 200; i++) {
        int64_t total = 1 + rnd_below((int64_t)1 << 40), first = rnd_below(total), last = first + rnd_below(total - first);
        char v[96];
        snprintf(v, sizeof v, "bytes %lld-%lld/%lld", (long long)first, (long long)last, (long long)total);
        CHECK_MSG(cr(v, &a, &b, &t) && a == first && b == last && t == total, "%s", v);
        snprintf(v, sizeof v, "bytes %lld-%lld/%lld", (long long)first, (long long)last, (long long)last);
        CHECK_MSG(!cr(v, &a, &b, &t), "last byte at the total accepted: %s", v);
        if (first != last) {
            snprintf(v, sizeof v, "bytes %lld-%lld/%lld", (long long)last, (long long)first, (long long)total);
            CHECK_MSG(!cr(v, &a, &b, &t), "a backwards range accepted: %s", v);
        }
    }
    CHECK(cr("bytes 5-9/*", &a, &b, &t) && a == 5 && b == 9 && t == -1);
    CHECK(cr("bytes */1234", &a, &b, &t) && a == -1 && b == -1 && t == 1234);
    CHECK(cr("BYTES 0-0/1 \r\n", &a, &b, &t) && a == 0 && t == 1);
    const char *bad[] = {"", "bytes", "bytes ", "bytes 1-2", "bytes 1-/3", "bytes -1-2/3", "bits 0-0/1", "bytes 0-0/1x",
                         "bytes */*", "bytes 0-0/", "bytes 99999999999999999999-1/2", "bytes 0 - 1/2", "bytes=0-1/2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK_MSG(!cr(bad[i], &a, &b, &t), "accepted '%s'", bad[i]);
    /* bounded by the length given, not by a terminating zero */
    CHECK(kiln_http_parse_content_range("bytes 0-1/20", 11, &a, &b, &t) && t == 2);
}

static void test_lines(void) {
    const char *v;
    size_t n;
    const char *line = "content-RANGE:   bytes 0-3/10 \r\n";
    CHECK(kiln_http_header_value(line, strlen(line), "Content-Range", &v, &n) && n == 12 && !strncmp(v, "bytes 0-3/10", 12));
    CHECK(!kiln_http_header_value(line, strlen(line), "Content-Length", &v, &n));
    CHECK(!kiln_http_header_value("Content-Range", 13, "Content-Range", &v, &n));
    long st;
    char reason[16];
    const char *sl = "HTTP/1.1 404 Not Found\r\n";
    CHECK(kiln_http_status_line(sl, strlen(sl), &st, reason, sizeof reason) && st == 404 && !strcmp(reason, "Not Found"));
    sl = "HTTP/2 206\r\n";
    CHECK(kiln_http_status_line(sl, strlen(sl), &st, reason, sizeof reason) && st == 206 && !reason[0]);
    sl = "HTTP/1.1 200 OK but a very long reason phrase\x01\r\n";
    CHECK(kiln_http_status_line(sl, strlen(sl), &st, reason, sizeof reason) && strlen(reason) == 15);
    CHECK(!kiln_http_status_line("HTTP/1.1 20x OK\r\n", 17, &st, reason, sizeof reason));
    CHECK(!kiln_http_status_line("Content-Type: x\r\n", 17, &st, reason, sizeof reason));
    CHECK(kiln_http_status_retryable(503) && kiln_http_status_retryable(429) && !kiln_http_status_retryable(404) &&
          !kiln_http_status_retryable(403));
}

static void test_check_range(void) {
    char buf[256];
    for (int i = 0; i < 100; i++) {
        int64_t size = 1 + rnd_below(1 << 30), off = rnd_below(size), len = 1 + rnd_below(size - off);
        kiln_http_answer a = {206, 1, off, off + len - 1, size, len};
        CHECK(kiln_http_check_range(&a, off, len, size, buf, sizeof buf) == NULL);
        kiln_http_answer w = a;
        w.status = 200;
        CHECK(kiln_http_check_range(&w, off, len, size, buf, sizeof buf) && strstr(buf, "Range"));
        w = a;
        w.first = off + 1;
        CHECK(kiln_http_check_range(&w, off, len, size, buf, sizeof buf) && strstr(buf, "sent bytes"));
        w = a;
        w.received = len - 1;
        CHECK(kiln_http_check_range(&w, off, len, size, buf, sizeof buf) && strstr(buf, "received"));
        w = a;
        w.total = size + 1;
        CHECK(kiln_http_check_range(&w, off, len, size, buf, sizeof buf) && strstr(buf, "changed"));
        w = a;
        w.have_range = 0;
        CHECK(kiln_http_check_range(&w, off, len, size, buf, sizeof buf) && strstr(buf, "Content-Range"));
    }
}

/* a multipart/byteranges body as nginx writes it, of nparts random ranges of obj */
static size_t multipart(uint8_t *out, const uint8_t *obj, int64_t size, int nparts, int64_t *first, int64_t *last) {
    size_t at = 0;
    for (int k = 0; k < nparts; k++) {
        first[k] = rnd_below(size);
        last[k] = first[k] + rnd_below(size - first[k] < 300 ? size - first[k] : 300);
        at += (size_t)sprintf((char *)out + at, "\r\n--00000000000000000042\r\nContent-Type: application/octet-stream\r\n"
                              "Content-Range: bytes %lld-%lld/%lld\r\n\r\n", (long long)first[k], (long long)last[k], (long long)size);
        memcpy(out + at, obj + first[k], (size_t)(last[k] - first[k] + 1));
        at += (size_t)(last[k] - first[k] + 1);
    }
    at += (size_t)sprintf((char *)out + at, "\r\n--00000000000000000042--\r\n");
    return at;
}

static void test_multipart(void) {
    char b[80];
    const char *ct = "multipart/byteranges; boundary=00000000000000000042";
    CHECK(kiln_http_multipart_boundary(ct, strlen(ct), b, sizeof b) && !strcmp(b, "00000000000000000042"));
    ct = "Multipart/ByteRanges;boundary=\"a b;c\"; charset=x";
    CHECK(kiln_http_multipart_boundary(ct, strlen(ct), b, sizeof b) && !strcmp(b, "a b;c"));
    const char *no[] = {"multipart/byteranges", "multipart/mixed; boundary=x", "multipart/byteranges; boundary=",
                        "multipart/byteranges; boundary=\"open", "multipart/byteranges; boundary=a\x01b", "multipart/byteranges; xboundary=y",
                        "multipart/byteranges; boundary=12345678901234567890123456789012345678901234567890123456789012345678901"};
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        CHECK_MSG(!kiln_http_multipart_boundary(no[i], strlen(no[i]), b, sizeof b), "accepted '%s'", no[i]);
    uint8_t obj[1000], body[8000];
    for (int i = 0; i < 1000; i++) obj[i] = (uint8_t)rnd();
    kiln_http_part parts[8];
    int64_t first[8], last[8];
    for (int round = 0; round < 50; round++) {
        int np = 1 + (int)rnd_below(8);
        size_t n = multipart(body, obj, sizeof obj, np, first, last);
        int got = kiln_http_parse_multipart(body, n, "00000000000000000042", parts, 8);
        CHECK_MSG(got == np, "%d parts of %d", got, np);
        for (int k = 0; k < got && k < np; k++)
            CHECK(parts[k].first == first[k] && parts[k].last == last[k] && parts[k].total == 1000 &&
                  !memcmp(parts[k].data, obj + first[k], (size_t)(last[k] - first[k] + 1)));
        if (np > 1) CHECK(kiln_http_parse_multipart(body, n, "00000000000000000042", parts, np - 1) == -1);
        CHECK(kiln_http_parse_multipart(body, n, "00000000000000000043", parts, 8) == -1);
        size_t cut = (size_t)rnd_below((int64_t)n - 2); /* short of the final "--" */
        uint8_t *copy = malloc(cut + 1);
        memcpy(copy, body, cut);
        CHECK_MSG(kiln_http_parse_multipart(copy, cut, "00000000000000000042", parts, 8) == -1, "cut at %zu of %zu", cut, n);
        free(copy);
    }
    const char *nocr = "--x\r\nContent-Type: a\r\n\r\nabc\r\n--x--\r\n";
    CHECK(kiln_http_parse_multipart((const uint8_t *)nocr, strlen(nocr), "x", parts, 8) == -1);
}

static void test_errors_without_server(void) {
    kiln_http_client *c;
    kiln_source *s = NULL;
    CHECK_OK(kiln_http_client_new(&c));
    CHECK(kiln_source_open_url(c, "ftp://127.0.0.1/x", &s) == KILN_ERR_INVALID_ARG && !s);
    /* port 1 on loopback: nobody listens, the connection is refused at once */
    const char *url = "http://127.0.0.1:1/shards/index.json";
    CHECK(kiln_source_open_url(c, url, &s) == KILN_ERR_IO && !s);
    CHECK_MSG(strstr(kiln_last_error(), url) && strstr(kiln_last_error(), "4 tries"), "%s", kiln_last_error());
    kiln_http_client_free(c);
}

/* ---------- against a server (test_http.sh) ---------- */

typedef struct {
    kiln_source *s;
    const uint8_t *want;
    int64_t size;
    uint64_t seed;
    int bad;
} reader;

static int read_check(kiln_source *s, const uint8_t *want, int64_t off, int64_t len) {
    uint8_t *got = malloc((size_t)len + 1);
    int ok = got && kiln_source_read(s, off, len, got) == KILN_OK && memcmp(got, want + off, (size_t)len) == 0;
    if (!ok) fprintf(stderr, "range %lld+%lld: %s\n", (long long)off, (long long)len, kiln_last_error());
    free(got);
    return ok;
}

static void random_range(int64_t size, uint64_t *st, int64_t *off, int64_t *len) {
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t r = *st >> 11;
    *off = (int64_t)(r % (uint64_t)size);
    *len = 1 + (int64_t)((r >> 20) % 9000u);
    if (*len > size - *off) *len = size - *off;
}

static void *reader_main(void *arg) {
    reader *r = arg;
    uint64_t st = r->seed;
    for (int i = 0; i < 60; i++) {
        int64_t off, len;
        random_range(r->size, &st, &off, &len);
        if (!read_check(r->s, r->want, off, len)) r->bad++;
    }
    return NULL;
}

static int test_ranges(const char *url, const char *path, uint64_t seed) {
    FILE *f = fopen(path, "rb");
    if (!f) return fprintf(stderr, "%s: cannot open\n", path), 1;
    fseek(f, 0, SEEK_END);
    int64_t size = ftell(f);
    rewind(f);
    uint8_t *want = malloc((size_t)size);
    if (!want || fread(want, 1, (size_t)size, f) != (size_t)size) return fprintf(stderr, "%s: cannot read\n", path), 1;
    fclose(f);
    kiln_http_client *c;
    kiln_source *s = NULL;
    CHECK_OK(kiln_http_client_new(&c));
    CHECK_OK(kiln_source_open_url(c, url, &s));
    if (!s) {
        kiln_http_client_free(c);
        free(want);
        return tu_finish("test_http_source --ranges");
    }
    CHECK_MSG(s->size == size, "size %lld, the file has %lld", (long long)s->size, (long long)size);
    CHECK(!strcmp(s->name, url));
    uint64_t st = seed;
    for (int i = 0; i < 100; i++) {
        int64_t off, len;
        random_range(size, &st, &off, &len);
        int ok = read_check(s, want, off, len);
        CHECK(ok);
        if (!ok) break; /* a server that fails once fails the rest: one error is enough */
    }
    if (tu_failed) {
        kiln_source_close(s);
        kiln_http_client_free(c);
        free(want);
        return tu_finish("test_http_source --ranges");
    }
    CHECK(read_check(s, want, 0, size));
    CHECK(read_check(s, want, size - 1, 1));
    uint8_t b;
    CHECK(kiln_source_read(s, size, 0, &b) == KILN_OK);
    CHECK(kiln_source_read(s, size - 1, 2, &b) != KILN_OK && strstr(kiln_last_error(), url));
    /* four threads at once */
    pthread_t th[4];
    reader rd[4];
    for (int i = 0; i < 4; i++) {
        rd[i] = (reader){s, want, size, seed + 17 * (uint64_t)i + 1, 0};
        pthread_create(&th[i], NULL, reader_main, &rd[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(rd[i].bad == 0, "thread %d: %d bad ranges", i, rd[i].bad);
    }
    /* hinted ranges, 64 at a time: most read whole (which drops them from the
     * read-ahead), every fourth only its first part (kept until evicted),
     * every fourth never; 12 rounds outgrow the cache's 512 ranges */
    if (s->ops->will_need) {
        for (int round = 0; round < 12; round++) {
            int64_t off[64], len[64];
            for (int i = 0; i < 64; i++) random_range(size, &st, &off[i], &len[i]);
            s->ops->will_need(s, 64, off, len);
            for (int i = 0; i < 64; i++) {
                if (i % 4 == 3) continue;
                CHECK(read_check(s, want, off[i], i % 4 == 2 ? (len[i] + 1) / 2 : len[i]));
            }
        }
    }
    kiln_source_close(s);
    kiln_http_client_free(c);
    free(want);
    return tu_finish("test_http_source --ranges");
}

/* FNV-1a over bytes */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static int epoch_hash(const char *data, int workers) {
    kiln_data_config dc = kiln_data_defaults();
    dc.random_resized_crop = 24;
    dc.hflip = 1;
    dc.channels = 1;
    kiln_dataset *ds;
    kiln_loader *L;
    if (kiln_dataset_open_config(data, 1, &dc, &ds) != KILN_OK) return fprintf(stderr, "%s\n", kiln_last_error()), 2;
    kiln_loader_config lc = kiln_loader_defaults();
    lc.batch_size = 32;
    lc.workers = workers;
    lc.seed = 7;
    if (kiln_loader_new(ds, &lc, &L) != KILN_OK) return fprintf(stderr, "%s\n", kiln_last_error()), 2;
    int64_t numel = 1;
    for (int d = 0; d < ds->sample_ndim; d++) numel *= ds->sample_shape[d];
    uint64_t h = 0xcbf29ce484222325ull;
    int64_t batches = 0;
    kiln_batch b;
    int rc = kiln_loader_start_epoch(L, 1, 0) == KILN_OK ? 1 : -1;
    while (rc == 1 && (rc = kiln_loader_next(L, &b)) == 1) {
        h = fnv(fnv(h, b.x, (size_t)(b.n * numel) * sizeof(float)), b.y, (size_t)b.n * sizeof(int32_t));
        batches++;
        kiln_loader_release(L, &b);
    }
    if (rc < 0) fprintf(stderr, "%s\n", kiln_last_error());
    else printf("%lld batches %016llx\n", (long long)batches, (unsigned long long)h);
    kiln_loader_free(L);
    kiln_dataset_free(ds);
    return rc < 0 ? 2 : 0;
}

int main(int argc, char **argv) {
    kiln_log_set_level(KILN_LOG_WARN);
    if (argc == 4 && !strcmp(argv[1], "--epoch")) return epoch_hash(argv[2], atoi(argv[3]));
    if (argc == 5 && !strcmp(argv[1], "--ranges")) return test_ranges(argv[2], argv[3], strtoull(argv[4], NULL, 10));
    test_content_range();
    test_lines();
    test_check_range();
    test_multipart();
    test_errors_without_server();
    return tu_finish("test_http_source");
}
