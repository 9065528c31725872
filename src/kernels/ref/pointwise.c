/* Reference elementwise ops, double. */
#include "kernels/internal/kernels.h"

void kiln_ref_add_fwd(int64_t n, const double *a, const double *b, double *y) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void kiln_ref_mul_fwd(int64_t n, const double *a, const double *b, double *y) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i];
}

void kiln_ref_grad_copy(int64_t n, const double *dy, double *dx, int acc) {
    for (int64_t i = 0; i < n; i++) dx[i] = acc ? dx[i] + dy[i] : dy[i];
}

void kiln_ref_mul_bwd(int64_t n, const double *dy, const double *b, double *da, int acc) {
    for (int64_t i = 0; i < n; i++) da[i] = acc ? da[i] + dy[i] * b[i] : dy[i] * b[i];
}

void kiln_ref_add_bcast_fwd(int64_t rows, int64_t inner, const double *a, const double *b, double *y) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < inner; j++) y[r * inner + j] = a[r * inner + j] + b[j];
}

void kiln_ref_bias_grad_rows(int64_t rows, int64_t cols, const double *dy, double *db, int acc) {
    for (int64_t j = 0; j < cols; j++) {
        double s = 0;
        for (int64_t r = 0; r < rows; r++) s += dy[r * cols + j];
        db[j] = acc ? db[j] + s : s;
    }
}
