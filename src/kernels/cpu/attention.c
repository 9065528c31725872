/* Causal multi-head self-attention, float, FlashAttention-2's algorithm on
 * the cpu. No T x T matrix is ever held: work goes tile by tile, 32 queries x
 * 32 keys, through buffers of one tile.
 *
 * Forward, per (batch, head) and block of 32 query rows: keep the row maxima
 * m, sums l and an output block O (32 x D); for each key block up to the
 * diagonal, S = (q / sqrt(D)) k^T for the tile, m_new = max(m, rowmax S),
 * P = exp(S - m_new) (causal mask on the diagonal tile), l = l e^(m - m_new)
 * + rowsum P, O = O e^(m - m_new) + P v. At the end y = O / l and the row's
 * logsumexp lse = m + log l is saved: [B, heads, T], all backward needs
 * besides q, k, v, y.
 *
 * Backward recomputes: first D_i = rowsum(dy_i * y_i) for the head's rows
 * (= sum_j P_ij dP_ij, since y_i = sum_j P_ij v_j); then for each key block j
 * and each query block i >= j, tile by tile,
 *     S = q k^T / sqrt(D)          (recomputed, as forward did)
 *     P = exp(S - lse_i)           (exact probabilities from the saved logsumexp)
 *     dP = dy v^T,  dS = P (dP - D_i)
 *     dv_j += P^T dy_i,  dk_j += dS^T q_i / sqrt(D),  dq_i += dS k_j / sqrt(D).
 *
 * Threads and determinism: a task is one (batch, head), run whole by one
 * thread. The thread owns that head's columns of y, dq, dk and dv, so every
 * key block's dk and dv (and every query block's dq) is summed by its one
 * owner in a fixed order: no atomics, no reduction across threads, the same
 * bits for any thread count. Each thread packs the head's operands into its
 * own scratch slot (k^T and v^T for the score products, zero-padded rows for
 * the weighted sums) and accumulates dq, dk, dv there, then writes them out
 * in the order dq, dk, dv, so a later one adds onto an earlier one when q, k
 * and v are one value. B x heads tasks keep the 2 or 16 threads of a cpu busy
 * at GPT sizes (B = 8, 4 heads: 32 tasks).
 *
 * The tiles' inner loops are attention_avx512.c's where the cpu has AVX-512,
 * attention_avx2.c's where it has AVX2 and FMA, else the portable loops below
 * (the same algorithm; not the same bits), with exp from vec_math.h so that
 * they vectorise (libm's expf is a call per element). */
#include <math.h>
#include <omp.h>
#include <string.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/internal/kernels.h"

#define BLK KILN_ATTN_BLK

/* ---- portable tiles (same contracts as the AVX-512 ones, cpu_internal.h) ---- */

/* 8 floats as GCC's generic vector: one AVX2 register in the x86-64-v3 clone, two SSE ones in the default
 * clone. The two products below keep their sums in such registers (8 accumulators, 2 rows at a time):
 * written as plain loops, GCC kept them in memory. aligned(4) and may_alias: loads and stores at any float,
 * as immintrin.h's __m256_u (macros, not functions: a vector argument would change the non-AVX ABI). */
typedef float v8f __attribute__((vector_size(32), aligned(4), may_alias));
#define ld8(p) (*(const v8f *)(const void *)(p))
#define st8(p, v) (*(v8f *)(void *)(p) = (v))

KILN_CPU_HOT static void scores_c(const float *restrict a, int64_t lda, const float *restrict bt, int64_t ldb, int64_t d,
                                  float *restrict s) {
    for (int r = 0; r < BLK; r += 2) { /* BLK is 32: four vectors a row */
        v8f c00 = {0}, c01 = {0}, c02 = {0}, c03 = {0}, c10 = {0}, c11 = {0}, c12 = {0}, c13 = {0};
        const float *a0 = a + r * lda, *a1 = a0 + lda;
        for (int64_t x = 0; x < d; x++) {
            const float *b = bt + x * ldb;
            v8f b0 = ld8(b), b1 = ld8(b + 8), b2 = ld8(b + 16), b3 = ld8(b + 24);
            float u = a0[x], w = a1[x];
            c00 += u * b0, c01 += u * b1, c02 += u * b2, c03 += u * b3;
            c10 += w * b0, c11 += w * b1, c12 += w * b2, c13 += w * b3;
        }
        float *s0 = s + r * BLK, *s1 = s0 + BLK;
        st8(s0, c00), st8(s0 + 8, c01), st8(s0 + 16, c02), st8(s0 + 24, c03);
        st8(s1, c10), st8(s1 + 8, c11), st8(s1 + 16, c12), st8(s1 + 24, c13);
    }
}

