/* Shared knobs and AVX-512 entry points of the fast CPU kernels. */
#ifndef KILN_KERNELS_CPU_INTERNAL_H
#define KILN_KERNELS_CPU_INTERNAL_H

#include <stdint.h>

/* Below this many elements a parallel region costs more than it saves. */
#define KILN_CPU_PAR_MIN 32768

/* for (i = 0; i < n; i++) stmt, over the team when n >= KILN_CPU_PAR_MIN, else
 * without any OpenMP construct: fused kernels call the elementwise kernels per
 * 1024-float tile, where even a parallel region whose `if` is false costs a
 * team start (a mul of 1M floats in tiles, one thread: 588 us, against 154 us
 * in one call). Elementwise, so both paths give the same bits. */
#define KILN_CPU_EACH(n, i, stmt)                                                                                      \
    do {                                                                                                               \
        if ((n) >= KILN_CPU_PAR_MIN) {                                                                                 \
            _Pragma("omp parallel for simd schedule(static)") for (int64_t i = 0; i < (n); i++) stmt;                  \
        } else {                                                                                                       \
            _Pragma("omp simd") for (int64_t i = 0; i < (n); i++) stmt;                                                \
        }                                                                                                              \
    } while (0)

/* Hot loops built twice, for AVX-512 machines (x86-64-v4) and for any
 * x86-64, one chosen when the program starts (GCC's target_clones). Put it on
 * the function a parallel region calls, not on the one holding the region:
 * OpenMP's outlined body does not inherit the clone's target. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define KILN_CPU_HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KILN_CPU_HOT
#endif

/* 1 when the running CPU has AVX-512 F, DQ, BW and VL: the *_avx512.c files
 * are built for all four (erf's vreduceps is DQ); every AVX-512 CPU but Xeon
 * Phi has them. */
static inline int kiln_cpu_has_avx512(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
#else
    return 0;
#endif
}

