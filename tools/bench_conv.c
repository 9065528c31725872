/* kiln bench conv: one convolution's forward and forward+backward through
 * kiln's plans (kiln_bench_conv in src/train/bench_conv.c), beside the
 * autotuner's choices and the time it measured for each, as one line per
 * figure or one JSON object. */
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include "cli.h"
#include "kiln/bench.h"

static const char *usage =
    "usage: kiln bench conv --shape NxCxHxW --out-channels K --kernel R --padding P [--stride S]\n"
    "                       [--autotune on|off] [--steps N] [--warmup N] [--no-bias] [--profile] [--json]\n\n"
    "The convolution benchmark (the guide's nn.Conv2d table): the median time of one\n"
    "forward call (an inference plan, as under no_grad) and of one forward+backward\n"
    "(a training plan with the input requiring its gradient: conv, sum to a scalar,\n"
    "its backward, backward-data, backward-weights with the bias; nothing subtracted),\n"
    "each call timed alone after a warm-up. With autotune on it also gives each\n"
    "direction's chosen oneDNN implementation and the time the tuner measured for\n"
    "it alone; their sum is the fastest oneDNN forward+backward measured alone.\n\n";

static const cli_opt opts[] = {
    {"shape", "NxCxHxW", "the input", "32x64x64x64"},
    {"out-channels", "K", "filters", "64"},
    {"kernel", "R", "square kernel size", "3"},
    {"padding", "P", "zero padding on each side", "1"},
    {"stride", "S", "", "1"},
    {"autotune", "on|off", "time each direction's implementations on this shape and keep the fastest", "on"},
    {"steps", "N", "timed calls (the median is reported)", "20"},
    {"warmup", "N", "untimed calls first", "3"},
    {"no-bias", NULL, "a convolution without bias (nn.Conv2d's default has one)", NULL},
    {"profile", NULL, "also time every kernel of the forward+backward plan and print the breakdown", NULL},
    {"json", NULL, "one JSON object: fwd_us, fwdbwd_us, gflops, choices per direction, alone_fwdbwd_us, ...", NULL},
};
enum { C_SHAPE, C_K, C_KERNEL, C_PAD, C_STRIDE, C_AUTOTUNE, C_STEPS, C_WARMUP, C_NOBIAS, C_PROFILE, C_JSON, C_N };

static const char *dirs[4] = {"fwd_inf", "fwd", "bwd_data", "bwd_weight"};

static json_t *result_json(const kiln_bench_conv_config *c, const kiln_bench_conv_result *r) {
    json_t *o = json_object(), *ch = json_object(), *g = json_object();
    char shape[96];
    snprintf(shape, sizeof shape, "%lldx%lldx%lldx%lld", (long long)c->n, (long long)c->c, (long long)c->h, (long long)c->w);
    json_object_set_new(o, "shape", json_string(shape));
    json_object_set_new(o, "out_channels", json_integer(c->k));
    json_object_set_new(o, "kernel", json_integer(c->kernel));
    json_object_set_new(o, "stride", json_integer(c->stride));
    json_object_set_new(o, "padding", json_integer(c->pad));
    json_object_set_new(o, "bias", json_boolean(c->bias));
    json_object_set_new(o, "autotune", json_string(c->autotune ? "on" : "off"));
    json_object_set_new(o, "threads", json_integer(omp_get_max_threads()));
    json_object_set_new(o, "steps", json_integer(c->steps));
    json_object_set_new(o, "fwd_us", cli_json_num(r->fwd_us));
    json_object_set_new(o, "fwd_us_min", cli_json_num(r->fwd_us_min));
    json_object_set_new(o, "fwdbwd_us", cli_json_num(r->fwdbwd_us));
    json_object_set_new(o, "fwdbwd_us_min", cli_json_num(r->fwdbwd_us_min));
    json_object_set_new(g, "fwd", cli_json_num(r->fwd_gflops));
    json_object_set_new(g, "fwdbwd", cli_json_num(r->fwdbwd_gflops));
    json_object_set_new(o, "gflops", g);
    for (int i = 0; i < 4; i++) {
        json_t *d = json_object();
        json_object_set_new(d, "impl", json_string(r->choice[i]));
        json_object_set_new(d, "us", r->choice_us[i] > 0 ? cli_json_num(r->choice_us[i]) : json_null());
        json_object_set_new(ch, dirs[i], d);
    }
    json_object_set_new(o, "choices", ch);
    json_object_set_new(o, "problem", json_string(r->problem));
    json_object_set_new(o, "alone_fwd_us", r->alone_fwd_us > 0 ? cli_json_num(r->alone_fwd_us) : json_null());
    json_object_set_new(o, "alone_fwdbwd_us", r->alone_fwdbwd_us > 0 ? cli_json_num(r->alone_fwdbwd_us) : json_null());
    json_object_set_new(o, "candidates_timed", json_integer(r->candidates));
    json_object_set_new(o, "unsure", json_integer(r->unsure));
    json_object_set_new(o, "tune_s", cli_json_num(r->tune_s));
    return o;
}

