/* Reference sum of squares and scaling, double: gradient clipping's oracle. */
#include "kernels/internal/kernels.h"

double kiln_ref_sumsq(int64_t n, const double *x) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
    return s;
}

void kiln_ref_scale(int64_t n, double *x, double s) {
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}
