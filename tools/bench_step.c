/* kiln bench step: the step-time benchmark of a zoo model on synthetic data
 * (kiln_bench_step in src/train/bench_step.c), printed as one line or as one
 * JSON object. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "cli.h"
#include "kiln/bench.h"
#include "kiln/train.h"

static const char *usage =
    "usage: kiln bench step --model NAME [--batch-size N] [--eval] [--steps N] [--warmup N] [--device cpu|cuda|auto] [--json]\n\n"
    "The step benchmark: synthetic data of the model's input shape, compile, warm-up,\n"
    "then each step timed alone; prints the median step time, images/s, the conv and\n"
    "linear GFLOP/s and the plan's arena. Training steps include backward and the SGD\n"
    "update (lr 0.1, momentum 0.9, weight decay 5e-4), for the gpt clipping to norm 1 and\n"
    "AdamW (lr 3e-4, betas 0.9, 0.95, weight decay 0.1), as the peers; --eval times an\n"
    "inference plan. The gpt's samples are windows of --block random tokens.\n\n";

static const cli_opt opts[] = {
    {"model", "NAME", "a zoo model (resnet20, resnet18, resnet34, resnet50, mnist-cnn, ...)", "resnet20"},
    {"batch-size", "N", "samples per step", "128"},
    {"eval", NULL, "an inference plan (no backward, no update), forward only", NULL},
    {"steps", "N", "timed steps (the median is reported)", "20"},
    {"warmup", "N", "untimed steps first", "3"},
    {"size", "N", "the input's height and width (resnet18: 112, resnet20: 32)", NULL},
    {"num-classes", "N", "the ResNets: the classifier's outputs (default 10)", NULL},
    CLI_GPT_OPTS,
    {"autotune", "on|off", "time each convolution's algorithms on its real shape", "on"},
    {"depth-first", "on|off", "inference: run chains of convolutions image slice by image slice (cpu)", "on"},
    {"checkpoint-activations", "none|block|OPS", "recompute saved activations in backward (as kiln train)", "none"},
    {"precision", "fp32|bf16|auto", "mixed precision (as kiln train): matmul-class steps with bf16 operands; auto: where "
                  "measured faster at compile", "fp32"},
    {"device", "cpu|cuda|auto", "where to run: cpu, cuda (the GPU; an error without one) or auto (cuda when a GPU is here)", "cpu"},
    {"matmul-precision", "highest|high|medium", "GPU matmuls and convolutions in fp32, TF32 or bf16 tensor-core math (as kiln train)",
     "highest"},
    {"profile", NULL, "also time every kernel and print the per-step breakdown (steps then run one kernel at a time)", NULL},
    {"json", NULL, "one JSON object: model, batch, mode, ms, ms_min, ms_max, images_per_s, gflops, flops, arena_mb, "
                   "arena_mb_plain (without checkpointing), recomputed, params, precision, bf16_steps", NULL},
};
enum { S_MODEL, S_BATCH, S_EVAL, S_STEPS, S_WARMUP, S_SIZE, S_CLASSES, S_GPT, S_AUTOTUNE = S_GPT + CLI_GPT_NOPTS, S_DEPTH, S_CKPT,
       S_PREC, S_DEVICE, S_MMPREC, S_PROFILE, S_JSON, S_N };

static void print_result(const kiln_bench_step_config *c, const kiln_bench_step_result *r, int json) {
    if (!json) {
        printf("%s batch %lld %s: %.2f ms per step (min %.2f, max %.2f), %.0f images/s, %.1f GFLOP/s, arena %.1f MiB",
               c->model, (long long)c->batch, c->eval ? "eval" : "train", r->ms, r->ms_min, r->ms_max, r->images_per_s,
               r->gflops, r->arena_mb);
        if (c->checkpoint_activations) printf(" (%.1f MiB without checkpointing, %d nodes recomputed)", r->arena_mb_plain, r->recomputed);
        if (c->precision != KILN_PRECISION_FP32) printf(", precision %s: %d steps bf16", kiln_precision_name(c->precision), r->bf16_steps);
        printf("\n");
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(c->model));
    json_object_set_new(o, "batch", json_integer(c->batch));
    json_object_set_new(o, "mode", json_string(c->eval ? "eval" : "train"));
    json_object_set_new(o, "ms", cli_json_num(r->ms));
    json_object_set_new(o, "ms_min", cli_json_num(r->ms_min));
    json_object_set_new(o, "ms_max", cli_json_num(r->ms_max));
    json_object_set_new(o, "images_per_s", cli_json_num(r->images_per_s));
    json_object_set_new(o, "gflops", cli_json_num(r->gflops));
    json_object_set_new(o, "flops", cli_json_num(r->flops));
    json_object_set_new(o, "arena_mb", cli_json_num(r->arena_mb));
    json_object_set_new(o, "arena_mb_plain", cli_json_num(r->arena_mb_plain));
    json_object_set_new(o, "recomputed", json_integer(r->recomputed));
    json_object_set_new(o, "params", json_integer(r->params));
    json_object_set_new(o, "precision", json_string(kiln_precision_name(c->precision)));
    json_object_set_new(o, "bf16_steps", json_integer(r->bf16_steps));
    json_object_set_new(o, "device", json_string(c->backend ? c->backend : "cpu"));
    cli_print_json(o);
}

int cli_bench_step(int argc, char **argv) {
    const char *vals[S_N];
    int given[S_N];
    int rc = cli_parse("bench step", usage, opts, S_N, argc, argv, vals, given);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    kiln_bench_step_config c = kiln_bench_step_defaults();
    int64_t batch, steps, warmup;
    int autotune, depth;
    if (cli_int("bench step", opts, S_BATCH, vals, 1, 1 << 20, &batch) ||
        cli_int("bench step", opts, S_STEPS, vals, 1, 100000, &steps) ||
        cli_int("bench step", opts, S_WARMUP, vals, 0, 100000, &warmup) ||
        cli_model_opts("bench step", opts, S_SIZE, S_CLASSES, vals, &c.model_opts) ||
        cli_gpt_opts("bench step", opts, S_GPT, vals, &c.model_opts.gpt) ||
        (autotune = cli_on_off("bench step", opts, S_AUTOTUNE, vals)) < 0 ||
        (depth = cli_on_off("bench step", opts, S_DEPTH, vals)) < 0)
        return EXIT_USAGE;
    c.model = vals[S_MODEL] ? vals[S_MODEL] : opts[S_MODEL].def;
    c.batch = batch;
    c.steps = (int)steps;
    c.warmup = (int)warmup;
    c.eval = given[S_EVAL];
    c.autotune = autotune;
    c.depth_first = depth;
    if (cli_checkpoint("bench step", opts, S_CKPT, vals, &c.checkpoint_activations) ||
        cli_precision("bench step", opts, S_PREC, vals, &c.precision))
        return EXIT_USAGE;
    /* --matmul-precision parses as kiln train's */
    kiln_train_config tc = kiln_train_defaults();
    if (vals[S_MMPREC] && kiln_train_option_set(&tc, "matmul-precision", vals[S_MMPREC]) != KILN_OK)
        return cli_usage_error("bench step", "%s", kiln_last_error());
    c.matmul_precision = tc.matmul_precision;
    kiln_status dst = kiln_device_backend(vals[S_DEVICE], &c.backend);
    if (dst != KILN_OK) {
        fprintf(stderr, "kiln bench step: %s\n", kiln_last_error());
        return cli_exit_code(dst);
    }
    static char report[1 << 16];
    if (given[S_PROFILE]) {
        c.profile = report;
        c.profile_len = sizeof report;
    }
    kiln_bench_step_result r;
    kiln_status st = kiln_bench_step(&c, &r);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln bench step: %s\n", kiln_last_error());
        return cli_exit_code(st);
    }
    if (given[S_PROFILE]) fputs(report, given[S_JSON] ? stderr : stdout);
    print_result(&c, &r, given[S_JSON]);
    return 0;
}
