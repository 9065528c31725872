/* kiln bench conv: one convolution (the guide's nn.Conv2d table) through
 * kiln's compiled plans, as PyTorch's peer times it:
 *   forward           an inference plan x -> conv(w, b) -> y (no_grad);
 *   forward+backward  a training plan whose x is a parameter, so backward
 *                     computes dx as x.requires_grad does: conv, sum to a
 *                     scalar loss, its seed, the sum's backward (dy = 1),
 *                     backward-data and backward-weights (bias included),
 *                     the loss read out. Nothing is subtracted: that is what
 *                     a training step of this conv costs.
 * Each call is timed alone, the median reported. The tuner's choices come
 * with the time it measured for each ("the fastest oneDNN implementation
 * measured alone", reorders to its layout included). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/internal/dnnl_ops.h"
#include "kiln/alloc.h"
#include "kiln/bench.h"
#include "train/internal/bench_util.h"

kiln_bench_conv_config kiln_bench_conv_defaults(void) {
    kiln_bench_conv_config c = {.n = 32, .c = 64, .h = 64, .w = 64, .k = 64, .kernel = 3, .stride = 1, .pad = 1,
                                .bias = 1, .autotune = 1, .warmup = 3, .steps = 20, .seed = 1};
    return c;
}

/* median and minimum of `steps` runs after `warmup` */
static kiln_status time_runs(kiln_plan *pl, int64_t batch, int warmup, int steps, double *median, double *min) {
    double *t = calloc((size_t)steps, sizeof *t);
    if (!t) return kiln_fail(KILN_ERR_NOMEM, "bench conv");
    kiln_status st = KILN_OK;
    for (int i = 0; i < warmup + steps && st == KILN_OK; i++) {
        double t0 = kiln_bench_now_ms();
        st = kiln_plan_run(pl, batch);
        if (i >= warmup) t[i - warmup] = 1e3 * (kiln_bench_now_ms() - t0);
    }
    *median = kiln_bench_median(t, steps);
    *min = t[0];
    free(t);
    return st;
}

/* the choices the last compile made, into r's slots (fwd_inf, fwd, bwd_data, bwd_weight) */
static void take_choices(kiln_bench_conv_result *r) {
    static const char *slot[4] = {"fwd_inf", "fwd", "bwd_data", "bwd_weight"};
    kiln_autotune_choice ch[8];
    int n = kiln_autotune_choices(ch, 8);
    for (int i = 0; i < n && i < 8; i++)
        for (int s = 0; s < 4; s++)
            if (!strcmp(ch[i].dir, slot[s])) {
                snprintf(r->choice[s], sizeof r->choice[s], "%.95s", ch[i].decision);
                r->choice_us[s] = ch[i].us;
                if (s == 1) snprintf(r->problem, sizeof r->problem, "%.159s", ch[i].problem);
            }
    kiln_autotune_stats st;
    kiln_autotune_stats_get(&st);
    r->candidates += st.candidates;
    r->unsure += st.unsure;
    r->tune_s += st.seconds;
}

typedef struct {
    kiln_graph *g;
    kiln_params *P;
    kiln_plan *pl;
    float *x;
} bench_plan;

static void bench_plan_free(bench_plan *b) {
    kiln_plan_free(b->pl);
    kiln_params_free(b->P);
    kiln_graph_free(b->g);
    kiln_free(b->x);
}