/* 1 when the running CPU has AVX2 and FMA (x86-64-v3): the *_avx2.c files are built for both */
static inline int kiln_cpu_has_avx2(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* Dropout over `blocks` * 64 elements whose first has Philox group first_group
 * (a multiple of 16; 16 Philox calls per vector); bit-identical to the portable
 * path. add: y += ..., else y = ... */
void kiln_cpu_dropout_blocks_avx512(int64_t first_group, int64_t blocks, float scale, uint32_t thr, uint64_t key, uint64_t counter,
                                    const float *x, float *y, int add, int parallel);
/* the same over `blocks` * 32 elements, first_group a multiple of 8 (CPUs with AVX2 but not AVX-512) */
void kiln_cpu_dropout_blocks_avx2(int64_t first_group, int64_t blocks, float scale, uint32_t thr, uint64_t key, uint64_t counter,
                                  const float *x, float *y, int add, int parallel);

/* Fused optimizer passes with vector sqrt (the portable loops cannot vectorise
 * sqrtf under -fmath-errno); same operation order, so bit-identical results. */
void kiln_cpu_adadelta_avx512(int64_t n, float *p, const float *g, float *square_avg, float *acc_delta, float lr,
                              float rho, float eps, float weight_decay);
void kiln_cpu_adamw_avx512(int64_t n, float *p, const float *g, float *m, float *v, float decay, float beta1,
                           float beta2, float eps, float step_size, float bc2_sqrt);

/* LAMB's two chunk passes (optim_layerwise.c) over n elements, vector sqrt and
 * division; the same per-element bits as the portable loops, the norms summed
 * in 16 double lanes (acc: sum p^2, sum u^2) */
typedef struct { float b1, b2, eps, wd, bc1, bc2; } kiln_cpu_lamb_consts;
void kiln_cpu_lamb_moments_avx512(int64_t n, float *m, float *v, const float *g, const float *p, const kiln_cpu_lamb_consts *c,
                                  double acc[2]);
void kiln_cpu_lamb_apply_avx512(int64_t n, float *p, const float *m, const float *v, const kiln_cpu_lamb_consts *c, float step);

/* segments.c: fn over the chunks of every tensor of a layer-wise optimizer's
 * run (seg as in kiln_layerwise_args), in parallel; begin and end index the
 * run's buffers. With sums, sums[2k], sums[2k+1] are tensor k's chunks' acc
 * added in chunk order. 0, or -1 out of memory. */
typedef void (*kiln_cpu_chunk_fn)(const void *ctx, int64_t seg, int64_t begin, int64_t end, double acc[2]);
int kiln_cpu_for_segments(int64_t nseg, const int64_t *seg, kiln_cpu_chunk_fn fn, const void *ctx, double *sums);
/* erf, tanh and erf's backward on 16 lanes (the tail masked); the portable
 * loops in pointwise_math.c follow the same formulas */
void kiln_cpu_erf_avx512(int64_t n, const float *x, float *y);
void kiln_cpu_tanh_avx512(int64_t n, const float *x, float *y);
void kiln_cpu_erf_bwd_avx512(int64_t n, const float *x, const float *dy, float *dx, int acc);
/* the same on 8 lanes for AVX2 CPUs without AVX-512 (erf in pointwise_math.h's 8-piece form) */
void kiln_cpu_erf_avx2(int64_t n, const float *x, float *y);
void kiln_cpu_tanh_avx2(int64_t n, const float *x, float *y);
void kiln_cpu_erf_bwd_avx2(int64_t n, const float *x, const float *dy, float *dx, int acc);

/* 2x2 stride-2 max-pool over one [h, w, 16] nChw16c block; y0/dy0 point at the
 * block's first NCHW plane. Blocks must be 64-byte aligned. */
void kiln_cpu_pool2_blocked_fwd_avx512(int64_t w, int64_t oh, int64_t ow, const float *xb, float *y0);
void kiln_cpu_pool2_blocked_bwd_avx512(int64_t w, int64_t oh, int64_t ow, int relu_mask, const float *xb,
                                       const float *dy0, float *db, int acc);

/* Causal attention's tiles (attention.c): KILN_ATTN_BLK x KILN_ATTN_BLK scores, row r
 * the query i0 + r, column c the key j0 + c; with di = i0 - j0, c is one of row r's keys
 * iff c <= di + r. Operands are packed, zero-padded and 64-byte aligned. */
#define KILN_ATTN_BLK 32
/* s[r][c] = sum_x<d a[r*lda + x] * bt[x*ldb + c] (a tile of q k^T or dy v^T) */
void kiln_cpu_attn_scores_avx512(const float *a, int64_t lda, const float *bt, int64_t ldb, int64_t d, float *s);
/* c[r][0:cols] = cscale[r] * c[r][0:cols] + sum_x p[r*prs + x*pxs] * b[x*ldb + 0:cols]
 * (cscale NULL: 1; p transposed when prs = 1, pxs = KILN_ATTN_BLK); cols % 16 == 0 */
void kiln_cpu_attn_accumulate_avx512(float *c, int64_t ldc, const float *cscale, const float *p, int64_t prs,
                                     int64_t pxs, const float *b, int64_t ldb, int64_t cols);
/* forward's online softmax over one tile of scores: row maxima m and sums l move on,
 * alpha[r] = exp(m_old - m_new) rescales the row's output, s becomes exp(s - m_new) */
void kiln_cpu_attn_softmax_avx512(float *s, int64_t di, float *m, float *l, float *alpha);
/* backward's tile: s (scores) becomes P = exp(s - lse[r]) and dp becomes dS = P (dp - dvec[r]),
 * zero outside the mask and below row `rows` */
void kiln_cpu_attn_bwd_tile_avx512(float *s, float *dp, const float *lse, const float *dvec, int64_t di, int64_t rows);
/* packing a head's operands: dst[i][x] = scale * src[i*rs + x] for rows i < n of
 * [rows][dp], zeros around; transposed: dst[x][i] = src[i*rs + x], [d][tp], keys >= t zero */
void kiln_cpu_attn_pack_rows_avx512(const float *src, int64_t rs, int64_t n, int64_t rows, int64_t d, int64_t dp,
                                    float scale, float *dst);
void kiln_cpu_attn_pack_t_avx512(const float *src, int64_t rs, int64_t t, int64_t tp, int64_t d, float *dst);
/* out[i*ldo + x] (=|+=) scale[i or 0] * src[i*dp + x] for i < n, x < d */
void kiln_cpu_attn_store_rows_avx512(const float *src, int64_t dp, int64_t n, int64_t d, float *out, int64_t ldo,
                                     const float *scale, int per_row, int acc);
/* out[i] = a row i . b row i (d columns, row stride ld) */
void kiln_cpu_attn_rowdot_avx512(const float *a, const float *b, int64_t ld, int64_t n, int64_t d, float *out);
/* the same tiles at 8 lanes (attention_avx2.c) for CPUs with AVX2 but not AVX-512 */
void kiln_cpu_attn_scores_avx2(const float *a, int64_t lda, const float *bt, int64_t ldb, int64_t d, float *s);
void kiln_cpu_attn_accumulate_avx2(float *c, int64_t ldc, const float *cscale, const float *p, int64_t prs, int64_t pxs,
                                   const float *b, int64_t ldb, int64_t cols);
void kiln_cpu_attn_softmax_avx2(float *s, int64_t di, float *m, float *l, float *alpha);
void kiln_cpu_attn_bwd_tile_avx2(float *s, float *dp, const float *lse, const float *dvec, int64_t di, int64_t rows);
void kiln_cpu_attn_pack_rows_avx2(const float *src, int64_t rs, int64_t n, int64_t rows, int64_t d, int64_t dp, float scale,
                                  float *dst);
void kiln_cpu_attn_pack_t_avx2(const float *src, int64_t rs, int64_t t, int64_t tp, int64_t d, float *dst);
void kiln_cpu_attn_store_rows_avx2(const float *src, int64_t dp, int64_t n, int64_t d, float *out, int64_t ldo,
                                   const float *scale, int per_row, int acc);
void kiln_cpu_attn_rowdot_avx2(const float *a, const float *b, int64_t ld, int64_t n, int64_t d, float *out);
/* which tiles attention runs: the best this cpu has (the default), or, for tests, the portable loops or the AVX2
 * tiles (where the cpu has AVX2) even where AVX-512 is */
enum { KILN_ATTN_TILES_BEST, KILN_ATTN_TILES_PORTABLE, KILN_ATTN_TILES_AVX2 };
void kiln_cpu_attention_force(int tiles);

/* log sum exp of a row of n floats (log_softmax.c; cross entropy's too): exps in 16 lanes, folded in lane order */
double kiln_cpu_row_lse(int64_t n, const float *x);

#endif