static void print_text(const kiln_bench_conv_config *c, const kiln_bench_conv_result *r) {
    printf("conv %lldx%lldx%lldx%lld -> %lld filters %lldx%lld, stride %lld, padding %lld%s, autotune %s, %d threads\n",
           (long long)c->n, (long long)c->c, (long long)c->h, (long long)c->w, (long long)c->k, (long long)c->kernel,
           (long long)c->kernel, (long long)c->stride, (long long)c->pad, c->bias ? ", bias" : "", c->autotune ? "on" : "off",
           omp_get_max_threads());
    printf("  forward:          %10.0f us (min %.0f), %.1f GFLOP/s\n", r->fwd_us, r->fwd_us_min, r->fwd_gflops);
    printf("  forward+backward: %10.0f us (min %.0f), %.1f GFLOP/s\n", r->fwdbwd_us, r->fwdbwd_us_min, r->fwdbwd_gflops);
    for (int i = 0; i < 4; i++) {
        if (!r->choice[i][0]) continue;
        printf("  %-10s %s", dirs[i], r->choice[i]);
        if (r->choice_us[i] > 0) printf(" (%.0f us alone)", r->choice_us[i]);
        putchar('\n');
    }
    if (r->alone_fwdbwd_us > 0)
        printf("  fastest oneDNN forward+backward measured alone: %.0f us; kiln's step is %.2fx that\n", r->alone_fwdbwd_us,
               r->fwdbwd_us / r->alone_fwdbwd_us);
    if (c->autotune) printf("  %lld candidates timed in %.2f s\n", (long long)r->candidates, r->tune_s);
}

static int parse_shape(const char *s, kiln_bench_conv_config *c) {
    long long v[4];
    char end;
    if (!s || sscanf(s, "%lldx%lldx%lldx%lld%c", &v[0], &v[1], &v[2], &v[3], &end) != 4 || v[0] < 1 || v[1] < 1 ||
        v[2] < 1 || v[3] < 1 || v[0] > (1 << 20) || v[1] > (1 << 20) || v[2] > (1 << 16) || v[3] > (1 << 16))
        return cli_usage_error("bench conv", "--shape: NxCxHxW, four positive sizes (got '%s')", s ? s : "");
    c->n = v[0];
    c->c = v[1];
    c->h = v[2];
    c->w = v[3];
    return 0;
}

int cli_bench_conv(int argc, char **argv) {
    const char *vals[C_N];
    int given[C_N];
    int rc = cli_parse("bench conv", usage, opts, C_N, argc, argv, vals, given);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    kiln_bench_conv_config c = kiln_bench_conv_defaults();
    int64_t steps, warmup;
    if (parse_shape(vals[C_SHAPE] ? vals[C_SHAPE] : opts[C_SHAPE].def, &c) ||
        cli_int("bench conv", opts, C_K, vals, 1, 1 << 20, &c.k) || cli_int("bench conv", opts, C_KERNEL, vals, 1, 1 << 10, &c.kernel) ||
        cli_int("bench conv", opts, C_PAD, vals, 0, 1 << 10, &c.pad) || cli_int("bench conv", opts, C_STRIDE, vals, 1, 1 << 10, &c.stride) ||
        cli_int("bench conv", opts, C_STEPS, vals, 1, 100000, &steps) || cli_int("bench conv", opts, C_WARMUP, vals, 0, 100000, &warmup) ||
        (c.autotune = cli_on_off("bench conv", opts, C_AUTOTUNE, vals)) < 0)
        return EXIT_USAGE;
    c.bias = !given[C_NOBIAS];
    c.steps = (int)steps;
    c.warmup = (int)warmup;
    static char report[1 << 14];
    if (given[C_PROFILE]) {
        c.profile = report;
        c.profile_len = sizeof report;
    }
    kiln_bench_conv_result r;
    kiln_status st = kiln_bench_conv(&c, &r);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln bench conv: %s\n", kiln_last_error());
        return cli_exit_code(st);
    }
    if (given[C_PROFILE]) fputs(report, given[C_JSON] ? stderr : stdout);
    if (given[C_JSON]) cli_print_json(result_json(&c, &r));
    else print_text(&c, &r);
    return 0;
}
