/* He et al.'s option-A shortcut as one op, float, each side plain NCHW or
 * nChw16c (blocked: [n, c/16, h, w, 16]), so a ResNet's blocked chain needs no
 * reorder around it (the layout pass keeps x and y blocked):
 *     y[i, k, p, q] = x[i, k - before, p * s, q * s]  (before <= k < before + c), else 0.
 * One image per thread: a blocked image's 16 channels share cache lines, which
 * two threads writing apart would pass back and forth. */
#include <string.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

/* channel ch's first element in one image of hw pixels (its pixels then lie 16 apart when blocked, else 1) */
static int64_t chan_at(int blocked, int64_t ch, int64_t hw) { return blocked ? (ch / 16) * hw * 16 + ch % 16 : ch * hw; }

/* Both sides blocked: a destination block's 16 lanes are channels b * 16 + shift ..
 * + 15 of the source, i.e. the tail of one source block and the head of the next
 * (blocks outside the source are zeros: channels are padded by whole channels). */
typedef struct {
    const float *lo, *hi; /* the two source blocks' first pixels in this image, NULL: zeros */
    int64_t r;            /* the first lane taken from lo */
} lane_src;

static lane_src block_src(const float *img, int64_t blocks, int64_t hw, int64_t b, int64_t shift) {
    int64_t base = b * 16 + shift, b0 = base >= 0 ? base / 16 : -((15 - base) / 16);
    lane_src L = {NULL, NULL, base - b0 * 16};
    if (b0 >= 0 && b0 < blocks) L.lo = img + b0 * hw * 16;
    if (b0 + 1 >= 0 && b0 + 1 < blocks) L.hi = img + (b0 + 1) * hw * 16;
    return L;
}

/* dst's 16 lanes (=, or += when acc) from source pixel pix */
static inline void lanes_at(const lane_src *L, int64_t pix, float *restrict dst, int acc) {
    float t[32];
    if (L->lo) memcpy(t, L->lo + pix * 16, 64);
    else memset(t, 0, 64);
    if (L->hi) memcpy(t + 16, L->hi + pix * 16, 64);
    else memset(t + 16, 0, 64);
    if (acc)
        for (int l = 0; l < 16; l++) dst[l] += t[L->r + l];
    else memcpy(dst, t + L->r, 64);
}

/* built for AVX-512 machines and for any x86-64, chosen when the program starts, as batch_norm.c's */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HOT
#endif

HOT static void blocked_fwd(const kiln_subsample_shape *S, const float *x, float *y) {
    int64_t oc = S->c + S->before + S->after, oh = (S->h + S->s - 1) / S->s, ow = (S->w + S->s - 1) / S->s;
    int64_t hw = S->h * S->w, ohw = oh * ow;
#pragma omp parallel for schedule(static) if (S->n * oc * ohw >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < S->n; i++)
        for (int64_t b = 0; b < oc / 16; b++) {
            lane_src L = block_src(x + i * S->c * hw, S->c / 16, hw, b, -S->before);
            float *yb = y + i * oc * ohw + b * ohw * 16;
            for (int64_t p = 0; p < oh; p++)
                for (int64_t q = 0; q < ow; q++) lanes_at(&L, p * S->s * S->w + q * S->s, yb + (p * ow + q) * 16, 0);
        }
}

HOT static void blocked_bwd(const kiln_subsample_shape *S, const float *dy, float *dx, int acc) {
    int64_t oc = S->c + S->before + S->after, oh = (S->h + S->s - 1) / S->s, ow = (S->w + S->s - 1) / S->s;
    int64_t hw = S->h * S->w, ohw = oh * ow;
#pragma omp parallel for schedule(static) if (S->n * S->c * hw >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < S->n; i++)
        for (int64_t b = 0; b < S->c / 16; b++) {
            lane_src L = block_src(dy + i * oc * ohw, oc / 16, ohw, b, S->before);
            float *db = dx + i * S->c * hw + b * hw * 16;
            for (int64_t h = 0; h < S->h; h++)
                for (int64_t w = 0; w < S->w; w++) {
                    float *d = db + (h * S->w + w) * 16;
                    if (h % S->s == 0 && w % S->s == 0) lanes_at(&L, (h / S->s) * ow + w / S->s, d, acc);
                    else if (!acc)
                        for (int l = 0; l < 16; l++) d[l] = 0.0f;
                }
        }
}

void kiln_cpu_subsample_pad(const kiln_subsample_shape *S, int x_blocked, int y_blocked, const float *x, float *y) {
    if (x_blocked && y_blocked) {
        blocked_fwd(S, x, y);
        return;
    }
    int64_t oc = S->c + S->before + S->after, oh = (S->h + S->s - 1) / S->s, ow = (S->w + S->s - 1) / S->s;
    int64_t hw = S->h * S->w, ohw = oh * ow, xp = x_blocked ? 16 : 1, yp = y_blocked ? 16 : 1;
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
        blocked_bwd(S, dy, dx, acc);
        return;
    }
    int64_t oc = S->c + S->before + S->after, oh = (S->h + S->s - 1) / S->s, ow = (S->w + S->s - 1) / S->s;
    int64_t hw = S->h * S->w, ohw = oh * ow, xp = dx_blocked ? 16 : 1, yp = dy_blocked ? 16 : 1;
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
