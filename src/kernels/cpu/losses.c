/* Fast NLL and cross-entropy losses (mean over rows), float. Per-row terms are
 * summed serially in double so the loss does not depend on the thread count.
 * Cross entropy leaves rows of a negative target out (a masked loss's
 * padding; the backend refuses them otherwise): the mean is over the rest.
 * Its rows' exps are vec_math.h's in 16 lanes of registers (log_softmax.c's
 * kiln_cpu_row_lse): libm's expf is a call per element, and a GPT-2
 * vocabulary (50,257 logits a token) made it seconds a step. */
#include <math.h>
#include <stdlib.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/internal/kernels.h"

void kiln_cpu_nll_loss_fwd(int64_t rows, int64_t cols, const float *logp, const int32_t *target, float *loss) {
    double s = 0.0;
    for (int64_t i = 0; i < rows; i++) s -= logp[i * cols + target[i]];
    *loss = (float)(s / (double)rows);
}

void kiln_cpu_nll_loss_bwd(int64_t rows, int64_t cols, const int32_t *target, const float *dloss, float *dlogp,
                           int acc) {
    float g = (float)(-(double)*dloss / (double)rows);
#pragma omp parallel for schedule(static) if (rows * cols >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < rows; i++) {
        float *dr = dlogp + i * cols;
        if (!acc)
            for (int64_t j = 0; j < cols; j++) dr[j] = 0.0f;
        dr[target[i]] += g;
    }
}

/* dr (=|+=) g (softmax(x) - onehot(t)) over a row */
KILN_CPU_HOT static void ce_bwd_row(int64_t n, const float *restrict x, int32_t t, float g, float *restrict dr, int acc) {
    float lse = (float)kiln_cpu_row_lse(n, x), old = acc ? dr[t] : 0.0f;
    if (acc) {
#pragma omp simd
        for (int64_t j = 0; j < n; j++) dr[j] += g * kiln_vexpf(x[j] - lse);
    } else {
#pragma omp simd
        for (int64_t j = 0; j < n; j++) dr[j] = g * kiln_vexpf(x[j] - lse);
    }
    dr[t] = old + g * (kiln_vexpf(x[t] - lse) - 1.0f);
}

static int64_t counted(int64_t rows, const int32_t *target) {
    int64_t n = 0;
    for (int64_t i = 0; i < rows; i++) n += target[i] >= 0;
    return n;
}

static double ce_term(int64_t cols, const float *row, int32_t t) { return t < 0 ? 0.0 : kiln_cpu_row_lse(cols, row) - row[t]; }

void kiln_cpu_cross_entropy_fwd(int64_t rows, int64_t cols, const float *logits, const int32_t *target,
                                float *loss) {
    double s = 0.0;
    double *term = rows * cols >= KILN_CPU_PAR_MIN ? malloc((size_t)rows * sizeof *term) : NULL;
    if (term) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < rows; i++) term[i] = ce_term(cols, logits + i * cols, target[i]);
        for (int64_t i = 0; i < rows; i++) s += term[i];
        free(term);
    } else {
        for (int64_t i = 0; i < rows; i++) s += ce_term(cols, logits + i * cols, target[i]);
    }
    int64_t n = counted(rows, target);
    *loss = n ? (float)(s / (double)n) : 0.0f;
}

void kiln_cpu_cross_entropy_bwd(int64_t rows, int64_t cols, const float *logits, const int32_t *target,
                                const float *dloss, float *dlogits, int acc) {
    int64_t n = counted(rows, target);
    float g = n ? (float)((double)*dloss / (double)n) : 0.0f;
#pragma omp parallel for schedule(static) if (rows * cols >= KILN_CPU_PAR_MIN)
    for (int64_t i = 0; i < rows; i++) {
        const float *xr = logits + i * cols;
        float *dr = dlogits + i * cols;
        if (target[i] < 0) {
            for (int64_t j = 0; j < cols; j++) dr[j] = acc ? dr[j] : 0.0f;
            continue;
        }
        ce_bwd_row(cols, xr, target[i], g, dr, acc);
    }
}
