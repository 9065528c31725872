#include "base/internal/rng.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

kiln_philox_out kiln_philox4x32(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo) {
    uint32_t c0 = (uint32_t)ctr_lo, c1 = (uint32_t)(ctr_lo >> 32);
    uint32_t c2 = (uint32_t)ctr_hi, c3 = (uint32_t)(ctr_hi >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    kiln_philox_out o = {{c0, c1, c2, c3}};
    return o;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t kiln_rng_key(uint64_t seed, uint64_t a, uint64_t b) {
    return splitmix64(splitmix64(splitmix64(seed) ^ a) ^ b);
}

float kiln_rng_uniform(uint64_t key, uint64_t stream, uint64_t i, float lo, float hi) {
    kiln_philox_out o = kiln_philox4x32(key, stream, i >> 2);
    return lo + (hi - lo) * kiln_u32_to_unit(o.v[i & 3]);
}

/* Uniform integer in [0, range) for draw `i` of stream `key`: Lemire's
 * multiply-shift on 64-bit words with rejection, so it is exactly unbiased; a
 * rejected word moves to the next word of the same counter, then to the next
 * counter (ctr_hi = attempt), all still a pure function of (key, i). */
uint64_t kiln_rng_bounded(uint64_t key, uint64_t i, uint64_t range) {
    uint64_t threshold = (0 - range) % range; /* 2^64 mod range */
    for (uint64_t attempt = 0;; attempt++) {
        kiln_philox_out o = kiln_philox4x32(key, attempt, i);
        for (int w = 0; w < 4; w += 2) {
            uint64_t r = (uint64_t)o.v[w] << 32 | o.v[w + 1];
            unsigned __int128 m = (unsigned __int128)r * range;
            if ((uint64_t)m >= threshold) return (uint64_t)(m >> 64);
        }
    }
}
