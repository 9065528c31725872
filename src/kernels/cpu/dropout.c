/* Fast dropout, float. One Philox call yields the mask words of 4 consecutive
 * elements; the backward recomputes the same mask from (key, counter). */
#include "base/internal/rng.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

/* add 0: y = mask ? x*scale : 0; add 1: y += mask ? x*scale : 0 */
/* elements [start, start + n) of the tensor: groups of 4 from start / 4 (start % 64 == 0) */
static void apply(int64_t start, int64_t n, float p, uint64_t key, uint64_t counter, const float *restrict x,
                  float *restrict y, int add) {
    if (p <= 0.0f) {
#pragma omp parallel for simd schedule(static) if (n >= KILN_CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) y[i] = add ? y[i] + x[i] : x[i];
        return;
    }
    if (p >= 1.0f) { /* the threshold saturates at 2^32-1, so p == 1 is special-cased to drop all */
        if (add) return;
#pragma omp parallel for simd schedule(static) if (n >= KILN_CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) y[i] = 0.0f;
        return;
    }
    const float scale = 1.0f / (1.0f - p);
    const uint32_t thr = kiln_dropout_threshold(p);
    int64_t groups = (n + 3) / 4, g_start = 0, g0 = start / 4;
    if (n >= 64 && kiln_cpu_has_avx512()) {
        kiln_cpu_dropout_blocks_avx512(g0, n / 64, scale, thr, key, counter, x, y, add, 1);
        g_start = n / 64 * 16; /* the tail of < 64 elements takes the portable loop */
    } else if (n >= 32 && kiln_cpu_has_avx2()) {
        kiln_cpu_dropout_blocks_avx2(g0, n / 32, scale, thr, key, counter, x, y, add, 1);
        g_start = n / 32 * 8;
    }
#pragma omp parallel for schedule(static) if (n - g_start * 4 >= KILN_CPU_PAR_MIN / 8)
    for (int64_t gi = g_start; gi < groups; gi++) {
        kiln_philox_out o = kiln_philox4x32(key, counter, (uint64_t)(g0 + gi));
        int64_t base = gi * 4, m = n - base < 4 ? n - base : 4;
        for (int64_t j = 0; j < m; j++) {
            float v = o.v[j] >= thr ? x[base + j] * scale : 0.0f;
            y[base + j] = add ? y[base + j] + v : v;
        }
    }
}

void kiln_cpu_dropout_fwd(int64_t n, float p, uint64_t key, uint64_t counter, const float *x, float *y) {
    apply(0, n, p, key, counter, x, y, 0);
}

void kiln_cpu_dropout_bwd(int64_t n, float p, uint64_t key, uint64_t counter, const float *dy, float *dx, int acc) {
    apply(0, n, p, key, counter, dy, dx, acc);
}

/* one thread (a fused kernel's tile): the same words and arithmetic as apply, no parallel region */
void kiln_cpu_dropout_range(int64_t start, int64_t n, float p, uint64_t key, uint64_t counter, const float *restrict x,
                            float *restrict y, int acc) {
    if (p <= 0.0f || p >= 1.0f) {
        for (int64_t i = 0; i < n; i++) y[i] = p <= 0.0f ? (acc ? y[i] + x[i] : x[i]) : (acc ? y[i] : 0.0f);
        return;
    }
    const float scale = 1.0f / (1.0f - p);
    const uint32_t thr = kiln_dropout_threshold(p);
    int64_t groups = (n + 3) / 4, g_start = 0, g0 = start / 4;
    if (n >= 64 && kiln_cpu_has_avx512()) {
        kiln_cpu_dropout_blocks_avx512(g0, n / 64, scale, thr, key, counter, x, y, acc, 0);
        g_start = n / 64 * 16;
    } else if (n >= 32 && kiln_cpu_has_avx2()) {
        kiln_cpu_dropout_blocks_avx2(g0, n / 32, scale, thr, key, counter, x, y, acc, 0);
        g_start = n / 32 * 8;
    }
    for (int64_t gi = g_start; gi < groups; gi++) {
        kiln_philox_out o = kiln_philox4x32(key, counter, (uint64_t)(g0 + gi));
        int64_t base = gi * 4, m = n - base < 4 ? n - base : 4;
        for (int64_t j = 0; j < m; j++) {
            float v = o.v[j] >= thr ? x[base + j] * scale : 0.0f;
            y[base + j] = acc ? y[base + j] + v : v;
        }
    }
}
