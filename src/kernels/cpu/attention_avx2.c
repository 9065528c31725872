/* AVX2 tiles of causal attention (the driver is attention.c; the contracts
 * are cpu_internal.h's, as for attention_avx512.c, which this follows at half
 * the width) for CPUs with AVX2 and FMA but not AVX-512 (AMD Zen 1-3, Intel
 * client cores). With 16 vector registers the products are blocked 4 rows x
 * 16 columns (8 accumulators: 2 loads and 4 broadcasts feed 8 FMAs). The
 * portable loops GCC builds for AVX2 left the packing, the stores and the row
 * dots scalar and the masked exp per element: about half of the kernel's time
 * on a Zen 3. exp is vec_math.h's polynomial (Cephes' expf), 8 lanes; 2^n by
 * the exponent bits. Only the tail of a row (d % 8 columns) goes through
 * masked loads and stores, which never touch memory past the row: on AMD's
 * Zen vmaskmovps is microcoded (a masked store of every vector made the
 * stores 10x slower than plain ones). */
#include <immintrin.h>
#include <math.h>
#include "kernels/cpu/cpu_internal.h"

#define BLK KILN_ATTN_BLK

static inline __m256 exp256(__m256 x) {
    __m256 c = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(c, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), c);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    p = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_blendv_ps(p, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)); /* NaN stays NaN, as in kiln_vexpf */
}

/* lanes [0, left) set (all when left >= 8, none when left <= 0), as maskload and maskstore take them */
static inline __m256i lanes(int64_t left) {
    int32_t l = left > 8 ? 8 : left < 0 ? 0 : (int32_t)left;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(l), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* 8 floats at p, or the first `left` of them (the rest 0) */
static inline __m256 load_part(const float *p, int64_t left) {
    return left >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes(left));
}

static inline void store_part(float *p, int64_t left, __m256 v) {
    if (left >= 8) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, lanes(left), v);
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

static inline float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

/* The 4 x 16 block's 8 accumulators are named, not an array: GCC kept an array of them on the stack (a store and a
 * load around every FMA, 3x slower). FMA8 adds the broadcast of 4 row values times the 2 vectors b0, b1. */
#define FMA8(v0, v1, v2, v3)                                                                                           \
    do {                                                                                                               \
        __m256 t_ = _mm256_broadcast_ss(v0);                                                                           \
        c00 = _mm256_fmadd_ps(t_, b0, c00), c01 = _mm256_fmadd_ps(t_, b1, c01);                                        \
        t_ = _mm256_broadcast_ss(v1);                                                                                  \
        c10 = _mm256_fmadd_ps(t_, b0, c10), c11 = _mm256_fmadd_ps(t_, b1, c11);                                        \
        t_ = _mm256_broadcast_ss(v2);                                                                                  \
        c20 = _mm256_fmadd_ps(t_, b0, c20), c21 = _mm256_fmadd_ps(t_, b1, c21);                                        \
        t_ = _mm256_broadcast_ss(v3);                                                                                  \
        c30 = _mm256_fmadd_ps(t_, b0, c30), c31 = _mm256_fmadd_ps(t_, b1, c31);                                        \
    } while (0)

/* stores the 4 x 16 block at c (rows ldc apart) */
#define STORE8(c, ldc)                                                                                                 \
    do {                                                                                                               \
        _mm256_storeu_ps((c), c00), _mm256_storeu_ps((c) + 8, c01);                                                    \
        _mm256_storeu_ps((c) + (ldc), c10), _mm256_storeu_ps((c) + (ldc) + 8, c11);                                    \
        _mm256_storeu_ps((c) + 2 * (ldc), c20), _mm256_storeu_ps((c) + 2 * (ldc) + 8, c21);                            \
        _mm256_storeu_ps((c) + 3 * (ldc), c30), _mm256_storeu_ps((c) + 3 * (ldc) + 8, c31);                            \
    } while (0)

