/* Fast max pooling, float. The 2x2 stride-2 window (the main model's pool)
 * has its own loop; other shapes take the general one. Ties go to the first
 * element in row-major window order, as PyTorch. */
#include <string.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

static void pool2_fwd_plane(int64_t w, int64_t oh, int64_t ow, const float *restrict x, float *restrict y) {
    for (int64_t i = 0; i < oh; i++) {
        const float *r0 = x + 2 * i * w, *r1 = r0 + w;
        float *yr = y + i * ow;
#pragma omp simd
        for (int64_t j = 0; j < ow; j++) {
            float m = r0[2 * j];
            m = r0[2 * j + 1] > m ? r0[2 * j + 1] : m;
            m = r1[2 * j] > m ? r1[2 * j] : m;
            m = r1[2 * j + 1] > m ? r1[2 * j + 1] : m;
            yr[j] = m;
        }
    }
}

/* one output row's windows: the gradient to each window's first maximum (masked by relu's backward where
 * its maximum is not > 0), zeros to the other three. Selects, not branches (the maxima are data): inlined
 * with relu_mask and acc constant, the row vectorizes */
static inline __attribute__((always_inline)) void pool2_bwd_body(int64_t ow, int relu_mask, int acc, const float *restrict r0,
                                                                 const float *restrict r1, const float *restrict g,
                                                                 float *restrict d0, float *restrict d1) {
#pragma omp simd
    for (int64_t j = 0; j < ow; j++) {
        float a = r0[2 * j], b = r0[2 * j + 1], c = r1[2 * j], d = r1[2 * j + 1];
        int sb = b > a;
        float m = sb ? b : a;
        int sc = c > m;
        m = sc ? c : m;
        int sd = d > m;
        m = sd ? d : m;
        float gv = relu_mask && !(m > 0.0f) ? 0.0f : g[j];
        float v3 = sd ? gv : 0.0f, v2 = sc && !sd ? gv : 0.0f, v1 = sb && !sc && !sd ? gv : 0.0f;
        float v0 = !sb && !sc && !sd ? gv : 0.0f;
        d0[2 * j] = acc ? d0[2 * j] + v0 : v0;
        d0[2 * j + 1] = acc ? d0[2 * j + 1] + v1 : v1;
        d1[2 * j] = acc ? d1[2 * j] + v2 : v2;
        d1[2 * j + 1] = acc ? d1[2 * j + 1] + v3 : v3;
    }
}

KILN_CPU_HOT static void pool2_bwd_row(int64_t ow, int relu_mask, const float *restrict r0, const float *restrict r1,
                                       const float *restrict g, float *restrict d0, float *restrict d1, int acc) {
    if (relu_mask && acc) pool2_bwd_body(ow, 1, 1, r0, r1, g, d0, d1);
    else if (relu_mask) pool2_bwd_body(ow, 1, 0, r0, r1, g, d0, d1);
    else if (acc) pool2_bwd_body(ow, 0, 1, r0, r1, g, d0, d1);
    else pool2_bwd_body(ow, 0, 0, r0, r1, g, d0, d1);
}

static void pool2_bwd_plane(int64_t h, int64_t w, int64_t oh, int64_t ow, int relu_mask, const float *restrict x,
                            const float *restrict dy, float *restrict dx, int acc) {
    /* rows/cols past the last window (odd h or w) get no gradient */
    if (!acc && (h != 2 * oh || w != 2 * ow)) memset(dx, 0, (size_t)(h * w) * sizeof *dx);
    for (int64_t i = 0; i < oh; i++)
        pool2_bwd_row(ow, relu_mask, x + 2 * i * w, x + (2 * i + 1) * w, dy + i * ow, dx + 2 * i * w, dx + (2 * i + 1) * w, acc);
}

static int64_t argmax(const kiln_pool_shape *ps, const float *plane, int64_t oh, int64_t ow) {
    int64_t h0, h1, w0, w1;
    kiln_pool_window(ps, oh, ps->h, &h0, &h1);
    kiln_pool_window(ps, ow, ps->w, &w0, &w1);
    int64_t best = h0 * ps->w + w0;
    float m = plane[best];
    for (int64_t r = h0; r < h1; r++) {
        const float *row = plane + r * ps->w;
        for (int64_t q = w0; q < w1; q++)
            if (row[q] > m) {
                m = row[q];
                best = r * ps->w + q;
            }
    }
    return best;
}

static int is_pool2(const kiln_pool_shape *ps) { return ps->k == 2 && ps->stride == 2 && ps->pad == 0; }

void kiln_cpu_max_pool2d_fwd(const kiln_pool_shape *ps, const float *x, float *y) {
    int64_t planes = ps->n * ps->c, hw = ps->h * ps->w, ohw = ps->oh * ps->ow;
#pragma omp parallel for schedule(static) if (planes * hw >= KILN_CPU_PAR_MIN)
    for (int64_t p = 0; p < planes; p++) {
        const float *xp = x + p * hw;
        float *yp = y + p * ohw;
        if (is_pool2(ps)) {
            pool2_fwd_plane(ps->w, ps->oh, ps->ow, xp, yp);
            continue;
        }
        for (int64_t i = 0; i < ps->oh; i++)
            for (int64_t j = 0; j < ps->ow; j++) yp[i * ps->ow + j] = xp[argmax(ps, xp, i, j)];
    }
}

static void bwd(const kiln_pool_shape *ps, int relu_mask, const float *x, const float *dy, float *dx, int acc) {
    int64_t planes = ps->n * ps->c, hw = ps->h * ps->w, ohw = ps->oh * ps->ow;
#pragma omp parallel for schedule(static) if (planes * hw >= KILN_CPU_PAR_MIN)
    for (int64_t p = 0; p < planes; p++) {
        const float *xp = x + p * hw, *gp = dy + p * ohw;
        float *dp = dx + p * hw;
        if (is_pool2(ps)) {
            pool2_bwd_plane(ps->h, ps->w, ps->oh, ps->ow, relu_mask, xp, gp, dp, acc);
            continue;
        }
        /* windows may overlap (k > stride): clear, then scatter-add within the plane */
        if (!acc) memset(dp, 0, (size_t)hw * sizeof *dp);
        for (int64_t i = 0; i < ps->oh; i++)
            for (int64_t j = 0; j < ps->ow; j++) {
                int64_t o = argmax(ps, xp, i, j);
                if (!relu_mask || xp[o] > 0.0f) dp[o] += gp[i * ps->ow + j];
            }
    }
}

void kiln_cpu_max_pool2d_bwd(const kiln_pool_shape *ps, const float *x, const float *dy, float *dx, int acc) {
    bwd(ps, 0, x, dy, dx, acc);
}

void kiln_cpu_max_pool2d_relu_bwd(const kiln_pool_shape *ps, const float *x, const float *dy, float *dx, int acc) {
    bwd(ps, 1, x, dy, dx, acc);
}