/* rows c0 and c1, columns [j, j + 32): scaled, then the BLK weighted rows of b added in order */
/* always_inline: a plain static inline helper is built for the default target and, called from a clone, not inlined */
static inline __attribute__((always_inline)) void accumulate_32(float *c0, float *c1, float s0, float s1, const float *p0,
                                                                const float *p1, int64_t pxs, const float *b, int64_t ldb) {
    v8f y0 = ld8(c0) * s0, y1 = ld8(c0 + 8) * s0, y2 = ld8(c0 + 16) * s0, y3 = ld8(c0 + 24) * s0;
    v8f z0 = ld8(c1) * s1, z1 = ld8(c1 + 8) * s1, z2 = ld8(c1 + 16) * s1, z3 = ld8(c1 + 24) * s1;
    for (int x = 0; x < BLK; x++) {
        const float *bx = b + x * ldb;
        v8f b0 = ld8(bx), b1 = ld8(bx + 8), b2 = ld8(bx + 16), b3 = ld8(bx + 24);
        float u = p0[x * pxs], w = p1[x * pxs];
        y0 += u * b0, y1 += u * b1, y2 += u * b2, y3 += u * b3;
        z0 += w * b0, z1 += w * b1, z2 += w * b2, z3 += w * b3;
    }
    st8(c0, y0), st8(c0 + 8, y1), st8(c0 + 16, y2), st8(c0 + 24, y3);
    st8(c1, z0), st8(c1 + 8, z1), st8(c1 + 16, z2), st8(c1 + 24, z3);
}

/* the same over 16 columns (cols % 32 == 16) */
static inline __attribute__((always_inline)) void accumulate_16(float *c0, float *c1, float s0, float s1, const float *p0,
                                                                const float *p1, int64_t pxs, const float *b, int64_t ldb) {
    v8f y0 = ld8(c0) * s0, y1 = ld8(c0 + 8) * s0, z0 = ld8(c1) * s1, z1 = ld8(c1 + 8) * s1;
    for (int x = 0; x < BLK; x++) {
        const float *bx = b + x * ldb;
        v8f b0 = ld8(bx), b1 = ld8(bx + 8);
        float u = p0[x * pxs], w = p1[x * pxs];
        y0 += u * b0, y1 += u * b1, z0 += w * b0, z1 += w * b1;
    }
    st8(c0, y0), st8(c0 + 8, y1), st8(c1, z0), st8(c1 + 8, z1);
}

KILN_CPU_HOT static void accumulate_c(float *restrict c, int64_t ldc, const float *restrict cscale, const float *restrict p,
                                      int64_t prs, int64_t pxs, const float *restrict b, int64_t ldb, int64_t cols) {
    for (int r = 0; r < BLK; r += 2) {
        float *c0 = c + r * ldc, *c1 = c0 + ldc, s0 = cscale ? cscale[r] : 1.0f, s1 = cscale ? cscale[r + 1] : 1.0f;
        const float *p0 = p + r * prs, *p1 = p0 + prs;
        int64_t j = 0;
        for (; j + 32 <= cols; j += 32) accumulate_32(c0 + j, c1 + j, s0, s1, p0, p1, pxs, b + j, ldb);
        if (j < cols) accumulate_16(c0 + j, c1 + j, s0, s1, p0, p1, pxs, b + j, ldb); /* cols % 16 == 0 */
    }
}

