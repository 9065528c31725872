/* Reference fully-connected layers in double: linear y = x w^T + b (w [out, in])
 * and matmul y = x w + b (w [in, out]). */
#include "kernels/internal/kernels.h"

void kiln_ref_linear_fwd(int64_t n, int64_t in, int64_t out, const double *x, const double *w, const double *b,
                         double *y) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < out; o++) {
            double s = b ? b[o] : 0.0;
            for (int64_t j = 0; j < in; j++) s += x[i * in + j] * w[o * in + j];
            y[i * out + o] = s;
        }
}

void kiln_ref_linear_bwd_data(int64_t n, int64_t in, int64_t out, const double *dy, const double *w, double *dx,
                              int acc) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < in; j++) {
            double s = 0.0;
            for (int64_t o = 0; o < out; o++) s += dy[i * out + o] * w[o * in + j];
            dx[i * in + j] = acc ? dx[i * in + j] + s : s;
        }
}

void kiln_ref_linear_bwd_weight(int64_t n, int64_t in, int64_t out, const double *x, const double *dy, double *dw,
                                double *db, int acc) {
    for (int64_t o = 0; o < out; o++)
        for (int64_t j = 0; j < in; j++) {
            double s = 0.0;
            for (int64_t i = 0; i < n; i++) s += dy[i * out + o] * x[i * in + j];
            dw[o * in + j] = acc ? dw[o * in + j] + s : s;
        }
    if (!db) return;
    for (int64_t o = 0; o < out; o++) {
        double s = 0.0;
        for (int64_t i = 0; i < n; i++) s += dy[i * out + o];
        db[o] = acc ? db[o] + s : s;
    }
}

/* matmul: y = x w + b with w [in, out] (HF GPT-2's Conv1D layout) */
void kiln_ref_matmul_fwd(int64_t n, int64_t in, int64_t out, const double *x, const double *w, const double *b,
                         double *y) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < out; o++) {
            double s = b ? b[o] : 0.0;
            for (int64_t j = 0; j < in; j++) s += x[i * in + j] * w[j * out + o];
            y[i * out + o] = s;
        }
}

void kiln_ref_matmul_bwd_data(int64_t n, int64_t in, int64_t out, const double *dy, const double *w, double *dx,
                              int acc) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < in; j++) {
            double s = 0.0;
            for (int64_t o = 0; o < out; o++) s += dy[i * out + o] * w[j * out + o];
            dx[i * in + j] = acc ? dx[i * in + j] + s : s;
        }
}

/* dw only: the bias gradient is linear's column sum */
void kiln_ref_matmul_bwd_weight(int64_t n, int64_t in, int64_t out, const double *x, const double *dy, double *dw,
                                int acc) {
    for (int64_t j = 0; j < in; j++)
        for (int64_t o = 0; o < out; o++) {
            double s = 0.0;
            for (int64_t i = 0; i < n; i++) s += x[i * in + j] * dy[i * out + o];
            dw[j * out + o] = acc ? dw[j * out + o] + s : s;
        }
}
