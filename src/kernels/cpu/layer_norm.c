/* Fast layer norm over the last dim, float, one pass over each row's data in
 * each direction (APEX's fused LayerNorm idea):
 *   forward: one sweep sums x - x[0] and its square (in double, so the
 *            one-pass variance E[d^2] - E[d]^2 does not cancel), then the row,
 *            still in L1, is normalised and written; mean and rstd are saved;
 *   backward: one sweep forms the row's sums of g = dy * w and g * xhat and
 *            adds dy * xhat and dy into the partial dw and db of the row's
 *            chunk, then dx = rstd (g - mean(g) - xhat mean(g xhat)) is
 *            written from the row in L1.
 * Rows run in parallel. dw and db are deterministic: rows are cut into at most
 * NCHUNK fixed chunks (by the shape alone), each chunk sums its rows in order
 * into its own partials (scratch), and the partials are added in chunk order,
 * so the bits do not depend on the thread count. */
#include <math.h>
#include <string.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

#define NCHUNK 16

KILN_CPU_HOT static void ln_row(int64_t C, const float *restrict x, const float *restrict w, const float *restrict b,
                                float eps, float *restrict y, float *mean, float *rstd) {
    float k = x[0];
    double s1 = 0, s2 = 0;
#pragma omp simd reduction(+ : s1, s2)
    for (int64_t c = 0; c < C; c++) {
        double d = (double)x[c] - k;
        s1 += d;
        s2 += d * d;
    }
    double m = s1 / (double)C, var = s2 / (double)C - m * m;
    float mu = (float)(k + m), rs = (float)(1.0 / sqrt((var > 0 ? var : 0) + eps));
#pragma omp simd
    for (int64_t c = 0; c < C; c++) y[c] = (x[c] - mu) * rs * w[c] + b[c];
    *mean = mu;
    *rstd = rs;
}

void kiln_cpu_layer_norm_fwd(int64_t rows, int64_t C, const float *x, const float *w, const float *b, float eps, float *y,
                             float *mean, float *rstd) {
#pragma omp parallel for schedule(static) if (rows * C >= KILN_CPU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) ln_row(C, x + r * C, w, b, eps, y + r * C, mean + r, rstd + r);
}

size_t kiln_cpu_layer_norm_scratch(int64_t rows, int64_t C) {
    (void)rows;
    return (size_t)(2 * NCHUNK * C) * sizeof(float);
}

/* one row's backward; pdw, pdb (its chunk's partials, or NULL) gain dy * xhat and dy; dx may be NULL */
KILN_CPU_HOT static void ln_bwd_row(int64_t C, const float *restrict x, const float *restrict dy, const float *restrict w,
                                    float mu, float rs, float *restrict dx, int acc, float *restrict pdw,
                                    float *restrict pdb) {
    float sg = 0, sgx = 0;
    if (pdw) {
#pragma omp simd reduction(+ : sg, sgx)
        for (int64_t c = 0; c < C; c++) {
            float xh = (x[c] - mu) * rs, d = dy[c], g = d * w[c];
            sg += g;
            sgx += g * xh;
            pdw[c] += d * xh;
            pdb[c] += d;
        }
    } else {
#pragma omp simd reduction(+ : sg, sgx)
        for (int64_t c = 0; c < C; c++) {
            float g = dy[c] * w[c];
            sg += g;
            sgx += g * ((x[c] - mu) * rs);
        }
    }
    if (!dx) return;
    float a = sg / (float)C, bx = sgx / (float)C;
    if (acc) {
#pragma omp simd
        for (int64_t c = 0; c < C; c++) dx[c] += rs * (dy[c] * w[c] - a - (x[c] - mu) * rs * bx);
    } else {
#pragma omp simd
        for (int64_t c = 0; c < C; c++) dx[c] = rs * (dy[c] * w[c] - a - (x[c] - mu) * rs * bx);
    }
}

/* dw, db (=|+=) the chunks' partials, added in chunk order */
static void reduce_chunks(int64_t nch, int64_t C, const float *pdw, const float *pdb, float *dw, float *db, int acc_dw,
                          int acc_db) {
    for (int64_t c = 0; c < C; c++) {
        double sw = 0, sb = 0;
        for (int64_t k = 0; k < nch; k++) {
            sw += pdw[k * C + c];
            sb += pdb[k * C + c];
        }
        if (dw) dw[c] = acc_dw ? dw[c] + (float)sw : (float)sw;
        if (db) db[c] = acc_db ? db[c] + (float)sb : (float)sb;
    }
}

void kiln_cpu_layer_norm_bwd(int64_t rows, int64_t C, const float *x, const float *dy, const float *w, const float *mean,
                             const float *rstd, float *dx, float *dw, float *db, int acc_dx, int acc_dw, int acc_db,
                             float *scratch) {
    int64_t nch = rows < NCHUNK ? rows : NCHUNK;
    int part = dw || db;
    float *pdw = scratch, *pdb = scratch + nch * C;
#pragma omp parallel for schedule(static) if (rows * C >= KILN_CPU_PAR_MIN)
    for (int64_t k = 0; k < nch; k++) {
        float *pw = part ? pdw + k * C : NULL, *pb = part ? pdb + k * C : NULL;
        if (part) {
            memset(pw, 0, (size_t)C * sizeof *pw);
            memset(pb, 0, (size_t)C * sizeof *pb);
        }
        for (int64_t r = rows * k / nch; r < rows * (k + 1) / nch; r++)
            ln_bwd_row(C, x + r * C, dy + r * C, w, mean[r], rstd[r], dx ? dx + r * C : NULL, acc_dx, pw, pb);
    }
    if (part) reduce_chunks(nch, C, pdw, pdb, dw, db, acc_dw, acc_db);
}
