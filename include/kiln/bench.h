/* kiln/bench.h — the training-step benchmark (`kiln bench step`) and the
 * convolution benchmark (`kiln bench conv`, at the end).
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
    int depth_first;          /* as kiln_compile_opts.depth_first (1 in the defaults) */
    const char *checkpoint_activations; /* as kiln_compile_opts (NULL: none) */
    int precision;            /* as kiln_compile_opts (kiln_precision) */
    int matmul_precision;     /* as kiln_compile_opts: a GPU's matmul and convolution math (0 highest: fp32) */
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
    double arena_mb_plain;    /* the same without checkpoint_activations */
    int recomputed;           /* nodes checkpointing recomputes in backward */
    int64_t params;           /* trainable parameters */
    int bf16_steps;           /* steps running with bf16 operands (after --precision auto decided) */
} kiln_bench_step_result;
kiln_status kiln_bench_step(const kiln_bench_step_config *c, kiln_bench_step_result *r);

/* The convolution benchmark (`kiln bench conv`, the guide's nn.Conv2d table):
 * x [n, c, h, w] through a k-filter kernel x kernel convolution. `fwd` is an
 * inference plan (PyTorch under no_grad); `fwdbwd` a training plan with x
 * requiring its gradient: conv, sum to a scalar, the seed, backward-data and
 * backward-weights (bias included), as y.sum().backward() in PyTorch.
 * Each call is timed alone; medians. */
typedef struct kiln_bench_conv_config {
    int64_t n, c, h, w;       /* the input */
    int64_t k, kernel, stride, pad;
    int bias;                 /* 1 (default): nn.Conv2d's default */
    int autotune;             /* as kiln_compile_opts.autotune */
    int warmup, steps;
    uint64_t seed;
    char *profile;            /* non-NULL: the training plan's per-kernel report (profile_len bytes) */
    size_t profile_len;
} kiln_bench_conv_config;
kiln_bench_conv_config kiln_bench_conv_defaults(void); /* the guide's 32x64x64x64, 64 3x3 filters, padding 1 */

typedef struct kiln_bench_conv_result {
    double fwd_us, fwd_us_min;       /* median and fastest call of the forward plan */
    double fwdbwd_us, fwdbwd_us_min; /* of the training plan */
    double fwd_gflops, fwdbwd_gflops; /* 2 x multiply-adds (x 3 with backward) per median call */
    char problem[160];                /* the autotuner's key of the training plan's conv */
    char choice[4][96];               /* implementations: the forward plan's, then the training plan's fwd, bwd_data,
                                         bwd_weight ("algorithm/layout/implementation") */
    double choice_us[4];              /* the tuner's best time per call of each (reorders included), 0: not timed */
    double alone_fwd_us;              /* choice_us[0]: the fastest oneDNN implementation measured alone */
    double alone_fwdbwd_us;           /* choice_us[1..3] summed; 0 when one was not timed */
    int64_t candidates;               /* implementations timed while compiling both plans (0: all remembered) */
    int64_t unsure;                   /* directions timed while other work held the cores (not kept on disk) */
    double tune_s;                    /* seconds that took */
} kiln_bench_conv_result;
kiln_status kiln_bench_conv(const kiln_bench_conv_config *c, kiln_bench_conv_result *r);

/* The pointwise benchmark (`kiln bench pointwise`, the guide's GELU table):
 * op "gelu-chain" is x * 0.5 * (1 + erf(x / 1.41421)) written as five nodes
 * (scale, erf, add_scalar, scale, mul) over an input of `elements` floats, an
 * inference plan compiled with the fusion pass on or off. Each call is timed
 * alone; `bytes` is what the plan's steps read and write (each step's inputs
 * and outputs once), gbps = bytes / median. */
typedef struct kiln_bench_pointwise_config {
    const char *op;           /* "gelu-chain" */
    int64_t elements;
    int fuse;                 /* 1 (default): the pointwise fusion pass */
    int warmup, steps;
    uint64_t seed;
} kiln_bench_pointwise_config;
kiln_bench_pointwise_config kiln_bench_pointwise_defaults(void); /* gelu-chain, 1M elements, fused, 10 warm-up, 50 timed */

typedef struct kiln_bench_pointwise_result {
    double us, us_min;        /* median and fastest call */
    int kernels;              /* steps the plan runs per call (kernels launched) */
    double bytes;             /* read and written by those steps per call */
    double gbps;              /* bytes / median */
    double max_err;           /* against erf's GELU in double, over every element */
} kiln_bench_pointwise_result;
kiln_status kiln_bench_pointwise(const kiln_bench_pointwise_config *c, kiln_bench_pointwise_result *r);

/* kiln bench peak: what a backend's kernels reach through kiln's own plans (the doctor's ratings of a GPU's
 * kernels; MFU against a measured peak, never a datasheet's): a square matmul in the given math (backend: cpu, cuda,
 * or a registered one; precision and matmul_precision as kiln_compile_opts), grown from 256 until a run takes
 * 20 ms (at most 16384), and a relu over up to 256 Mi floats (bytes read + written); each size's best of five runs
 * after a warm-up, the best rate kept. */
typedef struct kiln_bench_peak_result {
    double gflops, gbps;
    int64_t matmul_n, relu_n; /* the sizes that gave them */
} kiln_bench_peak_result;
kiln_status kiln_bench_peak(const char *backend, int precision, int matmul_precision, kiln_bench_peak_result *r);

#ifdef __cplusplus
}
#endif
#endif
