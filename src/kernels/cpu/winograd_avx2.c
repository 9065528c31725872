/* kiln's own 3x3 stride-1 convolution for AVX2 CPUs: Winograd F(4x4, 3x3)
 * (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks") over
 * activations in nChw8c, the layout pass's block there. oneDNN 2.6 has
 * Winograd kernels for AVX-512 only; on AVX2 its direct kernels are what the
 * tuner had, and they run near the CPU's FMA peak, so fewer multiplications
 * is the one way left to a faster convolution (36 products per 4x4 output
 * tile and channel pair where the direct form takes 144).
 *
 * y = A^T [ (G g G^T) .* (B^T d B) ] A per 4x4 output tile d (its 6x6 input
 * patch) and 3x3 filter g. Tiles of all images are taken TB at a time by one
 * thread: their patches transformed into V [36][C/8][TB][8] (8 channels a
 * vector), 36 small matrix products M[xi] = V[xi] U[xi] with the filters
 * transformed once per call into U [36][C][K], then each tile's 36 products
 * transformed back, with the bias, the residual (y added in: oneDNN's sum
 * post-op, or an accumulated gradient) and relu applied as the 4x4 outputs
 * are stored. With many channels over few tiles the order turns round
 * (outputs first: every tile's V, then 16 outputs at a time with their own
 * part of U). Backward-data of a 3x3 stride-1 convolution is the same
 * convolution of dy with the filters flipped and transposed (pad 2 - p), so
 * it runs here too, and backward-weights is the transpose of the forward's
 * form in the filters (the same transforms of x, dy's tiles taken by A).
 * Floats throughout, as oneDNN's Winograd kernels: the
 * transforms' constants (up to 8 and 1/24) cost a few bits against direct
 * summation (test_kernels bounds it against the double reference). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define V8 8
#define NXI 36

/* F(4x4, 3x3)'s transforms G (6 x 3), B^T and A^T are written out in g3, bt6 and at6 (and G^T in gt6) */

/* tiles a thread transforms at once, a multiple of the product's register block (6 tiles): 12 (their V
 * and M in L2 up to 128 channels) or 6; measured on a Zen 3 at resnet20's and resnet18's shapes */
static int64_t tile_block(const kiln_wino_shape *s) {
    int64_t cmax = s->c > s->k ? s->c : s->k;
    return cmax <= 128 ? 12 : 6;
}

/* the team: the process's, at most the one the workspace was sized for */
static int threads(const kiln_wino_shape *s) {
#ifdef _OPENMP
    int m = omp_get_max_threads();
    return s->threads > 0 && s->threads < m ? s->threads : m;
#else
    (void)s;
    return 1;
#endif
}

int kiln_cpu_wino_supported(const kiln_wino_shape *s) {
    return kiln_cpu_has_avx2() && s->c % V8 == 0 && s->k % V8 == 0 && s->pad >= 0 && s->pad <= 2 &&
           s->oh == s->h + 2 * s->pad - 2 && s->ow == s->w + 2 * s->pad - 2 && s->oh > 0 && s->ow > 0;
}

/* ---- the filters: U[xi][o / 8][i][o % 8] = (G g G^T)[xi] of input channel i, output channel o (a block
 * of 8 outputs is one contiguous run over the inputs: the product streams it) ---- */

/* G along one line of three vectors: six (G's rows: 1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6;
 * 1/24 -1/12 1/6; 0 0 1) */
static inline void g3(const __m256 d[3], __m256 o[6]) {
    const __m256 q = _mm256_set1_ps(0.25f), s6 = _mm256_set1_ps(1.0f / 6), s12 = _mm256_set1_ps(1.0f / 12),
                 s24 = _mm256_set1_ps(1.0f / 24), m6 = _mm256_set1_ps(-1.0f / 6);
    __m256 p = _mm256_add_ps(d[0], d[2]), e = _mm256_fmadd_ps(s24, d[0], _mm256_mul_ps(s6, d[2])), f = _mm256_mul_ps(s12, d[1]);
    o[0] = _mm256_mul_ps(q, d[0]);
    o[1] = _mm256_mul_ps(m6, _mm256_add_ps(p, d[1]));
    o[2] = _mm256_mul_ps(m6, _mm256_sub_ps(p, d[1]));
    o[3] = _mm256_add_ps(e, f);
    o[4] = _mm256_sub_ps(e, f);
    o[5] = d[2];
}

/* G g G^T of 8 filters at once (g[r * 3 + q]: tap (r, q) of each), into U[xi * us] */
static void filter_transform8(const __m256 g[9], float *U, int64_t us) {
    __m256 t[6][3];
    for (int j = 0; j < 3; j++) { /* columns: G g */
        __m256 col[3] = {g[j], g[3 + j], g[6 + j]}, o[6];
        g3(col, o);
        for (int a = 0; a < 6; a++) t[a][j] = o[a];
    }
    for (int a = 0; a < 6; a++) { /* rows: (G g) G^T */
        __m256 o[6];
        g3(t[a], o);
        for (int b = 0; b < 6; b++) _mm256_storeu_ps(U + (a * 6 + b) * us, o[b]);
    }
}

/* the 8 x 8 transpose of r[0 .. 7] */
static inline void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44), u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44), u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* the 9 taps of outputs ob * 8 .. + 7 and input i, a vector each; forward: w is [K][C][3][3]; backward-data
 * (flip): w is the forward's [C][K][3][3] (here C is its K), flipped. Each output's first 8 taps are one
 * load, turned into 8 tap vectors by a transpose */
