/* Reference sum to a scalar and its backward (a fill), double. */
#include "kernels/internal/kernels.h"

double kiln_ref_sum(int64_t n, const double *x) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    return s;
}

void kiln_ref_fill(int64_t n, double v, double *dx, int acc) {
    for (int64_t i = 0; i < n; i++) dx[i] = acc ? dx[i] + v : v;
}