KILN_CPU_HOT static void softmax_c(float *s, int64_t di, float *m, float *l, float *alpha) {
    for (int r = 0; r < BLK; r++) {
        float *sr = s + r * BLK, mt = -INFINITY, sum = 0;
        int64_t n = di + r + 1 < BLK ? di + r + 1 : BLK; /* the row's keys in this tile */
#pragma omp simd reduction(max : mt)
        for (int64_t c = 0; c < n; c++) mt = sr[c] > mt ? sr[c] : mt;
        /* the first tile's m is -inf: e^(-inf) is 0 (kiln_vexpf would give e^-87, which scales zeros too) */
        float mnew = m[r] > mt ? m[r] : mt, a = m[r] == -INFINITY ? 0.0f : kiln_vexpf(m[r] - mnew);
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < BLK; c++) {
            float e = c < n ? kiln_vexpf(sr[c] - mnew) : 0.0f;
            sr[c] = e;
            sum += e;
        }
        l[r] = l[r] * a + sum;
        m[r] = mnew;
        alpha[r] = a;
    }
}

KILN_CPU_HOT static void bwd_tile_c(float *s, float *dp, const float *lse, const float *dvec, int64_t di, int64_t rows) {
    for (int r = 0; r < BLK; r++) {
        int64_t n = r >= rows ? 0 : di + r + 1 < BLK ? di + r + 1 : BLK;
#pragma omp simd
        for (int c = 0; c < BLK; c++) {
            float p = c < n ? kiln_vexpf(s[r * BLK + c] - lse[r]) : 0.0f;
            s[r * BLK + c] = p;
            dp[r * BLK + c] = p * (dp[r * BLK + c] - (c < n ? dvec[r] : 0.0f));
        }
    }
}

KILN_CPU_HOT static void pack_rows_c(const float *src, int64_t rs, int64_t n, int64_t rows, int64_t d, int64_t dp, float scale,
                        float *dst) {
    for (int64_t i = 0; i < rows; i++) {
        float *row = dst + i * dp;
        int64_t have = i < n ? d : 0;
        for (int64_t x = 0; x < have; x++) row[x] = scale * src[i * rs + x];
        for (int64_t x = have; x < dp; x++) row[x] = 0;
    }
}

KILN_CPU_HOT static void pack_t_c(const float *src, int64_t rs, int64_t t, int64_t tp, int64_t d, float *dst) {
    for (int64_t x = 0; x < d; x++) {
        for (int64_t i = 0; i < t; i++) dst[x * tp + i] = src[i * rs + x];
        for (int64_t i = t; i < tp; i++) dst[x * tp + i] = 0;
    }
}

KILN_CPU_HOT static void store_rows_c(const float *src, int64_t dp, int64_t n, int64_t d, float *out, int64_t ldo, const float *scale,
                         int per_row, int acc) {
    for (int64_t i = 0; i < n; i++) {
        float sc = scale[per_row ? i : 0], *o = out + i * ldo;
        for (int64_t x = 0; x < d; x++) o[x] = acc ? o[x] + sc * src[i * dp + x] : sc * src[i * dp + x];
    }
}

KILN_CPU_HOT static void rowdot_c(const float *a, const float *b, int64_t ld, int64_t n, int64_t d, float *out) {
    for (int64_t i = 0; i < n; i++) {
        float sum = 0;
        for (int64_t x = 0; x < d; x++) sum += a[i * ld + x] * b[i * ld + x];
        out[i] = sum;
    }
}

typedef struct {
    void (*scores)(const float *a, int64_t lda, const float *bt, int64_t ldb, int64_t d, float *s);
    void (*accumulate)(float *c, int64_t ldc, const float *cscale, const float *p, int64_t prs, int64_t pxs,
                       const float *b, int64_t ldb, int64_t cols);
    void (*softmax)(float *s, int64_t di, float *m, float *l, float *alpha);
    void (*bwd_tile)(float *s, float *dp, const float *lse, const float *dvec, int64_t di, int64_t rows);
    void (*pack_rows)(const float *src, int64_t rs, int64_t n, int64_t rows, int64_t d, int64_t dp, float scale,
                      float *dst);
    void (*pack_t)(const float *src, int64_t rs, int64_t t, int64_t tp, int64_t d, float *dst);
    void (*store_rows)(const float *src, int64_t dp, int64_t n, int64_t d, float *out, int64_t ldo, const float *scale,
                       int per_row, int acc);
    void (*rowdot)(const float *a, const float *b, int64_t ld, int64_t n, int64_t d, float *out);
} tiles;

