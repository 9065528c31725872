/* kiln's Winograd kernel (src/kernels/cpu/winograd_avx2.c) as one direction of
 * a conv object, beside oneDNN's primitives: the tuner times it with them and
 * keeps the fastest. It reads and writes the plan's nChw8c tensors in place
 * (no reorders); the filters are transformed on every call (training changes
 * them every step) into the workspace, where each thread's tile buffers also
 * live. Forward takes the bias, the residual sum and relu in its output
 * transform; backward-data is the same kernel on dy with the filters flipped
 * and transposed. */
#include <stdio.h>
#include <string.h>
#include "kernels/dnnl/internal/conv2d.h"
#include "kernels/internal/kernels.h"

/* the Winograd problem of a direction: forward x -> y; backward-data dy -> dx (k and c swapped, pad 2 - p) */
static kiln_wino_shape shape_of(const kiln_conv_shape *cs, int dir) {
    if (dir == KILN_CONV_FWD) return (kiln_wino_shape){cs->n, cs->c, cs->h, cs->w, cs->k, cs->oh, cs->ow, cs->pad};
    return (kiln_wino_shape){cs->n, cs->k, cs->oh, cs->ow, cs->c, cs->h, cs->w, 2 - cs->pad};
}

int kiln_conv_own_fits(const kiln_dnnl_conv *c, int dir) {
    const kiln_conv_shape *cs = &c->cs;
    if (dir == KILN_CONV_BWD_WEIGHT || c->o.bf16 != KILN_DN_FP32 || c->o.x_blocked != 8 || c->o.y_blocked != 8) return 0;
    if (cs->r != 3 || cs->s != 3 || cs->stride != 1 || cs->dilation != 1 || cs->groups != 1) return 0;
    kiln_wino_shape s = shape_of(cs, dir);
    return kiln_cpu_wino_supported(&s);
}

kiln_status kiln_conv_own_make(kiln_dnnl_conv *c, int dir) {
    if (!kiln_conv_own_fits(c, dir)) return kiln_fail(KILN_ERR_BACKEND, "kiln's Winograd kernel does not fit %s", c->problem);
    kiln_conv_dir *d = &c->d[dir];
    memset(d, 0, sizeof *d);
    kiln_wino_shape s = shape_of(&c->cs, dir);
    d->own = 1;
    d->u_off = 0;
    d->t_off = ((size_t)(36 * s.c * s.k) * sizeof(float) + 63) & ~(size_t)63;
    d->acc_off = d->t_off + ((kiln_cpu_wino_workspace(&s) + 63) & ~(size_t)63);
    /* staging for an accumulated dx, as the primitives' directions have */
    d->ws = d->acc_off + (((size_t)(s.n * s.k * s.oh * s.ow) * sizeof(float) + 63) & ~(size_t)63);
    snprintf(d->decision, sizeof d->decision, "winograd/plan/%s", KILN_CONV_OWN_IMPL);
    return KILN_OK;
}

kiln_status kiln_conv_own_run(kiln_dnnl_conv *c, int dir, const float *in0, const float *w, const float *bias, float *out,
                              void *ws) {
    kiln_conv_dir *d = &c->d[dir];
    kiln_wino_shape s = shape_of(&c->cs, dir);
    float *u = (float *)((char *)ws + d->u_off);
    kiln_cpu_wino_weights(&s, w, dir == KILN_CONV_BWD_DATA, u);
    int fwd = dir == KILN_CONV_FWD;
    kiln_cpu_wino_fwd(&s, in0, u, fwd && c->o.has_bias ? bias : NULL, fwd && c->o.fuse_relu, fwd && c->o.residual, out,
                      (char *)ws + d->t_off);
    return KILN_OK;
}
