/* kiln/bench.h — the training-step benchmark (`kiln bench step`).
 *
 *     kiln_bench_step_config c = kiln_bench_step_defaults();
 *     c.model = "resnet20"; c.batch = 128;
 *     kiln_bench_step_result r;
 *     if (kiln_bench_step(&c, &r) != KILN_OK) ... kiln_last_error()
 *     // r.ms: the median step; r.images_per_s, r.gflops, r.arena_mb
 *
 * Synthetic data of the model's input shape (uniform in [-1, 1], random
 * labels) bound once, so the step is all that is timed: forward, backward and
 * the SGD update (lr 0.1, momentum 0.9, weight decay 5e-4, as the peer
 * benchmark), or the forward alone of an inference plan with `eval`.
 */
#ifndef KILN_BENCH_H
#define KILN_BENCH_H

#include "kiln/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_bench_step_config {
    const char *model;        /* a zoo name */
    kiln_model_opts model_opts;
    int64_t batch;
    int eval;                 /* 1: an inference plan (no backward), forward only */
    int warmup, steps;        /* untimed steps first, then the timed ones (the median is reported) */
    const char *backend;      /* NULL: cpu */
    int autotune;             /* as kiln_compile_opts.autotune */
    uint64_t seed;
    char *profile;            /* non-NULL: after the timed steps, the per-kernel report (profile_len bytes) */
    size_t profile_len;
} kiln_bench_step_config;
kiln_bench_step_config kiln_bench_step_defaults(void); /* batch 64, 3 warm-up, 20 timed, autotune on */

typedef struct kiln_bench_step_result {
    double ms;                /* median step time */
    double ms_min, ms_max;
    double images_per_s;      /* batch / median */
    double flops;             /* conv and linear work of one step: 2 x multiply-adds, forward, and in training the
                                 backward-weights and the backward-data of every layer whose input needs it */
    double gflops;            /* flops / median, in GFLOP/s */
    double arena_mb;          /* the plan's activation arena, MiB */
    int64_t params;           /* trainable parameters */
} kiln_bench_step_result;
kiln_status kiln_bench_step(const kiln_bench_step_config *c, kiln_bench_step_result *r);

#ifdef __cplusplus
}
#endif
#endif