static const tiles portable = {scores_c, accumulate_c, softmax_c, bwd_tile_c, pack_rows_c, pack_t_c, store_rows_c, rowdot_c};
static const tiles avx512 = {kiln_cpu_attn_scores_avx512, kiln_cpu_attn_accumulate_avx512, kiln_cpu_attn_softmax_avx512,
                             kiln_cpu_attn_bwd_tile_avx512, kiln_cpu_attn_pack_rows_avx512, kiln_cpu_attn_pack_t_avx512,
                             kiln_cpu_attn_store_rows_avx512, kiln_cpu_attn_rowdot_avx512};
static const tiles avx2 = {kiln_cpu_attn_scores_avx2, kiln_cpu_attn_accumulate_avx2, kiln_cpu_attn_softmax_avx2,
                           kiln_cpu_attn_bwd_tile_avx2, kiln_cpu_attn_pack_rows_avx2, kiln_cpu_attn_pack_t_avx2,
                           kiln_cpu_attn_store_rows_avx2, kiln_cpu_attn_rowdot_avx2};
static int forced = KILN_ATTN_TILES_BEST;

void kiln_cpu_attention_force(int tiles) { forced = tiles; }

static const tiles *pick(void) {
    if (forced == KILN_ATTN_TILES_PORTABLE) return &portable;
    if (forced == KILN_ATTN_TILES_BEST && kiln_cpu_has_avx512()) return &avx512;
    return kiln_cpu_has_avx2() ? &avx2 : &portable;
}

/* ---- one (batch, head): sizes and packing ---- */

typedef struct {
    const kiln_attn_shape *s;
    const tiles *tl;
    int64_t b, h, t, tp, d, dp; /* tp, dp: T and D rounded up to the tile and the vector */
    float scale;
} head;

static head head_of(const kiln_attn_shape *s, const tiles *tl, int64_t task) {
    int64_t d = s->c / s->heads;
    return (head){s, tl, task / s->heads, task % s->heads, s->t, (s->t + BLK - 1) / BLK * BLK, d, (d + 15) / 16 * 16,
                  (float)(1.0 / sqrt((double)d))};
}

static int64_t align16(int64_t n) { return (n + 15) / 16 * 16; }

/* the head's columns of row 0 of x, whose (batch, time) strides are st */
static const float *head_base(const head *hd, const float *x, const int64_t *st) {
    return x + hd->b * st[0] + hd->h * hd->d;
}

/* dst[x][i] = src row i, column x: [d][tp], keys beyond t zero */
static void pack_transposed(const head *hd, const float *src, int64_t rs, float *dst) {
    hd->tl->pack_t(src, rs, hd->t, hd->tp, hd->d, dst);
}

/* dst[i][x] = scale * src row i, column x, for rows [0, n) of [rows][dp]; zeros beyond */
static void pack_rows(const head *hd, const float *src, int64_t rs, int64_t n, int64_t rows, float scale, float *dst) {
    hd->tl->pack_rows(src, rs, n, rows, hd->d, hd->dp, scale, dst);
}

/* ---- forward ---- */

typedef struct { /* floats of a forward slot, each 64-byte aligned */
    float *kt, *vp, *qb, *s, *o, *m, *l, *alpha;
} fwd_slot;

static int64_t fwd_slot_layout(const head *hd, float *base, fwd_slot *f) {
    int64_t sizes[8] = {hd->d * hd->tp, hd->tp * hd->dp, BLK * hd->dp, BLK * BLK, BLK * hd->dp, BLK, BLK, BLK};
    float **dst[8] = {&f->kt, &f->vp, &f->qb, &f->s, &f->o, &f->m, &f->l, &f->alpha};
    int64_t at = 0;
    for (int i = 0; i < 8; i++) {
        if (base) *dst[i] = base + at;
        at += align16(sizes[i]);
    }
    return at;
}

