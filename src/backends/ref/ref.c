/* The reference backend: f32 values held as f64 in host memory (parameters
 * are the f64 kiln_params of a reference run), so float inputs are staged by
 * converting them; integer inputs are read in place. No passes, no state. */
#include <omp.h>
#include <string.h>
#include <unistd.h>
#include "backends/ref/internal/ref.h"

static void *ref_alloc(size_t bytes) { return kiln_alloc(bytes); }
static void ref_free(void *p) { kiln_free(p); }

static kiln_status ref_copy(void *dst, const void *src, size_t bytes, int async) {
    (void)async;
    memcpy(dst, src, bytes);
    return KILN_OK;
}

static size_t ref_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

static int ref_in_place(kiln_dtype dtype) { return dtype != KILN_F32; }

static kiln_status ref_stage(void *dst, const void *host, int64_t n, kiln_dtype dtype) {
    if (dtype != KILN_F32) return kiln_fail(KILN_ERR_INVALID_ARG, "ref: cannot stage a %s input", kiln_dtype_name(dtype));
    const float *s = host;
    double *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = s[i];
    return KILN_OK;
}

static double ref_now(void) { return omp_get_wtime(); }

const kiln_backend kiln_backend_ref = {
    .name = "ref",
    .float_dtype = KILN_F64,
    .host_memory = 1,
    .kernels = kiln_ref_kernels,
    .alloc = ref_alloc,
    .free = ref_free,
    .copy = ref_copy,
    .memory_available = ref_memory,
    .input_in_place = ref_in_place,
    .stage_input = ref_stage,
    .now = ref_now,
};
