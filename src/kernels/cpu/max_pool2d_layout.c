/* Max-pool over plain or blocked (nChw16c or nChw8c) input and output, with the relu
 * backward optionally folded into the pool's backward. Keeping conv outputs
 * in oneDNN's blocked layout saves a reorder of the largest activation each
 * way; folding relu saves a full read-modify-write pass over it. Whenever a
 * side is blocked the work goes a block (B = 16 or 8 channels) at a time: a
 * window's pixels are rows of B lanes, each side read through a pixel stride
 * and a lane stride (blocked: B and 1; plain: 1 and h*w), so any window, stride and padding
 * (ResNet's 3x3 stride-2 stem pool) vectorizes over the lanes; 2x2 stride 2
 * into a plain output keeps its AVX-512 kernel (mnist-cnn). */
#include <stdint.h>
#include <string.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

/* the loops over the lanes are built for AVX-512 machines and any x86-64, chosen at start (as batch norm's) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HOT
#endif
#define LMAX 16

/* one side of a block of B channels: element (pixel k, lane l) at p[k * pix + l * lane] */
typedef struct {
    const float *p;
    int64_t pix, lane;
} block_side;

/* block b (image n, channels c0..c0+B-1) of a tensor of hw pixels a plane, blocked or plain */
static block_side block_of(const kiln_pool_shape *ps, int B, int blocked, const float *t, int64_t b, int64_t hw) {
    int64_t n = b / (ps->c / B), c0 = (b % (ps->c / B)) * B;
    if (blocked) return (block_side){t + b * hw * B, B, 1};
    return (block_side){t + (n * ps->c + c0) * hw, 1, hw};
}

/* window (i, j)'s maximum over one block into m and, when best is given, per lane the pixel that holds
 * it (the first in row-major window order, as the reference); branch-free so the lanes vectorize.
 * Inlined with the lane count L and the x side's strides, constants (L, 1) for a blocked x, and best
 * NULL or not */
static inline __attribute__((always_inline)) void window_max(const kiln_pool_shape *ps, int L, const float *restrict xp,
                                                             int64_t pix, int64_t lane, int64_t i, int64_t j, float *m,
                                                             int32_t *best) {
    int64_t h0, h1, w0, w1;
    kiln_pool_window(ps, i, ps->h, &h0, &h1);
    kiln_pool_window(ps, j, ps->w, &w0, &w1);
    const float *f = xp + (h0 * ps->w + w0) * pix;
    for (int l = 0; l < L; l++) m[l] = f[l * lane];
    if (best)
        for (int l = 0; l < L; l++) best[l] = (int32_t)(h0 * ps->w + w0);
    for (int64_t r = h0; r < h1; r++)
        for (int64_t q = w0; q < w1; q++) {
            const float *v = xp + (r * ps->w + q) * pix;
            int32_t k = (int32_t)(r * ps->w + q);
            if (!best) {
#pragma omp simd
                for (int l = 0; l < L; l++) m[l] = v[l * lane] > m[l] ? v[l * lane] : m[l];
                continue;
            }
#pragma omp simd
            for (int l = 0; l < L; l++) {
                float a = v[l * lane];
                int gt = a > m[l];
                m[l] = gt ? a : m[l];
                best[l] = gt ? k : best[l];
            }
        }
}

static inline __attribute__((always_inline)) void fwd_body(const kiln_pool_shape *ps, int L, block_side x, int64_t xpix,
                                                           int64_t xlane, block_side y) {
    float *yp = (float *)y.p;
    for (int64_t i = 0; i < ps->oh; i++)
        for (int64_t j = 0; j < ps->ow; j++) {
            float m[LMAX];
            window_max(ps, L, x.p, xpix, xlane, i, j, m, NULL);
            float *o = yp + (i * ps->ow + j) * y.pix;
            for (int l = 0; l < L; l++) o[l * y.lane] = m[l];
        }
}

/* any window over one block of B channels */
HOT static void block_fwd(const kiln_pool_shape *ps, int B, block_side x, block_side y) {
    if (B == 16 && x.lane == 1) fwd_body(ps, 16, x, 16, 1, y);
    else if (B == 16) fwd_body(ps, 16, x, x.pix, x.lane, y);
    else if (x.lane == 1) fwd_body(ps, 8, x, 8, 1, y);
    else fwd_body(ps, 8, x, x.pix, x.lane, y);
}