static void filter_taps(const kiln_wino_shape *s, const float *w, int flip, int64_t ob, int64_t i, __m256 g[9]) {
    int64_t C = s->c, K = s->k;
    const float *f[V8];
    __m256 r[8];
    for (int l = 0; l < V8; l++) {
        int64_t o = ob * V8 + l;
        f[l] = flip ? w + (i * K + o) * 9 : w + (o * C + i) * 9;
        r[l] = _mm256_loadu_ps(f[l]);
    }
    transpose8(r);
    __m256 last = _mm256_setr_ps(f[0][8], f[1][8], f[2][8], f[3][8], f[4][8], f[5][8], f[6][8], f[7][8]);
    for (int t = 0; t < 8; t++) g[flip ? 8 - t : t] = r[t];
    g[flip ? 0 : 8] = last;
    if (s->scale && !flip) { /* lane l is output ob * 8 + l */
        __m256 sc = _mm256_loadu_ps(s->scale + ob * V8);
        for (int t = 0; t < 9; t++) g[t] = _mm256_mul_ps(g[t], sc);
    }
}

/* U's xi stride for n floats of each xi: one cache line more, so that the 36 stores of a filter's transform
 * (and the products' reads) do not all fall in one set of the L1 when n is a multiple of 4 KiB */
static int64_t u_stride(int64_t n) { return n + 16; }

static void wino_weights(const kiln_wino_shape *s, const float *w, int flip, float *u) {
    int64_t C = s->c, KB = s->k / V8;
#pragma omp parallel for schedule(static) num_threads(threads(s))
    for (int64_t ob = 0; ob < KB; ob++)
        for (int64_t i = 0; i < C; i++) {
            __m256 g[9];
            filter_taps(s, w, flip, ob, i, g);
            filter_transform8(g, u + (ob * C + i) * V8, u_stride(KB * C * V8));
        }
}

/* ---- the input: B^T d B of each tile's 6x6 patch, 8 channels a vector ---- */

/* B^T along one line of six vectors */
static inline void bt6(const __m256 d[6], __m256 o[6]) {
    const __m256 four = _mm256_set1_ps(4.0f), five = _mm256_set1_ps(5.0f), two = _mm256_set1_ps(2.0f);
    __m256 t1 = _mm256_fnmadd_ps(four, d[2], d[4]);  /* d4 - 4 d2 */
    __m256 t2 = _mm256_fnmadd_ps(four, d[1], d[3]);  /* d3 - 4 d1 */
    __m256 t3 = _mm256_sub_ps(d[4], d[2]);           /* d4 - d2 */
    __m256 t4 = _mm256_mul_ps(two, _mm256_sub_ps(d[3], d[1])); /* 2 (d3 - d1) */
    o[0] = _mm256_fnmadd_ps(five, d[2], _mm256_fmadd_ps(four, d[0], d[4]));
    o[1] = _mm256_add_ps(t1, t2);
    o[2] = _mm256_sub_ps(t1, t2);
    o[3] = _mm256_add_ps(t3, t4);
    o[4] = _mm256_sub_ps(t3, t4);
    o[5] = _mm256_fnmadd_ps(five, d[3], _mm256_fmadd_ps(four, d[1], d[5]));
}

typedef struct {
    const kiln_wino_shape *s;
    int64_t th, tw, ntiles, tb;
} tiling;

/* the 4x4 output tiles of s, taken tb at a time */
static tiling tiling_of(const kiln_wino_shape *s, int64_t tb) {
    tiling T = {s, (s->oh + 3) / 4, (s->ow + 3) / 4, 0, tb};
    T.ntiles = s->n * T.th * T.tw;
    return T;
}

/* tile t's image and top-left output pixel */
static void tile_at(const tiling *T, int64_t t, int64_t *img, int64_t *r0, int64_t *c0) {
    int64_t per = T->th * T->tw;
    *img = t / per;
    *r0 = (t % per) / T->tw * 4;
    *c0 = (t % per) % T->tw * 4;
}

/* B^T d B of one 6x6 patch whose rows lie `rs` floats apart (8 channels a pixel), into the 36 vectors
 * V[xi * vs]: rows first, then columns, fully unrolled */
static inline __attribute__((always_inline)) void patch_transform(const float *p, int64_t rs, float *V, int64_t vs) {
    __m256 t[6][6];
#pragma GCC unroll 6
    for (int a = 0; a < 6; a++) {
        __m256 d[6];
#pragma GCC unroll 6
        for (int b = 0; b < 6; b++) d[b] = _mm256_loadu_ps(p + a * rs + b * V8);
        bt6(d, t[a]);
    }
#pragma GCC unroll 6
    for (int b = 0; b < 6; b++) {
        __m256 col[6] = {t[0][b], t[1][b], t[2][b], t[3][b], t[4][b], t[5][b]}, o[6];
        bt6(col, o);
#pragma GCC unroll 6
        for (int a = 0; a < 6; a++) _mm256_storeu_ps(V + (a * 6 + b) * vs, o[a]);
    }
}

/* a tile whose patch crosses the border: its rows [a0, a1) lie inside the plane (from row y0); column b is read at
 * col[b] floats into a row, clamped inside, and masked by cm[b] (all ones where the column is inside), so every load
 * stays in the plane and the transform runs unrolled like an inner tile's, without a padded copy */
typedef struct {
    int a0, a1;
    int64_t y0, col[6];
    __m256 cm[6];
} edge;

static edge edge_of(const kiln_wino_shape *s, int64_t y0, int64_t x0) {
    edge e = {y0 < 0 ? (int)-y0 : 0, s->h - y0 < 6 ? (int)(s->h - y0) : 6, y0, {0}, {_mm256_setzero_ps()}};
    for (int b = 0; b < 6; b++) {
        int64_t xc = x0 + b, in = xc >= 0 && xc < s->w;
        e.col[b] = (xc < 0 ? 0 : xc >= s->w ? s->w - 1 : xc) * V8;
        e.cm[b] = _mm256_castsi256_ps(_mm256_set1_epi32(in ? -1 : 0));
    }
    return e;
}

/* B^T d B of an edge tile's patch in `plane` (rows `rs` floats apart), the pixels outside taken as zeros: rows
 * outside give zero lines, columns outside are masked */
