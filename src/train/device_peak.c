/* A device's peaks, measured through kiln's own plans on it (the doctor's
 * ratings of a GPU's kernels; the CPU's are machine.c's): a square matmul in
 * the run's math (cuBLASLt on a GPU: fp32, TF32 or bf16 tensor cores) and a
 * relu over a buffer larger than any cache (bytes read + written). Each
 * problem grows, doubling while a run takes under 20 ms (the matmul from 256
 * to 16384, its best rate kept; the relu from 16 Mi floats, 128 MB moved, past
 * an H100's 50 MB L2 and a CPU's L3, to 256 Mi, the largest's rate kept: the
 * launch and the read-back a few per cent of a run there), each size's best of
 * five runs after a warm-up: a simulator's slow runs stop at the smallest.
 * Never hard-coded: the GPU model changes between machines. The compiles'
 * chatter (the autotuner's choices) is quiet; their warnings (bf16 emulated)
 * are not. */
#include "train/internal/device_peak.h"
#include <math.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* one finished run: reading an element back waits for the device */
static kiln_status run_once(kiln_plan *pl, kiln_value y, double *s) {
    float one;
    double t0 = now_s();
    kiln_status st = kiln_plan_run(pl, 1);
    if (st == KILN_OK) st = kiln_plan_read(pl, y, &one, 1);
    *s = now_s() - t0;
    return st;
}

/* the best of five runs after a warm-up, in seconds */
static kiln_status best_of(kiln_plan *pl, kiln_value y, double *best) {
    double s;
    kiln_status st = run_once(pl, y, &s);
    *best = INFINITY;
    for (int i = 0; st == KILN_OK && i < 5; i++)
        if ((st = run_once(pl, y, &s)) == KILN_OK && s < *best) *best = s;
    return st;
}

/* y = x @ w with x, w [n, n] (matmul) or y = relu(x) with x [n] on the backend; its best run */
static kiln_status time_plan(const char *backend, int matmul, int64_t n, int precision, int matmul_precision, double *s) {
    kiln_log_level level = kiln_log_get_level();
    if (level < KILN_LOG_WARN) kiln_log_set_level(KILN_LOG_WARN);
    kiln_graph *g = kiln_graph_new();
    kiln_value x = matmul ? kiln_param(g, "x", 2, (int64_t[]){n, n}, n) : kiln_param(g, "x", 1, (int64_t[]){n}, 1);
    kiln_value y = matmul ? kiln_matmul(g, x, kiln_param(g, "w", 2, (int64_t[]){n, n}, n), -1) : kiln_relu(g, x);
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    kiln_status st = kiln_graph_status(g);
    if (st == KILN_OK) st = kiln_params_new_on(g, backend, &P);
    if (st == KILN_OK) {
        kiln_params_init(P, 1);
        kiln_compile_opts o = kiln_compile_defaults();
        o.backend = backend;
        o.max_batch = 1;
        o.precision = precision;
        o.matmul_precision = matmul_precision;
        st = kiln_compile(g, P, &y, 1, &o, &pl);
    }
    if (st == KILN_OK) st = best_of(pl, y, s);
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
    kiln_log_set_level(level);
    return st;
}

kiln_status kiln_bench_peak(const char *backend, int precision, int matmul_precision, kiln_bench_peak_result *r) {
    *r = (kiln_bench_peak_result){0};
    double s = 0;
    kiln_status st = KILN_OK;
    for (int64_t n = 256; st == KILN_OK && n <= 16384; n *= 2) {
        if ((st = time_plan(backend, 1, n, precision, matmul_precision, &s)) != KILN_OK) break;
        double rate = 2.0 * (double)n * (double)n * (double)n / s / 1e9;
        if (rate > r->gflops) r->gflops = rate, r->matmul_n = n;
        if (s > 0.02) break;
    }
    for (int64_t n = (int64_t)1 << 24; st == KILN_OK && n <= (int64_t)1 << 28; n *= 2) {
        if ((st = time_plan(backend, 0, n, KILN_PRECISION_FP32, 0, &s)) != KILN_OK) break;
        r->gbps = 8.0 * (double)n / s / 1e9, r->relu_n = n;
        if (s > 0.02) break;
    }
    return st;
}

kiln_status kiln_device_peaks(const char *backend, int precision, int matmul_precision, double *gflops, double *gbps) {
    kiln_bench_peak_result r;
    kiln_status st = kiln_bench_peak(backend, precision, matmul_precision, &r);
    *gflops = r.gflops, *gbps = r.gbps;
    return st;
}
