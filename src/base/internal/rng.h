/* Counter-based RNG (Philox4x32-10): every random number is a pure function of
 * (key, counter), so results do not depend on thread or worker count, and a run
 * resumes exactly from a saved counter. */
#ifndef KILN_BASE_RNG_H
#define KILN_BASE_RNG_H

#include <stdint.h>

typedef struct { uint32_t v[4]; } kiln_philox_out;

/* Four independent 32-bit words for (key, counter). */
kiln_philox_out kiln_philox4x32(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo);
/* 64-bit key from several parts (seed, stream ids) by a strong mix. */
uint64_t kiln_rng_key(uint64_t seed, uint64_t a, uint64_t b);
/* Uniform float in [0, 1) from a 32-bit word (24 bits of mantissa). */
static inline float kiln_u32_to_unit(uint32_t u) { return (float)(u >> 8) * (1.0f / 16777216.0f); }
/* Uniform integer in [0, range) for draw i of stream key, exactly unbiased (range >= 1). */
uint64_t kiln_rng_bounded(uint64_t key, uint64_t i, uint64_t range);
/* Uniform in [lo, hi) for element i of stream (key, stream). */
float kiln_rng_uniform(uint64_t key, uint64_t stream, uint64_t i, float lo, float hi);

/* Dropout: element i of the tensor in step `counter` is kept iff its word >= threshold,
 * where threshold = round(p * 2^32). Forward and backward recompute the same mask. */
static inline uint32_t kiln_dropout_threshold(float p) {
    double t = (double)p * 4294967296.0;
    return t >= 4294967295.0 ? 0xffffffffu : (uint32_t)t;
}

#endif
