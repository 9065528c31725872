/* kiln bench pointwise: the guide's GELU table through kiln's plans
 * (kiln_bench_pointwise in src/train/bench_pointwise.c): the median time of
 * one call, the kernels launched and the bandwidth achieved, fused or not,
 * as one line or one JSON object. */
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "kiln/bench.h"

static const char *usage =
    "usage: kiln bench pointwise --op gelu-chain --elements N [--fuse on|off] [--steps N] [--warmup N] [--json]\n\n"
    "The pointwise benchmark (the guide's GELU table): x * 0.5 * (1 + erf(x / 1.41421))\n"
    "written as five nodes over N floats, an inference plan with the pointwise fusion\n"
    "pass on (one kernel) or off (five). Each call is timed alone after a warm-up; the\n"
    "median, the kernels launched, and the bytes the plan's steps read and write per\n"
    "call over that time (GB/s).\n\n";

static const cli_opt opts[] = {
    {"op", "NAME", "the chain: gelu-chain (the guide's five-node GELU)", "gelu-chain"},
    {"elements", "N", "floats in the input", "1048576"},
    {"fuse", "on|off", "the pointwise fusion pass", "on"},
    {"steps", "N", "timed calls (the median is reported)", "50"},
    {"warmup", "N", "untimed calls first", "10"},
    {"json", NULL, "one JSON object: us, kernels, gbps, bytes, ...", NULL},
};
enum { P_OP, P_ELEMENTS, P_FUSE, P_STEPS, P_WARMUP, P_JSON, P_N };

static json_t *result_json(const kiln_bench_pointwise_config *c, const kiln_bench_pointwise_result *r) {
    json_t *o = json_object();
    json_object_set_new(o, "op", json_string(c->op));
    json_object_set_new(o, "elements", json_integer(c->elements));
    json_object_set_new(o, "fuse", json_string(c->fuse ? "on" : "off"));
    json_object_set_new(o, "threads", json_integer(omp_get_max_threads()));
    json_object_set_new(o, "steps", json_integer(c->steps));
    json_object_set_new(o, "us", cli_json_num(r->us));
    json_object_set_new(o, "us_min", cli_json_num(r->us_min));
    json_object_set_new(o, "kernels", json_integer(r->kernels));
    json_object_set_new(o, "bytes", json_integer((json_int_t)r->bytes));
    json_object_set_new(o, "gbps", cli_json_num(r->gbps));
    json_object_set_new(o, "max_abs_err", cli_json_num(r->max_err));
    return o;
}

int cli_bench_pointwise(int argc, char **argv) {
    const char *vals[P_N];
    int given[P_N];
    int rc = cli_parse("bench pointwise", usage, opts, P_N, argc, argv, vals, given);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    kiln_bench_pointwise_config c = kiln_bench_pointwise_defaults();
    int64_t steps, warmup;
    c.op = vals[P_OP] ? vals[P_OP] : opts[P_OP].def;
    if (strcmp(c.op, "gelu-chain") != 0) return cli_usage_error("bench pointwise", "--op: unknown op '%s' (known: gelu-chain)", c.op);
    if (cli_int("bench pointwise", opts, P_ELEMENTS, vals, 1, (int64_t)1 << 32, &c.elements) ||
        cli_int("bench pointwise", opts, P_STEPS, vals, 1, 100000, &steps) ||
        cli_int("bench pointwise", opts, P_WARMUP, vals, 0, 100000, &warmup) ||
        (c.fuse = cli_on_off("bench pointwise", opts, P_FUSE, vals)) < 0)
        return EXIT_USAGE;
    c.steps = (int)steps;
    c.warmup = (int)warmup;
    kiln_bench_pointwise_result r;
    kiln_status st = kiln_bench_pointwise(&c, &r);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln bench pointwise: %s\n", kiln_last_error());
        return cli_exit_code(st);
    }
    if (given[P_JSON]) cli_print_json(result_json(&c, &r));
    else
        printf("%s, %lld elements, fuse %s, %d threads: %.1f us per call (min %.1f), %d kernels, %.1f GB/s (%.0f bytes)\n",
               c.op, (long long)c.elements, c.fuse ? "on" : "off", omp_get_max_threads(), r.us, r.us_min, r.kernels, r.gbps,
               r.bytes);
    return 0;
}
