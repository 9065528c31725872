/* test_safetensors: round trips, the Python library's exact layout, every
 * rejection (status and message), and atomic save under failure. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "kiln/safetensors.h"
#include "testutil.h"

static char g_dir[256];

static void tpath(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_dir, name); }

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(p, 1, n, f) == n);
    CHECK(fclose(f) == 0);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)len + 1);
    *n = fread(p, 1, (size_t)len, f);
    fclose(f);
    return p;
}

/* a file: u64 header size, header (padded with spaces to 8 if pad), data */
static void write_st(const char *path, const char *hdr, int pad, const void *data, size_t dlen) {
    size_t h = strlen(hdr), hp = pad ? (h + 7) / 8 * 8 : h;
    unsigned char *b = calloc(1, 8 + hp + dlen + 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hp >> (8 * i));
    memcpy(b + 8, hdr, h);
    memset(b + 8 + h, ' ', hp - h);
    if (dlen) memcpy(b + 8 + hp, data, dlen);
    write_bytes(path, b, 8 + hp + dlen);
    free(b);
}

static int count_temps(void) {
    int n = 0;
    DIR *d = opendir(g_dir);
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}

/* open must fail with `st`, and the message must name the file and the problem */
static void expect_fail(const char *path, kiln_status st, const char *what) {
    kiln_st_file *f = (kiln_st_file *)(uintptr_t)1;
    kiln_status s = kiln_st_open(path, &f);
    CHECK_MSG(s == st, "%s: status %s, want %s (%s)", path, kiln_status_name(s), kiln_status_name(st), kiln_last_error());
    CHECK(f == NULL);
    CHECK_MSG(strstr(kiln_last_error(), path) != NULL, "message does not name the file: %s", kiln_last_error());
    CHECK_MSG(strstr(kiln_last_error(), what) != NULL, "message lacks '%s': %s", what, kiln_last_error());
    if (s == KILN_OK) kiln_st_close(f);
}

static void expect_hdr_fail(const char *name, const char *hdr, const void *data, size_t dlen, const char *what) {
    char p[512];
    tpath(p, sizeof p, name);
    write_st(p, hdr, 1, data, dlen);
    expect_fail(p, KILN_ERR_FORMAT, what);
}

static void fill_random(void *p, size_t n) {
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(tu_u64() >> 24);
    if (n) b[0] |= 1; /* never all zero */
}

