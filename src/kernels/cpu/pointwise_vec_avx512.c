/* The vector passes of pointwise_vec.h: one function per core op, each the
 * same block loop (vpass_loop) with the op's arithmetic inlined. A block is
 * VB vectors (128 floats): sources loaded (and their affine applied), the core
 * computed, then each epilogue step applied to the whole block while it is in
 * registers, one store. The steps' kinds are read once per block, not per
 * vector. Each core computes what the op's tile function computes
 * (pointwise_tile.c, pointwise_math.c, pointwise_math_avx512.c: a fused
 * multiply-add exactly where those have one), so the bits match. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/pointwise_math_avx512.h"
#include "kernels/cpu/pointwise_vec.h"

#define VB 8 /* vectors per block: 8 independent chains hide erf's latencies; 16 spills */
#define ALWAYS static inline __attribute__((always_inline))

typedef __m512 (*core_fn)(const kiln_vpass *V, __m512 a, __m512 b);

/* the affine op's one rounding (kiln_cpu_affine's fmaf) */
ALWAYS __m512 affine16(__m512 x, float s, float b) { return _mm512_fmadd_ps(x, _mm512_set1_ps(s), _mm512_set1_ps(b)); }

ALWAYS void affine_block(int nv, float s, float b, __m512 *x) {
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) x[u] = affine16(x[u], s, b);
}

/* vector u of a block of nv from p + i (nv < VB: one vector, masked by m) */
ALWAYS __m512 load1(const float *p, int64_t i, int u, int nv, __mmask16 m) {
    return nv == VB ? _mm512_loadu_ps(p + i + 16 * u) : _mm512_maskz_loadu_ps(m, p + i);
}

/* a block, each x * s + b when pre */
ALWAYS void load_block(const float *p, int64_t i, int nv, __mmask16 m, int pre, float s, float b, __m512 *x) {
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) x[u] = load1(p, i, u, nv, m);
    if (pre) affine_block(nv, s, b, x);
}

ALWAYS void epilogue(const kiln_vpass *V, const float *const *ptr, int64_t i, int nv, __mmask16 m, __m512 *y) {
    for (int e = 0; e < V->nepi; e++) {
        const kiln_vepi *E = &V->epi[e];
        if (E->kind == KILN_VFOLD_AFFINE) {
            affine_block(nv, E->s, E->b, y);
            continue;
        }
        if (E->kind == KILN_VFOLD_SCALE) { /* affine_bwd's scale * dy */
#pragma GCC unroll 8
            for (int u = 0; u < nv; u++) y[u] = _mm512_mul_ps(y[u], _mm512_set1_ps(E->s));
            continue;
        }
        /* operand by operand, not a block of them: a block's worth of registers would spill */
        const float *p = ptr[2 + e];
        if (E->kind == KILN_VFOLD_ADD && E->pre)
#pragma GCC unroll 8
            for (int u = 0; u < nv; u++) y[u] = _mm512_add_ps(y[u], affine16(load1(p, i, u, nv, m), E->s, E->b));
        else if (E->kind == KILN_VFOLD_ADD)
#pragma GCC unroll 8
            for (int u = 0; u < nv; u++) y[u] = _mm512_add_ps(y[u], load1(p, i, u, nv, m));
        else if (E->pre)
#pragma GCC unroll 8
            for (int u = 0; u < nv; u++) y[u] = _mm512_mul_ps(y[u], affine16(load1(p, i, u, nv, m), E->s, E->b));
        else
#pragma GCC unroll 8
            for (int u = 0; u < nv; u++) y[u] = _mm512_mul_ps(y[u], load1(p, i, u, nv, m));
    }
}

ALWAYS void vblock(const kiln_vpass *V, int nsrc, core_fn core, float *dst, const float *const *ptr, int64_t i, int nv,
                   __mmask16 m) {
    __m512 a[VB], b[VB], y[VB];
    load_block(ptr[0], i, nv, m, V->pre[0], V->pre_s[0], V->pre_b[0], a);
    if (nsrc > 1) load_block(ptr[1], i, nv, m, V->pre[1], V->pre_s[1], V->pre_b[1], b);
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) y[u] = core(V, a[u], nsrc > 1 ? b[u] : a[u]);
    epilogue(V, ptr, i, nv, m, y);
    if (V->acc) {
        __m512 d[VB];
        load_block(dst, i, nv, m, 0, 0, 0, d);
#pragma GCC unroll 8
        for (int u = 0; u < nv; u++) y[u] = _mm512_add_ps(d[u], y[u]);
    }
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) {
        if (nv == VB) _mm512_storeu_ps(dst + i + 16 * u, y[u]);
        else _mm512_mask_storeu_ps(dst + i, m, y[u]);
    }
}

ALWAYS void vpass_loop(const kiln_vpass *V, int64_t n, float *dst, const float *const *ptr, int nsrc, core_fn core) {
    int64_t i = 0;
    for (; i + 16 * VB <= n; i += 16 * VB) vblock(V, nsrc, core, dst, ptr, i, VB, 0);
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        vblock(V, nsrc, core, dst, ptr, i, 1, m);
    }
}

#define VPASS(nm, NSRC, FOLD, EXPR)                                                                          \
    ALWAYS __m512 core_##nm(const kiln_vpass *V, __m512 a, __m512 b) {                                      \
        (void)V, (void)a, (void)b;                                                                          \
        return EXPR;                                                                                        \
    }                                                                                                       \
    void kiln_cpu_vpass_##nm##_avx512(const kiln_vpass *V, int64_t n, float *dst, const float *const *ptr) { \
        vpass_loop(V, n, dst, ptr, NSRC, core_##nm);                                                        \
    }

#define ZERO _mm512_setzero_ps()
#define AFF V->I->attr.affine

VPASS(relu, 1, KILN_VFOLD_NONE, _mm512_max_ps(a, ZERO)) /* x > 0 ? x : +0, NaN to 0 as the C loop */
VPASS(add, 2, KILN_VFOLD_ADD, _mm512_add_ps(a, b))
VPASS(mul, 2, KILN_VFOLD_MUL, _mm512_mul_ps(a, b))
VPASS(affine, 1, KILN_VFOLD_AFFINE, affine16(a, AFF.scale, AFF.shift))
VPASS(erf, 1, KILN_VFOLD_NONE, erf16(a))
VPASS(tanh, 1, KILN_VFOLD_NONE, tanh16(a))
/* backward: (y or x, dy) as the tile functions take them; acc adds into dst */
VPASS(relu_bwd, 2, KILN_VFOLD_NONE, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, ZERO, _CMP_GT_OQ), b))
VPASS(mul_bwd, 2, KILN_VFOLD_MUL, _mm512_mul_ps(a, b))
VPASS(copy, 1, KILN_VFOLD_COPY, a)
VPASS(affine_bwd, 1, KILN_VFOLD_SCALE, _mm512_mul_ps(_mm512_set1_ps(AFF.scale), a))
VPASS(erf_bwd, 2, KILN_VFOLD_NONE,
      _mm512_mul_ps(b, _mm512_mul_ps(_mm512_set1_ps(KILN_TWO_OVER_SQRTPI), exp16(_mm512_sub_ps(ZERO, _mm512_mul_ps(a, a))))))
VPASS(tanh_bwd, 2, KILN_VFOLD_NONE, _mm512_mul_ps(b, _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_mul_ps(a, a))))