/* training: x a parameter (its gradient is dx), loss = sum(conv(x)); else x an input bound to random data */
static kiln_status build(const kiln_bench_conv_config *c, int training, bench_plan *b) {
    memset(b, 0, sizeof *b);
    b->g = kiln_graph_new();
    kiln_graph *g = b->g;
    int64_t xs[4] = {training ? c->n : KILN_BATCH, c->c, c->h, c->w}, fan = c->c * c->kernel * c->kernel;
    kiln_value x = training ? kiln_param(g, "x", 4, xs, 1) : kiln_input(g, "x", KILN_F32, 4, xs);
    kiln_value w = kiln_param(g, "conv.weight", 4, (int64_t[]){c->k, c->c, c->kernel, c->kernel}, fan);
    kiln_value bias = c->bias ? kiln_param(g, "conv.bias", 1, (int64_t[]){c->k}, fan) : -1;
    kiln_value y = kiln_conv2d(g, x, w, bias, c->stride, c->pad);
    kiln_value out = training ? kiln_sum(g, y) : y;
    kiln_status st = kiln_params_new(g, KILN_F32, &b->P);
    if (st != KILN_OK) return st;
    kiln_params_init(b->P, c->seed);
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = training;
    o.max_batch = c->n;
    o.autotune = c->autotune;
    o.profile = training && c->profile;
    kiln_autotune_stats_reset();
    if ((st = kiln_compile(g, b->P, &out, 1, &o, &b->pl)) != KILN_OK || training) return st;
    size_t nx = (size_t)(c->n * c->c * c->h * c->w);
    if (!(b->x = kiln_alloc(nx * sizeof *b->x))) return kiln_fail(KILN_ERR_NOMEM, "bench conv: input");
    kiln_bench_fill_uniform(b->x, (int64_t)nx, c->seed);
    return kiln_plan_bind(b->pl, x, b->x);
}

static kiln_status run_mode(const kiln_bench_conv_config *c, int training, kiln_bench_conv_result *r) {
    bench_plan b;
    kiln_status st = build(c, training, &b);
    if (st == KILN_OK) {
        take_choices(r);
        st = training ? time_runs(b.pl, c->n, c->warmup, c->steps, &r->fwdbwd_us, &r->fwdbwd_us_min)
                      : time_runs(b.pl, c->n, c->warmup, c->steps, &r->fwd_us, &r->fwd_us_min);
        if (st == KILN_OK && training && c->profile) kiln_plan_profile_report(b.pl, c->profile, c->profile_len);
    }
    bench_plan_free(&b);
    return st;
}

kiln_status kiln_bench_conv(const kiln_bench_conv_config *c, kiln_bench_conv_result *r) {
    memset(r, 0, sizeof *r);
    if (c->n < 1 || c->c < 1 || c->h < 1 || c->w < 1 || c->k < 1 || c->kernel < 1 || c->stride < 1 || c->pad < 0 ||
        c->steps < 1 || c->warmup < 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "bench conv: a size, stride or step count out of range");
    if (c->h + 2 * c->pad < c->kernel || c->w + 2 * c->pad < c->kernel)
        return kiln_fail(KILN_ERR_INVALID_ARG, "bench conv: a %lldx%lld kernel does not fit %lldx%lld with padding %lld",
                         (long long)c->kernel, (long long)c->kernel, (long long)c->h, (long long)c->w, (long long)c->pad);
    kiln_status st = run_mode(c, 0, r);
    if (st == KILN_OK) st = run_mode(c, 1, r);
    if (st != KILN_OK) return kiln_fail_context(st, "bench conv");
    int64_t oh = (c->h + 2 * c->pad - c->kernel) / c->stride + 1, ow = (c->w + 2 * c->pad - c->kernel) / c->stride + 1;
    double fwd = 2.0 * (double)(c->n * c->k * oh * ow) * (double)(c->c * c->kernel * c->kernel);
    r->fwd_gflops = fwd / (r->fwd_us * 1e3);
    r->fwdbwd_gflops = 3 * fwd / (r->fwdbwd_us * 1e3);
    r->alone_fwd_us = r->choice_us[0];
    /* known only when each direction was timed (now or by the run that made the cache) */
    if (r->choice_us[1] > 0 && r->choice_us[2] > 0 && r->choice_us[3] > 0)
        r->alone_fwdbwd_us = r->choice_us[1] + r->choice_us[2] + r->choice_us[3];
    return KILN_OK;
}