void kiln_cpu_attn_scores_avx2(const float *a, int64_t lda, const float *bt, int64_t ldb, int64_t d, float *s) {
    for (int r0 = 0; r0 < BLK; r0 += 4)
        for (int c0 = 0; c0 < BLK; c0 += 16) {
            __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
            const float *a0 = a + r0 * lda, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda, *b = bt + c0;
            for (int64_t x = 0; x < d; x++, b += ldb) {
                __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
                FMA8(a0 + x, a1 + x, a2 + x, a3 + x);
            }
            STORE8(s + r0 * BLK + c0, BLK);
        }
}

void kiln_cpu_attn_accumulate_avx2(float *c, int64_t ldc, const float *cscale, const float *p, int64_t prs, int64_t pxs,
                                   const float *b, int64_t ldb, int64_t cols) {
    for (int r0 = 0; r0 < BLK; r0 += 4) {
        const float *p0 = p + r0 * prs, *p1 = p0 + prs, *p2 = p1 + prs, *p3 = p2 + prs;
        __m256 s0 = _mm256_set1_ps(cscale ? cscale[r0] : 1.0f), s1 = _mm256_set1_ps(cscale ? cscale[r0 + 1] : 1.0f),
               s2 = _mm256_set1_ps(cscale ? cscale[r0 + 2] : 1.0f), s3 = _mm256_set1_ps(cscale ? cscale[r0 + 3] : 1.0f);
        for (int64_t j = 0; j < cols; j += 16) {
            float *cr = c + r0 * ldc + j;
            __m256 c00 = _mm256_mul_ps(s0, _mm256_loadu_ps(cr)), c01 = _mm256_mul_ps(s0, _mm256_loadu_ps(cr + 8));
            __m256 c10 = _mm256_mul_ps(s1, _mm256_loadu_ps(cr + ldc)), c11 = _mm256_mul_ps(s1, _mm256_loadu_ps(cr + ldc + 8));
            __m256 c20 = _mm256_mul_ps(s2, _mm256_loadu_ps(cr + 2 * ldc)), c21 = _mm256_mul_ps(s2, _mm256_loadu_ps(cr + 2 * ldc + 8));
            __m256 c30 = _mm256_mul_ps(s3, _mm256_loadu_ps(cr + 3 * ldc)), c31 = _mm256_mul_ps(s3, _mm256_loadu_ps(cr + 3 * ldc + 8));
            const float *bx = b + j;
            for (int64_t x = 0; x < BLK; x++, bx += ldb) {
                __m256 b0 = _mm256_loadu_ps(bx), b1 = _mm256_loadu_ps(bx + 8);
                FMA8(p0 + x * pxs, p1 + x * pxs, p2 + x * pxs, p3 + x * pxs);
            }
            STORE8(cr, ldc);
        }
    }
}

/* lanes of columns [8h, 8h + 8) that are among row r's first n keys */
static inline __m256 key_mask(int64_t n, int h) { return _mm256_castsi256_ps(lanes(n - 8 * h)); }

/* row r's keys in the tile: the first n columns */
static inline int64_t keys(int64_t di, int r) { return di + r + 1 < BLK ? di + r + 1 : BLK; }

void kiln_cpu_attn_softmax_avx2(float *s, int64_t di, float *m, float *l, float *alpha) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    for (int r = 0; r < BLK; r++) {
        float *sr = s + r * BLK;
        int64_t n = keys(di, r);
        __m256 v[4], mx = ninf;
        for (int h = 0; h < 4; h++) {
            v[h] = _mm256_loadu_ps(sr + 8 * h);
            mx = _mm256_max_ps(mx, _mm256_blendv_ps(ninf, v[h], key_mask(n, h)));
        }
        float mt = hmax(mx), mnew = m[r] > mt ? m[r] : mt;
        /* the first tile's m is -inf: its factor is 0 (exp's clamp would give e^-87, which scales zeros too) */
        float a = m[r] == -INFINITY ? 0.0f : _mm256_cvtss_f32(exp256(_mm256_set1_ps(m[r] - mnew)));
        __m256 mv = _mm256_set1_ps(mnew), sum = _mm256_setzero_ps();
        for (int h = 0; h < 4; h++) {
            __m256 e = _mm256_and_ps(exp256(_mm256_sub_ps(v[h], mv)), key_mask(n, h));
            _mm256_storeu_ps(sr + 8 * h, e);
            sum = _mm256_add_ps(sum, e);
        }
        l[r] = l[r] * a + hsum(sum);
        m[r] = mnew;
        alpha[r] = a;
    }
}

