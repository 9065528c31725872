/* kiln's Winograd kernel (src/kernels/cpu/winograd_avx2.c) as one direction of
 * a conv object, beside oneDNN's primitives: the tuner times it with them and
 * keeps the fastest. It reads and writes the plan's nChw8c tensors in place
 * (no reorders); the filters are transformed on every call (training changes
 * them every step) in the workspace, where each thread's tile buffers also
 * live. Forward takes the bias, the residual sum and relu in its output
 * transform; backward-data is the same kernel on dy with the filters flipped
 * and transposed; backward-weights sums the transformed x and dy tiles
 * (without a bias: its gradient is left to oneDNN's candidates). */
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include "kernels/dnnl/internal/conv2d.h"
#include "kernels/internal/kernels.h"

/* the Winograd problem of a direction: forward (and backward-weights) x -> y; backward-data dy -> dx (k and c
 * swapped, pad 2 - p) */
static kiln_wino_shape shape_of(const kiln_conv_shape *cs, int dir, int threads) {
    if (dir != KILN_CONV_BWD_DATA) return (kiln_wino_shape){cs->n, cs->c, cs->h, cs->w, cs->k, cs->oh, cs->ow, cs->pad, threads, NULL, 0};
    return (kiln_wino_shape){cs->n, cs->k, cs->oh, cs->ow, cs->c, cs->h, cs->w, 2 - cs->pad, threads, NULL, 0};
}

int kiln_conv_own_fits(const kiln_dnnl_conv *c, int dir) {
    const kiln_conv_shape *cs = &c->cs;
    if (c->o.bf16 != KILN_DN_FP32 || c->o.x_blocked != 8 || c->o.y_blocked != 8) return 0;
    if (dir == KILN_CONV_BWD_WEIGHT && c->o.has_bias) return 0; /* backward-weights: no bias gradient */
    if (cs->r != 3 || cs->s != 3 || cs->stride != 1 || cs->dilation != 1 || cs->groups != 1) return 0;
    kiln_wino_shape s = shape_of(cs, dir, 0);
    return kiln_cpu_wino_supported(&s);
}

kiln_status kiln_conv_own_make(kiln_dnnl_conv *c, int dir) {
    if (!kiln_conv_own_fits(c, dir)) return kiln_fail(KILN_ERR_BACKEND, "kiln's Winograd kernel does not fit %s", c->problem);
    kiln_conv_dir *d = &c->d[dir];
    memset(d, 0, sizeof *d);
    d->own = omp_get_max_threads(); /* the team its workspace is sized for */
    kiln_wino_shape s = shape_of(&c->cs, dir, d->own);
    /* no staging for accumulated outputs: the kernels add into them (kiln_conv_own_run's acc) */
    d->ws = dir == KILN_CONV_BWD_WEIGHT ? kiln_cpu_wino_bwd_weight_workspace(&s) : kiln_cpu_wino_workspace(&s);
    snprintf(d->decision, sizeof d->decision, "winograd/plan/%s", KILN_CONV_OWN_IMPL);
    return KILN_OK;
}

kiln_status kiln_conv_own_run(kiln_dnnl_conv *c, int dir, const float *in0, const float *w, const float *bias, float *out,
                              int acc, void *ws) {
    return kiln_conv_own_run_scaled(c, dir, in0, w, NULL, bias, out, acc, ws);
}

