/* kiln/tensor.h — dtypes, tensors and the aligned caching allocator.
 *
 *     int64_t shape[2] = {64, 10};
 *     kiln_tensor *t = kiln_tensor_new(KILN_F32, 2, shape);   // 64-byte aligned, from the cache
 *     float *p = t->data; ...
 *     kiln_tensor_free(t);                                     // back to the cache
 *
 * kiln_alloc_stats reports what the allocator holds: `current` bytes handed
 * out, their `peak`, and `reserved` bytes obtained from the OS (current plus
 * cached free blocks).
 */
#ifndef KILN_TENSOR_H
#define KILN_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/alloc.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_MAX_DIMS 6

typedef enum kiln_dtype { KILN_F32, KILN_F64, KILN_BF16, KILN_F16, KILN_I32, KILN_I64, KILN_U8 } kiln_dtype;

size_t kiln_dtype_size(kiln_dtype t);
const char *kiln_dtype_name(kiln_dtype t);           /* "f32", ... */
const char *kiln_dtype_safetensors(kiln_dtype t);    /* "F32", "BF16", ... */
int kiln_dtype_from_safetensors(const char *s, kiln_dtype *out); /* 0 on success */

typedef struct kiln_tensor {
    kiln_dtype dtype;
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    void *data;
    int owns_data; /* 1: kiln_tensor_free releases data */
} kiln_tensor;

kiln_tensor *kiln_tensor_new(kiln_dtype dtype, int ndim, const int64_t *shape);
kiln_tensor *kiln_tensor_wrap(kiln_dtype dtype, int ndim, const int64_t *shape, void *data);
void kiln_tensor_free(kiln_tensor *t);
int64_t kiln_tensor_numel(const kiln_tensor *t);
size_t kiln_tensor_nbytes(const kiln_tensor *t);
int64_t kiln_shape_numel(int ndim, const int64_t *shape);
/* "[64, 1, 28, 28]" into buf; returns buf */
char *kiln_shape_str(int ndim, const int64_t *shape, char *buf, size_t len);

/* bf16 / fp16 conversion (round to nearest even) */
uint16_t kiln_f32_to_bf16(float f);
float kiln_bf16_to_f32(uint16_t h);
uint16_t kiln_f32_to_f16(float f);
float kiln_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif
