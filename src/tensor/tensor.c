#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kiln/tensor.h"

static const struct { const char *name, *st; size_t size; } dtypes[] = {
    [KILN_F32] = {"f32", "F32", 4}, [KILN_F64] = {"f64", "F64", 8}, [KILN_BF16] = {"bf16", "BF16", 2},
    [KILN_F16] = {"f16", "F16", 2}, [KILN_I32] = {"i32", "I32", 4}, [KILN_I64] = {"i64", "I64", 8},
    [KILN_U8] = {"u8", "U8", 1},
};
#define NDTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

size_t kiln_dtype_size(kiln_dtype t) { return (int)t >= 0 && (int)t < NDTYPES ? dtypes[t].size : 0; }
const char *kiln_dtype_name(kiln_dtype t) { return (int)t >= 0 && (int)t < NDTYPES ? dtypes[t].name : "?"; }
const char *kiln_dtype_safetensors(kiln_dtype t) { return (int)t >= 0 && (int)t < NDTYPES ? dtypes[t].st : "?"; }

int kiln_dtype_from_safetensors(const char *s, kiln_dtype *out) {
    for (int i = 0; i < NDTYPES; i++)
        if (strcmp(s, dtypes[i].st) == 0) {
            *out = (kiln_dtype)i;
            return 0;
        }
    return -1;
}

int64_t kiln_shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

char *kiln_shape_str(int ndim, const int64_t *shape, char *buf, size_t len) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (int i = 0; i < ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}

kiln_tensor *kiln_tensor_wrap(kiln_dtype dtype, int ndim, const int64_t *shape, void *data) {
    if (ndim < 0 || ndim > KILN_MAX_DIMS || kiln_dtype_size(dtype) == 0) return NULL;
    kiln_tensor *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->data = data;
    return t;
}

kiln_tensor *kiln_tensor_new(kiln_dtype dtype, int ndim, const int64_t *shape) {
    kiln_tensor *t = kiln_tensor_wrap(dtype, ndim, shape, NULL);
    if (!t) return NULL;
    size_t bytes = kiln_tensor_nbytes(t);
    t->data = kiln_alloc(bytes ? bytes : 1);
    if (!t->data) {
        free(t);
        return NULL;
    }
    t->owns_data = 1;
    return t;
}

void kiln_tensor_free(kiln_tensor *t) {
    if (!t) return;
    if (t->owns_data) kiln_free(t->data);
    free(t);
}

int64_t kiln_tensor_numel(const kiln_tensor *t) { return kiln_shape_numel(t->ndim, t->shape); }
size_t kiln_tensor_nbytes(const kiln_tensor *t) { return (size_t)kiln_tensor_numel(t) * kiln_dtype_size(t->dtype); }

uint16_t kiln_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float kiln_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t kiln_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow to inf */
    if (a < 0x38800000u) {                                    /* subnormal or zero */
        if (a < 0x33000000u) return (uint16_t)sign;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23); /* value = m * 2^(e - 150) in units of 2^-24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((a - 0x38000000u) >> 13);
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

float kiln_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu, u;
    if (e == 0) {
        if (m == 0) u = sign;
        else { /* subnormal: normalise */
            e = 113;
            while (!(m & 0x400u)) { m <<= 1; e--; }
            u = sign | (e << 23) | ((m & 0x3ffu) << 13);
        }
    } else if (e == 31) u = sign | 0x7f800000u | (m << 13);
    else u = sign | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