static void test_round_trip(void) {
    tu_seed(11);
    float f32[12];
    double f64[5];
    uint16_t bf16[6], f16[4];
    int32_t i32[7];
    int64_t i64[4];
    uint8_t u8[13];
    float scalar = -3.25f, empty_dummy = 0;
    tu_fill(f32, 12, -2, 2);
    tu_fill_d(f64, 5, -1e6, 1e6);
    for (int i = 0; i < 6; i++) bf16[i] = kiln_f32_to_bf16((float)tu_uniform(-5, 5));
    for (int i = 0; i < 4; i++) f16[i] = kiln_f32_to_f16((float)tu_uniform(-5, 5));
    for (int i = 0; i < 7; i++) i32[i] = (int32_t)tu_int(-100000, 100000);
    for (int i = 0; i < 4; i++) i64[i] = (int64_t)tu_u64();
    fill_random(u8, 13);

    struct { const char *name; kiln_dtype dt; int ndim; int64_t shape[4]; const void *data; size_t bytes; } t[] = {
        {"z.weight", KILN_F32, 2, {3, 4}, f32, sizeof f32},
        {"u8.mask", KILN_U8, 1, {13}, u8, sizeof u8}, /* odd size: everything after is unaligned in the file */
        {"a.f64", KILN_F64, 1, {5}, f64, sizeof f64},
        {"bf", KILN_BF16, 2, {2, 3}, bf16, sizeof bf16},
        {"h", KILN_F16, 3, {1, 2, 2}, f16, sizeof f16},
        {"ints", KILN_I32, 1, {7}, i32, sizeof i32},
        {"longs", KILN_I64, 2, {2, 2}, i64, sizeof i64},
        {"scalar", KILN_F32, 0, {0}, &scalar, 4},
        {"empty", KILN_F32, 2, {0, 5}, NULL, 0},
        {"empty2", KILN_I64, 1, {0}, &empty_dummy, 0},
    };
    int nt = (int)(sizeof t / sizeof t[0]);
    kiln_alloc_stats before, after;
    kiln_alloc_get_stats(&before);

    kiln_st_writer *w = kiln_st_writer_new();
    CHECK(w != NULL);
    for (int i = 0; i < nt; i++) CHECK_OK(kiln_st_writer_add(w, t[i].name, t[i].dt, t[i].ndim, t[i].shape, t[i].data));
    char p[512];
    tpath(p, sizeof p, "rt.safetensors");
    CHECK_OK(kiln_st_writer_save(w, p));
    kiln_st_writer_free(w);
    CHECK(count_temps() == 0);

    size_t n;
    unsigned char *raw = read_bytes(p, &n);
    CHECK(raw && n >= 8);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | raw[i];
    CHECK(hl % 8 == 0);
    size_t total = 0;
    for (int i = 0; i < nt; i++) total += t[i].bytes;
    CHECK(n == 8 + hl + total);
    CHECK(raw[8] == '{');
    char *hdr = strndup((char *)raw + 8, (size_t)hl);
    CHECK(strstr(hdr, "__metadata__") == NULL); /* only written when metadata was given */
    CHECK(strstr(hdr, "{\"z.weight\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[0,48]}") == hdr);
    CHECK(strstr(hdr, "\"scalar\":{\"dtype\":\"F32\",\"shape\":[],") != NULL);
    free(hdr);
    free(raw);

    kiln_st_file *f;
    CHECK_OK(kiln_st_open(p, &f));
    if (f) {
        CHECK(kiln_st_count(f) == nt);
        CHECK(strcmp(kiln_st_path(f), p) == 0);
        for (int i = 0; i < nt; i++) {
            const kiln_tensor *x = kiln_st_at(f, i);
            CHECK_MSG(strcmp(kiln_st_name(f, i), t[i].name) == 0, "order: %d is %s", i, kiln_st_name(f, i));
            CHECK(x == kiln_st_find(f, t[i].name));
            CHECK(x->dtype == t[i].dt && x->ndim == t[i].ndim);
            for (int d = 0; d < t[i].ndim; d++) CHECK(x->shape[d] == t[i].shape[d]);
            CHECK(kiln_tensor_nbytes(x) == t[i].bytes);
            CHECK(x->data != NULL && ((uintptr_t)x->data % KILN_ALIGN) == 0);
            if (t[i].bytes) CHECK_MSG(memcmp(x->data, t[i].data, t[i].bytes) == 0, "data of %s", t[i].name);
        }
        CHECK(*(const float *)kiln_st_find(f, "scalar")->data == -3.25f);
        CHECK(kiln_st_find(f, "nope") == NULL);
        CHECK(kiln_st_find(f, "") == NULL);
        CHECK(kiln_st_at(f, nt) == NULL && kiln_st_at(f, -1) == NULL && kiln_st_name(f, nt) == NULL);
        CHECK(kiln_st_meta(f, "format") == NULL);
        kiln_st_close(f);
    }
    kiln_alloc_get_stats(&after);
    CHECK_MSG(after.current == before.current, "allocator: %zu bytes not returned", after.current - before.current);

    /* an empty writer makes a valid, empty file */
    w = kiln_st_writer_new();
    tpath(p, sizeof p, "empty.safetensors");
    CHECK_OK(kiln_st_writer_save(w, p));
    kiln_st_writer_free(w);
    raw = read_bytes(p, &n);
    CHECK(n == 16 && raw && memcmp(raw + 8, "{}      ", 8) == 0);
    free(raw);
    CHECK_OK(kiln_st_open(p, &f));
    if (f) {
        CHECK(kiln_st_count(f) == 0 && kiln_st_find(f, "x") == NULL);
        kiln_st_close(f);
    }
}