/* each window's gradient to its first maximum (none where relu_mask and the maximum is not > 0); dx
 * (laid out as x) is cleared first unless acc */
static inline __attribute__((always_inline)) void bwd_body(const kiln_pool_shape *ps, int L, int relu_mask, block_side x,
                                                           int64_t xpix, int64_t xlane, block_side dy, float *dx, int acc) {
    if (!acc)
        for (int64_t k = 0; k < ps->h * ps->w; k++)
            for (int l = 0; l < L; l++) dx[k * xpix + l * xlane] = 0.0f;
    for (int64_t i = 0; i < ps->oh; i++)
        for (int64_t j = 0; j < ps->ow; j++) {
            float m[LMAX];
            int32_t best[LMAX];
            window_max(ps, L, x.p, xpix, xlane, i, j, m, best);
            const float *g = dy.p + (i * ps->ow + j) * dy.pix;
            for (int l = 0; l < L; l++)
                if (!relu_mask || m[l] > 0.0f) dx[best[l] * xpix + l * xlane] += g[l * dy.lane];
        }
}

/* 8 lanes in a vector (GCC's vector extensions, so every clone below has them) */
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
/* macros, not functions: a function taking or returning them would change the ABI in the portable clone */
#define LD8(out, p) memcpy(&(out), (p), 32)
#define ST8(p, v) memcpy((p), &(v), 32)
#define PICK(m, a, b) (((a) & (m)) | ((b) & ~(m)))

/* x and y both blocked (ResNet's stem pool): each window's maximum in a vector per 8 lanes, kept in a register
 * (fwd_body's lane loops go through memory). On a Zen 3, resnet18's 32x64x56x56 pool: medians 2.5 -> 2.1-2.5 ms,
 * near what its 38 MB of memory traffic take at the machine's ~24 GB/s */
static inline __attribute__((always_inline)) void fwd_blocked_body(const kiln_pool_shape *ps, int L, const float *x,
                                                                   float *y) {
    for (int64_t i = 0; i < ps->oh; i++) {
        int64_t h0, h1;
        kiln_pool_window(ps, i, ps->h, &h0, &h1);
        for (int64_t j = 0; j < ps->ow; j++) {
            int64_t w0, w1;
            kiln_pool_window(ps, j, ps->w, &w0, &w1);
            for (int v = 0; v < L; v += 8) {
                v8f m, a;
                LD8(m, x + (h0 * ps->w + w0) * L + v);
                for (int64_t r = h0; r < h1; r++)
                    for (int64_t q = w0; q < w1; q++) {
                        LD8(a, x + (r * ps->w + q) * L + v);
                        m = (v8f)PICK(a > m, (v8i)a, (v8i)m);
                    }
                ST8(y + (i * ps->ow + j) * L + v, m);
            }
        }
    }
}

HOT static void blocked_fwd(const kiln_pool_shape *ps, int B, const float *x, float *y) {
    if (B == 16) fwd_blocked_body(ps, 16, x, y);
    else fwd_blocked_body(ps, 8, x, y);
}

/* x, dy and dx all blocked (ResNet's stem pool in training): each window's maximum and its pixel per lane in
 * vectors, then the gradient added to each pixel of the window under the mask "is its maximum": no
 * scatter of single lanes. Windows in row-major order, each its first maximum, as the reference */
static inline __attribute__((always_inline)) void bwd_blocked_body(const kiln_pool_shape *ps, int L, int relu_mask,
                                                                   const float *x, const float *dy, float *dx, int acc) {
    if (!acc) memset(dx, 0, (size_t)(ps->h * ps->w * L) * sizeof *dx);
    for (int64_t i = 0; i < ps->oh; i++)
        for (int64_t j = 0; j < ps->ow; j++) {
            int64_t h0, h1, w0, w1;
            kiln_pool_window(ps, i, ps->h, &h0, &h1);
            kiln_pool_window(ps, j, ps->w, &w0, &w1);
            for (int v = 0; v < L; v += 8) {
                int32_t k0 = (int32_t)(h0 * ps->w + w0);
                v8f m, a, d;
                v8i g, best = (v8i){0} + k0;
                LD8(m, x + k0 * L + v);
                for (int64_t r = h0; r < h1; r++)
                    for (int64_t q = w0; q < w1; q++) {
                        int32_t k = (int32_t)(r * ps->w + q);
                        LD8(a, x + k * L + v);
                        v8i gt = a > m, kv = (v8i){0} + k;
                        m = (v8f)PICK(gt, (v8i)a, (v8i)m);
                        best = PICK(gt, kv, best);
                    }
                LD8(g, dy + (i * ps->ow + j) * L + v);
                if (relu_mask) g &= m > 0.0f;
                for (int64_t r = h0; r < h1; r++)
                    for (int64_t q = w0; q < w1; q++) {
                        int32_t k = (int32_t)(r * ps->w + q);
                        float *p = dx + k * L + v;
                        LD8(d, p);
                        d += (v8f)(g & (best == k));
                        ST8(p, d);
                    }
            }
        }
}

