/* Max-pool over plain or blocked (nChw16c) input and output, with the relu
 * backward optionally folded into the pool's backward. Keeping conv outputs
 * in oneDNN's blocked layout saves a reorder of the largest activation each
 * way; folding relu saves a full read-modify-write pass over it. Whenever a
 * side is blocked the work goes 16 channels at a time: a window's pixels are
 * rows of 16 lanes, each side read through a pixel stride and a lane stride
 * (blocked: 16 and 1; plain: 1 and h*w), so any window, stride and padding
 * (ResNet's 3x3 stride-2 stem pool) vectorizes over the lanes; 2x2 stride 2
 * into a plain output keeps its AVX-512 kernel (mnist-cnn). */
#include <stdint.h>
#include <string.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

/* the loops over 16 lanes are built for AVX-512 machines and any x86-64, chosen at start (as batch norm's) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HOT
#endif
#define L 16

/* one side of a 16-channel block: element (pixel k, lane l) at p[k * pix + l * lane] */
typedef struct {
    const float *p;
    int64_t pix, lane;
} lanes16;

/* block b (image n, channels c0..c0+15) of a tensor of hw pixels a plane, blocked or plain */
static lanes16 block_of(const kiln_pool_shape *ps, int blocked, const float *t, int64_t b, int64_t hw) {
    int64_t n = b / (ps->c / L), c0 = (b % (ps->c / L)) * L;
    if (blocked) return (lanes16){t + b * hw * L, L, 1};
    return (lanes16){t + (n * ps->c + c0) * hw, 1, hw};
}

/* window (i, j)'s maximum over one block into m and, when best is given, per lane the pixel that holds
 * it (the first in row-major window order, as the reference); branch-free so the lanes vectorize.
 * Inlined with the x side's strides, constants (16, 1) for a blocked x, and best NULL or not */