static void test_metadata(void) {
    const char *keys[] = {"kiln.step", "quote\"key", "back\\slash", "ctl"};
    const char *vals[] = {"100", "say \"hi\"\n\ttab/slash", "C:\\path\\", "\x01\x1f bell\x07 \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"};
    float x[3] = {1, 2, 3};
    int64_t sh[1] = {3};
    kiln_st_writer *w = kiln_st_writer_new();
    CHECK_OK(kiln_st_writer_add(w, "x", KILN_F32, 1, sh, x));
    for (int i = 0; i < 4; i++) CHECK_OK(kiln_st_writer_meta(w, keys[i], vals[i]));
    CHECK_OK(kiln_st_writer_meta(w, "kiln.step", "200")); /* last value wins */
    char p[512];
    tpath(p, sizeof p, "meta.safetensors");
    CHECK_OK(kiln_st_writer_save(w, p));
    kiln_st_writer_free(w);
    size_t n;
    unsigned char *raw = read_bytes(p, &n);
    CHECK(raw && n > 16 && memcmp(raw + 8, "{\"__metadata__\":{\"kiln.step\":\"200\",", 35) == 0);
    free(raw);
    kiln_st_file *f;
    CHECK_OK(kiln_st_open(p, &f));
    if (f) {
        CHECK(strcmp(kiln_st_meta(f, "kiln.step"), "200") == 0);
        for (int i = 1; i < 4; i++) CHECK_MSG(kiln_st_meta(f, keys[i]) && strcmp(kiln_st_meta(f, keys[i]), vals[i]) == 0, "meta %s", keys[i]);
        CHECK(kiln_st_meta(f, "missing") == NULL);
        CHECK(kiln_st_count(f) == 1 && memcmp(kiln_st_at(f, 0)->data, x, sizeof x) == 0);
        kiln_st_close(f);
    }
}

/* Bytes as the Python library writes them: compact JSON, "__metadata__"
 * first, tensors sorted, header padded with spaces to a multiple of 8, data
 * back to back in header order. */
static void test_python_layout(void) {
    float bias[2] = {0.5f, -1.5f}, weight[4] = {1, 2, 3, 4};
    int64_t steps[1] = {123456789012345ll};
    unsigned char data[8 + 16 + 8];
    memcpy(data, bias, 8);
    memcpy(data + 8, weight, 16);
    memcpy(data + 24, steps, 8);
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
                      "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[8,24]},"
                      "\"zsteps\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[24,32]}}";
    CHECK(strlen(hdr) % 8 != 0); /* so the padding is exercised */
    char p[512];
    tpath(p, sizeof p, "python.safetensors");
    write_st(p, hdr, 1, data, sizeof data);
    kiln_st_file *f;
    CHECK_OK(kiln_st_open(p, &f));
    if (!f) return;
    CHECK(kiln_st_count(f) == 3);
    CHECK(strcmp(kiln_st_meta(f, "format"), "pt") == 0);
    CHECK(strcmp(kiln_st_name(f, 0), "bias") == 0 && strcmp(kiln_st_name(f, 1), "weight") == 0);
    const kiln_tensor *w = kiln_st_find(f, "weight");
    CHECK(w && w->ndim == 2 && w->shape[0] == 2 && w->shape[1] == 2 && memcmp(w->data, weight, 16) == 0);
    CHECK(memcmp(kiln_st_find(f, "bias")->data, bias, 8) == 0);
    CHECK(*(const int64_t *)kiln_st_find(f, "zsteps")->data == 123456789012345ll);
    kiln_st_close(f);

    /* JSON the reader must also take: whitespace, escapes, header order unlike
     * data order, data offsets not aligned for the dtype */
    unsigned char d2[3 + 8];
    float v2[2] = {7.0f, -8.0f};
    memcpy(d2, "abc", 3);
    memcpy(d2 + 3, v2, 8);
    const char *h2 = "{ \"caf\\u00e9 \\ud83d\\ude00\\n\" : {\"shape\": [ 2 ], \"data_offsets\": [3, 11], \"dtype\": \"F32\"},\n"
                     "\t\"__metadata__\": {\"k\\\"\\\\\\/\": \"v\\t\\u0001\"} ,\r\n"
                     "  \"bytes\": {\"dtype\": \"U8\", \"shape\": [3], \"data_offsets\": [0, 3]} }\n";
    tpath(p, sizeof p, "json.safetensors");
    write_st(p, h2, 0, d2, sizeof d2);
    CHECK_OK(kiln_st_open(p, &f));
    if (!f) return;
    CHECK(kiln_st_count(f) == 2);
    CHECK(strcmp(kiln_st_name(f, 0), "caf\xc3\xa9 \xf0\x9f\x98\x80\n") == 0);
    CHECK(strcmp(kiln_st_name(f, 1), "bytes") == 0);
    const kiln_tensor *t = kiln_st_at(f, 0);
    CHECK(t->dtype == KILN_F32 && ((uintptr_t)t->data % KILN_ALIGN) == 0 && memcmp(t->data, v2, 8) == 0);
    CHECK(memcmp(kiln_st_at(f, 1)->data, "abc", 3) == 0);
    CHECK(kiln_st_meta(f, "k\"\\/") && strcmp(kiln_st_meta(f, "k\"\\/"), "v\t\x01") == 0);
    kiln_st_close(f);
}

