#include <pthread.h>
#include <string.h>
#include "kernels/dnnl/internal/dnnl_util.h"
#include "kernels/internal/dnnl_ops.h"

dnnl_engine_t kiln_dnnl_engine;
dnnl_stream_t kiln_dnnl_stream;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static dnnl_status_t init_status = dnnl_success;

static void init_once(void) {
    init_status = dnnl_engine_create(&kiln_dnnl_engine, dnnl_cpu, 0);
    if (init_status == dnnl_success)
        init_status = dnnl_stream_create(&kiln_dnnl_stream, kiln_dnnl_engine, dnnl_stream_default_flags);
}

kiln_status kiln_dnnl_init(void) {
    pthread_once(&once, init_once);
    return kiln_dnnl_check(init_status, "oneDNN engine");
}

static const char *dn_status_str(dnnl_status_t s) {
    switch (s) {
    case dnnl_success: return "success";
    case dnnl_out_of_memory: return "out of memory";
    case dnnl_invalid_arguments: return "invalid arguments";
    case dnnl_unimplemented: return "unimplemented";
    case dnnl_iterator_ends: return "iterator ends";
    case dnnl_runtime_error: return "runtime error";
    case dnnl_not_required: return "not required";
    }
    return "unknown";
}

kiln_status kiln_dnnl_check(dnnl_status_t s, const char *what) {
    if (s == dnnl_success) return KILN_OK;
    return kiln_fail(s == dnnl_out_of_memory ? KILN_ERR_NOMEM : KILN_ERR_BACKEND, "oneDNN: %s: %s", what, dn_status_str(s));
}

void kiln_dn_md_operand(const dnnl_memory_desc_t *f32, int mode, dnnl_memory_desc_t *out) {
    int64_t numel = 1;
    for (int i = 0; i < f32->ndims; i++) numel *= f32->dims[i];
    dnnl_data_type_t dt = mode == KILN_DN_BF16 ? dnnl_bf16 : dnnl_f32;
    if (mode == KILN_DN_FP32 || dnnl_memory_desc_get_size(f32) == (size_t)numel * sizeof(float)) {
        *out = *f32; /* dense (perhaps a transposed view): the same strides, converted in place of a gather */
        out->data_type = dt;
        return;
    }
    /* a strided view with gaps (a slice of qkv): a dense row-major copy, not the whole span */
    dnnl_dims_t d, s;
    int64_t st = 1;
    for (int i = f32->ndims - 1; i >= 0; i--) {
        d[i] = f32->dims[i];
        s[i] = st;
        st *= d[i];
    }
    dnnl_memory_desc_init_by_strides(out, f32->ndims, d, dt, s);
}

