/* kiln bench pointwise: the guide's GELU table. x * 0.5 * (1 + erf(x / 1.41421))
 * written as five nodes (as the guide's eager gelu(x) runs five kernels) over
 * a vector of floats, compiled as an inference plan with the pointwise fusion
 * pass on (one fused kernel) or off (five). Each call is timed alone, after a
 * warm-up, the median reported with the kernels the plan launches and the
 * bytes its steps read and write, so the achieved bandwidth compares with the
 * machine's (bench/membw.c). The output is checked against erf's GELU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kiln/alloc.h"
#include "kiln/bench.h"
#include "train/internal/bench_util.h"

kiln_bench_pointwise_config kiln_bench_pointwise_defaults(void) {
    kiln_bench_pointwise_config c = {.op = "gelu-chain", .elements = 1 << 20, .fuse = 1, .warmup = 10, .steps = 50, .seed = 1};
    return c;
}

/* the bytes each step reads and writes, from the plan's own description */
static double plan_bytes(const kiln_plan *pl) {
    double b = 0;
    for (int i = 0; i < kiln_plan_step_count(pl); i++) {
        kiln_step_info s;
        if (kiln_plan_step_info(pl, i, &s) != KILN_OK) continue;
        for (int k = 0; k < s.nin + s.nout; k++) {
            const kiln_step_arg *a = k < s.nin ? &s.in[k] : &s.out[k - s.nin];
            double n = 1;
            for (int d = 0; d < a->ndim; d++) n *= (double)a->shape[d];
            b += 4 * n;
        }
    }
    return b;
}

static double gelu_err(const float *x, const float *y, int64_t n) {
    double e = 0;
    for (int64_t i = 0; i < n; i++) e = fmax(e, fabs(y[i] - 0.5 * x[i] * (1.0 + erf(x[i] / 1.41421))));
    return e;
}

static kiln_status time_calls(const kiln_bench_pointwise_config *c, kiln_plan *pl, kiln_bench_pointwise_result *r) {
    double *t = calloc((size_t)c->steps, sizeof *t);
    if (!t) return kiln_fail(KILN_ERR_NOMEM, "bench pointwise");
    kiln_status st = KILN_OK;
    for (int i = 0; i < c->warmup + c->steps && st == KILN_OK; i++) {
        double t0 = kiln_bench_now_ms();
        st = kiln_plan_run(pl, c->elements);
        if (i >= c->warmup) t[i - c->warmup] = 1e3 * (kiln_bench_now_ms() - t0);
    }
    r->us = kiln_bench_median(t, c->steps);
    r->us_min = t[0];
    free(t);
    return st;
}

kiln_status kiln_bench_pointwise(const kiln_bench_pointwise_config *c, kiln_bench_pointwise_result *r) {
    memset(r, 0, sizeof *r);
    if (!c->op || strcmp(c->op, "gelu-chain") != 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "bench pointwise: unknown op '%s' (known: gelu-chain)", c->op ? c->op : "");
    if (c->elements < 1 || c->steps < 1 || c->warmup < 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "bench pointwise: %lld elements, %d steps, %d warm-up", (long long)c->elements,
                         c->steps, c->warmup);
    kiln_graph *g = kiln_graph_new();
    kiln_value x = kiln_input(g, "x", KILN_F32, 1, (int64_t[]){KILN_BATCH});
    kiln_value e = kiln_add_scalar(g, kiln_erf(g, kiln_scale(g, x, 1.0f / 1.41421f)), 1.0f);
    kiln_value y = kiln_mul(g, kiln_scale(g, x, 0.5f), e);
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    float *xd = kiln_alloc((size_t)c->elements * sizeof *xd), *yd = malloc((size_t)c->elements * sizeof *yd);
    kiln_status st = kiln_graph_status(g);
    if (st == KILN_OK && (!xd || !yd)) st = kiln_fail(KILN_ERR_NOMEM, "bench pointwise: %lld elements", (long long)c->elements);
    if (st == KILN_OK) st = kiln_params_new(g, KILN_F32, &P);
    kiln_compile_opts o = kiln_compile_defaults();
    o.max_batch = c->elements;
    o.fuse = c->fuse;
    if (st == KILN_OK) st = kiln_compile(g, P, &y, 1, &o, &pl);
    if (st == KILN_OK) {
        kiln_bench_fill_uniform(xd, c->elements, c->seed);
        for (int64_t i = 0; i < c->elements; i++) xd[i] *= 4.0f; /* [-4, 4]: both sides of erf's range */
        st = kiln_plan_bind(pl, x, xd);
    }
    if (st == KILN_OK) st = time_calls(c, pl, r);
    if (st == KILN_OK) st = kiln_plan_read(pl, y, yd, c->elements);
    if (st == KILN_OK) {
        r->kernels = kiln_plan_step_count(pl);
        r->bytes = plan_bytes(pl);
        r->gbps = r->bytes / (r->us * 1e3);
        r->max_err = gelu_err(xd, yd, c->elements);
    }
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
    kiln_free(xd);
    free(yd);
    return st;
}
