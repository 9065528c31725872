/* AVX-512 tiles of causal attention (the driver is attention.c). The two
 * products are register-blocked so each loaded vector feeds several FMAs:
 *   scores:     8 query rows x 32 keys (16 accumulators), one step per
 *               column x of the head: 2 loads of k^T's row x, 8 broadcasts;
 *   accumulate: 4 rows x 64 columns (16 accumulators), one step per key:
 *               4 loads of the key's row, 4 broadcasts of the weights.
 * exp is Cephes' expf polynomial (about 1 ulp) scaled by 2^n with vscalefps. */
#include <immintrin.h>
#include <math.h>
#include "kernels/cpu/cpu_internal.h"

#define BLK KILN_ATTN_BLK

static inline __m512 exp512(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.3762626647949f)), _mm512_set1_ps(-88.3762626647949f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* the first `left` lanes (all when left >= 16, none when left <= 0) */
static inline __mmask16 lanes(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
}

/* the keys of row r among columns [16h, 16h + 16) */
static inline __mmask16 key_mask(int64_t di, int64_t r, int h) {
    int64_t last = di + r - 16 * h; /* the last key's lane */
    return last >= 15 ? (__mmask16)0xFFFF : last < 0 ? (__mmask16)0 : (__mmask16)((1u << (last + 1)) - 1);
}

void kiln_cpu_attn_scores_avx512(const float *a, int64_t lda, const float *bt, int64_t ldb, int64_t d, float *s) {
    for (int r0 = 0; r0 < BLK; r0 += 8) {
        __m512 c[8][2];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) c[r][0] = c[r][1] = _mm512_setzero_ps();
        const float *ar = a + r0 * lda;
        for (int64_t x = 0; x < d; x++) {
            __m512 b0 = _mm512_loadu_ps(bt + x * ldb), b1 = _mm512_loadu_ps(bt + x * ldb + 16);
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                __m512 av = _mm512_set1_ps(ar[r * lda + x]);
                c[r][0] = _mm512_fmadd_ps(av, b0, c[r][0]);
                c[r][1] = _mm512_fmadd_ps(av, b1, c[r][1]);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            _mm512_storeu_ps(s + (r0 + r) * BLK, c[r][0]);
            _mm512_storeu_ps(s + (r0 + r) * BLK + 16, c[r][1]);
        }
    }
}

/* 4 rows x nv vectors of c; nv is a constant where it is inlined */
static inline __attribute__((always_inline)) void acc_block(int nv, float *c, int64_t ldc, const float *cscale,
                                                            const float *p, int64_t prs, int64_t pxs, const float *b,
                                                            int64_t ldb) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        __m512 sc = _mm512_set1_ps(cscale ? cscale[r] : 1.0f);
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) acc[r][v] = _mm512_mul_ps(sc, _mm512_loadu_ps(c + r * ldc + 16 * v));
    }
    for (int64_t x = 0; x < BLK; x++) {
        __m512 bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) bv[v] = _mm512_loadu_ps(b + x * ldb + 16 * v);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            __m512 pv = _mm512_set1_ps(p[r * prs + x * pxs]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) acc[r][v] = _mm512_fmadd_ps(pv, bv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
}

void kiln_cpu_attn_accumulate_avx512(float *c, int64_t ldc, const float *cscale, const float *p, int64_t prs,
                                     int64_t pxs, const float *b, int64_t ldb, int64_t cols) {
    for (int r0 = 0; r0 < BLK; r0 += 4) {
        float *cr = c + r0 * ldc;
        const float *pr = p + r0 * prs, *sr = cscale ? cscale + r0 : NULL;
        for (int64_t c0 = 0; c0 < cols; c0 += 64) {
            switch ((cols - c0) / 16) {
            case 1: acc_block(1, cr + c0, ldc, sr, pr, prs, pxs, b + c0, ldb); break;
            case 2: acc_block(2, cr + c0, ldc, sr, pr, prs, pxs, b + c0, ldb); break;
            case 3: acc_block(3, cr + c0, ldc, sr, pr, prs, pxs, b + c0, ldb); break;
            default: acc_block(4, cr + c0, ldc, sr, pr, prs, pxs, b + c0, ldb); break;
            }
        }
    }
}

