/* kiln bench peak: what the device's kernels reach through kiln's own plans
 * (kiln_bench_peak in src/train/device_peak.c): a square matmul's GFLOP/s in
 * the given math and a relu's GB/s, as one line or one JSON object. The
 * figure MFU is taken against (bench/gpu_models.sh), and the doctor's. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "kiln/bench.h"
#include "kiln/train.h"

static const char *usage =
    "usage: kiln bench peak [--device cpu|cuda|auto] [--precision fp32|bf16|fp16] [--matmul-precision highest|high|medium] [--json]\n\n"
    "The device's peaks as kiln's own plans reach them: a square matmul (cuBLASLt on a\n"
    "GPU, oneDNN on the cpu) in the given math, grown from 256 until a run takes 20 ms\n"
    "(at most 16384), and a relu over up to 256 Mi floats (bytes read + written); each\n"
    "size's best of five runs after a warm-up, the best rate kept. Measured, never a\n"
    "datasheet's: the GPU and CPU models change between machines.\n\n";

static const cli_opt opts[] = {
    {"device", "cpu|cuda|auto", "where to run: cpu, cuda (the GPU; an error without one) or auto", "cpu"},
    {"precision", "fp32|bf16|fp16", "the matmul's operands (as kiln train's --precision)", "fp32"},
    {"matmul-precision", "highest|high|medium", "a GPU's fp32 matmul math: fp32, TF32 or bf16 (as kiln train)", "highest"},
    {"json", NULL, "one JSON object: gflops, gbps, matmul_n, relu_n, device, precision", NULL},
};
enum { K_DEVICE, K_PREC, K_MMPREC, K_JSON, K_N };

int cli_bench_peak(int argc, char **argv) {
    const char *vals[K_N];
    int given[K_N];
    int rc = cli_parse("bench peak", usage, opts, K_N, argc, argv, vals, given);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    int precision = KILN_PRECISION_FP32;
    if (cli_precision("bench peak", opts, K_PREC, vals, &precision)) return EXIT_USAGE;
    kiln_train_config tc = kiln_train_defaults(); /* --matmul-precision parses as kiln train's */
    if (vals[K_MMPREC] && kiln_train_option_set(&tc, "matmul-precision", vals[K_MMPREC]) != KILN_OK)
        return cli_usage_error("bench peak", "%s", kiln_last_error());
    const char *backend = NULL;
    kiln_status st = kiln_device_backend(vals[K_DEVICE], &backend);
    kiln_bench_peak_result r;
    if (st == KILN_OK) st = kiln_bench_peak(backend, precision, tc.matmul_precision, &r);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln bench peak: %s\n", kiln_last_error());
        return cli_exit_code(st);
    }
    if (given[K_JSON]) {
        json_t *o = json_object();
        json_object_set_new(o, "device", json_string(backend));
        json_object_set_new(o, "precision", json_string(kiln_precision_name(precision)));
        json_object_set_new(o, "matmul_precision", json_integer(tc.matmul_precision));
        json_object_set_new(o, "gflops", cli_json_num(r.gflops));
        json_object_set_new(o, "matmul_n", json_integer(r.matmul_n));
        json_object_set_new(o, "gbps", cli_json_num(r.gbps));
        json_object_set_new(o, "relu_n", json_integer(r.relu_n));
        cli_print_json(o);
    } else {
        printf("%s, %s operands: matmul %.1f GFLOP/s (n %lld), relu %.1f GB/s (%lld floats)\n", backend,
               kiln_precision_name(precision), r.gflops, (long long)r.matmul_n, r.gbps, (long long)r.relu_n);
    }
    return 0;
}