/* one block of query rows [i0, i0 + BLK) */
static void fwd_block(const head *hd, const fwd_slot *f, int64_t i0, const float *q, float *y, float *lse) {
    const kiln_attn_shape *s = hd->s;
    const tiles *tl = hd->tl;
    int64_t rows = hd->t - i0 < BLK ? hd->t - i0 : BLK;
    pack_rows(hd, head_base(hd, q, s->q_stride) + i0 * s->q_stride[1], s->q_stride[1], rows, BLK, hd->scale, f->qb);
    for (int r = 0; r < BLK; r++) f->m[r] = -INFINITY, f->l[r] = 0;
    memset(f->o, 0, sizeof(float) * BLK * hd->dp);
    for (int64_t j0 = 0; j0 <= i0; j0 += BLK) {
        tl->scores(f->qb, hd->dp, f->kt + j0, hd->tp, hd->d, f->s);
        tl->softmax(f->s, i0 - j0, f->m, f->l, f->alpha);
        tl->accumulate(f->o, hd->dp, f->alpha, f->s, BLK, 1, f->vp + j0 * hd->dp, hd->dp, hd->dp);
    }
    float *lb = lse + (hd->b * s->heads + hd->h) * s->t + i0;
    for (int64_t r = 0; r < rows; r++) {
        lb[r] = f->m[r] + logf(f->l[r]);
        f->alpha[r] = 1.0f / f->l[r];
    }
    tl->store_rows(f->o, hd->dp, rows, hd->d, y + (hd->b * s->t + i0) * s->c + hd->h * hd->d, s->c, f->alpha, 1, 0);
}

static void fwd_head(const head *hd, float *slot, const float *q, const float *k, const float *v, float *y, float *lse) {
    const kiln_attn_shape *s = hd->s;
    fwd_slot f;
    fwd_slot_layout(hd, slot, &f);
    pack_transposed(hd, head_base(hd, k, s->k_stride), s->k_stride[1], f.kt);
    pack_rows(hd, head_base(hd, v, s->v_stride), s->v_stride[1], hd->t, hd->tp, 1.0f, f.vp);
    for (int64_t i0 = 0; i0 < hd->t; i0 += BLK) fwd_block(hd, &f, i0, q, y, lse);
}

/* ---- backward ---- */

typedef struct {
    float *kt, *vt, *kp, *qp, *dyp, *dq, *dk, *dv, *s, *dp, *lse, *dvec;
} bwd_slot;

static int64_t bwd_slot_layout(const head *hd, float *base, bwd_slot *b) {
    int64_t td = hd->tp * hd->dp;
    int64_t sizes[12] = {hd->d * hd->tp, hd->d * hd->tp, td, td, td, td, td, td, BLK * BLK, BLK * BLK, hd->tp, hd->tp};
    float **dst[12] = {&b->kt, &b->vt, &b->kp, &b->qp, &b->dyp, &b->dq, &b->dk, &b->dv, &b->s, &b->dp, &b->lse, &b->dvec};
    int64_t at = 0;
    for (int i = 0; i < 12; i++) {
        if (base) *dst[i] = base + at;
        at += align16(sizes[i]);
    }
    return at;
}

/* packs the head's operands; lse and D_i = dy_i . y_i per row */
static void bwd_pack(const head *hd, const bwd_slot *b, const float *q, const float *k, const float *v, const float *y,
                     const float *lse, const float *dy) {
    const kiln_attn_shape *s = hd->s;
    const float *kh = head_base(hd, k, s->k_stride), *vh = head_base(hd, v, s->v_stride);
    int64_t cst[2] = {s->t * s->c, s->c}; /* y and dy are contiguous */
    const float *dyh = head_base(hd, dy, cst);
    pack_transposed(hd, kh, s->k_stride[1], b->kt);
    pack_transposed(hd, vh, s->v_stride[1], b->vt);
    pack_rows(hd, kh, s->k_stride[1], hd->t, hd->tp, 1.0f, b->kp);
    pack_rows(hd, head_base(hd, q, s->q_stride), s->q_stride[1], hd->t, hd->tp, hd->scale, b->qp);
    pack_rows(hd, dyh, s->c, hd->t, hd->tp, 1.0f, b->dyp);
    hd->tl->rowdot(dyh, head_base(hd, y, cst), s->c, hd->t, hd->d, b->dvec);
    memcpy(b->lse, lse + (hd->b * s->heads + hd->h) * s->t, sizeof(float) * (size_t)hd->t);
    memset(b->dq, 0, sizeof(float) * (size_t)(3 * hd->tp * hd->dp)); /* dq, dk, dv are adjacent */
}

/* out (=|+=) scale * the accumulated rows, the head's columns (dq, dk, dv have d_stride) */
static void bwd_store(const head *hd, const float *src, float scale, float *out, int acc) {
    const kiln_attn_shape *s = hd->s;
    if (out)
        hd->tl->store_rows(src, hd->dp, hd->t, hd->d, out + hd->b * s->d_stride[0] + hd->h * hd->d, s->d_stride[1], &scale,
                           0, acc);
}