static void test_errors(void) {
    char p[512];
    unsigned char d8[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const char *ok1 = "\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]";
    char h[1024];

    tpath(p, sizeof p, "missing.safetensors");
    expect_fail(p, KILN_ERR_IO, "No such file");
    tpath(p, sizeof p, "empty_file.safetensors");
    write_bytes(p, "", 0);
    expect_fail(p, KILN_ERR_FORMAT, "too short");
    tpath(p, sizeof p, "five.safetensors");
    write_bytes(p, "\x10\0\0\0\0", 5);
    expect_fail(p, KILN_ERR_FORMAT, "too short");
    expect_fail(g_dir, KILN_ERR_IO, "not a regular file");

    /* header size beyond the file: the header is truncated */
    tpath(p, sizeof p, "trunc_header.safetensors");
    write_bytes(p, "\x40\0\0\0\0\0\0\0{\"a\":{\"dty", 18);
    expect_fail(p, KILN_ERR_FORMAT, "beyond the end of the file");
    tpath(p, sizeof p, "absurd.safetensors");
    write_bytes(p, "\0\0\0\0\0\x01\0\0{}", 10);
    expect_fail(p, KILN_ERR_FORMAT, "absurd");

    /* bad JSON, with the byte position */
    snprintf(h, sizeof h, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}");
    tpath(p, sizeof p, "float.safetensors");
    write_st(p, h, 1, d8, 8);
    char want[64];
    snprintf(want, sizeof want, "header byte %d ", (int)(strstr(h, "2.0") - h));
    expect_fail(p, KILN_ERR_FORMAT, want);
    expect_fail(p, KILN_ERR_FORMAT, "fraction");
    /* the header byte count (0: strlen) lets one case end in a NUL byte */
    struct { const char *hdr, *what; size_t len; } bad[] = {
        {"", "empty header", 0},
        {"[]", "start with '{'", 0},
        {" {}", "start with '{'", 0},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}", "expected a string", 0},
        {"{\"a\" {}}", "expected ':'", 0},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", "expected ',' or '}'", 0},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", "after the JSON object", 0},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}\0", "after the JSON object", 55},
        {"{\"a:{}}", "unterminated string", 0},
        {"{\"a\\q\":{}}", "invalid escape", 0},
        {"{\"a\\u12G4\":{}}", "hex digit", 0},
        {"{\"a\\udc00\":{}}", "lone low surrogate", 0},
        {"{\"a\\ud800x\":{}}", "not followed by a low surrogate", 0},
        {"{\"a\\u0000\":{}}", "\\u0000", 0},
        {"{\"a\tb\":{}}", "control character", 0},
        {"{\"\xc3(\":{}}", "invalid UTF-8", 0},
        {"{\"\xed\xa0\x80\":{}}", "invalid UTF-8", 0},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", "leading zero", 0},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", "negative value in shape", 0},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,8]}}", "too large", 0},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,],\"data_offsets\":[0,8]}}", "expected an integer", 0},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", "more than 6", 0},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}", "more than 2", 0},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8]}}", "must have 2 entries", 0},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"extra\":1}}", "unknown key \"extra\"", 0},
        {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "duplicate key \"dtype\"", 0},
        {"{\"a\":{\"dtype\":true,\"shape\":[2],\"data_offsets\":[0,8]}}", "expected a string", 0},
        {"{\"a\":[]}", "expected '{' for tensor 'a'", 0},
        {"{\"\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "empty tensor name", 0},
        {"{\"__metadata__\":{\"k\":1},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "must be a string", 0},
        {"{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "duplicate __metadata__ key", 0},
        {"{\"__metadata__\":{},\"__metadata__\":{},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", "duplicate \"__metadata__\"", 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "badjson%zu.safetensors", i);
        tpath(p, sizeof p, name);
        size_t hl = bad[i].len ? bad[i].len : strlen(bad[i].hdr);
        unsigned char buf[512];
        for (int k = 0; k < 8; k++) buf[k] = (unsigned char)((uint64_t)hl >> (8 * k));
        memcpy(buf + 8, bad[i].hdr, hl);
        memcpy(buf + 8 + hl, d8, 8);
        write_bytes(p, buf, 8 + hl + 8);
        expect_fail(p, KILN_ERR_FORMAT, "bad JSON header at header byte");
        expect_fail(p, KILN_ERR_FORMAT, bad[i].what);
    }

    /* semantic errors name the tensor */
    expect_hdr_fail("dtype.safetensors", "{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", d8, 8,
                    "tensor 'a': unknown dtype \"Q7\"");
    expect_hdr_fail("range.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", d8, 4,
                    "tensor 'w': data_offsets [0, 8] out of range");
    expect_hdr_fail("range2.safetensors",
                    "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[18446744073709551615,18446744073709551623]}}",
                    d8, 8, "too large");
    expect_hdr_fail("backwards.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,0]}}", d8, 8,
                    "end before they begin");
    expect_hdr_fail("size.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", d8, 8,
                    "tensor 'w': size mismatch");
    snprintf(h, sizeof h, "{\"a\":{%s},\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", ok1);
    expect_hdr_fail("dupnames0.safetensors", h, d8, 8, "overlap");
    snprintf(h, sizeof h, "{\"a\":{%s},\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[8,9]},\"a\":{%s}}", ok1,
             "\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[9,9]");
    unsigned char d9[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    expect_hdr_fail("dupnames.safetensors", h, d9, 9, "duplicate tensor name 'a'");
    expect_hdr_fail("nokey.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", d8, 8,
                    "tensor 'a': missing \"data_offsets\"");
    snprintf(h, sizeof h, "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[6,8]}}");
    expect_hdr_fail("gap.safetensors", h, d8, 8, "tensor 'b': gap of 2 unused bytes");
    snprintf(h, sizeof h, "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[2,5]}}");
    expect_hdr_fail("overlap.safetensors", h, d8, 5, "tensor 'b': data_offsets [2, 5] overlap tensor 'a'");
    snprintf(h, sizeof h, "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}");
    expect_hdr_fail("trailing.safetensors", h, d8, 8, "4 unused bytes after the last tensor");
    snprintf(h, sizeof h, "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}");
    expect_hdr_fail("no_first.safetensors",
                    "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", d8, 8, "gap of 4 unused bytes");

    /* truncated data: a good file with its last bytes cut off */
    float x[6] = {1, 2, 3, 4, 5, 6};
    int64_t sh[2] = {2, 3};
    kiln_st_writer *w = kiln_st_writer_new();
    CHECK_OK(kiln_st_writer_add(w, "x", KILN_F32, 2, sh, x));
    tpath(p, sizeof p, "truncdata.safetensors");
    CHECK_OK(kiln_st_writer_save(w, p));
    kiln_st_writer_free(w);
    size_t n;
    unsigned char *raw = read_bytes(p, &n);
    write_bytes(p, raw, n - 5);
    free(raw);
    expect_fail(p, KILN_ERR_FORMAT, "tensor 'x': data_offsets [0, 24] out of range: the data section has 19 bytes (file truncated?)");
}

static void test_writer_args(void) {
    float x[2] = {1, 2};
    int64_t sh[1] = {2}, neg[1] = {-1};
    kiln_st_writer *w = kiln_st_writer_new();
    CHECK_OK(kiln_st_writer_add(w, "x", KILN_F32, 1, sh, x));
    CHECK(kiln_st_writer_add(w, "x", KILN_F32, 1, sh, x) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_last_error(), "duplicate tensor name 'x'") != NULL);
    CHECK(kiln_st_writer_add(w, "", KILN_F32, 1, sh, x) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_last_error(), "empty tensor name") != NULL);
    CHECK(kiln_st_writer_add(w, NULL, KILN_F32, 1, sh, x) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_st_writer_add(w, "__metadata__", KILN_F32, 1, sh, x) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_st_writer_add(w, "n", KILN_F32, 1, neg, x) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_st_writer_add(w, "n", KILN_F32, 7, sh, x) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_st_writer_add(w, "n", KILN_F32, 1, sh, NULL) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_st_writer_add(w, "n", (kiln_dtype)99, 1, sh, x) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_st_writer_add(w, "bad\xff", KILN_F32, 1, sh, x) == KILN_ERR_INVALID_ARG);
    CHECK(kiln_st_writer_meta(w, "k", "\xc3") == KILN_ERR_INVALID_ARG);
    /* many names: the duplicate check must keep working as the table grows */
    float one = 1;
    char name[32];
    for (int i = 0; i < 300; i++) {
        snprintf(name, sizeof name, "t%d", i);
        CHECK_OK(kiln_st_writer_add(w, name, KILN_F32, 0, NULL, &one));
    }
    for (int i = 0; i < 300; i += 37) {
        snprintf(name, sizeof name, "t%d", i);
        CHECK(kiln_st_writer_add(w, name, KILN_F32, 0, NULL, &one) == KILN_ERR_INVALID_ARG);
    }
    char p[512];
    tpath(p, sizeof p, "many.safetensors");
    CHECK_OK(kiln_st_writer_save(w, p));
    kiln_st_writer_free(w);
    kiln_st_file *f;
    CHECK_OK(kiln_st_open(p, &f));
    if (f) {
        CHECK(kiln_st_count(f) == 301);
        CHECK(strcmp(kiln_st_name(f, 300), "t299") == 0 && kiln_st_find(f, "t123") == kiln_st_at(f, 124));
        kiln_st_close(f);
    }
}