static inline __attribute__((always_inline)) void window_max(const kiln_pool_shape *ps, const float *restrict xp,
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

static inline __attribute__((always_inline)) void fwd_body(const kiln_pool_shape *ps, lanes16 x, int64_t xpix,
                                                           int64_t xlane, lanes16 y) {
    float *yp = (float *)y.p;
    for (int64_t i = 0; i < ps->oh; i++)
        for (int64_t j = 0; j < ps->ow; j++) {
            float m[L];
            window_max(ps, x.p, xpix, xlane, i, j, m, NULL);
            float *o = yp + (i * ps->ow + j) * y.pix;
            for (int l = 0; l < L; l++) o[l * y.lane] = m[l];
        }
}

/* any window over one block */
HOT static void block_fwd(const kiln_pool_shape *ps, lanes16 x, lanes16 y) {
    if (x.lane == 1) fwd_body(ps, x, L, 1, y);
    else fwd_body(ps, x, x.pix, x.lane, y);
}

/* each window's gradient to its first maximum (none where relu_mask and the maximum is not > 0); dx
 * (laid out as x) is cleared first unless acc */
static inline __attribute__((always_inline)) void bwd_body(const kiln_pool_shape *ps, int relu_mask, lanes16 x,
                                                           int64_t xpix, int64_t xlane, lanes16 dy, float *dx, int acc) {
    if (!acc)
        for (int64_t k = 0; k < ps->h * ps->w; k++)
            for (int l = 0; l < L; l++) dx[k * xpix + l * xlane] = 0.0f;
    for (int64_t i = 0; i < ps->oh; i++)
        for (int64_t j = 0; j < ps->ow; j++) {
            float m[L];
            int32_t best[L];
            window_max(ps, x.p, xpix, xlane, i, j, m, best);
            const float *g = dy.p + (i * ps->ow + j) * dy.pix;
            for (int l = 0; l < L; l++)
                if (!relu_mask || m[l] > 0.0f) dx[best[l] * xpix + l * xlane] += g[l * dy.lane];
        }
}

HOT static void block_bwd(const kiln_pool_shape *ps, int relu_mask, lanes16 x, lanes16 dy, float *dx, int acc) {
    if (x.lane == 1) bwd_body(ps, relu_mask, x, L, 1, dy, dx, acc);
    else bwd_body(ps, relu_mask, x, x.pix, x.lane, dy, dx, acc);
}

/* offset of (n, c, h, w) in the input layout */
/* 2x2 stride 2 over one [h, w, 16] block of 16 channels; y rows are NCHW planes */
static void pool2_blocked_fwd(const kiln_pool_shape *ps, const float *restrict xb, float *restrict y0) {
    int64_t ohw = ps->oh * ps->ow;
    for (int64_t i = 0; i < ps->oh; i++)
        for (int64_t j = 0; j < ps->ow; j++) {
            const float *a = xb + ((2 * i) * ps->w + 2 * j) * 16, *b = a + 16, *c = a + ps->w * 16, *d = c + 16;
            float m[16];
#pragma omp simd
            for (int l = 0; l < 16; l++) {
                float v = a[l];
                v = b[l] > v ? b[l] : v;
                v = c[l] > v ? c[l] : v;
                v = d[l] > v ? d[l] : v;
                m[l] = v;
            }
            for (int l = 0; l < 16; l++) y0[l * ohw + i * ps->ow + j] = m[l];
        }
}

static void pool2_blocked_bwd(const kiln_pool_shape *ps, int relu_mask, const float *restrict xb,
                              const float *restrict dy0, float *restrict db, int acc) {
    int64_t ohw = ps->oh * ps->ow;
    if (!acc && (ps->h != 2 * ps->oh || ps->w != 2 * ps->ow)) memset(db, 0, (size_t)(ps->h * ps->w * 16) * sizeof *db);
    for (int64_t i = 0; i < ps->oh; i++)
        for (int64_t j = 0; j < ps->ow; j++) {
            int64_t o = ((2 * i) * ps->w + 2 * j) * 16;
            const float *a = xb + o, *b = a + 16, *c = a + ps->w * 16, *d = c + 16;
            float *da = db + o, *dbb = da + 16, *dc = da + ps->w * 16, *dd = dc + 16;
            float g[16];
            for (int l = 0; l < 16; l++) g[l] = dy0[l * ohw + i * ps->ow + j];
#pragma omp simd
            for (int l = 0; l < 16; l++) {
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

void kiln_cpu_max_pool2d_fwd_layout(const kiln_pool_shape *ps, int blocked, int y_blocked, const float *x, float *y) {
    if (!blocked && !y_blocked) {
        kiln_cpu_max_pool2d_fwd(ps, x, y);
        return;
    }
    int64_t cb = ps->c / 16, ohw = ps->oh * ps->ow, blk = ps->h * ps->w * 16;
    int fast = blocked && !y_blocked && ps->k == 2 && ps->stride == 2 && ps->pad == 0;
    int avx512 = kiln_cpu_has_avx512() && ((uintptr_t)x & 63) == 0;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < ps->n * cb; p++) {
        int64_t n = p / cb, c0 = (p % cb) * 16;
        float *y0 = y + (n * ps->c + c0) * ohw;
        if (fast && avx512) kiln_cpu_pool2_blocked_fwd_avx512(ps->w, ps->oh, ps->ow, x + p * blk, y0);
        else if (fast) pool2_blocked_fwd(ps, x + p * blk, y0);
        else block_fwd(ps, block_of(ps, blocked, x, p, ps->h * ps->w), block_of(ps, y_blocked, y, p, ohw));
    }
}

void kiln_cpu_max_pool2d_bwd_layout(const kiln_pool_shape *ps, int blocked, int dy_blocked, int relu_mask,
                                    const float *x, const float *dy, float *dx, int acc) {
    if (!blocked && !dy_blocked && !relu_mask) {
        kiln_cpu_max_pool2d_bwd(ps, x, dy, dx, acc);
        return;
    }
    int64_t ohw = ps->oh * ps->ow;
    if (blocked || dy_blocked) { /* then c % 16 == 0 */
        int64_t cb = ps->c / 16, blk = ps->h * ps->w * 16;
        int fast = blocked && !dy_blocked && ps->k == 2 && ps->stride == 2 && ps->pad == 0;
        int avx512 = kiln_cpu_has_avx512() && (((uintptr_t)x | (uintptr_t)dx) & 63) == 0;
#pragma omp parallel for schedule(static)
        for (int64_t p = 0; p < ps->n * cb; p++) {
            int64_t n = p / cb, c0 = (p % cb) * 16;
            if (!fast) {
                lanes16 xb = block_of(ps, blocked, x, p, ps->h * ps->w);
                block_bwd(ps, relu_mask, xb, block_of(ps, dy_blocked, dy, p, ohw), dx + (xb.p - x), acc);
            } else if (avx512) {
                float *db = dx + p * blk;
                /* rows/cols past the last window (odd sizes) get no gradient */
                if (!acc && (ps->h != 2 * ps->oh || ps->w != 2 * ps->ow)) memset(db, 0, (size_t)blk * sizeof *db);
                kiln_cpu_pool2_blocked_bwd_avx512(ps->w, ps->oh, ps->ow, relu_mask, x + p * blk, dy + (n * ps->c + c0) * ohw, db, acc);
            } else {
                pool2_blocked_bwd(ps, relu_mask, x + p * blk, dy + (n * ps->c + c0) * ohw, dx + p * blk, acc);
            }
        }
        return;
    }
    kiln_cpu_max_pool2d_relu_bwd(ps, x, dy, dx, acc); /* plain, relu folded in */
}
