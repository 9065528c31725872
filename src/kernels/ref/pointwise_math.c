/* Reference pointwise arithmetic, double: libm's erf, tanh and exp. */
#include <math.h>
#include "kernels/internal/kernels.h"

void kiln_ref_affine(int64_t n, const double *x, double scale, double shift, double *y) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale + shift;
}

void kiln_ref_erf(int64_t n, const double *x, double *y) {
    for (int64_t i = 0; i < n; i++) y[i] = erf(x[i]);
}

void kiln_ref_tanh(int64_t n, const double *x, double *y) {
    for (int64_t i = 0; i < n; i++) y[i] = tanh(x[i]);
}

void kiln_ref_affine_bwd(int64_t n, const double *dy, double scale, double *dx, int acc) {
    for (int64_t i = 0; i < n; i++) dx[i] = acc ? dx[i] + scale * dy[i] : scale * dy[i];
}

void kiln_ref_erf_bwd(int64_t n, const double *x, const double *dy, double *dx, int acc) {
    const double c = 2.0 / sqrt(M_PI);
    for (int64_t i = 0; i < n; i++) {
        double g = dy[i] * c * exp(-x[i] * x[i]);
        dx[i] = acc ? dx[i] + g : g;
    }
}

void kiln_ref_tanh_bwd(int64_t n, const double *y, const double *dy, double *dx, int acc) {
    for (int64_t i = 0; i < n; i++) {
        double g = dy[i] * (1.0 - y[i] * y[i]);
        dx[i] = acc ? dx[i] + g : g;
    }
}