static inline __attribute__((always_inline)) void patch_transform_edge(const float *plane, const edge *e, int64_t rs,
                                                                       float *V, int64_t vs) {
    __m256 t[6][6];
#pragma GCC unroll 6
    for (int a = 0; a < 6; a++) {
        if (a < e->a0 || a >= e->a1) {
#pragma GCC unroll 6
            for (int b = 0; b < 6; b++) t[a][b] = _mm256_setzero_ps();
            continue;
        }
        const float *row = plane + (e->y0 + a) * rs;
        __m256 d[6];
#pragma GCC unroll 6
        for (int b = 0; b < 6; b++) d[b] = _mm256_and_ps(_mm256_loadu_ps(row + e->col[b]), e->cm[b]);
        bt6(d, t[a]);
    }
#pragma GCC unroll 6
    for (int b = 0; b < 6; b++) {
        __m256 col[6] = {t[0][b], t[1][b], t[2][b], t[3][b], t[4][b], t[5][b]}, o[6];
        bt6(col, o);
#pragma GCC unroll 6
        for (int a = 0; a < 6; a++) _mm256_storeu_ps(V + (a * 6 + b) * vs, o[a]);
    }
}

/* V[xi][cb][j] for tiles t0 + j, j in [j0, j1) (those past the last tile: zeros), V's tile stride T->tb */
static void input_transform(const tiling *T, const float *x, int64_t t0, int64_t j0, int64_t j1, float *V) {
    const kiln_wino_shape *s = T->s;
    int64_t CB = s->c / V8, tb = T->tb, vs = CB * tb * V8;
    for (int64_t j = j0; j < j1; j++) {
        int64_t t = t0 + j, img, r0, c0;
        if (t >= T->ntiles) {
            for (int xi = 0; xi < NXI; xi++)
                for (int64_t cb = 0; cb < CB; cb++) _mm256_storeu_ps(V + ((xi * CB + cb) * tb + j) * V8, _mm256_setzero_ps());
            continue;
        }
        tile_at(T, t, &img, &r0, &c0);
        int64_t y0 = r0 - s->pad, x0 = c0 - s->pad;
        int inside = y0 >= 0 && x0 >= 0 && y0 + 6 <= s->h && x0 + 6 <= s->w;
        edge e;
        if (!inside) e = edge_of(s, y0, x0);
        for (int64_t cb = 0; cb < CB; cb++) {
            const float *p = x + ((img * CB + cb) * s->h) * s->w * V8;
            float *v = V + (cb * tb + j) * V8;
            if (inside) patch_transform(p + (y0 * s->w + x0) * V8, s->w * V8, v, vs);
            else patch_transform_edge(p, &e, s->w * V8, v, vs);
        }
    }
}

/* ---- the 36 products: M[xi][kb][j] = sum over c of V[xi][c][j] U[xi][c][kb] ---- */

/* 6 tiles x 16 outputs in twelve named accumulators (an array of them GCC keeps on the stack) */
#define ACC6(X) X(0) X(1) X(2) X(3) X(4) X(5)
static void product_6x16(const float *V, const float *U, int64_t C, int64_t tb, float *M0, float *M1, int add) {
#define ZERO(t) __m256 a##t = _mm256_setzero_ps(), b##t = _mm256_setzero_ps();
    ACC6(ZERO)
    for (int64_t c = 0; c < C; c++) {
        const float *v = V + ((c / V8) * tb) * V8 + c % V8;
        __m256 u0 = _mm256_loadu_ps(U + c * V8), u1 = _mm256_loadu_ps(U + (C + c) * V8);
#define STEP(t)                                                                                                       \
    {                                                                                                                  \
        __m256 e = _mm256_broadcast_ss(v + (t) * V8);                                                                  \
        a##t = _mm256_fmadd_ps(e, u0, a##t);                                                                           \
        b##t = _mm256_fmadd_ps(e, u1, b##t);                                                                           \
    }
        ACC6(STEP)
#undef STEP
    }
#define ADD(t) a##t = _mm256_add_ps(a##t, _mm256_loadu_ps(M0 + (t) * V8)), b##t = _mm256_add_ps(b##t, _mm256_loadu_ps(M1 + (t) * V8));
    if (add) { ACC6(ADD) }
#undef ADD
#define STORE(t) _mm256_storeu_ps(M0 + (t) * V8, a##t), _mm256_storeu_ps(M1 + (t) * V8, b##t);
    ACC6(STORE)
#undef STORE
#undef ZERO
}

static void product_6x8(const float *V, const float *U, int64_t C, int64_t tb, float *M0, int add) {
#define ZERO(t) __m256 a##t = _mm256_setzero_ps();
    ACC6(ZERO)
    for (int64_t c = 0; c < C; c++) {
        const float *v = V + ((c / V8) * tb) * V8 + c % V8;
        __m256 u0 = _mm256_loadu_ps(U + c * V8);
#define STEP(t) a##t = _mm256_fmadd_ps(_mm256_broadcast_ss(v + (t) * V8), u0, a##t);
        ACC6(STEP)
#undef STEP
    }
#define ADD(t) a##t = _mm256_add_ps(a##t, _mm256_loadu_ps(M0 + (t) * V8));
    if (add) { ACC6(ADD) }
#undef ADD
#define STORE(t) _mm256_storeu_ps(M0 + (t) * V8, a##t);
    ACC6(STORE)
#undef STORE
#undef ZERO
}

/* M[xi][kb][j] (=, or += when add) for the KB output blocks of U [36][KB][C][8] (its xi stride ux floats)
 * and tiles j in [j0, j1) of V (its xi stride vx floats, tile stride vt; j1 - j0 a multiple of 6): the sums
 * over V's first C channels; M's tile stride mt, its tiles from j0 at M */