static kiln_st_writer *writer_with(const float *x, int64_t n) {
    kiln_st_writer *w = kiln_st_writer_new();
    CHECK_OK(kiln_st_writer_add(w, "x", KILN_F32, 1, &n, x));
    return w;
}

static void test_atomic(void) {
    char p[512], tmp[600];
    float a[4] = {1, 2, 3, 4}, b[3] = {9, 8, 7};
    tpath(p, sizeof p, "atomic.safetensors");
    kiln_st_writer *w = writer_with(a, 4);
    CHECK_OK(kiln_st_writer_save(w, p));
    kiln_st_writer_free(w);

    /* replacing: a stale temp of our own name does not get in the way */
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());
    write_bytes(tmp, "stale", 5);
    w = writer_with(b, 3);
    CHECK_OK(kiln_st_writer_save(w, p));
    kiln_st_writer_free(w);
    CHECK(count_temps() == 0);
    kiln_st_file *f;
    CHECK_OK(kiln_st_open(p, &f));
    if (f) {
        CHECK(kiln_st_at(f, 0)->shape[0] == 3 && memcmp(kiln_st_at(f, 0)->data, b, sizeof b) == 0);
        kiln_st_close(f);
    }
    size_t n0, n1;
    unsigned char *orig = read_bytes(p, &n0);

    /* the folder does not exist / the parent is a regular file */
    char q[600];
    snprintf(q, sizeof q, "%s/no/such/dir/x.safetensors", g_dir);
    w = writer_with(a, 4);
    CHECK(kiln_st_writer_save(w, q) == KILN_ERR_IO);
    CHECK(strstr(kiln_last_error(), q) && strstr(kiln_last_error(), "No such file or directory"));
    snprintf(q, sizeof q, "%s/x.safetensors", p);
    CHECK(kiln_st_writer_save(w, q) == KILN_ERR_IO);
    CHECK(strstr(kiln_last_error(), q) && strstr(kiln_last_error(), "Not a directory"));
    CHECK(count_temps() == 0);

    /* the rename fails: PATH is a non-empty folder */
    char dir[600], inside[700];
    snprintf(dir, sizeof dir, "%s/adir", g_dir);
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(inside, sizeof inside, "%s/keep", dir);
    write_bytes(inside, "k", 1);
    CHECK(kiln_st_writer_save(w, dir) == KILN_ERR_IO);
    CHECK(strstr(kiln_last_error(), dir) && strstr(kiln_last_error(), "rename"));
    CHECK(count_temps() == 0);
    unlink(inside);
    rmdir(dir);

    /* a write that fails half way (file size limit: works as root too) leaves
     * PATH byte-identical and no temp file */
    float big[4096];
    tu_fill(big, 4096, -1, 1);
    kiln_st_writer *wb = writer_with(big, 4096);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    void (*oldsig)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 4096;
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    kiln_status s = kiln_st_writer_save(wb, p);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, oldsig);
    CHECK(s == KILN_ERR_IO);
    CHECK_MSG(strstr(kiln_last_error(), p) && strstr(kiln_last_error(), "File too large"), "%s", kiln_last_error());
    CHECK(count_temps() == 0);
    unsigned char *now = read_bytes(p, &n1);
    CHECK(now && n1 == n0 && memcmp(now, orig, n0) == 0);
    free(now);

    /* an unwritable folder (only meaningful when not root) */
    if (geteuid() != 0) {
        char ro[600], rp[700];
        snprintf(ro, sizeof ro, "%s/ro", g_dir);
        CHECK(mkdir(ro, 0755) == 0);
        snprintf(rp, sizeof rp, "%s/ro/x.safetensors", g_dir);
        CHECK_OK(kiln_st_writer_save(w, rp));
        unsigned char *before = read_bytes(rp, &n0);
        CHECK(chmod(ro, 0555) == 0);
        CHECK(kiln_st_writer_save(wb, rp) == KILN_ERR_IO);
        CHECK(strstr(kiln_last_error(), rp) && strstr(kiln_last_error(), "Permission denied"));
        chmod(ro, 0755);
        now = read_bytes(rp, &n1);
        CHECK(now && n1 == n0 && memcmp(now, before, n0) == 0);
        free(now);
        free(before);
        unlink(rp);
        rmdir(ro);
    }
    kiln_st_writer_free(wb);
    kiln_st_writer_free(w);
    free(orig);
}

static void cleanup(void) {
    DIR *d = opendir(g_dir);
    if (!d) return;
    struct dirent *e;
    char p[800];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(g_dir);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/kiln_st_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_metadata();
    test_python_layout();
    test_errors();
    test_writer_args();
    test_atomic();
    cleanup();
    kiln_alloc_release_cached();
    return tu_finish("test_safetensors");
}
