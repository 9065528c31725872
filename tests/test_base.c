/* Base layer: the caching allocator's alignment, reuse and statistics; the
 * counter-based RNG against Philox4x32-10's published answers; bf16/fp16
 * rounding; status messages and the logger. */
#include <stdint.h>
#include "base/internal/rng.h"
#include "kiln/tensor.h"
#include "testutil.h"

static void test_allocator(void) {
    kiln_alloc_stats s0, s1, s2;
    kiln_alloc_get_stats(&s0);
    void *p[8];
    size_t sizes[8] = {1, 63, 64, 65, 1000, 4096, 100000, 3 << 20};
    for (int i = 0; i < 8; i++) {
        p[i] = kiln_alloc(sizes[i]);
        CHECK(p[i] != NULL);
        CHECK_MSG(((uintptr_t)p[i] & 63) == 0, "block of %zu bytes not 64-byte aligned", sizes[i]);
        memset(p[i], 0xab, sizes[i]); /* the whole size is usable (ASan would object otherwise) */
    }
    kiln_alloc_get_stats(&s1);
    size_t want = 0;
    for (int i = 0; i < 8; i++) want += sizes[i];
    CHECK_MSG(s1.current - s0.current >= want && s1.current - s0.current <= want * 2 + 8 * 64,
              "current grew by %zu for %zu requested", s1.current - s0.current, want);
    CHECK(s1.peak >= s1.current && s1.reserved >= s1.current);
    for (int i = 0; i < 8; i++) kiln_free(p[i]);
    kiln_alloc_get_stats(&s2);
    CHECK(s2.current == s0.current);
    CHECK(s2.peak == s1.peak);
    CHECK(s2.reserved == s1.reserved); /* freed blocks stay cached */
    /* the same size again comes from the cache */
    void *q = kiln_alloc(100000);
    kiln_alloc_stats s3;
    kiln_alloc_get_stats(&s3);
    CHECK(s3.cache_hits == s2.cache_hits + 1);
    CHECK(s3.reserved == s2.reserved);
    kiln_free(q);
    kiln_alloc_release_cached();
    kiln_alloc_stats s4;
    kiln_alloc_get_stats(&s4);
    CHECK_MSG(s4.reserved == s4.current, "release_cached left %zu cached bytes", s4.reserved - s4.current);
    uint8_t *z = kiln_calloc(777);
    int zeros = 1;
    for (int i = 0; i < 777; i++) zeros &= z[i] == 0;
    CHECK(zeros);
    kiln_free(z);
    kiln_free(NULL);
}

static void test_philox(void) {
    /* Random123's known-answer vectors for philox4x32-10 */
    kiln_philox_out a = kiln_philox4x32(0, 0, 0);
    CHECK_MSG(a.v[0] == 0x6627e8d5u && a.v[1] == 0xe169c58du && a.v[2] == 0xbc57ac4cu && a.v[3] == 0x9b00dbd8u,
              "philox(0,0) = %08x %08x %08x %08x", a.v[0], a.v[1], a.v[2], a.v[3]);
    /* ctr = all ones, key = all ones */
    kiln_philox_out b = kiln_philox4x32(~0ull, ~0ull, ~0ull);
    CHECK_MSG(b.v[0] == 0x408f276du && b.v[1] == 0x41c83b0eu && b.v[2] == 0xa20bc7c6u && b.v[3] == 0x6d5451fdu,
              "philox(ones) = %08x %08x %08x %08x", b.v[0], b.v[1], b.v[2], b.v[3]);
    /* ctr = pi digits, key = more pi digits: (243f6a88 85a308d3 13198a2e 03707344), key (a4093822 299f31d0) */
    kiln_philox_out c = kiln_philox4x32(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull);
    CHECK_MSG(c.v[0] == 0xd16cfe09u && c.v[1] == 0x94fdccebu && c.v[2] == 0x5001e420u && c.v[3] == 0x24126ea1u,
              "philox(pi) = %08x %08x %08x %08x", c.v[0], c.v[1], c.v[2], c.v[3]);
    /* uniform draws: in range, mean near the middle, keys and streams differ */
    double sum = 0;
    int in = 1;
    for (int i = 0; i < 100000; i++) {
        float u = kiln_rng_uniform(kiln_rng_key(1, 2, 3), 0, (uint64_t)i, -1.0f, 1.0f);
        in &= u >= -1.0f && u < 1.0f;
        sum += u;
    }
    CHECK(in);
    CHECK_MSG(fabs(sum / 100000) < 0.01, "mean %g", sum / 100000);
    CHECK(kiln_rng_key(1, 2, 3) != kiln_rng_key(1, 2, 4) && kiln_rng_key(1, 2, 3) != kiln_rng_key(2, 2, 3));
    CHECK(kiln_dropout_threshold(0.0f) == 0 && kiln_dropout_threshold(0.5f) == 0x80000000u);
}

static void test_half(void) {
    /* bf16: round to nearest even on the dropped 16 bits */
    CHECK(kiln_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(kiln_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(kiln_f32_to_bf16(1.00390625f) == 0x3f80);  /* exactly halfway: to even */
    CHECK(kiln_f32_to_bf16(1.01171875f) == 0x3f82);  /* halfway above an odd: up */
    CHECK(isnan(kiln_bf16_to_f32(kiln_f32_to_bf16(NAN))));
    /* fp16: normals, subnormals, overflow */
    CHECK(kiln_f32_to_f16(1.0f) == 0x3c00 && kiln_f16_to_f32(0x3c00) == 1.0f);
    CHECK(kiln_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(kiln_f32_to_f16(1e6f) == 0x7c00);
    CHECK(kiln_f32_to_f16(-2.0f) == 0xc000);
    CHECK(kiln_f16_to_f32(0x0001) == 5.9604644775390625e-08f); /* smallest subnormal */
    CHECK(kiln_f32_to_f16(5.9604644775390625e-08f) == 0x0001);
    /* every half value survives a round trip through float */
    int ok = 1;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaN payloads */
        ok &= kiln_f32_to_f16(kiln_f16_to_f32((uint16_t)h)) == h;
    }
    CHECK(ok);
}

static int sink_calls;
static char sink_last[256];
static void sink(kiln_log_level level, const char *msg, void *user) {
    (void)level;
    (void)user;
    sink_calls++;
    snprintf(sink_last, sizeof sink_last, "%s", msg);
}

static void test_status_and_log(void) {
    CHECK(kiln_fail(KILN_ERR_IO, "%s: %d", "file.idx", 7) == KILN_ERR_IO);
    CHECK(strcmp(kiln_last_error(), "file.idx: 7") == 0);
    CHECK(kiln_fail_context(KILN_ERR_IO, "loading %s", "x") == KILN_ERR_IO);
    CHECK(strcmp(kiln_last_error(), "loading x: file.idx: 7") == 0);
    kiln_clear_error();
    CHECK(kiln_last_error()[0] == 0);
    CHECK(strcmp(kiln_status_name(KILN_ERR_SHAPE), "shape mismatch") == 0);
    kiln_log_set_sink(sink, NULL);
    kiln_log_set_level(KILN_LOG_WARN);
    kiln_log(KILN_LOG_INFO, "hidden");
    kiln_log(KILN_LOG_WARN, "shown %d", 3);
    CHECK(sink_calls == 1 && strcmp(sink_last, "shown 3") == 0);
    kiln_log_set_sink(NULL, NULL);
    kiln_log_set_level(KILN_LOG_INFO);
}

int main(void) {
    test_allocator();
    test_philox();
    test_half();
    test_status_and_log();
    return tu_finish("test_base");
}