static void products(int64_t C, int64_t KB, const float *V, int64_t vx, int64_t vt, int64_t j0, int64_t j1,
                     const float *U, int64_t ux, float *M, int64_t mt, int add) {
    for (int xi = 0; xi < NXI; xi++) {
        const float *Vx = V + xi * vx, *Ux = U + xi * ux;
        float *Mx = M + xi * KB * mt * V8;
        for (int64_t j = j0; j < j1; j += 6) {
            float *m = Mx + (j - j0) * V8;
            int64_t kb = 0;
            for (; kb + 2 <= KB; kb += 2)
                product_6x16(Vx + j * V8, Ux + kb * C * V8, C, vt, m + kb * mt * V8, m + (kb + 1) * mt * V8, add);
            if (kb < KB) product_6x8(Vx + j * V8, Ux + kb * C * V8, C, vt, m + kb * mt * V8, add);
        }
    }
}

/* ---- the output: A^T M A per tile, the epilogue, the stores ---- */

/* A^T along one line of six vectors: four */
static inline void at6(const __m256 m[6], __m256 o[4]) {
    const __m256 two = _mm256_set1_ps(2.0f), four = _mm256_set1_ps(4.0f), eight = _mm256_set1_ps(8.0f);
    __m256 s12 = _mm256_add_ps(m[1], m[2]), d12 = _mm256_sub_ps(m[1], m[2]);
    __m256 s34 = _mm256_add_ps(m[3], m[4]), d34 = _mm256_sub_ps(m[3], m[4]);
    o[0] = _mm256_add_ps(_mm256_add_ps(m[0], s12), s34);
    o[1] = _mm256_fmadd_ps(two, d34, d12);
    o[2] = _mm256_fmadd_ps(four, s34, s12);
    o[3] = _mm256_add_ps(_mm256_fmadd_ps(eight, d34, d12), m[5]);
}

/* A^T m A of one tile's 36 products m[xi * ms] into 4x4 vectors at out, rows `rs` floats apart, with the
 * epilogue: + bias, + what out holds (acc), relu */
static inline __attribute__((always_inline)) void tile_out(const float *m, int64_t ms, __m256 bias, int relu, int acc,
                                                           int stream, float *out, int64_t rs) {
    __m256 r[4][6], zero = _mm256_setzero_ps();
#pragma GCC unroll 6
    for (int b = 0; b < 6; b++) {
        __m256 col[6], o[4];
#pragma GCC unroll 6
        for (int a = 0; a < 6; a++) col[a] = _mm256_loadu_ps(m + (a * 6 + b) * ms);
        at6(col, o);
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++) r[a][b] = o[a];
    }
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++) {
        __m256 o[4];
        at6(r[a], o);
#pragma GCC unroll 4
        for (int b = 0; b < 4; b++) {
            float *dst = out + a * rs + b * V8;
            __m256 v = _mm256_add_ps(o[b], bias);
            if (acc) v = _mm256_add_ps(v, _mm256_loadu_ps(dst));
            if (relu) v = _mm256_max_ps(v, zero);
            if (stream) _mm256_stream_ps(dst, v);
            else _mm256_storeu_ps(dst, v);
        }
    }
}

typedef struct {
    const float *bias;
    int relu, acc, stream;
} epilogue;

/* the tiles t0 + j, j < tb, of output blocks kb0 .. kb0 + nkb - 1 from M [36][nkb][tb][8] */
static void output_transform(const tiling *T, const float *M, int64_t t0, int64_t kb0, int64_t nkb, const epilogue *E,
                             float *y) {
    const kiln_wino_shape *s = T->s;
    int64_t KB = s->k / V8, tb = T->tb, ms = nkb * tb * V8;
    float part[16 * V8] __attribute__((aligned(32)));
    for (int64_t j = 0; j < tb && t0 + j < T->ntiles; j++) {
        int64_t img, r0, c0;
        tile_at(T, t0 + j, &img, &r0, &c0);
        int whole = r0 + 4 <= s->oh && c0 + 4 <= s->ow;
        for (int64_t b = 0; b < nkb; b++) {
            int64_t kb = kb0 + b;
            const float *m = M + (b * tb + j) * V8;
            __m256 bias = E->bias ? _mm256_loadu_ps(E->bias + kb * V8) : _mm256_setzero_ps();
            float *q = y + (((img * KB + kb) * s->oh + r0) * s->ow + c0) * V8;
            if (whole) {
                if (E->acc) tile_out(m, ms, bias, E->relu, 1, 0, q, s->ow * V8);
                else if (E->stream) tile_out(m, ms, bias, E->relu, 0, 1, q, s->ow * V8);
                else tile_out(m, ms, bias, E->relu, 0, 0, q, s->ow * V8);
                continue;
            }
            /* a tile past the edge: its part inside, through a local 4x4 */
            int64_t hr = s->oh - r0 < 4 ? s->oh - r0 : 4, hc = s->ow - c0 < 4 ? s->ow - c0 : 4;
            for (int64_t a = 0; a < hr; a++)
                for (int64_t c = 0; c < hc && E->acc; c++) memcpy(part + (a * 4 + c) * V8, q + (a * s->ow + c) * V8, 32);
            tile_out(m, ms, bias, E->relu, E->acc, 0, part, 4 * V8);
            for (int64_t a = 0; a < hr; a++)
                for (int64_t c = 0; c < hc; c++) memcpy(q + (a * s->ow + c) * V8, part + (a * 4 + c) * V8, 32);
        }
    }
}

/* tile-first: the filters transformed once per call into U [36][C][K] (first in ws), then each thread takes
 * TB tiles at a time: their V, their products with all of U, their outputs */
static void tiles_first(const kiln_wino_shape *s, const float *x, const float *w, int flip, const epilogue *E, float *y,
                        float *base) {
    tiling T = tiling_of(s, tile_block(s));
    int64_t nblocks = (T.ntiles + T.tb - 1) / T.tb, per = NXI * T.tb * (s->c + s->k), KB = s->k / V8;
    float *u = base, *bufs = base + NXI * u_stride(s->c * s->k);
    wino_weights(s, w, flip, u);
#pragma omp parallel num_threads(threads(s))
    {
#ifdef _OPENMP
        float *V = bufs + (int64_t)omp_get_thread_num() * per;
#else
        float *V = bufs;
#endif
        float *M = V + NXI * T.tb * s->c;
        /* dynamic: each output is one block's, whichever thread takes it, and a core shared with another
         * process then holds nobody up */
#pragma omp for schedule(dynamic, 2) nowait
        for (int64_t blk = 0; blk < nblocks; blk++) {
            input_transform(&T, x, blk * T.tb, 0, T.tb, V);
            products(s->c, KB, V, s->c * T.tb, T.tb, 0, T.tb, u, u_stride(s->c * s->k), M, T.tb, 0);
            output_transform(&T, M, blk * T.tb, 0, KB, E, y);
        }
        if (E->stream) _mm_sfence(); /* this thread's streamed stores, visible before the region's barrier */
    }
}

