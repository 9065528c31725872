/* He et al.'s option-A shortcut as one op, float, each side plain NCHW or
 * nChw16c / nChw8c (blocked = B: [n, c/B, h, w, B]), so a ResNet's blocked chain needs no
 * reorder around it (the layout pass keeps x and y blocked):
 *     y[i, k, p, q] = x[i, k - before, p * s, q * s]  (before <= k < before + c), else 0.
 * One image per thread: a blocked image's B channels share cache lines, which
 * two threads writing apart would pass back and forth. */
#include <string.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

/* channel ch's first element in one image of hw pixels (its pixels then lie B apart when blocked, else 1) */
static int64_t chan_at(int B, int64_t ch, int64_t hw) { return B ? (ch / B) * hw * B + ch % B : ch * hw; }

/* Both sides blocked: a destination block's B lanes are channels b * B + shift ..
 * + B - 1 of the source, i.e. the tail of one source block and the head of the next
 * (blocks outside the source are zeros: channels are padded by whole channels). */
typedef struct {
    const float *lo, *hi; /* the two source blocks' first pixels in this image, NULL: zeros */
    int64_t r;            /* the first lane taken from lo */
    int B;                /* the block */
} lane_src;

static lane_src block_src(const float *img, int B, int64_t blocks, int64_t hw, int64_t b, int64_t shift) {
    int64_t base = b * B + shift, b0 = base >= 0 ? base / B : -((B - 1 - base) / B);
    lane_src L = {NULL, NULL, base - b0 * B, B};
    if (b0 >= 0 && b0 < blocks) L.lo = img + b0 * hw * B;
    if (b0 + 1 >= 0 && b0 + 1 < blocks) L.hi = img + (b0 + 1) * hw * B;
    return L;
}

/* dst's B lanes (=, or += when acc) from source pixel pix */
static inline void lanes_at(const lane_src *L, int64_t pix, float *restrict dst, int acc) {
    float t[32];
    int B = L->B;
    size_t bytes = (size_t)B * sizeof(float);
    if (L->lo) memcpy(t, L->lo + pix * B, bytes);
    else memset(t, 0, bytes);
    if (L->hi) memcpy(t + B, L->hi + pix * B, bytes);
    else memset(t + B, 0, bytes);
    if (acc)
        for (int l = 0; l < B; l++) dst[l] += t[L->r + l];
    else memcpy(dst, t + L->r, bytes);
}

/* built for AVX-512 machines and for any x86-64, chosen when the program starts, as batch_norm.c's */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HOT
#endif

HOT static void blocked_fwd(const kiln_subsample_shape *S, int B, const float *x, float *y) {
    int64_t oc = S->c + S->before + S->after, oh = (S->h + S->s - 1) / S->s, ow = (S->w + S->s - 1) / S->s;
    int64_t hw = S->h * S->w, ohw = oh * ow;
#pragma omp parallel for schedule(static) if (S->n * oc * ohw >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < S->n; i++)
        for (int64_t b = 0; b < oc / B; b++) {
            lane_src L = block_src(x + i * S->c * hw, B, S->c / B, hw, b, -S->before);
            float *yb = y + i * oc * ohw + b * ohw * B;
            if (L.r == 0) { /* `before` a multiple of B (ResNets' shortcuts): one source block, or zeros */
                if (!L.lo) memset(yb, 0, (size_t)(ohw * B) * sizeof *yb);
                for (int64_t p = 0; p < oh && L.lo; p++)
                    for (int64_t q = 0; q < ow; q++)
                        memcpy(yb + (p * ow + q) * B, L.lo + (p * S->s * S->w + q * S->s) * B, (size_t)B * sizeof *yb);
                continue;
            }
            for (int64_t p = 0; p < oh; p++)
                for (int64_t q = 0; q < ow; q++) lanes_at(&L, p * S->s * S->w + q * S->s, yb + (p * ow + q) * B, 0);
        }
}

