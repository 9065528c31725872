/* Reference GELU, double, PyTorch's two forms:
 *   erf:  x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2));
 *   tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (approximate='tanh', GPT-2's). */
#include <math.h>
#include "kernels/internal/kernels.h"

#define SQRT_2_OVER_PI 0.79788456080286535588
#define INV_SQRT_2PI 0.39894228040143267794

static double gelu(double x, int tanh_form) {
    if (tanh_form) return 0.5 * x * (1 + tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1 + erf(x / sqrt(2.0)));
}

static double gelu_grad(double x, int tanh_form) {
    if (tanh_form) {
        double t = tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x));
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x);
    }
    return 0.5 * (1 + erf(x / sqrt(2.0))) + x * INV_SQRT_2PI * exp(-0.5 * x * x);
}

void kiln_ref_gelu_fwd(int64_t n, int tanh_form, const double *x, double *y) {
    for (int64_t i = 0; i < n; i++) y[i] = gelu(x[i], tanh_form);
}

void kiln_ref_gelu_bwd(int64_t n, int tanh_form, const double *x, const double *dy, double *dx, int acc) {
    for (int64_t i = 0; i < n; i++) {
        double g = dy[i] * gelu_grad(x[i], tanh_form);
        dx[i] = acc ? dx[i] + g : g;
    }
}