/* the rescaling factors 16 rows at a time (vector exp), the row maxima and sums one row at a time */
void kiln_cpu_attn_softmax_avx512(float *s, int64_t di, float *m, float *l, float *alpha) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    float mt[BLK];
    for (int r = 0; r < BLK; r++) {
        __mmask16 k0 = key_mask(di, r, 0), k1 = key_mask(di, r, 1);
        __m512 s0 = _mm512_mask_mov_ps(ninf, k0, _mm512_loadu_ps(s + r * BLK));
        mt[r] = _mm512_reduce_max_ps(_mm512_max_ps(s0, _mm512_mask_mov_ps(ninf, k1, _mm512_loadu_ps(s + r * BLK + 16))));
    }
    for (int r = 0; r < BLK; r += 16) { /* m = -inf at first: alpha is then exp(-88), l and O are still 0 */
        __m512 mo = _mm512_loadu_ps(m + r), mn = _mm512_max_ps(mo, _mm512_loadu_ps(mt + r));
        _mm512_storeu_ps(alpha + r, exp512(_mm512_sub_ps(mo, mn)));
        _mm512_storeu_ps(m + r, mn);
    }
    for (int r = 0; r < BLK; r++) {
        __m512 mv = _mm512_set1_ps(m[r]);
        __m512 p0 = _mm512_maskz_mov_ps(key_mask(di, r, 0), exp512(_mm512_sub_ps(_mm512_loadu_ps(s + r * BLK), mv)));
        __m512 p1 = _mm512_maskz_mov_ps(key_mask(di, r, 1), exp512(_mm512_sub_ps(_mm512_loadu_ps(s + r * BLK + 16), mv)));
        l[r] = l[r] * alpha[r] + _mm512_reduce_add_ps(_mm512_add_ps(p0, p1));
        _mm512_storeu_ps(s + r * BLK, p0);
        _mm512_storeu_ps(s + r * BLK + 16, p1);
    }
}

void kiln_cpu_attn_bwd_tile_avx512(float *s, float *dp, const float *lse, const float *dvec, int64_t di, int64_t rows) {
    for (int r = 0; r < BLK; r++) {
        __m512 l = _mm512_set1_ps(r < rows ? lse[r] : 0.0f), dv = _mm512_set1_ps(r < rows ? dvec[r] : 0.0f);
        for (int h = 0; h < 2; h++) {
            __mmask16 k = r < rows ? key_mask(di, r, h) : 0;
            float *sp = s + r * BLK + 16 * h, *dpp = dp + r * BLK + 16 * h;
            __m512 p = _mm512_maskz_mov_ps(k, exp512(_mm512_sub_ps(_mm512_loadu_ps(sp), l)));
            _mm512_storeu_ps(sp, p);
            _mm512_storeu_ps(dpp, _mm512_mul_ps(p, _mm512_sub_ps(_mm512_loadu_ps(dpp), dv)));
        }
    }
}

/* ---- packing: masked loads never touch memory past a row (or past the last row) ---- */

void kiln_cpu_attn_pack_rows_avx512(const float *src, int64_t rs, int64_t n, int64_t rows, int64_t d, int64_t dp,
                                    float scale, float *dst) {
    const __m512 sc = _mm512_set1_ps(scale);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t x = 0; x < dp; x += 16) {
            __mmask16 k = i < n ? lanes(d - x) : 0;
            __m512 v = k ? _mm512_maskz_loadu_ps(k, src + i * rs + x) : _mm512_setzero_ps();
            _mm512_storeu_ps(dst + i * dp + x, _mm512_mul_ps(sc, v));
        }
}

/* r[i] becomes column i of the 16 x 16 block whose rows r holds */
static inline void transpose16(__m512 *r) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
}

/* 16 x 16 blocks through registers */
void kiln_cpu_attn_pack_t_avx512(const float *src, int64_t rs, int64_t t, int64_t tp, int64_t d, float *dst) {
    for (int64_t i0 = 0; i0 < tp; i0 += 16)
        for (int64_t x0 = 0; x0 < d; x0 += 16) {
            __m512 r[16];
            __mmask16 k = lanes(d - x0);
            for (int i = 0; i < 16; i++)
                r[i] = i0 + i < t ? _mm512_maskz_loadu_ps(k, src + (i0 + i) * rs + x0) : _mm512_setzero_ps();
            transpose16(r);
            for (int64_t x = 0; x < 16 && x0 + x < d; x++) _mm512_storeu_ps(dst + (x0 + x) * tp + i0, r[x]);
        }
}

void kiln_cpu_attn_store_rows_avx512(const float *src, int64_t dp, int64_t n, int64_t d, float *out, int64_t ldo,
                                     const float *scale, int per_row, int acc) {
    for (int64_t i = 0; i < n; i++) {
        __m512 sc = _mm512_set1_ps(scale[per_row ? i : 0]);
        for (int64_t x = 0; x < d; x += 16) {
            __mmask16 k = lanes(d - x);
            __m512 v = _mm512_mul_ps(sc, _mm512_loadu_ps(src + i * dp + x));
            if (acc) v = _mm512_add_ps(_mm512_maskz_loadu_ps(k, out + i * ldo + x), v);
            _mm512_mask_storeu_ps(out + i * ldo + x, k, v);
        }
    }
}

void kiln_cpu_attn_rowdot_avx512(const float *a, const float *b, int64_t ld, int64_t n, int64_t d, float *out) {
    for (int64_t i = 0; i < n; i++) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t x = 0; x < d; x += 16) {
            __mmask16 k = lanes(d - x);
            acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a + i * ld + x), _mm512_maskz_loadu_ps(k, b + i * ld + x), acc);
        }
        out[i] = _mm512_reduce_add_ps(acc);
    }
}