HOT static void blocked_bwd(const kiln_subsample_shape *S, int B, const float *dy, float *dx, int acc) {
    int64_t oc = S->c + S->before + S->after, oh = (S->h + S->s - 1) / S->s, ow = (S->w + S->s - 1) / S->s;
    int64_t hw = S->h * S->w, ohw = oh * ow;
#pragma omp parallel for schedule(static) if (S->n * S->c * hw >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < S->n; i++)
        for (int64_t b = 0; b < S->c / B; b++) {
            lane_src L = block_src(dy + i * oc * ohw, B, oc / B, ohw, b, S->before);
            float *db = dx + i * S->c * hw + b * hw * B;
            for (int64_t h = 0; h < S->h; h++)
                for (int64_t w = 0; w < S->w; w++) {
                    float *d = db + (h * S->w + w) * B;
                    if (h % S->s == 0 && w % S->s == 0 && L.r == 0 && L.lo) { /* one source block (ResNets') */
                        const float *g = L.lo + ((h / S->s) * ow + w / S->s) * B;
                        if (acc)
                            for (int l = 0; l < B; l++) d[l] += g[l];
                        else memcpy(d, g, (size_t)B * sizeof *d);
                    } else if (h % S->s == 0 && w % S->s == 0) lanes_at(&L, (h / S->s) * ow + w / S->s, d, acc);
                    else if (!acc)
                        for (int l = 0; l < B; l++) d[l] = 0.0f;
                }
        }
}

void kiln_cpu_subsample_pad(const kiln_subsample_shape *S, int x_blocked, int y_blocked, const float *x, float *y) {
    if (x_blocked && y_blocked) {
        blocked_fwd(S, x_blocked, x, y);
        return;
    }
    int64_t oc = S->c + S->before + S->after, oh = (S->h + S->s - 1) / S->s, ow = (S->w + S->s - 1) / S->s;
    int64_t hw = S->h * S->w, ohw = oh * ow, xp = x_blocked ? x_blocked : 1, yp = y_blocked ? y_blocked : 1;
#pragma omp parallel for schedule(static) if (S->n * oc * ohw >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < S->n; i++)
        for (int64_t k = 0; k < oc; k++) {
            float *yk = y + i * oc * ohw + chan_at(y_blocked, k, ohw);
            int64_t c = k - S->before;
            if (c < 0 || c >= S->c) {
                for (int64_t p = 0; p < ohw; p++) yk[p * yp] = 0.0f;
                continue;
            }
            const float *xc = x + i * S->c * hw + chan_at(x_blocked, c, hw);
            for (int64_t p = 0; p < oh; p++)
                for (int64_t q = 0; q < ow; q++) yk[(p * ow + q) * yp] = xc[(p * S->s * S->w + q * S->s) * xp];
        }
}

void kiln_cpu_subsample_pad_bwd(const kiln_subsample_shape *S, int dy_blocked, int dx_blocked, const float *dy, float *dx,
                                int acc) {
    if (dy_blocked && dx_blocked) {
        blocked_bwd(S, dx_blocked, dy, dx, acc);
        return;
    }
    int64_t oc = S->c + S->before + S->after, oh = (S->h + S->s - 1) / S->s, ow = (S->w + S->s - 1) / S->s;
    int64_t hw = S->h * S->w, ohw = oh * ow, xp = dx_blocked ? dx_blocked : 1, yp = dy_blocked ? dy_blocked : 1;
#pragma omp parallel for schedule(static) if (S->n * S->c * hw >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < S->n; i++)
        for (int64_t c = 0; c < S->c; c++) {
            float *dxc = dx + i * S->c * hw + chan_at(dx_blocked, c, hw);
            const float *dyk = dy + i * oc * ohw + chan_at(dy_blocked, c + S->before, ohw);
            for (int64_t h = 0; h < S->h; h++)
                for (int64_t w = 0; w < S->w; w++) {
                    float g = h % S->s == 0 && w % S->s == 0 ? dyk[((h / S->s) * ow + w / S->s) * yp] : 0.0f;
                    float *d = &dxc[(h * S->w + w) * xp];
                    *d = acc ? *d + g : g;
                }
        }
}
