/* Shared plumbing for the oneDNN kernels: the engine, status checks that name
 * the call, and "arguments" that reorder between kiln's plain layouts (NCHW,
 * OIHW) and whatever layout a primitive asked for (format_any). */
#ifndef KILN_DNNL_UTIL_H
#define KILN_DNNL_UTIL_H

#include <oneapi/dnnl/dnnl.h>
#include "kiln/status.h"

extern dnnl_engine_t kiln_dnnl_engine;
extern dnnl_stream_t kiln_dnnl_stream;

kiln_status kiln_dnnl_check(dnnl_status_t s, const char *what);
#define DN_TRY(call)                                                       \
    do {                                                                   \
        kiln_status st_ = kiln_dnnl_check((call), #call);                  \
        if (st_ != KILN_OK) return st_;                                    \
    } while (0)

/* One tensor argument of a primitive. `user` wraps caller memory in kiln's
 * layout; `prim` is the layout the primitive wants. When they differ, data
 * goes through a reorder into a workspace slice at offset `ws_off`. */
typedef struct kiln_dn_arg {
    dnnl_memory_desc_t user_md, prim_md;
    dnnl_memory_t user, prim;
    dnnl_primitive_t reorder; /* NULL when the layouts are equal */
    dnnl_primitive_t pre;     /* KILN_DN_OUT_ACC with a reorder: the tensor's values into the primitive's layout first */
    size_t bytes;             /* size of the primitive-layout buffer */
    size_t ws_off;
    int round_bf16;           /* emulated bf16: the workspace copy holds the values rounded to bf16 */
} kiln_dn_arg;

/* is_input: 1 for src/weights (user -> prim), 0 for outputs (prim -> user), KILN_DN_OUT_ACC for an
 * output the primitive adds into (a sum post-op): both ways, the tensor's values reordered in first */
#define KILN_DN_OUT_ACC 2
kiln_status kiln_dn_arg_init(kiln_dn_arg *a, const dnnl_memory_desc_t *user_md, const dnnl_memory_desc_t *prim_md,
                             int is_input, size_t *ws_cursor);
/* emulated bf16 (KILN_DN_BF16_EMULATED): the input reaches the primitive through the workspace, rounded
 * to bf16 values in f32 (after its reorder, if it has one) */
kiln_status kiln_dn_arg_round_bf16(kiln_dn_arg *a, size_t *ws_cursor);
void kiln_dn_arg_free(kiln_dn_arg *a);
/* inputs: bind the caller's pointer, reorder if needed; returns the memory to execute with */
dnnl_memory_t kiln_dn_arg_in(kiln_dn_arg *a, const void *ptr, void *ws);
/* outputs: the memory to execute with (caller's when layouts match) */
dnnl_memory_t kiln_dn_arg_out(kiln_dn_arg *a, void *ptr, void *ws);
/* outputs: after execution, reorder back into the caller's layout */
void kiln_dn_arg_out_done(kiln_dn_arg *a);
kiln_status kiln_dn_execute(dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args, const char *what);
void kiln_dn_md_plain(dnnl_memory_desc_t *md, int ndims, const int64_t *dims);
/* a matmul operand's descriptor in a KILN_DN_* precision mode: as given in fp32; in bf16 its bf16 twin (the
 * same strides when the operand is dense, else dense row-major; a kiln_dn_arg from the f32 one converts
 * into it); emulated, the f32 twin of that (the arg rounds into it: kiln_dn_arg_round_bf16) */
void kiln_dn_md_operand(const dnnl_memory_desc_t *f32, int mode, dnnl_memory_desc_t *out);
const char *kiln_dn_impl_name(const_dnnl_primitive_desc_t pd);

#endif
