/* The vector passes of pointwise_vec.h on AVX2 CPUs without AVX-512:
 * pointwise_vec_avx512.c's block loop on 8-float vectors (a block is VB
 * vectors, 64 floats), the tail one vector at a time through masked loads
 * and stores. Each core computes what the op's tile function computes on
 * such a CPU (pointwise_tile.c, pointwise_math.c, pointwise_math_avx2.c: a
 * fused multiply-add exactly where those have one), so the bits match. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/pointwise_math_avx2.h"
#include "kernels/cpu/pointwise_vec.h"

#define VB 8 /* vectors per block: independent chains hide erf's latencies; AVX2 has 16 registers */
#define ALWAYS static inline __attribute__((always_inline))

typedef __m256 (*core_fn)(const kiln_vpass *V, __m256 a, __m256 b);

/* the affine op's one rounding (kiln_cpu_affine's fmaf) */
ALWAYS __m256 affine8(__m256 x, float s, float b) { return _mm256_fmadd_ps(x, _mm256_set1_ps(s), _mm256_set1_ps(b)); }

ALWAYS void affine_block(int nv, float s, float b, __m256 *x) {
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) x[u] = affine8(x[u], s, b);
}

/* vector u of a block of nv from p + i (nv < VB: one vector, masked by m) */
ALWAYS __m256 load1(const float *p, int64_t i, int u, int nv, __m256i m) {
    return nv == VB ? _mm256_loadu_ps(p + i + 8 * u) : _mm256_maskload_ps(p + i, m);
}

ALWAYS void load_block(const float *p, int64_t i, int nv, __m256i m, int pre, float s, float b, __m256 *x) {
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) x[u] = load1(p, i, u, nv, m);
    if (pre) affine_block(nv, s, b, x);
}

ALWAYS void epilogue(const kiln_vpass *V, const float *const *ptr, int64_t i, int nv, __m256i m, __m256 *y) {
    for (int e = 0; e < V->nepi; e++) {
        const kiln_vepi *E = &V->epi[e];
        if (E->kind == KILN_VFOLD_AFFINE) {
            affine_block(nv, E->s, E->b, y);
            continue;
        }
        if (E->kind == KILN_VFOLD_SCALE) { /* affine_bwd's scale * dy */
#pragma GCC unroll 8
            for (int u = 0; u < nv; u++) y[u] = _mm256_mul_ps(y[u], _mm256_set1_ps(E->s));
            continue;
        }
        const float *p = ptr[2 + e];
        if (E->kind == KILN_VFOLD_ADD && E->pre)
#pragma GCC unroll 8
            for (int u = 0; u < nv; u++) y[u] = _mm256_add_ps(y[u], affine8(load1(p, i, u, nv, m), E->s, E->b));
        else if (E->kind == KILN_VFOLD_ADD)
#pragma GCC unroll 8
            for (int u = 0; u < nv; u++) y[u] = _mm256_add_ps(y[u], load1(p, i, u, nv, m));
        else if (E->pre)
#pragma GCC unroll 8
            for (int u = 0; u < nv; u++) y[u] = _mm256_mul_ps(y[u], affine8(load1(p, i, u, nv, m), E->s, E->b));
        else
#pragma GCC unroll 8
            for (int u = 0; u < nv; u++) y[u] = _mm256_mul_ps(y[u], load1(p, i, u, nv, m));
    }
}

ALWAYS void vblock(const kiln_vpass *V, int nsrc, core_fn core, float *dst, const float *const *ptr, int64_t i, int nv,
                   __m256i m) {
    __m256 a[VB], b[VB], y[VB];
    load_block(ptr[0], i, nv, m, V->pre[0], V->pre_s[0], V->pre_b[0], a);
    if (nsrc > 1) load_block(ptr[1], i, nv, m, V->pre[1], V->pre_s[1], V->pre_b[1], b);
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) y[u] = core(V, a[u], nsrc > 1 ? b[u] : a[u]);
    epilogue(V, ptr, i, nv, m, y);
    if (V->acc) {
        __m256 d[VB];
        load_block(dst, i, nv, m, 0, 0, 0, d);
#pragma GCC unroll 8
        for (int u = 0; u < nv; u++) y[u] = _mm256_add_ps(d[u], y[u]);
    }
#pragma GCC unroll 8
    for (int u = 0; u < nv; u++) {
        if (nv == VB) _mm256_storeu_ps(dst + i + 8 * u, y[u]);
        else _mm256_maskstore_ps(dst + i, m, y[u]);
    }
}

ALWAYS void vpass_loop(const kiln_vpass *V, int64_t n, float *dst, const float *const *ptr, int nsrc, core_fn core) {
    int64_t i = 0;
    for (; i + 8 * VB <= n; i += 8 * VB) vblock(V, nsrc, core, dst, ptr, i, VB, _mm256_setzero_si256());
    for (; i < n; i += 8) {
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - i >= 8 ? 8 : (int)(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        vblock(V, nsrc, core, dst, ptr, i, 1, m);
    }
}

#define VPASS(nm, NSRC, EXPR)                                                                              \
    ALWAYS __m256 core_##nm(const kiln_vpass *V, __m256 a, __m256 b) {                                    \
        (void)V, (void)a, (void)b;                                                                        \
        return EXPR;                                                                                      \
    }                                                                                                     \
    void kiln_cpu_vpass_##nm##_avx2(const kiln_vpass *V, int64_t n, float *dst, const float *const *ptr) { \
        vpass_loop(V, n, dst, ptr, NSRC, core_##nm);                                                      \
    }

#define ZERO _mm256_setzero_ps()
#define AFF V->I->attr.affine

VPASS(relu, 1, _mm256_max_ps(a, ZERO)) /* x > 0 ? x : +0, NaN to 0 as the C loop */
VPASS(add, 2, _mm256_add_ps(a, b))
VPASS(mul, 2, _mm256_mul_ps(a, b))
VPASS(affine, 1, affine8(a, AFF.scale, AFF.shift))
VPASS(erf, 1, erf8(a))
VPASS(tanh, 1, tanh8(a))
/* backward: (y or x, dy) as the tile functions take them; acc adds into dst */
VPASS(relu_bwd, 2, _mm256_and_ps(_mm256_cmp_ps(a, ZERO, _CMP_GT_OQ), b))
VPASS(mul_bwd, 2, _mm256_mul_ps(a, b))
VPASS(copy, 1, a)
VPASS(affine_bwd, 1, _mm256_mul_ps(_mm256_set1_ps(AFF.scale), a))
VPASS(erf_bwd, 2,
      _mm256_mul_ps(b, _mm256_mul_ps(_mm256_set1_ps(KILN_TWO_OVER_SQRTPI), exp8(_mm256_sub_ps(ZERO, _mm256_mul_ps(a, a))))))
VPASS(tanh_bwd, 2, _mm256_mul_ps(b, _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_mul_ps(a, a))))
