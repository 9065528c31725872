/* Fast GELU, float, both of PyTorch's forms, vectorised through vec_math.h:
 *   erf:  x * Phi(x),            Phi(x) = 0.5 (1 + erf(x / sqrt 2));
 *   tanh: 0.5 x (1 + tanh(u)) = x * sigmoid(2u),  u = sqrt(2/pi) (x + 0.044715 x^3)
 * (the sigmoid form keeps its relative accuracy for very negative x, where
 * 1 + tanh(u) would cancel). Backward: dx = dy * gelu'(x), with
 *   erf:  Phi(x) + x phi(x);
 *   tanh: s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 x^2),  s = sigmoid(2u).
 * Elementwise, so any layout works; spans of SPAN elements in parallel. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/internal/kernels.h"

#define SPAN 8192
#define K_TANH 0.7978845608028654f /* sqrt(2/pi) */
#define A_TANH 0.044715f
#define INV_SQRT2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f

KILN_CPU_HOT static void gelu_span(int64_t n, int tanh_form, const float *restrict x, float *restrict y) {
    if (tanh_form) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) {
            float v = x[i], u = K_TANH * (v + A_TANH * v * v * v);
            y[i] = v * kiln_vsigmoidf(2.0f * u);
        }
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * (0.5f + 0.5f * kiln_verff(x[i] * INV_SQRT2));
    }
}

static inline float grad_tanh(float v) {
    float s = kiln_vsigmoidf(2.0f * K_TANH * (v + A_TANH * v * v * v));
    return s + 2.0f * v * s * (1.0f - s) * K_TANH * (1.0f + 3.0f * A_TANH * v * v);
}

static inline float grad_erf(float v) {
    return 0.5f + 0.5f * kiln_verff(v * INV_SQRT2) + v * INV_SQRT_2PI * kiln_vexpf(-0.5f * v * v);
}

/* one loop per (form, acc): a condition inside would keep GCC from vectorising */
#define BWD_LOOP(grad, op)                                                                                             \
    do {                                                                                                               \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) dx[i] op dy[i] * grad(x[i]);                              \
    } while (0)

KILN_CPU_HOT static void gelu_bwd_span(int64_t n, int tanh_form, const float *restrict x, const float *restrict dy,
                                       float *restrict dx, int acc) {
    if (tanh_form && acc) BWD_LOOP(grad_tanh, +=);
    else if (tanh_form) BWD_LOOP(grad_tanh, =);
    else if (acc) BWD_LOOP(grad_erf, +=);
    else BWD_LOOP(grad_erf, =);
}

/* below KILN_CPU_PAR_MIN the span runs directly: the fusion pass calls these per
 * tile of 1024 floats, where even an `if (0)` parallel region costs a team start */
void kiln_cpu_gelu_fwd(int64_t n, int tanh_form, const float *x, float *y) {
    if (n < KILN_CPU_PAR_MIN) {
        gelu_span(n, tanh_form, x, y);
        return;
    }
    int64_t spans = (n + SPAN - 1) / SPAN;
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < spans; s++) {
        int64_t b = s * SPAN, len = n - b < SPAN ? n - b : SPAN;
        gelu_span(len, tanh_form, x + b, y + b);
    }
}

void kiln_cpu_gelu_bwd(int64_t n, int tanh_form, const float *x, const float *dy, float *dx, int acc) {
    if (n < KILN_CPU_PAR_MIN) {
        gelu_bwd_span(n, tanh_form, x, dy, dx, acc);
        return;
    }
    int64_t spans = (n + SPAN - 1) / SPAN;
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < spans; s++) {
        int64_t b = s * SPAN, len = n - b < SPAN ? n - b : SPAN;
        gelu_bwd_span(len, tanh_form, x + b, dy + b, dx + b, acc);
    }
}

/* one tile, one thread: a fused kernel's instruction (no parallel region inside the fused kernel's) */
void kiln_cpu_gelu_tile_fwd(int64_t n, int tanh_form, const float *x, float *y) { gelu_span(n, tanh_form, x, y); }

void kiln_cpu_gelu_tile_bwd(int64_t n, int tanh_form, const float *x, const float *dy, float *dx, int acc) {
    gelu_bwd_span(n, tanh_form, x, dy, dx, acc);
}