void kiln_dn_md_plain(dnnl_memory_desc_t *md, int ndims, const int64_t *dims) {
    dnnl_dims_t d, strides;
    for (int i = 0; i < ndims; i++) d[i] = dims[i];
    int64_t s = 1;
    for (int i = ndims - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
    dnnl_memory_desc_init_by_strides(md, ndims, d, dnnl_f32, strides);
}

/* a 4-d activation of exactly C = 16 or 8 channels laid out [n][h][w][C]: nhwc, or
 * nChw16c / nChw8c with one block ([n][1][h][w][C], the same bytes) */
static int hw_block(const dnnl_memory_desc_t *m) {
    const dnnl_blocking_desc_t *b = &m->format_desc.blocking;
    int64_t C = m->dims[1];
    if (m->ndims != 4 || m->format_kind != dnnl_blocked || (C != 16 && C != 8) || m->offset0 != 0 || m->extra.flags) return 0;
    for (int d = 0; d < 4; d++)
        if (m->padded_dims[d] != m->dims[d] || m->padded_offsets[d]) return 0;
    int64_t h = m->dims[2], w = m->dims[3];
    if (b->strides[0] != h * w * C || b->strides[2] != w * C || b->strides[3] != C) return 0;
    if (b->inner_nblks == 0) return b->strides[1] == 1;
    return b->inner_nblks == 1 && b->inner_blks[0] == C && b->inner_idxs[0] == 1;
}

/* two descriptions of the same bytes that oneDNN calls different (nChw16c and nhwc
 * at 16 channels, nChw8c and nhwc at 8): a reorder between them would be a copy */
static int same_bytes(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b) {
    if (a->data_type != b->data_type || a->ndims != b->ndims) return 0;
    for (int d = 0; d < a->ndims; d++)
        if (a->dims[d] != b->dims[d]) return 0;
    return hw_block(a) && hw_block(b);
}

kiln_status kiln_dn_arg_init(kiln_dn_arg *a, const dnnl_memory_desc_t *user_md, const dnnl_memory_desc_t *prim_md,
                             int is_input, size_t *ws_cursor) {
    memset(a, 0, sizeof *a);
    int same = dnnl_memory_desc_equal(user_md, prim_md) || same_bytes(user_md, prim_md);
    a->user_md = same ? *prim_md : *user_md; /* the same bytes: the primitive reads the plan's tensor as it describes it */
    a->prim_md = *prim_md;
    DN_TRY(dnnl_memory_create(&a->user, &a->user_md, kiln_dnnl_engine, DNNL_MEMORY_NONE));
    if (same) return KILN_OK;
    a->bytes = dnnl_memory_desc_get_size(prim_md);
    a->ws_off = *ws_cursor;
    *ws_cursor += (a->bytes + 63) & ~(size_t)63;
    DN_TRY(dnnl_memory_create(&a->prim, &a->prim_md, kiln_dnnl_engine, DNNL_MEMORY_NONE));
    dnnl_primitive_desc_t rpd;
    if (is_input == 1)
        DN_TRY(dnnl_reorder_primitive_desc_create(&rpd, user_md, kiln_dnnl_engine, prim_md, kiln_dnnl_engine, NULL));
    else
        DN_TRY(dnnl_reorder_primitive_desc_create(&rpd, prim_md, kiln_dnnl_engine, user_md, kiln_dnnl_engine, NULL));
    dnnl_status_t s = dnnl_primitive_create(&a->reorder, rpd);
    dnnl_primitive_desc_destroy(rpd);
    if (s != dnnl_success || is_input != KILN_DN_OUT_ACC) return kiln_dnnl_check(s, "reorder");
    DN_TRY(dnnl_reorder_primitive_desc_create(&rpd, user_md, kiln_dnnl_engine, prim_md, kiln_dnnl_engine, NULL));
    s = dnnl_primitive_create(&a->pre, rpd);
    dnnl_primitive_desc_destroy(rpd);
    return kiln_dnnl_check(s, "reorder");
}

kiln_status kiln_dn_arg_round_bf16(kiln_dn_arg *a, size_t *ws_cursor) {
    a->round_bf16 = 1;
    if (a->reorder) return KILN_OK; /* rounded in place after its reorder */
    a->bytes = dnnl_memory_desc_get_size(&a->prim_md);
    a->ws_off = *ws_cursor;
    *ws_cursor += (a->bytes + 63) & ~(size_t)63;
    DN_TRY(dnnl_memory_create(&a->prim, &a->prim_md, kiln_dnnl_engine, DNNL_MEMORY_NONE));
    return KILN_OK;
}

/* to the nearest bf16, ties to even, as kiln_f32_to_bf16 and oneDNN's conversions; NaN stays NaN.
 * Branch-free with a signed compare (both sides below 2^31), so it vectorises, and split over
 * the team: it runs on every operand of every emulated-bf16 call. src may be dst. */
static void round_bf16(const float *src, float *dst, size_t n) {
    const uint32_t *s = (const uint32_t *)(const void *)src;
    uint32_t *d = (uint32_t *)(void *)dst;
    int64_t len = (int64_t)n;
#pragma omp parallel for simd schedule(static) if (len > (1 << 16))
    for (int64_t i = 0; i < len; i++) {
        uint32_t u = s[i];
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        uint32_t q = (u | 0x00400000u) & 0xffff0000u;
        d[i] = (int32_t)(u & 0x7fffffffu) > (int32_t)0x7f800000 ? q : r;
    }
}

void kiln_dn_arg_free(kiln_dn_arg *a) {
    if (a->user) dnnl_memory_destroy(a->user);
    if (a->prim) dnnl_memory_destroy(a->prim);
    if (a->reorder) dnnl_primitive_destroy(a->reorder);
    if (a->pre) dnnl_primitive_destroy(a->pre);
    memset(a, 0, sizeof *a);
}

dnnl_memory_t kiln_dn_arg_in(kiln_dn_arg *a, const void *ptr, void *ws) {
    dnnl_memory_set_data_handle(a->user, (void *)ptr);
    if (!a->reorder && !a->round_bf16) return a->user;
    float *copy = (float *)(void *)((char *)ws + a->ws_off);
    dnnl_memory_set_data_handle(a->prim, copy);
    if (a->reorder) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, a->user}, {DNNL_ARG_TO, a->prim}};
        dnnl_primitive_execute(a->reorder, kiln_dnnl_stream, 2, args);
    }
    if (a->round_bf16) round_bf16(a->reorder ? copy : ptr, copy, a->bytes / sizeof(float));
    return a->prim;
}

dnnl_memory_t kiln_dn_arg_out(kiln_dn_arg *a, void *ptr, void *ws) {
    dnnl_memory_set_data_handle(a->user, ptr);
    if (!a->reorder) return a->user;
    dnnl_memory_set_data_handle(a->prim, (char *)ws + a->ws_off);
    if (a->pre) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, a->user}, {DNNL_ARG_TO, a->prim}};
        dnnl_primitive_execute(a->pre, kiln_dnnl_stream, 2, args);
    }
    return a->prim;
}

void kiln_dn_arg_out_done(kiln_dn_arg *a) {
    if (!a->reorder) return;
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, a->prim}, {DNNL_ARG_TO, a->user}};
    dnnl_primitive_execute(a->reorder, kiln_dnnl_stream, 2, args);
}

kiln_status kiln_dn_execute(dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args, const char *what) {
    return kiln_dnnl_check(dnnl_primitive_execute(p, kiln_dnnl_stream, nargs, args), what);
}

const char *kiln_dn_impl_name(const_dnnl_primitive_desc_t pd) {
    const char *s = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success || !s) return "?";
    return s;
}

/* a 16 x 16 bf16 matmul either makes a primitive here or not: oneDNN 2.6 has bf16 kernels from AVX-512 on and
 * none (not even its reference ones) below; probed once (a race makes the same answer twice) */
int kiln_dnnl_has_bf16(void) {
    static int known = -1;
    if (known >= 0) return known;
    if (kiln_dnnl_init() != KILN_OK) return known = 0;
    dnnl_dims_t d = {16, 16};
    dnnl_memory_desc_t a, b, c;
    dnnl_memory_desc_init_by_tag(&a, 2, d, dnnl_bf16, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&b, 2, d, dnnl_bf16, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&c, 2, d, dnnl_f32, dnnl_ab);
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    int ok = dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c) == dnnl_success &&
             dnnl_primitive_desc_create(&pd, &desc, NULL, kiln_dnnl_engine, NULL) == dnnl_success;
    if (pd) dnnl_primitive_desc_destroy(pd);
    return known = ok;
}
