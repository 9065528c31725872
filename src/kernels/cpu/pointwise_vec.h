/* Vector passes: the cpu backend's fused kernel (src/backends/cpu/fused.c)
 * runs a fused program as a few passes over a tile instead of one per member.
 * A pass is one member op (its core) whose sources may first go through an
 * affine (x * s + b: a scale or add_scalar member folded in), and whose result
 * may then go through up to KILN_VPASS_MAX_EPI more members (affine, or add /
 * mul with another register, itself optionally affine) before one store: the
 * values stay in vector registers, a block of 128 floats at a time, between
 * the members a pass holds. Each step rounds as the member's own kernel does
 * (an affine is one fused multiply-add, as kiln_cpu_affine), so the bits are
 * those of the members run one by one. AVX-512 (pointwise_vec_avx512.c, blocks of 128
 * floats) and AVX2 (pointwise_vec_avx2.c, 64); the caller picks by
 * kiln_cpu_has_avx512() and kiln_cpu_has_avx2(). */
#ifndef KILN_KERNELS_CPU_POINTWISE_VEC_H
#define KILN_KERNELS_CPU_POINTWISE_VEC_H

#include <stdint.h>
#include "ops/internal/ops.h"

#define KILN_VPASS_MAX_EPI 4
/* how a member folds into a neighbouring pass (kiln_vform.fold); the last
 * member folded into a pass may add into its destination (backward's acc) */
enum { KILN_VFOLD_NONE, KILN_VFOLD_AFFINE, KILN_VFOLD_ADD, KILN_VFOLD_MUL, KILN_VFOLD_SCALE, KILN_VFOLD_COPY };

typedef struct {
    uint8_t kind;  /* AFFINE: y = y * s + b; SCALE: y = y * s; ADD / MUL: y = y op operand (COPY: no step) */
    uint8_t pre;   /* ADD / MUL: the operand is read as operand * s + b */
    float s, b;
} kiln_vepi;

typedef struct kiln_vpass {
    const kiln_pw_instr *I; /* the core member: its attributes */
    uint8_t acc;            /* add into dst after the epilogue (the core's or the last folded member's acc) */
    uint8_t pre[2];         /* core source k is read as x * pre_s[k] + pre_b[k] */
    float pre_s[2], pre_b[2];
    uint8_t nepi;
    kiln_vepi epi[KILN_VPASS_MAX_EPI];
} kiln_vpass;

/* n elements: ptr[0], ptr[1] the core's sources, ptr[2 + e] epilogue step e's operand */
typedef void (*kiln_vpass_fn)(const kiln_vpass *V, int64_t n, float *dst, const float *const *ptr);

/* the ops with a vector form: name, sources, how it folds into a neighbouring pass */
#define KILN_VFORMS(X)                                                                                               \
    X(relu, 1, KILN_VFOLD_NONE) X(add, 2, KILN_VFOLD_ADD) X(mul, 2, KILN_VFOLD_MUL)                                 \
    X(affine, 1, KILN_VFOLD_AFFINE) X(erf, 1, KILN_VFOLD_NONE) X(tanh, 1, KILN_VFOLD_NONE)                           \
    X(relu_bwd, 2, KILN_VFOLD_NONE) X(mul_bwd, 2, KILN_VFOLD_MUL) X(copy, 1, KILN_VFOLD_COPY)                        \
    X(affine_bwd, 1, KILN_VFOLD_SCALE) X(erf_bwd, 2, KILN_VFOLD_NONE) X(tanh_bwd, 2, KILN_VFOLD_NONE)

/* an op's vector form, named by its cpu kernel-table entry (kiln_kernel.vec) */
typedef struct kiln_vform {
    kiln_vpass_fn fn, fn_avx2; /* the AVX-512 pass, the AVX2 one */
    uint8_t nsrc;              /* 1 or 2 */
    uint8_t fold;              /* KILN_VFOLD_*: may become a step of the pass that wrote its source */
} kiln_vform;

#define KILN_VFORM_DECL(nm, nsrc, fold)                                                                      \
    extern const kiln_vform kiln_cpu_vform_##nm;                                                            \
    void kiln_cpu_vpass_##nm##_avx512(const kiln_vpass *V, int64_t n, float *dst, const float *const *ptr); \
    void kiln_cpu_vpass_##nm##_avx2(const kiln_vpass *V, int64_t n, float *dst, const float *const *ptr);
KILN_VFORMS(KILN_VFORM_DECL)

#endif
