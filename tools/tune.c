/* kiln tune: fill the convolution autotune cache ahead of a run (kiln_tune in
 * src/train/tune.c); prints each direction's choice and what tuning took. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include "cli.h"
#include "kiln/tune.h"

static const char *usage =
    "usage: kiln tune --model NAME [--batch-size N] [--eval] [--retune] [--json]\n\n"
    "Compiles the model's training plan and its inference plan with autotuning on,\n"
    "as kiln train, eval, predict and bench step compile them at this batch size:\n"
    "every direction of every convolution that was not decided before is timed\n"
    "over oneDNN's implementations and layouts, and the fastest is kept in the\n"
    "autotune cache ($KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln),\n"
    "so the run that follows tunes nothing. Prints each direction's choice, how many\n"
    "directions were timed (and how many implementations) and the time it took.\n\n";

static const cli_opt opts[] = {
    {"model", "NAME", "a zoo model (resnet20, resnet18, resnet34, resnet50, mnist-cnn, ...)", "resnet20"},
    {"batch-size", "N", "the batch the plans are compiled for (the run's --batch-size)", "32"},
    {"eval", NULL, "the inference plan only", NULL},
    {"retune", NULL, "time every direction again and replace what the cache remembers (a cache filled while the machine was "
                     "busy keeps slow choices)", NULL},
    {"size", "N", "the ResNets: the input's height and width (resnet18: 112, resnet20: 32)", NULL},
    {"num-classes", "N", "the ResNets: the classifier's outputs", "10"},
    {"json", NULL, "one JSON object: the counts, the time and every choice", NULL},
};
enum { U_MODEL, U_BATCH, U_EVAL, U_RETUNE, U_SIZE, U_CLASSES, U_JSON, U_N };

static void print_text(const kiln_tune_config *c, const kiln_tune_result *r) {
    for (int i = 0; i < r->nchoices; i++) {
        const kiln_tune_choice *t = &r->choices[i];
        char how[48];
        if (t->remembered) snprintf(how, sizeof how, "remembered");
        else snprintf(how, sizeof how, "%d candidates timed%s", t->candidates, t->unsure ? ", under load: not kept" : "");
        printf("conv %-52s %-10s %-44s %9.1f us  %s\n", t->problem, t->dir, t->decision, t->us, how);
    }
    printf("kiln tune: %s batch %lld: %lld directions tuned (%lld candidates timed) in %.2f s, %lld remembered%s; %.2f s in "
           "all; ",
           c->model, (long long)c->batch, (long long)r->tuned, (long long)r->candidates, r->tune_seconds,
           (long long)r->remembered, r->over_budget ? " (the time budget left some candidates untimed)" : "", r->seconds);
    if (r->unsure)
        printf("%lld directions were timed while other work held the cores: their choices are not kept (run again when the "
               "machine is quiet); ", (long long)r->unsure);
    if (r->cache[0]) printf("decisions kept in %s\n", r->cache);
    else printf("no on-disk cache (KILN_CACHE_DIR is empty): nothing is kept\n");
}

static void print_json(const kiln_tune_config *c, const kiln_tune_result *r) {
    json_t *o = json_object(), *list = json_array();
    json_object_set_new(o, "model", json_string(c->model));
    json_object_set_new(o, "batch", json_integer(c->batch));
    json_object_set_new(o, "tuned", json_integer(r->tuned));
    json_object_set_new(o, "remembered", json_integer(r->remembered));
    json_object_set_new(o, "candidates", json_integer(r->candidates));
    json_object_set_new(o, "over_budget", json_integer(r->over_budget));
    json_object_set_new(o, "unsure", json_integer(r->unsure));
    json_object_set_new(o, "tune_seconds", cli_json_num(r->tune_seconds));
    json_object_set_new(o, "seconds", cli_json_num(r->seconds));
    json_object_set_new(o, "cache", r->cache[0] ? json_string(r->cache) : json_null());
    for (int i = 0; i < r->nchoices; i++) {
        const kiln_tune_choice *t = &r->choices[i];
        json_t *e = json_object();
        json_object_set_new(e, "problem", json_string(t->problem));
        json_object_set_new(e, "dir", json_string(t->dir));
        json_object_set_new(e, "decision", json_string(t->decision));
        json_object_set_new(e, "us", cli_json_num(t->us));
        json_object_set_new(e, "remembered", json_boolean(t->remembered));
        json_object_set_new(e, "candidates", json_integer(t->candidates));
        json_object_set_new(e, "unsure", json_boolean(t->unsure));
        json_array_append_new(list, e);
    }
    json_object_set_new(o, "choices", list);
    cli_print_json(o);
}

int cli_tune(int argc, char **argv) {
    const char *vals[U_N];
    int given[U_N];
    int rc = cli_parse("tune", usage, opts, U_N, argc, argv, vals, given);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    kiln_tune_config c = kiln_tune_defaults();
    int64_t batch;
    if (cli_int("tune", opts, U_BATCH, vals, 1, KILN_MAX_BATCH, &batch) ||
        cli_model_opts("tune", opts, U_SIZE, U_CLASSES, vals, &c.model_opts))
        return EXIT_USAGE;
    c.model = vals[U_MODEL] ? vals[U_MODEL] : opts[U_MODEL].def;
    c.batch = batch;
    c.eval_only = given[U_EVAL];
    c.retune = given[U_RETUNE];
    /* the table below says what the tuner's log lines would (KILN_LOG=debug shows them too) */
    if (!getenv("KILN_LOG")) kiln_log_set_level(KILN_LOG_WARN);
    kiln_tune_result r;
    kiln_status st = kiln_tune(&c, &r);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln tune: %s\n", kiln_last_error());
        return cli_exit_code(st);
    }
    if (given[U_JSON]) print_json(&c, &r);
    else print_text(&c, &r);
    kiln_tune_result_free(&r);
    return 0;
}
