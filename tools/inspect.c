/* kiln inspect: a zoo model's compiled plan, step by step (kiln_inspect in
 * src/train/inspect.c gives it as JSON; this prints it as JSON or as a table). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "kiln/inspect.h"

static const char *usage =
    "usage: kiln inspect --model NAME [--batch-size N] [--eval] [--json]\n\n"
    "Compiles the model as training (or, with --eval, inference) compiles it and\n"
    "prints the plan: every step with its op, shapes, layouts (plain or oneDNN's\n"
    "blocked nChw16c), attributes, folded epilogue, the implementation chosen for\n"
    "it, the reorders its kernel makes on every run and its FLOPs; then the\n"
    "parameters, the arena, the conv and linear FLOPs per run and the reorders.\n\n";

static const cli_opt opts[] = {
    {"model", "NAME", "a zoo model (resnet20, resnet18, resnet34, resnet50, mnist-cnn, ...)", "resnet20"},
    {"batch-size", "N", "the batch the plan is compiled for", "32"},
    {"eval", NULL, "the inference plan (no backward)", NULL},
    {"size", "N", "the ResNets: the input's height and width (resnet18: 112, resnet20: 32)", NULL},
    {"num-classes", "N", "the ResNets: the classifier's outputs", "10"},
    CLI_GPT_OPTS,
    {"autotune", "on|off", "time each convolution's implementations on its real shape (remembered on disk), as training does", "on"},
    {"checkpoint-activations", "none|block|OPS", "the training plan with activation checkpointing (as kiln train): its "
                               "recomputations are steps of phase recompute", "none"},
    {"precision", "fp32|bf16|auto", "mixed precision (as kiln train): each step's precision is shown", "fp32"},
    {"json", NULL, "the plan as one JSON object", NULL},
};
enum { I_MODEL, I_BATCH, I_EVAL, I_SIZE, I_CLASSES, I_GPT, I_AUTOTUNE = I_GPT + CLI_GPT_NOPTS, I_CKPT, I_PREC, I_JSON, I_N };

/* "32x16x32x32" of a JSON shape */
static const char *shape_text(json_t *shape, char *buf, size_t len) {
    size_t o = (size_t)snprintf(buf, len, "%s", json_array_size(shape) ? "" : "scalar");
    for (size_t d = 0; d < json_array_size(shape) && o < len; d++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", d ? "x" : "", (long long)json_integer_value(json_array_get(shape, d)));
    return buf;
}

/* "plain>nChw16c": the layout of the first input and of the first output (the activations) */
static const char *layouts(json_t *step, char *buf, size_t len) {
    json_t *in = json_array_get(json_object_get(step, "in"), 0), *out = json_array_get(json_object_get(step, "out"), 0);
    snprintf(buf, len, "%s>%s", in ? json_string_value(json_object_get(in, "layout")) : "-",
             out ? json_string_value(json_object_get(out, "layout")) : "-");
    return buf;
}

#define STR(o, k) json_string_value(json_object_get((o), (k)))
#define INT(o, k) (long long)json_integer_value(json_object_get((o), (k)))
#define NUM(o, k) json_number_value(json_object_get((o), (k)))

static void print_table(json_t *doc) {
    json_t *steps = json_object_get(doc, "steps");
    printf("%-5s %-30s %-18s %-9s %-18s %-16s %-9s %-4s %-40s %8s %9s\n", "step", "name", "op", "phase", "shape",
           "layout in>out", "epilogue", "prec", "kernel", "reorders", "MFLOP");
    for (size_t i = 0; i < json_array_size(steps); i++) {
        json_t *s = json_array_get(steps, i), *out = json_object_get(s, "out");
        json_t *first = json_array_size(out) ? json_array_get(out, 0) : json_array_get(json_object_get(s, "in"), 0);
        char shape[96], lay[160], reo[32];
        if (INT(s, "weight_reorders")) snprintf(reo, sizeof reo, "%lld+%lldw", INT(s, "reorders"), INT(s, "weight_reorders"));
        else snprintf(reo, sizeof reo, "%lld", INT(s, "reorders"));
        printf("%-5zu %-30s %-18s %-9s %-18s %-16s %-9s %-4s %-40s %8s %9.1f", i, STR(s, "name"), STR(s, "op"), STR(s, "phase"),
               shape_text(json_object_get(first, "shape"), shape, sizeof shape), layouts(s, lay, sizeof lay),
               STR(s, "epilogue"), STR(s, "precision"), STR(s, "kernel"), reo, NUM(s, "flops") / 1e6);
        printf("%s%s\n", STR(s, "attrs")[0] ? "  " : "", STR(s, "attrs"));
    }
    printf("\n%s, batch %lld, %s plan on %s: %zu steps, %lld parameters, arena %.1f MiB, kernel workspace %.1f MiB, %.3f "
           "GFLOP per run (conv and linear), %lld reorders of activations and %lld of weights (w) per run\n",
           STR(doc, "model"), INT(doc, "batch"), !strcmp(STR(doc, "mode"), "eval") ? "inference" : "training",
           STR(doc, "backend"), json_array_size(steps), INT(doc, "params"), (double)INT(doc, "arena_bytes") / 1048576.0,
           (double)INT(doc, "workspace_bytes") / 1048576.0, NUM(doc, "flops") / 1e9, INT(doc, "reorders"), INT(doc, "weight_reorders"));
    if (INT(doc, "recomputed"))
        printf("activation checkpointing: %lld nodes recomputed in backward (phase recompute); arena %.1f MiB without it\n",
               INT(doc, "recomputed"), (double)INT(doc, "arena_bytes_plain") / 1048576.0);
}

int cli_inspect(int argc, char **argv) {
    const char *vals[I_N];
    int given[I_N];
    int rc = cli_parse("inspect", usage, opts, I_N, argc, argv, vals, given);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    kiln_inspect_config c = kiln_inspect_defaults();
    int64_t batch;
    if (cli_int("inspect", opts, I_BATCH, vals, 1, KILN_MAX_BATCH, &batch) ||
        cli_model_opts("inspect", opts, I_SIZE, I_CLASSES, vals, &c.model_opts) ||
        cli_gpt_opts("inspect", opts, I_GPT, vals, &c.model_opts.gpt) ||
        (c.autotune = cli_on_off("inspect", opts, I_AUTOTUNE, vals)) < 0 ||
        cli_checkpoint("inspect", opts, I_CKPT, vals, &c.checkpoint_activations) ||
        cli_precision("inspect", opts, I_PREC, vals, &c.precision))
        return EXIT_USAGE;
    c.model = vals[I_MODEL] ? vals[I_MODEL] : opts[I_MODEL].def;
    c.batch = batch;
    c.eval = given[I_EVAL];
    char *text = NULL;
    kiln_status st = kiln_inspect(&c, &text);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln inspect: %s\n", kiln_last_error());
        return cli_exit_code(st);
    }
    if (given[I_JSON]) printf("%s\n", text);
    else {
        json_t *doc = json_loads(text, 0, NULL);
        if (doc) print_table(doc);
        json_decref(doc);
    }
    free(text);
    return 0;
}
