/* bf16 and fp16 bit patterns on the host, for simt's stand-ins of cuDNN and cuBLASLt and its cpu stand-ins:
 * what a GPU's 16-bit tensors hold, read and written as IEEE defines them (rounding to nearest even through the
 * reference's own rounding, src/backends/ref/reduced.c). */
#ifndef KILN_SIMT_HALF_BITS_H
#define KILN_SIMT_HALF_BITS_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "backends/ref/internal/ref.h"

/* the value of 16 bits: bf16 (the high half of a float) or fp16 (sign, 5 exponent bits, 10 fraction bits) */
static inline double simt_half_get(uint16_t h, int fp16) {
    if (!fp16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    int e = (h >> 10) & 31, f = h & 1023;
    double v = e == 31 ? (f ? NAN : INFINITY) : e ? ldexp(1024 + f, e - 25) : ldexp(f, -24);
    return h >> 15 ? -v : v;
}

/* v rounded to TF32 (10 fraction bits, nearest even), as tensor-op math reads an fp32 operand */
static inline double simt_round_tf32(double v) {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu; /* not inf or NaN */
    memcpy(&f, &u, 4);
    return f;
}

/* v rounded to nearest even into 16 bits */
static inline uint16_t simt_half_put(double v, int fp16) {
    if (!fp16) {
        float f = (float)kiln_ref_round_bf16(v);
        uint32_t u;
        memcpy(&u, &f, 4);
        return (uint16_t)(u >> 16);
    }
    double r = kiln_ref_round_fp16(v), a = fabs(r);
    uint16_t sign = signbit(r) ? 0x8000 : 0;
    if (isnan(r)) return 0x7e00;
    if (isinf(r)) return sign | 0x7c00;
    if (a < 0x1p-14) return sign | (uint16_t)(a * 0x1p24); /* subnormal: a multiple of 2^-24 */
    int e;
    double m = frexp(a, &e); /* a = m 2^e, m in [0.5, 1): exponent field e + 14, fraction (2m - 1) 2^10 */
    return sign | (uint16_t)((e + 14) << 10) | (uint16_t)((m * 2 - 1) * 1024);
}

#endif
