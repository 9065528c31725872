/* Reference dropout, double. The mask is a pure function of (key, counter, i),
 * so the backward recomputes it instead of storing it. */
#include "base/internal/rng.h"
#include "kernels/internal/kernels.h"

static int kept(uint64_t key, uint64_t counter, uint32_t thr, int64_t i) {
    return kiln_philox4x32(key, counter, (uint64_t)i / 4).v[i % 4] >= thr;
}

void kiln_ref_dropout_fwd(int64_t n, float p, uint64_t key, uint64_t counter, const double *x, double *y) {
    double scale = p < 1.0f ? 1.0 / (1.0 - (double)p) : 0.0;
    uint32_t thr = kiln_dropout_threshold(p);
    for (int64_t i = 0; i < n; i++) {
        if (p <= 0.0f) y[i] = x[i];
        else if (p >= 1.0f) y[i] = 0.0; /* threshold saturates at 2^32-1: p == 1 must drop all */
        else y[i] = kept(key, counter, thr, i) ? x[i] * scale : 0.0;
    }
}

void kiln_ref_dropout_bwd(int64_t n, float p, uint64_t key, uint64_t counter, const double *dy, double *dx, int acc) {
    double scale = p < 1.0f ? 1.0 / (1.0 - (double)p) : 0.0;
    uint32_t thr = kiln_dropout_threshold(p);
    for (int64_t i = 0; i < n; i++) {
        double g;
        if (p <= 0.0f) g = dy[i];
        else if (p >= 1.0f) g = 0.0;
        else g = kept(key, counter, thr, i) ? dy[i] * scale : 0.0;
        dx[i] = acc ? dx[i] + g : g;
    }
}

void kiln_ref_dropout_range(int64_t start, int64_t n, float p, uint64_t key, uint64_t counter, const double *x, double *y,
                            int acc) {
    double scale = p < 1.0f ? 1.0 / (1.0 - (double)p) : 0.0;
    uint32_t thr = kiln_dropout_threshold(p);
    for (int64_t i = 0; i < n; i++) {
        double g = p <= 0.0f ? x[i] : p >= 1.0f ? 0.0 : kept(key, counter, thr, start + i) ? x[i] * scale : 0.0;
        y[i] = acc ? y[i] + g : g;
    }
}