kiln_status kiln_conv_own_run_scaled(kiln_dnnl_conv *c, int dir, const float *in0, const float *w, const float *scale,
                                     const float *bias, float *out, int acc, void *ws) {
    kiln_conv_dir *d = &c->d[dir];
    kiln_wino_shape s = shape_of(&c->cs, dir, d->own);
    s.scale = dir == KILN_CONV_FWD ? scale : NULL;
    /* in training plans the outputs stream past the caches: the next step reads each once, from memory either
     * way at these sizes, and backward reads it again long after; the stores then skip reading each line in
     * first. On a Zen 3 the forward alone at 128x16x32x32 took 2.9-3.0 against 3.3-3.9 ms; resnet20's training
     * step at batch 128, two runs of 8 alternating rounds on a noisy machine: medians 187 against 212 ms (faster
     * in 8 of 8) and 190 against 203 (4 of 8). Inference plans keep their stores: the next convolution reads y
     * at once, and streaming measured no faster there (resnet18 at batch 32: 118.5 against 116.1 ms) */
    s.stream = dir != KILN_CONV_BWD_WEIGHT && (c->o.need_bwd_data || c->o.need_bwd_weight);
    if (dir == KILN_CONV_BWD_WEIGHT) { /* in0 is x, w is dy, out is dw */
        kiln_cpu_wino_bwd_weight(&s, in0, w, out, acc, ws);
        return KILN_OK;
    }
    int fwd = dir == KILN_CONV_FWD;
    kiln_cpu_wino_conv(&s, in0, w, !fwd, fwd && c->o.has_bias ? bias : NULL, fwd && c->o.fuse_relu, fwd ? c->o.residual : acc,
                       out, ws);
    return KILN_OK;
}

int kiln_dnnl_conv_own_fwd(const kiln_dnnl_conv *c) { return c->d[KILN_CONV_FWD].own != 0; }

kiln_status kiln_dnnl_conv_fwd_scaled(kiln_dnnl_conv *c, const float *x, const float *w, const float *scale, const float *b,
                                      float *y, void *ws) {
    if (!c->d[KILN_CONV_FWD].own) return kiln_fail(KILN_ERR_INVALID_ARG, "%s: scaled filters need kiln's own kernel", c->problem);
    return kiln_conv_own_run_scaled(c, KILN_CONV_FWD, x, w, scale, b, y, 0, ws);
}

/* a slice of images per call keeps at least this many tiles: the kernel takes them a block of 6 or 12 at a
 * time, so fewer leave blocks part empty and the filters' transform (once per call) weighs more. On a Zen 3,
 * resnet20's blocks by slices of 128 tiles: 16 channels at 32 x 32 (2 images) and 32 at 16 x 16 (8) ran 30 %
 * faster than the whole batch at once; 64 at 8 x 8 by 16 images (64 tiles) no faster */
#define SLICE_TILES 128

int64_t kiln_dnnl_conv_slice_images(const kiln_dnnl_conv *c) {
    const kiln_conv_shape *cs = &c->cs;
    const kiln_conv_dir *d = &c->d[KILN_CONV_FWD];
    if (!d->own || c->o.need_bwd_data || c->o.need_bwd_weight) return 0;
    int64_t tiles = ((cs->oh + 3) / 4) * ((cs->ow + 3) / 4);
    return (SLICE_TILES + tiles - 1) / tiles;
}

size_t kiln_dnnl_conv_slice_workspace(const kiln_dnnl_conv *c, int64_t n) {
    kiln_wino_shape s = shape_of(&c->cs, KILN_CONV_FWD, 1);
    s.n = n;
    return kiln_cpu_wino_workspace(&s);
}

void kiln_dnnl_conv_fwd_images(kiln_dnnl_conv *c, const float *x, const float *w, const float *scale, const float *b,
                               float *y, int64_t i0, int64_t n, void *ws) {
    const kiln_conv_shape *cs = &c->cs;
    kiln_wino_shape s = shape_of(cs, KILN_CONV_FWD, 1);
    s.n = n;
    s.scale = scale;
    /* nChw8c: an image's channel blocks, rows and columns lie together, the images one after another */
    int64_t xs = cs->c * cs->h * cs->w, ys = cs->k * cs->oh * cs->ow;
    kiln_cpu_wino_conv(&s, x + i0 * xs, w, 0, c->o.has_bias ? b : NULL, c->o.fuse_relu, c->o.residual, y + i0 * ys, ws);
}