HOT static void block_bwd(const kiln_pool_shape *ps, int B, int relu_mask, block_side x, block_side dy, float *dx, int acc) {
    if (x.lane == 1 && dy.lane == 1 && B == 16) bwd_blocked_body(ps, 16, relu_mask, x.p, dy.p, dx, acc);
    else if (x.lane == 1 && dy.lane == 1) bwd_blocked_body(ps, 8, relu_mask, x.p, dy.p, dx, acc);
    else if (B == 16 && x.lane == 1) bwd_body(ps, 16, relu_mask, x, 16, 1, dy, dx, acc);
    else if (B == 16) bwd_body(ps, 16, relu_mask, x, x.pix, x.lane, dy, dx, acc);
    else if (x.lane == 1) bwd_body(ps, 8, relu_mask, x, 8, 1, dy, dx, acc);
    else bwd_body(ps, 8, relu_mask, x, x.pix, x.lane, dy, dx, acc);
}

/* 2x2 stride 2 over one [h, w, L] block of L channels; y rows are NCHW planes */
static inline __attribute__((always_inline)) void pool2_fwd_body(const kiln_pool_shape *ps, int L,
                                                                 const float *restrict xb, float *restrict y0) {
    int64_t ohw = ps->oh * ps->ow;
    for (int64_t i = 0; i < ps->oh; i++)
        for (int64_t j = 0; j < ps->ow; j++) {
            const float *a = xb + ((2 * i) * ps->w + 2 * j) * L, *b = a + L, *c = a + ps->w * L, *d = c + L;
            float m[LMAX];
#pragma omp simd
            for (int l = 0; l < L; l++) {
                float v = a[l];
                v = b[l] > v ? b[l] : v;
                v = c[l] > v ? c[l] : v;
                v = d[l] > v ? d[l] : v;
                m[l] = v;
            }
            for (int l = 0; l < L; l++) y0[l * ohw + i * ps->ow + j] = m[l];
        }
}

static void pool2_blocked_fwd(const kiln_pool_shape *ps, int B, const float *restrict xb, float *restrict y0) {
    if (B == 16) pool2_fwd_body(ps, 16, xb, y0);
    else pool2_fwd_body(ps, 8, xb, y0);
}

static inline __attribute__((always_inline)) void pool2_bwd_body(const kiln_pool_shape *ps, int L, int relu_mask,
                                                                 const float *restrict xb, const float *restrict dy0,
                                                                 float *restrict db, int acc) {
    int64_t ohw = ps->oh * ps->ow;
    if (!acc && (ps->h != 2 * ps->oh || ps->w != 2 * ps->ow)) memset(db, 0, (size_t)(ps->h * ps->w * L) * sizeof *db);
    for (int64_t i = 0; i < ps->oh; i++)
        for (int64_t j = 0; j < ps->ow; j++) {
            int64_t o = ((2 * i) * ps->w + 2 * j) * L;
            const float *a = xb + o, *b = a + L, *c = a + ps->w * L, *d = c + L;
            float *da = db + o, *dbb = da + L, *dc = da + ps->w * L, *dd = dc + L;
            float g[LMAX];
            for (int l = 0; l < L; l++) g[l] = dy0[l * ohw + i * ps->ow + j];
#pragma omp simd
            for (int l = 0; l < L; l++) {
                float m = a[l];
                int w = 0;
                if (b[l] > m) { m = b[l]; w = 1; }
                if (c[l] > m) { m = c[l]; w = 2; }
                if (d[l] > m) { m = d[l]; w = 3; }
                float gv = (relu_mask && !(m > 0.0f)) ? 0.0f : g[l];
                float v0 = w == 0 ? gv : 0.0f, v1 = w == 1 ? gv : 0.0f, v2 = w == 2 ? gv : 0.0f, v3 = w == 3 ? gv : 0.0f;
                if (acc) {
                    da[l] += v0; dbb[l] += v1; dc[l] += v2; dd[l] += v3;
                } else {
                    da[l] = v0; dbb[l] = v1; dc[l] = v2; dd[l] = v3;
                }
            }
        }
}