/* ---- outputs-first, for many channels over few tiles (resnet18's last stage at batch 32: 32 tiles), where
 * U [36][C][K] would not stay in cache and tile-first reads it again for every block of 6 tiles: all
 * threads transform every tile into V [36][C/8][T][8] (T a multiple of 6, tiles past the last zeros), then
 * each thread takes 16 outputs at a time: their filters transformed into its own U, OF_CC inputs at a
 * time, and the products summed. On a Zen 3, one thread: 512 channels over 32 tiles 12 ms against
 * tile-first's 17-24; 256 over 128 tiles 11 against 8.5, so only up to OF_TB tiles ---- */
#define OF_TB 48                    /* tiles a thread's M holds: 36 x 16 x 48 floats, in L2 */
#define OF_CC 128                   /* inputs a thread's U holds: 36 x 16 x 128 floats, in L2 */
#define OF_U_BYTES (4 << 20)        /* U past this: outputs-first, if the tiles fit one M */
#define OF_V_BYTES (12 << 20)       /* and all of V fits this (Zen 3's L3: 32 MiB) */

static int64_t of_tiles(const kiln_wino_shape *s) {
    int64_t t = tiling_of(s, 0).ntiles;
    return (t + 5) / 6 * 6;
}

static int forced_path; /* 0: by size; 1 tile-first, 2 outputs-first (tests) */
void kiln_cpu_wino_force_fwd_path(int path) { forced_path = path; }

static int outputs_first(const kiln_wino_shape *s) {
    if (forced_path) return forced_path == 2;
    return (int64_t)(NXI * sizeof(float)) * s->c * s->k > OF_U_BYTES && of_tiles(s) <= OF_TB &&
           (int64_t)(NXI * sizeof(float)) * s->c * of_tiles(s) <= OF_V_BYTES;
}

static int64_t of_per_thread(void) { return NXI * (u_stride(16 * OF_CC) + 16 * OF_TB); }

/* outputs 16 kp .. (or 8 kp .. when the last block is 8 wide) of every tile: for each block of OF_TB tiles,
 * the sums over OF_CC inputs at a time, their filters transformed just before (U stays in L2) */
static void of_outputs(const tiling *T, const float *w, int flip, int64_t kp, const float *V, const epilogue *E,
                       float *y, float *U) {
    const kiln_wino_shape *s = T->s;
    int64_t C = s->c, nkb = 2 * kp + 1 < s->k / V8 ? 2 : 1, vt = T->tb;
    float *M = U + NXI * u_stride(2 * OF_CC * V8);
    tiling Tm = *T;
    Tm.tb = OF_TB;
    for (int64_t j0 = 0; j0 < vt; j0 += OF_TB) {
        int64_t j1 = j0 + OF_TB < vt ? j0 + OF_TB : vt;
        for (int64_t c0 = 0; c0 < C; c0 += OF_CC) {
            int64_t cc = C - c0 < OF_CC ? C - c0 : OF_CC;
            for (int64_t b = 0; b < nkb; b++)
                for (int64_t i = 0; i < cc; i++) {
                    __m256 g[9];
                    filter_taps(s, w, flip, 2 * kp + b, c0 + i, g);
                    filter_transform8(g, U + (b * cc + i) * V8, u_stride(nkb * cc * V8));
                }
            products(cc, nkb, V + c0 * vt, C * vt, vt, j0, j1, U, u_stride(nkb * cc * V8), M, OF_TB, c0 > 0);
        }
        output_transform(&Tm, M, j0, 2 * kp, nkb, E, y);
    }
}

static void outputs_first_run(const kiln_wino_shape *s, const float *x, const float *w, int flip, const epilogue *E,
                              float *y, float *base) {
    tiling T = tiling_of(s, of_tiles(s));
    float *V = base, *bufs = base + NXI * s->c * T.tb;
    int64_t nkp = (s->k / V8 + 1) / 2;
#pragma omp parallel num_threads(threads(s))
    {
#ifdef _OPENMP
        float *U = bufs + (int64_t)omp_get_thread_num() * of_per_thread();
#else
        float *U = bufs;
#endif
#pragma omp for schedule(static)
        for (int64_t j = 0; j < T.tb; j++) input_transform(&T, x, 0, j, j + 1, V);
        /* dynamic: each output is one block's, whichever thread takes it */
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t kp = 0; kp < nkp; kp++) of_outputs(&T, w, flip, kp, V, E, y, U);
        if (E->stream) _mm_sfence(); /* as tiles_first's */
    }
}

size_t kiln_cpu_wino_workspace(const kiln_wino_shape *s) {
    int64_t n = outputs_first(s) ? NXI * s->c * of_tiles(s) + of_per_thread() * threads(s)
                                 : NXI * u_stride(s->c * s->k) + NXI * tile_block(s) * (s->c + s->k) * threads(s);
    return (size_t)n * sizeof(float) + 64;
}

void kiln_cpu_wino_conv(const kiln_wino_shape *s, const float *x, const float *w, int flip, const float *bias, int relu,
                        int acc, float *y, void *ws) {
    float *base = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    /* streaming stores need whole 32-byte vectors (every 8-channel pixel of an aligned y is one) */
    epilogue E = {bias, relu, acc, s->stream && !acc && !((uintptr_t)y & 31)};
    if (outputs_first(s)) outputs_first_run(s, x, w, flip, &E, y, base);
    else tiles_first(s, x, w, flip, &E, y, base);
}