static void bwd_tile(const head *hd, const bwd_slot *b, int64_t i0, int64_t j0) {
    const tiles *tl = hd->tl;
    int64_t dp = hd->dp, rows = hd->t - i0 < BLK ? hd->t - i0 : BLK;
    tl->scores(b->qp + i0 * dp, dp, b->kt + j0, hd->tp, hd->d, b->s);
    tl->scores(b->dyp + i0 * dp, dp, b->vt + j0, hd->tp, hd->d, b->dp);
    tl->bwd_tile(b->s, b->dp, b->lse + i0, b->dvec + i0, i0 - j0, rows); /* s: P, dp: dS */
    tl->accumulate(b->dv + j0 * dp, dp, NULL, b->s, 1, BLK, b->dyp + i0 * dp, dp, dp); /* P^T dy */
    tl->accumulate(b->dk + j0 * dp, dp, NULL, b->dp, 1, BLK, b->qp + i0 * dp, dp, dp); /* dS^T q / sqrt(D) */
    tl->accumulate(b->dq + i0 * dp, dp, NULL, b->dp, BLK, 1, b->kp + j0 * dp, dp, dp); /* dS k */
}

static void bwd_head(const head *hd, float *slot, const float *q, const float *k, const float *v, const float *y,
                     const float *lse, const float *dy, float *dq, float *dk, float *dv, int acc_q, int acc_k, int acc_v) {
    bwd_slot b;
    bwd_slot_layout(hd, slot, &b);
    bwd_pack(hd, &b, q, k, v, y, lse, dy);
    for (int64_t j0 = 0; j0 < hd->t; j0 += BLK)
        for (int64_t i0 = j0; i0 < hd->t; i0 += BLK) bwd_tile(hd, &b, i0, j0);
    bwd_store(hd, b.dq, hd->scale, dq, acc_q);
    bwd_store(hd, b.dk, 1.0f, dk, acc_k);
    bwd_store(hd, b.dv, 1.0f, dv, acc_v);
}

/* ---- entry points ---- */

size_t kiln_cpu_attention_scratch(const kiln_attn_shape *s) {
    head hd = head_of(s, &portable, 0);
    int64_t f = fwd_slot_layout(&hd, NULL, &(fwd_slot){0}), b = bwd_slot_layout(&hd, NULL, &(bwd_slot){0});
    return (size_t)(f > b ? f : b) * sizeof(float);
}

/* tasks go to at most `slots` threads, dynamically (heads differ in nothing, but threads may be delayed) */
static int threads_for(const kiln_attn_shape *s, int slots) {
    int64_t tasks = s->b * s->heads, work = tasks * s->t * s->t * s->c / s->heads;
    if (tasks < 2 || work < KILN_CPU_PAR_MIN || slots < 2) return 1;
    return tasks < slots ? (int)tasks : slots;
}

void kiln_cpu_causal_attention_fwd(const kiln_attn_shape *s, const float *q, const float *k, const float *v, float *y,
                                   float *lse, void *scratch, int slots) {
    const tiles *tl = pick();
    int64_t per = (int64_t)(kiln_cpu_attention_scratch(s) / sizeof(float)), tasks = s->b * s->heads;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_for(s, slots))
    for (int64_t task = 0; task < tasks; task++) {
        head hd = head_of(s, tl, task);
        fwd_head(&hd, (float *)scratch + omp_get_thread_num() * per, q, k, v, y, lse);
    }
}

void kiln_cpu_causal_attention_bwd(const kiln_attn_shape *s, const float *q, const float *k, const float *v,
                                   const float *y, const float *lse, const float *dy, float *dq, float *dk, float *dv,
                                   int acc_q, int acc_k, int acc_v, void *scratch, int slots) {
    const tiles *tl = pick();
    int64_t per = (int64_t)(kiln_cpu_attention_scratch(s) / sizeof(float)), tasks = s->b * s->heads;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_for(s, slots))
    for (int64_t task = 0; task < tasks; task++) {
        head hd = head_of(s, tl, task);
        bwd_head(&hd, (float *)scratch + omp_get_thread_num() * per, q, k, v, y, lse, dy, dq, dk, dv, acc_q, acc_k, acc_v);
    }
}