static void pool2_blocked_bwd(const kiln_pool_shape *ps, int B, int relu_mask, const float *restrict xb,
                              const float *restrict dy0, float *restrict db, int acc) {
    if (B == 16) pool2_bwd_body(ps, 16, relu_mask, xb, dy0, db, acc);
    else pool2_bwd_body(ps, 8, relu_mask, xb, dy0, db, acc);
}

void kiln_cpu_max_pool2d_fwd_layout(const kiln_pool_shape *ps, int blocked, int y_blocked, const float *x, float *y) {
    if (!blocked && !y_blocked) {
        kiln_cpu_max_pool2d_fwd(ps, x, y);
        return;
    }
    int B = blocked ? blocked : y_blocked;
    int64_t cb = ps->c / B, ohw = ps->oh * ps->ow, blk = ps->h * ps->w * B;
    int fast = blocked && !y_blocked && ps->k == 2 && ps->stride == 2 && ps->pad == 0;
    int avx512 = B == 16 && kiln_cpu_has_avx512() && ((uintptr_t)x & 63) == 0;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < ps->n * cb; p++) {
        int64_t n = p / cb, c0 = (p % cb) * B;
        float *y0 = y + (n * ps->c + c0) * ohw;
        if (fast && avx512) kiln_cpu_pool2_blocked_fwd_avx512(ps->w, ps->oh, ps->ow, x + p * blk, y0);
        else if (fast) pool2_blocked_fwd(ps, B, x + p * blk, y0);
        else if (blocked && y_blocked) blocked_fwd(ps, B, x + p * blk, y + p * ohw * B);
        else block_fwd(ps, B, block_of(ps, B, blocked, x, p, ps->h * ps->w), block_of(ps, B, y_blocked, y, p, ohw));
    }
}

void kiln_cpu_max_pool2d_bwd_layout(const kiln_pool_shape *ps, int blocked, int dy_blocked, int relu_mask,
                                    const float *x, const float *dy, float *dx, int acc) {
    if (!blocked && !dy_blocked && !relu_mask) {
        kiln_cpu_max_pool2d_bwd(ps, x, dy, dx, acc);
        return;
    }
    int64_t ohw = ps->oh * ps->ow;
    if (blocked || dy_blocked) { /* then c % B == 0 */
        int B = blocked ? blocked : dy_blocked;
        int64_t cb = ps->c / B, blk = ps->h * ps->w * B;
        int fast = blocked && !dy_blocked && ps->k == 2 && ps->stride == 2 && ps->pad == 0;
        int avx512 = B == 16 && kiln_cpu_has_avx512() && (((uintptr_t)x | (uintptr_t)dx) & 63) == 0;
#pragma omp parallel for schedule(static)
        for (int64_t p = 0; p < ps->n * cb; p++) {
            int64_t n = p / cb, c0 = (p % cb) * B;
            if (!fast) {
                block_side xb = block_of(ps, B, blocked, x, p, ps->h * ps->w);
                block_bwd(ps, B, relu_mask, xb, block_of(ps, B, dy_blocked, dy, p, ohw), dx + (xb.p - x), acc);
            } else if (avx512) {
                float *db = dx + p * blk;
                /* rows/cols past the last window (odd sizes) get no gradient */
                if (!acc && (ps->h != 2 * ps->oh || ps->w != 2 * ps->ow)) memset(db, 0, (size_t)blk * sizeof *db);
                kiln_cpu_pool2_blocked_bwd_avx512(ps->w, ps->oh, ps->ow, relu_mask, x + p * blk, dy + (n * ps->c + c0) * ohw, db, acc);
            } else {
                pool2_blocked_bwd(ps, B, relu_mask, x + p * blk, dy + (n * ps->c + c0) * ohw, dx + p * blk, acc);
            }
        }
        return;
    }
    kiln_cpu_max_pool2d_relu_bwd(ps, x, dy, dx, acc); /* plain, relu folded in */
}