/* ---- backward-weights: dw = sum over tiles of G^T [ (A dY A^T) .* (B^T d B) ] G (the transpose of the
 * forward's bilinear form in the filters): x's patches transformed as forward's, dy's 4x4 tiles taken up to
 * 6x6 by A, their products summed over the tiles into dU[xi][c][k], then G^T dU G. Up to 64 x 64 channels
 * each thread sums its own tiles into its own dU (small_bwd_weight below). Past that the tiles are taken a
 * chunk at a time: all threads transform the chunk's tiles into V [36][C/8][TC][8] and Mdy [36][K/8][TC][8],
 * then take whole blocks of the sums (8 inputs x 16 outputs over all of the chunk's tiles, in tile order).
 * One thread makes each sum, so the bits do not depend on the thread count. With one chunk and blocks
 * enough for the team, a block's 36 sums go straight through G^T . G into dw; otherwise they are kept in
 * dU across chunks (a block then covers 6 of the 36 xi, for more blocks) and dw is made from dU at the
 * end ---- */

/* A along one line of four vectors: six */
static inline void a6(const __m256 d[4], __m256 o[6]) {
    const __m256 two = _mm256_set1_ps(2.0f), four = _mm256_set1_ps(4.0f), eight = _mm256_set1_ps(8.0f);
    __m256 e = _mm256_fmadd_ps(four, d[2], d[0]), f = _mm256_fmadd_ps(eight, d[3], _mm256_mul_ps(two, d[1]));
    __m256 s02 = _mm256_add_ps(d[0], d[2]), s13 = _mm256_add_ps(d[1], d[3]);
    o[0] = d[0];
    o[1] = _mm256_add_ps(s02, s13);
    o[2] = _mm256_sub_ps(s02, s13);
    o[3] = _mm256_add_ps(e, f);
    o[4] = _mm256_sub_ps(e, f);
    o[5] = d[3];
}

/* Mdy[xi][kb][j] = (A dY A^T)[xi] of the 4x4 dy of tiles t0 + j, j in [j0, j1) (zeros past the edge) */
static void dy_transform(const tiling *T, const float *dy, int64_t t0, int64_t j0, int64_t j1, float *Mdy) {
    const kiln_wino_shape *s = T->s;
    int64_t KB = s->k / V8, tb = T->tb;
    for (int64_t j = j0; j < j1; j++) {
        int64_t img = 0, r0 = 0, c0 = 0, live = t0 + j < T->ntiles;
        if (live) tile_at(T, t0 + j, &img, &r0, &c0);
        for (int64_t kb = 0; kb < KB; kb++) {
            const float *q = dy + ((img * KB + kb) * s->oh) * s->ow * V8;
            __m256 r[6][4];
            for (int b = 0; b < 4; b++) { /* columns: A dY */
                __m256 col[4], o[6];
                for (int a = 0; a < 4; a++)
                    col[a] = live && r0 + a < s->oh && c0 + b < s->ow ? _mm256_loadu_ps(q + ((r0 + a) * s->ow + c0 + b) * V8)
                                                                      : _mm256_setzero_ps();
                a6(col, o);
                for (int a = 0; a < 6; a++) r[a][b] = o[a];
            }
            for (int a = 0; a < 6; a++) { /* rows: (A dY) A^T */
                __m256 o[6];
                a6(r[a], o);
                for (int b = 0; b < 6; b++) _mm256_storeu_ps(Mdy + (((a * 6 + b) * KB + kb) * tb + j) * V8, o[b]);
            }
        }
    }
}

/* s[i][0 .. 7 (, 8 .. 15)] += sum over tn tiles of v[t][i] m0[t] (, m1[t]) for 4 inputs i: a 4 x 16 (nk = 2)
 * or 4 x 8 register block; v, m0 and m1 step 8 floats a tile; s's rows are ss floats apart */
static inline __attribute__((always_inline)) void sums_4xn(const float *v, const float *m0, const float *m1, int64_t tn,
                                                           int nk, float *s, int64_t ss) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (int64_t t = 0; t < tn; t++) {
        __m256 x0 = _mm256_loadu_ps(m0 + t * V8), x1 = nk == 2 ? _mm256_loadu_ps(m1 + t * V8) : x0;
        __m256 e0 = _mm256_broadcast_ss(v + t * V8), e1 = _mm256_broadcast_ss(v + t * V8 + 1);
        __m256 e2 = _mm256_broadcast_ss(v + t * V8 + 2), e3 = _mm256_broadcast_ss(v + t * V8 + 3);
        a0 = _mm256_fmadd_ps(e0, x0, a0), a1 = _mm256_fmadd_ps(e1, x0, a1);
        a2 = _mm256_fmadd_ps(e2, x0, a2), a3 = _mm256_fmadd_ps(e3, x0, a3);
        if (nk == 2) {
            b0 = _mm256_fmadd_ps(e0, x1, b0), b1 = _mm256_fmadd_ps(e1, x1, b1);
            b2 = _mm256_fmadd_ps(e2, x1, b2), b3 = _mm256_fmadd_ps(e3, x1, b3);
        }
    }
    __m256 acc[4] = {a0, a1, a2, a3}, acc2[4] = {b0, b1, b2, b3};
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(s + i * ss, _mm256_add_ps(_mm256_loadu_ps(s + i * ss), acc[i]));
        if (nk == 2) _mm256_storeu_ps(s + i * ss + V8, _mm256_add_ps(_mm256_loadu_ps(s + i * ss + V8), acc2[i]));
    }
}

/* G^T along one line of six vectors: three (G's rows written out: 1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6;
 * 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1) */
