/* kiln gradcheck: a zoo model's backward against finite differences in double
 * (kiln_gradcheck, src/train/gradcheck.c), one line per parameter tensor.
 * Exit 0 when every tensor is within --tol, 1 when one is not (the check
 * found a wrong gradient), 2 for bad usage. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "kiln/gradcheck.h"

static const char *usage =
    "usage: kiln gradcheck --model NAME [--batch-size N] [--samples K] [--tensors N] [--json]\n\n"
    "Checks backward against central finite differences, in double on the reference\n"
    "backend: the model is compiled for training (dropout off, batch norm on the\n"
    "batch's statistics) on a small random batch; K sampled elements of every\n"
    "parameter tensor are moved by +-eps and the loss recomputed. Prints the worst\n"
    "relative error |a - n| / max(|a|, |n|, 1e-5) per tensor. Exit 0 when all are\n"
    "within --tol, 1 when one is not, 2 for bad usage. A debugging aid: it runs\n"
    "two forward passes per sampled element.\n\n";

static const cli_opt opts[] = {
    {"model", "NAME", "a zoo model (mnist-cnn, mnist-cnn-bn, mlp, mlp-deep, resnet20, resnet18, resnet34, resnet50, gpt)", "mnist-cnn"},
    {"batch-size", "N", "samples in the random batch; 0: 2, 4 for resnet18/34/50 (batch norm over their 1x1 maps)", "0"},
    {"samples", "K", "elements checked per tensor (all of a smaller one); 0: 4, 1 for resnet18/34/50", "0"},
    {"tensors", "N", "check N parameter tensors spread evenly over the model (first and last included); 0: all", "0"},
    {"eps", "X", "the step of the central differences", "1e-6"},
    {"tol", "X", "the largest relative error that passes (an element over it at eps is tried again at eps / 10 and / 100, a ReLU's kink, and at eps x 10, rounding)", "1e-3"},
    {"seed", "N", "the parameters, the batch and the sampled elements", "1"},
    {"size", "N", "the ResNets: the input's height and width; mlp-deep: its width", "32"},
    {"num-classes", "N", "the ResNets: the classifier's outputs", "10"},
    {"layers", "N", "gpt: transformer blocks", "1"}, {"heads", "N", "gpt: attention heads (divides --dim)", "2"},
    {"dim", "N", "gpt: embedding width", "32"}, {"block", "N", "gpt: context length", "8"},
    {"vocab", "N", "gpt: vocabulary size", "32"},
    {"json", NULL, "one JSON object: the settings, every tensor, passed", NULL},
};
enum { G_MODEL, G_BATCH, G_SAMPLES, G_TENSORS, G_EPS, G_TOL, G_SEED, G_SIZE, G_CLASSES, G_GPT, G_JSON = G_GPT + CLI_GPT_NOPTS, G_N };

static int positive_double(const cli_opt *o, const char *v, double *out) {
    char *end;
    double x = strtod(v ? v : o->def, &end);
    if (end == (v ? v : o->def) || *end || !(x > 0) || !isfinite(x))
        return cli_usage_error("gradcheck", "--%s: a positive number (got '%s')", o->name, v ? v : "");
    *out = x;
    return 0;
}

static void print_json(const kiln_gradcheck_config *c, const kiln_gradcheck_result *r) {
    json_t *o = json_object(), *ts = json_array();
    for (int i = 0; i < r->n; i++) {
        const kiln_gradcheck_tensor *t = &r->t[i];
        json_t *e = json_object();
        json_object_set_new(e, "name", json_string(t->name));
        json_object_set_new(e, "numel", json_integer(t->numel));
        json_object_set_new(e, "checked", json_integer(t->checked));
        json_object_set_new(e, "retried", json_integer(t->retried));
        json_object_set_new(e, "worst_rel", cli_json_num(t->worst_rel));
        json_object_set_new(e, "worst_at", json_integer(t->worst_at));
        json_object_set_new(e, "analytic", cli_json_num(t->analytic));
        json_object_set_new(e, "numeric", cli_json_num(t->numeric));
        json_object_set_new(e, "passed", json_boolean(t->worst_rel <= c->tol));
        json_array_append_new(ts, e);
    }
    json_object_set_new(o, "model", json_string(c->model));
    json_object_set_new(o, "batch", json_integer(r->batch));
    json_object_set_new(o, "samples", json_integer(r->samples));
    json_object_set_new(o, "eps", json_real(c->eps));
    json_object_set_new(o, "tol", json_real(c->tol));
    json_object_set_new(o, "loss", cli_json_num(r->loss));
    json_object_set_new(o, "runs", json_integer(r->runs));
    json_object_set_new(o, "worst_rel", cli_json_num(r->worst_rel));
    json_object_set_new(o, "failed", json_integer(r->failed));
    json_object_set_new(o, "passed", json_boolean(!r->failed));
    json_object_set_new(o, "tensors", ts);
    cli_print_json(o);
}

static void print_table(const kiln_gradcheck_config *c, const kiln_gradcheck_result *r) {
    printf("%-34s %10s %7s %12s %14s %14s  %s\n", "tensor", "numel", "checked", "worst rel", "backward", "differences", "");
    for (int i = 0; i < r->n; i++) {
        const kiln_gradcheck_tensor *t = &r->t[i];
        printf("%-34s %10lld %7d %12.3e %14.6e %14.6e  %s\n", t->name, (long long)t->numel, t->checked, t->worst_rel,
               t->analytic, t->numeric, t->worst_rel <= c->tol ? "ok" : "FAIL");
    }
    printf("\n%s, batch %lld, %d elements per tensor, eps %g: worst relative error %.3e over %d tensors (%d forward runs); "
           "%s\n", c->model, (long long)r->batch, r->samples, c->eps, r->worst_rel, r->n, r->runs,
           r->failed ? "FAILED" : "passed");
    if (r->failed) printf("%d tensors over the tolerance %g\n", r->failed, c->tol);
}

int cli_gradcheck(int argc, char **argv) {
    const char *vals[G_N];
    int given[G_N];
    int rc = cli_parse("gradcheck", usage, opts, G_N, argc, argv, vals, given);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    kiln_gradcheck_config c = kiln_gradcheck_defaults();
    int64_t batch, samples, tensors, seed;
    if (cli_int("gradcheck", opts, G_BATCH, vals, 0, 64, &batch) || cli_int("gradcheck", opts, G_SAMPLES, vals, 0, 1 << 20, &samples) ||
        cli_int("gradcheck", opts, G_TENSORS, vals, 0, 1 << 20, &tensors) ||
        cli_int("gradcheck", opts, G_SEED, vals, 0, INT64_MAX, &seed) || positive_double(&opts[G_EPS], vals[G_EPS], &c.eps) ||
        positive_double(&opts[G_TOL], vals[G_TOL], &c.tol) ||
        cli_model_opts("gradcheck", opts, G_SIZE, G_CLASSES, vals, &c.model_opts) ||
        cli_gpt_opts("gradcheck", opts, G_GPT, vals, &c.model_opts.gpt))
        return EXIT_USAGE;
    c.model = vals[G_MODEL] ? vals[G_MODEL] : opts[G_MODEL].def;
    c.batch = batch;
    c.samples = (int)samples;
    c.tensors = (int)tensors;
    c.seed = (uint64_t)seed;
    kiln_gradcheck_result r;
    kiln_status st = kiln_gradcheck(&c, &r);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln gradcheck: %s\n", kiln_last_error());
        return cli_exit_code(st);
    }
    if (given[G_JSON]) print_json(&c, &r);
    else print_table(&c, &r);
    int failed = r.failed;
    kiln_gradcheck_result_free(&r);
    return failed ? 1 : 0;
}
