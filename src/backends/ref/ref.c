/* The reference backend: f32 values held as f64 in host memory (parameters
 * are the f64 kiln_params of a reference run), so float inputs are staged by
 * converting them; integer inputs are read in place. No passes, no state. */
#include "backends/ref/internal/ref.h"

static int ref_in_place(kiln_dtype dtype) { return dtype != KILN_F32; }

static kiln_status ref_stage(void *dst, const void *host, int64_t n, kiln_dtype dtype) {
    if (dtype != KILN_F32) return kiln_fail(KILN_ERR_INVALID_ARG, "ref: cannot stage a %s input", kiln_dtype_name(dtype));
    const float *s = host;
    double *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = s[i];
    return KILN_OK;
}

const kiln_backend kiln_backend_ref = {
    .name = "ref",
    .float_dtype = KILN_F64,
    .host_memory = 1,
    .kernels = kiln_ref_kernels,
    .alloc = kiln_host_alloc,
    .free = kiln_host_free,
    .copy = kiln_host_copy,
    .memory_available = kiln_host_memory,
    .input_in_place = ref_in_place,
    .stage_input = ref_stage,
    .now = kiln_host_now,
    .run_reduced = kiln_ref_run_reduced,
};