static inline void gt6(const __m256 d[6], __m256 o[3]) {
    const __m256 q = _mm256_set1_ps(0.25f), s6 = _mm256_set1_ps(1.0f / 6), s12 = _mm256_set1_ps(1.0f / 12),
                 s24 = _mm256_set1_ps(1.0f / 24);
    __m256 p12 = _mm256_add_ps(d[1], d[2]), m21 = _mm256_sub_ps(d[2], d[1]);
    __m256 p34 = _mm256_add_ps(d[3], d[4]), m34 = _mm256_sub_ps(d[3], d[4]);
    o[0] = _mm256_fmadd_ps(s24, p34, _mm256_fnmadd_ps(s6, p12, _mm256_mul_ps(q, d[0])));
    o[1] = _mm256_fmadd_ps(s12, m34, _mm256_mul_ps(s6, m21));
    o[2] = _mm256_fmadd_ps(s6, _mm256_sub_ps(p34, p12), d[5]);
}

/* G^T X G for 8 outputs (vector lanes) and one input from the 36 vectors X[xi * xs]: output lane l's 9 taps
 * into o[l * os] */
static void filter_grad8(const float *X, int64_t xs, float *o, int64_t os) {
    __m256 t[3][6];
    for (int b = 0; b < 6; b++) { /* columns: G^T X */
        __m256 col[6], g[3];
        for (int a = 0; a < 6; a++) col[a] = _mm256_loadu_ps(X + (a * 6 + b) * xs);
        gt6(col, g);
        for (int r = 0; r < 3; r++) t[r][b] = g[r];
    }
    float lanes[9][V8];
    for (int r = 0; r < 3; r++) { /* rows: (G^T X) G */
        __m256 g[3];
        gt6(t[r], g);
        for (int q = 0; q < 3; q++) _mm256_storeu_ps(lanes[r * 3 + q], g[q]);
    }
    for (int l = 0; l < V8; l++)
        for (int i = 0; i < 9; i++) o[l * os + i] = lanes[i][l];
}

/* dw's rows k0 .. k0 + nk - 1 at inputs c0 .. c0 + 7 (=, or += when acc) from blk [nk][8][9], 72 floats a row */
static void put_rows(const float *blk, int64_t nk, int64_t C, int64_t k0, int64_t c0, int acc, float *dw) {
    for (int64_t k = 0; k < nk; k++) {
        float *d = dw + ((k0 + k) * C + c0) * 9;
        const float *b = blk + k * 72;
        if (!acc) memcpy(d, b, 72 * sizeof(float));
        else
            for (int i = 0; i < 72; i++) d[i] += b[i];
    }
}

#define BW_RUN 32                     /* tiles summed in registers before they are added to the block: the
                                       * error of a float sum grows with its length */
#define BW_XG 6                       /* xi a block covers when dU keeps the sums */
#define BW_CHUNK_BYTES (12 << 20)     /* V and Mdy of a chunk: within a Zen 3's L3 (32 MiB) */

typedef struct {
    const kiln_wino_shape *s;
    tiling T;
    int64_t nchunks, nxg, nkp;
    int fused;
    float *V, *Mdy, *dU;
} bw_plan;

static int64_t forced_chunk;
void kiln_cpu_wino_force_bw_chunk(int64_t tiles) { forced_chunk = tiles; }

static bw_plan bw_plan_of(const kiln_wino_shape *s, int nt) {
    bw_plan P = {.s = s, .T = tiling_of(s, 0)};
    int64_t tc = BW_CHUNK_BYTES / (int64_t)(NXI * (s->c + s->k) * sizeof(float));
    tc = forced_chunk > 0 ? forced_chunk : tc < 16 ? 16 : tc;
    P.T.tb = tc < P.T.ntiles ? tc : P.T.ntiles;
    P.nchunks = (P.T.ntiles + P.T.tb - 1) / P.T.tb;
    P.nkp = (s->k / V8 + 1) / 2;
    P.fused = P.nchunks == 1 && (s->c / V8) * P.nkp >= 4 * nt;
    P.nxg = P.fused ? 1 : NXI / BW_XG;
    return P;
}

/* block `it` (xi group, 8 inputs, 16 outputs) of chunk ch: its sums over the chunk's tn tiles, from dU (or
 * zeros in the first chunk) into dU, or in the fused form through G^T . G into dw */
static void bw_block(const bw_plan *P, int64_t it, int64_t ch, int64_t tn, int acc_dw, float *dw) {
    const kiln_wino_shape *s = P->s;
    int64_t C = s->c, K = s->k, CB = C / V8, KB = K / V8, tc = P->T.tb;
    int64_t kp = it % P->nkp, cb = it / P->nkp % CB, xg = it / P->nkp / CB;
    int nk = 2 * kp + 1 < KB ? 2 : 1, x0 = P->fused ? 0 : (int)xg * BW_XG, x1 = P->fused ? NXI : x0 + BW_XG;
    float acc[NXI][V8][16] __attribute__((aligned(32)));
    if (ch == 0) memset(acc, 0, sizeof acc);
    else
        for (int xi = x0; xi < x1; xi++)
            for (int i = 0; i < V8; i++)
                memcpy(acc[xi - x0][i], P->dU + (xi * C + cb * V8 + i) * K + kp * 16, (size_t)nk * V8 * sizeof(float));
    for (int xi = x0; xi < x1; xi++) {
        const float *v = P->V + ((xi * CB + cb) * tc) * V8, *m0 = P->Mdy + ((xi * KB + 2 * kp) * tc) * V8;
        for (int i = 0; i < V8; i += 4)
            for (int64_t t = 0; t < tn; t += BW_RUN) { /* registers sum a run of tiles, the block sums the runs */
                int64_t n = tn - t < BW_RUN ? tn - t : BW_RUN, o = t * V8;
                if (nk == 2) sums_4xn(v + o + i, m0 + o, m0 + tc * V8 + o, n, 2, acc[xi - x0][i], 16);
                else sums_4xn(v + o + i, m0 + o, m0 + o, n, 1, acc[xi - x0][i], 16);
            }
    }
    if (P->fused) {
        float blk[16 * 72];
        for (int i = 0; i < V8; i++)
            for (int h = 0; h < nk; h++) filter_grad8(acc[0][i] + h * V8, V8 * 16, blk + h * V8 * 72 + i * 9, 72);
        put_rows(blk, nk * V8, C, kp * 16, cb * V8, acc_dw, dw);
        return;
    }
    for (int xi = x0; xi < x1; xi++)
        for (int i = 0; i < V8; i++)
            memcpy(P->dU + (xi * C + cb * V8 + i) * K + kp * 16, acc[xi - x0][i], (size_t)nk * V8 * sizeof(float));
}

