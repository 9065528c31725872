/* Fast ReLU, float. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/internal/kernels.h"

void kiln_cpu_relu_fwd(int64_t n, const float *restrict x, float *restrict y) {
    KILN_CPU_EACH(n, i, y[i] = x[i] > 0.0f ? x[i] : 0.0f);
}

/* dx over dy (the in-place pass): one pointer, so no restrict is broken */
static void relu_bwd_in_place(int64_t n, const float *restrict y, float *restrict d) {
    KILN_CPU_EACH(n, i, {
        float g = d[i];
        d[i] = y[i] > 0.0f ? g : 0.0f;
    });
}

void kiln_cpu_relu_bwd(int64_t n, const float *restrict y, const float *restrict dy, float *restrict dx, int acc) {
    if ((const float *)dx == dy && !acc) {
        relu_bwd_in_place(n, y, dx);
    } else if (acc) {
        /* the unconditional load of dy lets the select vectorise */
        KILN_CPU_EACH(n, i, {
            float g = dy[i];
            dx[i] += y[i] > 0.0f ? g : 0.0f;
        });
    } else {
        KILN_CPU_EACH(n, i, {
            float g = dy[i];
            dx[i] = y[i] > 0.0f ? g : 0.0f;
        });
    }
}
