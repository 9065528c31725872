/* Tiny test harness: CHECK macros that name file and line, random inputs, and
 * tolerant comparisons. Each test program prints "N passed, N failed" and
 * exits non-zero on any failure. */
#ifndef KILN_TESTUTIL_H
#define KILN_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kiln/status.h"

static int tu_passed, tu_failed;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (cond) tu_passed++;                                                        \
        else {                                                                        \
            tu_failed++;                                                              \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
        }                                                                             \
    } while (0)

#define CHECK_MSG(cond, ...)                                                          \
    do {                                                                              \
        if (cond) tu_passed++;                                                        \
        else {                                                                        \
            tu_failed++;                                                              \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
        }                                                                             \
    } while (0)

/* a library call that must succeed */
#define CHECK_OK(call)                                                                \
    do {                                                                              \
        kiln_status s_ = (call);                                                      \
        if (s_ == KILN_OK) tu_passed++;                                               \
        else {                                                                        \
            tu_failed++;                                                              \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,      \
                    kiln_last_error());                                               \
        }                                                                             \
    } while (0)

static inline int tu_finish(const char *name) {
    printf("%s: %d passed, %d failed\n", name, tu_passed, tu_failed);
    return tu_failed ? 1 : 0;
}

/* xorshift for test inputs: reproducible, never all zeros */
static uint64_t tu_state = 0x9E3779B97F4A7C15ull;
static inline void tu_seed(uint64_t s) { tu_state = s * 0x9E3779B97F4A7C15ull + 1; }
static inline uint64_t tu_u64(void) {
    tu_state ^= tu_state << 13;
    tu_state ^= tu_state >> 7;
    tu_state ^= tu_state << 17;
    return tu_state;
}
static inline double tu_uniform(double lo, double hi) { return lo + (hi - lo) * (double)(tu_u64() >> 11) / 9007199254740992.0; }
static inline int64_t tu_int(int64_t lo, int64_t hi) { return lo + (int64_t)(tu_u64() % (uint64_t)(hi - lo + 1)); }
static inline void tu_fill(float *x, int64_t n, double lo, double hi) { for (int64_t i = 0; i < n; i++) x[i] = (float)tu_uniform(lo, hi); }
static inline void tu_fill_d(double *x, int64_t n, double lo, double hi) { for (int64_t i = 0; i < n; i++) x[i] = tu_uniform(lo, hi); }

/* max over i of |a - b| / (atol + rtol * |b|); <= 1 means close */
static inline double tu_err(const float *a, const double *b, int64_t n, double atol, double rtol) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / (atol + rtol * fabs(b[i]));
        if (!(e <= worst)) worst = e; /* NaN propagates */
    }
    return worst;
}
/* max |a - b| over max |b| (that max at least `floor`): an error relative to the tensor's scale; NaN propagates */
static inline double tu_scaled_err(const float *a, const double *b, int64_t n, double floor) {
    double num = 0, den = floor;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= num)) num = e;
        den = fmax(den, fabs(b[i]));
    }
    return num / den;
}
static inline double tu_err_ff(const float *a, const float *b, int64_t n, double atol, double rtol) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]) / (atol + rtol * fabs((double)b[i]));
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

#endif