void kiln_cpu_attn_bwd_tile_avx2(float *s, float *dp, const float *lse, const float *dvec, int64_t di, int64_t rows) {
    for (int r = 0; r < BLK; r++) {
        int64_t n = r < rows ? keys(di, r) : 0;
        __m256 lv = _mm256_set1_ps(r < rows ? lse[r] : 0.0f), dv = _mm256_set1_ps(r < rows ? dvec[r] : 0.0f);
        for (int h = 0; h < 4; h++) {
            float *sp = s + r * BLK + 8 * h, *dpp = dp + r * BLK + 8 * h;
            __m256 p = _mm256_and_ps(exp256(_mm256_sub_ps(_mm256_loadu_ps(sp), lv)), key_mask(n, h));
            _mm256_storeu_ps(sp, p);
            _mm256_storeu_ps(dpp, _mm256_mul_ps(p, _mm256_sub_ps(_mm256_loadu_ps(dpp), dv)));
        }
    }
}

void kiln_cpu_attn_pack_rows_avx2(const float *src, int64_t rs, int64_t n, int64_t rows, int64_t d, int64_t dp, float scale,
                                  float *dst) {
    const __m256 sc = _mm256_set1_ps(scale);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t x = 0; x < dp; x += 8) {
            __m256 v = i < n && x < d ? load_part(src + i * rs + x, d - x) : _mm256_setzero_ps();
            _mm256_storeu_ps(dst + i * dp + x, _mm256_mul_ps(sc, v));
        }
}

/* r[i] becomes column i of the 8 x 8 block whose rows r holds */
static inline void transpose8(__m256 *r) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* 8 x 8 blocks through registers */
void kiln_cpu_attn_pack_t_avx2(const float *src, int64_t rs, int64_t t, int64_t tp, int64_t d, float *dst) {
    for (int64_t i0 = 0; i0 < tp; i0 += 8)
        for (int64_t x0 = 0; x0 < d; x0 += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++) r[i] = i0 + i < t ? load_part(src + (i0 + i) * rs + x0, d - x0) : _mm256_setzero_ps();
            transpose8(r);
            for (int64_t x = 0; x < 8 && x0 + x < d; x++) _mm256_storeu_ps(dst + (x0 + x) * tp + i0, r[x]);
        }
}

void kiln_cpu_attn_store_rows_avx2(const float *src, int64_t dp, int64_t n, int64_t d, float *out, int64_t ldo,
                                   const float *scale, int per_row, int acc) {
    for (int64_t i = 0; i < n; i++) {
        __m256 sc = _mm256_set1_ps(scale[per_row ? i : 0]);
        for (int64_t x = 0; x < d; x += 8) {
            __m256 v = _mm256_mul_ps(sc, _mm256_loadu_ps(src + i * dp + x));
            if (acc) v = _mm256_add_ps(load_part(out + i * ldo + x, d - x), v);
            store_part(out + i * ldo + x, d - x, v);
        }
    }
}

void kiln_cpu_attn_rowdot_avx2(const float *a, const float *b, int64_t ld, int64_t n, int64_t d, float *out) {
    for (int64_t i = 0; i < n; i++) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t x = 0; x < d; x += 8) acc = _mm256_fmadd_ps(load_part(a + i * ld + x, d - x), load_part(b + i * ld + x, d - x), acc);
        out[i] = hsum(acc);
    }
}
