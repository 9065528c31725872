/* What linear.c (the oneDNN matmul primitives of a linear or matmul layer)
 * and linear_tune.c (choosing backward-weights' form) share. */
#ifndef KILN_DNNL_LINEAR_H
#define KILN_DNNL_LINEAR_H

#include "kernels/dnnl/internal/dnnl_util.h"
#include "kernels/internal/dnnl_ops.h"

/* A direction's forms. Bit 0: its transposed operand (backward-weights' x^T or dy^T) is read from a dense copy (a
 * reorder into the workspace) instead of through strides; bit 1: its weights operand is read from a copy whose rows
 * are padded (oneDNN's AVX2 gemm runs 2-2.5x slower on a 64-byte aligned operand whose rows are a power of two of
 * floats apart, 1024 say: Zen 3). Forward and backward-data take forms 0 and 2, backward-weights all four. */
enum { L_DIR_FWD, L_DIR_BD, L_DIR_BW, L_NDIR };
#define KILN_LINEAR_FORMS 4
/* the primitive of a direction, form, and writing (acc 0) or adding (1); then backward-data in place by row blocks */
#define L_PRIM(dir, form, acc) (((dir) * KILN_LINEAR_FORMS + (form)) * 2 + (acc))
enum { L_BD_BLK = L_PRIM(L_NDIR, 0, 0), L_BD_TAIL, L_N };
/* kiln_dnnl_linear_new's autotune: 0 form 0 alone, untimed; 1 every form made, timed, the unchosen freed; this: every
 * form made and kept, none timed (tests run each) */
#define KILN_LINEAR_ALL_FORMS 2
/* the padding of that copy's rows, in floats */
#define KILN_LINEAR_PAD 32

struct kiln_dnnl_linear {
    int64_t n, in, out;
    int has_bias, w_kn, bf16;
    int form[L_NDIR]; /* each direction's form (bits as above) */
    dnnl_primitive_t p[L_N];
    kiln_dn_arg op[L_N][2];  /* src, weights per primitive (converted to bf16 when bf16) */
    dnnl_memory_t m[L_N][2]; /* bias, dst */
    size_t ws;
    size_t need[L_N]; /* each primitive's workspace: its operands' copies */
    int64_t blk;   /* in-place backward-data: rows per block (0: not made) */
    size_t blk_off; /* its block buffer in the workspace */
};

/* one call of a direction in a form (operands as kiln_dnnl_linear_fwd, _bwd_data and _bwd_weight take them:
 * a, b, bias or NULL, the output), writing or adding (acc) */
kiln_status kiln_dnnl_linear_call(kiln_dnnl_linear *l, int dir, int form, const float *a, const float *b,
                                  const float *bias, float *out, int acc, void *ws);
/* sets l->form: each direction's form remembered for this shape, or the fastest of those timed now; autotune 0:
 * form 0 everywhere (the operands as the plan holds them, oneDNN's own), nothing timed */
kiln_status kiln_dnnl_linear_choose(kiln_dnnl_linear *l, int autotune);

#endif
