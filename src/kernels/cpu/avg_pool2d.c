/* Average pooling, float, over x in plain NCHW (blocked = 0) or nChw16c or
 * nChw8c (blocked = 16 or 8), so the end of a conv chain kept blocked (a ResNet's global
 * pool) needs no reorder; y and dy are plain NCHW. Planes (one image, one
 * channel) are split across the team; each sums its windows in float. The
 * backward gathers: every input element adds the outputs whose window holds
 * it, so no two threads write one element. */
#include <string.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

/* where plane p = (n, c) starts in x, and the distance between its elements */
static int64_t plane_base(const kiln_avg_pool_shape *ps, int blocked, int64_t p, int64_t *step) {
    int64_t n = p / ps->c, c = p % ps->c, hw = ps->h * ps->w;
    *step = blocked ? blocked : 1;
    return blocked ? ((n * (ps->c / blocked) + c / blocked) * hw) * blocked + c % blocked : p * hw;
}

void kiln_cpu_avg_pool2d_fwd(const kiln_avg_pool_shape *ps, int blocked, const float *x, float *y) {
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < ps->n * ps->c; p++) {
        int64_t st, base = plane_base(ps, blocked, p, &st);
        for (int64_t oh = 0; oh < ps->oh; oh++) {
            int64_t h0, h1, ch;
            kiln_avg_pool_window(ps, oh, ps->h, ps->oh, &h0, &h1, &ch);
            for (int64_t ow = 0; ow < ps->ow; ow++) {
                int64_t w0, w1, cw;
                kiln_avg_pool_window(ps, ow, ps->w, ps->ow, &w0, &w1, &cw);
                float s = 0;
                for (int64_t i = h0; i < h1; i++)
                    for (int64_t j = w0; j < w1; j++) s += x[base + (i * ps->w + j) * st];
                y[(p * ps->oh + oh) * ps->ow + ow] = s / (float)(ch * cw);
            }
        }
    }
}

/* the output range [*o0, *o1) whose windows hold input index i (windows are monotone in o) */
static void outputs_of(const kiln_avg_pool_shape *ps, int64_t i, int64_t in, int64_t out, int64_t *o0, int64_t *o1) {
    int64_t lo, hi, cnt, o = 0;
    if (!ps->adaptive) { /* the first window that can reach i */
        o = (i + ps->pad - ps->k) / ps->stride;
        if (o < 0) o = 0;
    }
    for (; o < out; o++) {
        kiln_avg_pool_window(ps, o, in, out, &lo, &hi, &cnt);
        if (hi > i) break;
    }
    *o0 = o;
    for (; o < out; o++) {
        kiln_avg_pool_window(ps, o, in, out, &lo, &hi, &cnt);
        if (lo > i) break;
    }
    *o1 = o;
}

/* a global pool (one output whose window is the whole plane: a ResNet's head)
 * spreads dy / (h w) over each plane; blocked, a block's channels a pixel at once.
 * The same values as the gather below, which pays a window search per element */
static int global_pool(const kiln_avg_pool_shape *ps, int64_t *count) {
    int64_t lo, hi, ch, cw;
    if (ps->oh != 1 || ps->ow != 1) return 0;
    kiln_avg_pool_window(ps, 0, ps->h, 1, &lo, &hi, &ch);
    if (lo != 0 || hi != ps->h) return 0;
    kiln_avg_pool_window(ps, 0, ps->w, 1, &lo, &hi, &cw);
    if (lo != 0 || hi != ps->w) return 0;
    *count = ch * cw;
    return 1;
}

static void global_bwd(const kiln_avg_pool_shape *ps, int blocked, int64_t count, const float *dy, float *dx, int acc) {
    int64_t hw = ps->h * ps->w, L = blocked ? blocked : 1, groups = ps->n * ps->c / L;
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < groups; g++) { /* g: one plane, or one image's block of channels */
        float v[16];
        for (int64_t l = 0; l < L; l++) v[l] = dy[g * L + l] / (float)count;
        float *d = dx + g * hw * L;
        for (int64_t q = 0; q < hw; q++)
            for (int64_t l = 0; l < L; l++) d[q * L + l] = acc ? d[q * L + l] + v[l] : v[l];
    }
}

void kiln_cpu_avg_pool2d_bwd(const kiln_avg_pool_shape *ps, int blocked, const float *dy, float *dx, int acc) {
    int64_t count;
    if (global_pool(ps, &count)) {
        global_bwd(ps, blocked, count, dy, dx, acc);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < ps->n * ps->c; p++) {
        int64_t st, base = plane_base(ps, blocked, p, &st);
        const float *g = dy + p * ps->oh * ps->ow;
        for (int64_t i = 0; i < ps->h; i++) {
            int64_t a0, a1;
            outputs_of(ps, i, ps->h, ps->oh, &a0, &a1);
            for (int64_t j = 0; j < ps->w; j++) {
                int64_t b0, b1, lo, hi, ch, cw;
                outputs_of(ps, j, ps->w, ps->ow, &b0, &b1);
                float s = 0;
                for (int64_t oh = a0; oh < a1; oh++) {
                    kiln_avg_pool_window(ps, oh, ps->h, ps->oh, &lo, &hi, &ch);
                    for (int64_t ow = b0; ow < b1; ow++) {
                        kiln_avg_pool_window(ps, ow, ps->w, ps->ow, &lo, &hi, &cw);
                        s += g[oh * ps->ow + ow] / (float)(ch * cw);
                    }
                }
                float *d = &dx[base + (i * ps->w + j) * st];
                *d = acc ? *d + s : s;
            }
        }
    }
}
