/* Bias gradients: column sums (linear) and per-channel sums (conv). Every
 * output element is summed by one thread in a fixed order, so results do not
 * depend on the thread count. */
#include <stdint.h>
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

#define COL_BLOCK 32 /* columns summed by one task: 32 doubles, 8 AVX2 registers */

/* v rounded to bf16, to nearest even (as oneDNN's f32 -> bf16 reorder), back in float */
static inline float round_bf16(float v) {
    union {
        float f;
        uint32_t u;
    } x = {v};
    if ((x.u & 0x7f800000u) != 0x7f800000u) x.u += 0x7fffu + ((x.u >> 16) & 1u); /* inf and NaN kept */
    x.u &= 0xffff0000u;
    return x.f;
}

/* out[j] = sum over rows of dy[r, c0 + j] (bf16: each rounded to bf16 first), j < nc, in double: the row-major walk
 * keeps the reads contiguous; a whole block's sums stay in registers (GCC kept a 64-double block in memory, a load
 * and a store per element, and tested the bf16 flag per element: 3 % of a GPT step) */
KILN_CPU_HOT static void col_sums(int64_t rows, int64_t cols, const float *restrict dy, int64_t c0, int64_t nc, int bf16,
                                  double *restrict out) {
    double s[COL_BLOCK] = {0};
    if (nc == COL_BLOCK && !bf16) {
        for (int64_t r = 0; r < rows; r++) {
            const float *row = dy + r * cols + c0;
#pragma GCC unroll 32
            for (int j = 0; j < COL_BLOCK; j++) s[j] += row[j];
        }
    } else {
        for (int64_t r = 0; r < rows; r++) {
            const float *row = dy + r * cols + c0;
            for (int64_t j = 0; j < nc; j++) s[j] += bf16 ? round_bf16(row[j]) : row[j];
        }
    }
    for (int64_t j = 0; j < nc; j++) out[j] = s[j];
}

static void rows_body(int64_t rows, int64_t cols, const float *restrict dy, float *restrict db, int acc, int bf16) {
    int64_t nblk = (cols + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static) if (rows * cols >= KILN_CPU_PAR_MIN && nblk > 1)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t c0 = b * COL_BLOCK, nc = cols - c0 < COL_BLOCK ? cols - c0 : COL_BLOCK;
        double s[COL_BLOCK];
        col_sums(rows, cols, dy, c0, nc, bf16, s);
        for (int64_t j = 0; j < nc; j++) db[c0 + j] = acc ? db[c0 + j] + (float)s[j] : (float)s[j];
    }
}

void kiln_cpu_bias_grad_rows(int64_t rows, int64_t cols, const float *restrict dy, float *restrict db, int acc) {
    rows_body(rows, cols, dy, db, acc, 0);
}

void kiln_cpu_bias_grad_rows_bf16(int64_t rows, int64_t cols, const float *restrict dy, float *restrict db, int acc) {
    rows_body(rows, cols, dy, db, acc, 1);
}

void kiln_cpu_bias_grad_nchw(int64_t n, int64_t c, int64_t hw, const float *restrict dy, float *restrict db, int acc) {
#pragma omp parallel for schedule(static) if (n * c * hw >= KILN_CPU_PAR_MIN)
    for (int64_t k = 0; k < c; k++) {
        double s = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const float *plane = dy + (i * c + k) * hw;
            double ps = 0.0; /* simd reduction: fixed lane order for a given build */
#pragma omp simd reduction(+ : ps)
            for (int64_t j = 0; j < hw; j++) ps += plane[j];
            s += ps;
        }
        db[k] = acc ? db[k] + (float)s : (float)s;
    }
}