/* ---- small c k: each thread sums its own blocks of tiles into its own dU (in L2: 36 c k floats), V and Mdy
 * a block at a time; the threads' sums are added in thread order (static schedule: the bits depend on the
 * thread count alone). Faster than the chunks up to 64 x 64 channels, whose V and Mdy make a round trip
 * through L3 (measured on a Zen 3 at resnet20's and resnet18's shapes) ---- */
static int small_ck(const kiln_wino_shape *s) { return s->c * s->k <= 64 * 64; }

static int64_t small_tb(const kiln_wino_shape *s) { return (s->c > s->k ? s->c : s->k) <= 32 ? 24 : 12; }

static int64_t small_per_thread(const kiln_wino_shape *s) {
    return NXI * (small_tb(s) * (s->c + s->k) + s->c * s->k);
}

/* dU[xi][c][k] += the block's sums (tb tiles) */
static void small_sums(const kiln_wino_shape *s, int64_t tb, const float *V, const float *Mdy, float *dU) {
    int64_t C = s->c, K = s->k, KB = K / V8, CB = C / V8;
    for (int xi = 0; xi < NXI; xi++) {
        const float *Vx = V + xi * CB * tb * V8, *Mx = Mdy + xi * KB * tb * V8;
        float *Ux = dU + xi * C * K;
        for (int64_t c = 0; c < C; c += 4) {
            const float *v = Vx + (c / V8) * tb * V8 + c % V8;
            int64_t kb = 0;
            for (; kb + 2 <= KB; kb += 2) sums_4xn(v, Mx + kb * tb * V8, Mx + (kb + 1) * tb * V8, tb, 2, Ux + c * K + kb * V8, K);
            if (kb < KB) sums_4xn(v, Mx + kb * tb * V8, Mx + kb * tb * V8, tb, 1, Ux + c * K + kb * V8, K);
        }
    }
}

/* dw (=, or += when acc) from the sums dU [36][c][k], 8 outputs x 8 inputs at a time (within a parallel region) */
static void dw_from_sums(const kiln_wino_shape *s, const float *dU, int acc, float *dw) {
    int64_t KB = s->k / V8;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < KB * (s->c / V8); b++) {
        int64_t kb = b % KB, c0 = b / KB * V8;
        float blk[V8 * 72];
        for (int i = 0; i < V8; i++) filter_grad8(dU + (c0 + i) * s->k + kb * V8, s->c * s->k, blk + i * 9, 72);
        put_rows(blk, V8, s->c, kb * V8, c0, acc, dw);
    }
}

static void small_bwd_weight(const kiln_wino_shape *s, const float *x, const float *dy, float *dw, int acc, float *base) {
    tiling T = tiling_of(s, small_tb(s));
    int64_t nblocks = (T.ntiles + T.tb - 1) / T.tb, nu = NXI * s->c * s->k, per = small_per_thread(s);
#pragma omp parallel num_threads(threads(s))
    {
#ifdef _OPENMP
        int me = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        int me = 0, nt = 1;
#endif
        float *dU = base + (int64_t)me * per, *V = dU + nu, *Mdy = V + NXI * T.tb * s->c;
        memset(dU, 0, (size_t)nu * sizeof(float));
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < nblocks; blk++) {
            input_transform(&T, x, blk * T.tb, 0, T.tb, V);
            dy_transform(&T, dy, blk * T.tb, 0, T.tb, Mdy);
            small_sums(s, T.tb, V, Mdy, dU);
        }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < nu; i++) /* the threads' sums, added in thread order */
            for (int k = 1; k < nt; k++) base[i] += base[(int64_t)k * per + i];
        dw_from_sums(s, base, acc, dw);
    }
}

size_t kiln_cpu_wino_bwd_weight_workspace(const kiln_wino_shape *s) {
    if (small_ck(s)) return (size_t)(small_per_thread(s) * threads(s)) * sizeof(float) + 64;
    bw_plan P = bw_plan_of(s, threads(s));
    int64_t n = NXI * P.T.tb * (s->c + s->k) + (P.fused ? 0 : NXI * s->c * s->k);
    return (size_t)n * sizeof(float) + 64;
}

void kiln_cpu_wino_bwd_weight(const kiln_wino_shape *s, const float *x, const float *dy, float *dw, int acc, void *ws) {
    float *base = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    if (small_ck(s)) {
        small_bwd_weight(s, x, dy, dw, acc, base);
        return;
    }
    int nt = threads(s);
    bw_plan P = bw_plan_of(s, nt);
    int64_t tc = P.T.tb, nblocks = P.nxg * (s->c / V8) * P.nkp;
    P.V = base;
    P.Mdy = P.V + NXI * tc * s->c;
    P.dU = P.Mdy + NXI * tc * s->k;
#pragma omp parallel num_threads(nt)
    {
        for (int64_t ch = 0; ch < P.nchunks; ch++) {
            int64_t t0 = ch * tc, tn = P.T.ntiles - t0 < tc ? P.T.ntiles - t0 : tc;
#pragma omp for schedule(static)
            for (int64_t j = 0; j < tn; j++) {
                input_transform(&P.T, x, t0, j, j + 1, P.V);
                dy_transform(&P.T, dy, t0, j, j + 1, P.Mdy);
            }
            /* dynamic: a block's sums do not depend on the thread that makes them, and a core shared with
             * another process then holds nobody up */
#pragma omp for schedule(dynamic, 2)
            for (int64_t it = 0; it < nblocks; it++) bw_block(&P, it, ch, tn, acc, dw);
        }
        if (!P.fused) dw_from_sums(s, P.dU, acc, dw);
    }
}
