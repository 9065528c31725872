/* kiln — the command-line program: train and evaluate models from the zoo.
 * An interrupted run (Ctrl-C, SIGTERM) saves its checkpoint and exits 130.
 * Exit codes: 0 success, 2 bad input or usage (including a batch too large
 * for the machine's memory), 1 anything else (a diverging loss, oneDNN). */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli.h"
#include "kiln/dist.h"

#ifndef KILN_VERSION
#define KILN_VERSION "dev"
#endif

static const char *main_help =
    "kiln " KILN_VERSION " — a neural-network training engine for the CPU\n"
    "\n"
    "usage: kiln <command> [options]\n"
    "\n"
    "commands:\n"
    "  train   train a model from the zoo on a dataset, optionally save a checkpoint\n"
    "  eval    measure a saved model's test loss and accuracy\n"
    "  pack    write Fashion-MNIST, an IDX folder or an image folder as JPEG or PNG files, or as shards\n"
    "  bench   bench loader: the loader's images/s per worker count, without training;\n"
    "          bench step: a model's median step time on synthetic data;\n"
    "          bench conv: one convolution's forward and forward+backward, autotuned or not\n"
    "          bench pointwise: the guide's five-node GELU, fused or not (kernels, us, GB/s)\n"
    "          bench peak: the device's matmul GFLOP/s and copy GB/s through kiln's plans\n"
    "  predict a model's top-5 classes and logits for every image under a folder, as JSON lines\n"
    "  inspect a model's compiled plan: steps, kernels and layouts chosen, reorders, arena, FLOPs\n"
    "  tune    time every convolution of a model ahead of a run and keep the fastest in the autotune cache\n"
    "  tokenize  text files to a byte-level token file (--data tokens:FILE) for the gpt\n"
    "  sample  text from a trained gpt, continuing a prompt\n"
    "  doctor  doctor train ...: what holds a training run back, and the remedies (--apply runs the improved command)\n"
    "  plot    runs' metrics files (train --metrics) as one PNG or SVG: loss, accuracy, throughput, data-wait\n"
    "  gradcheck  a model's backward against finite differences in double (a debugging aid)\n"
    "\n"
    "  kiln <command> --help   describes each command's options\n"
    "  kiln --version          prints the version\n"
    "\n"
    "examples:\n"
    "  kiln train --model mnist-cnn --data fashion-mnist --epochs 1 --save run.safetensors\n"
    "  kiln train --resume run.safetensors --epochs 3      # continue that run, with its settings\n"
    "  kiln eval --model mnist-cnn --data fashion-mnist --load run.safetensors --json\n"
    "  kiln predict --model resnet18 --load weights.safetensors --data photos --out preds.jsonl\n"
    "  kiln tune --model resnet18 --batch-size 32        # then kiln train ... --batch-size 32 tunes nothing\n"
    "  kiln inspect --model resnet18 --batch-size 32 --eval\n"
    "  kiln pack --from fashion-mnist --to fmnist-jpeg --format jpeg --size 64\n"
    "  kiln bench loader --data fmnist-jpeg --workers 0,2 --random-resized-crop 56 --hflip --normalize imagenet\n"
    "  kiln tokenize --from /usr/share/games/fortunes/*.u8 --to fortunes.tokens --val-fraction 0.1\n"
    "  kiln train --model gpt --data tokens:fortunes.tokens --optimizer adamw --lr 3e-4 --batch-size 8 --save gpt.safetensors\n"
    "  kiln sample --model gpt --load gpt.safetensors --prompt \"The \" --tokens 200\n"
    "  kiln plot run.jsonl other.jsonl --out curves.png\n";

/* Ctrl-C (or SIGTERM) asks the trainer to stop after the current step and
 * write its checkpoint; a second one kills the process as usual. */
static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
    g_stop = 1;
    signal(sig, SIG_DFL);
}

/* ---------------------------------------------------------------- train */

static const char *train_usage =
    "usage: kiln train [options]\n"
    "       kiln train --resume FILE [options that may change]\n"
    "\n"
    "Options marked * may differ from a resumed run's saved settings; the others\n"
    "are taken from the checkpoint and refused when they contradict it.\n"
    "\n";

enum { MAX_OPTS = 96 }; /* the trainer's table (kiln_train_option_count) plus the program's own, with room */

typedef struct {
    cli_opt opts[MAX_OPTS];
    char defs[MAX_OPTS][64];
    char helps[MAX_OPTS][512]; /* room for the longest help (--model's: 330 characters) */
    int n, ntrain; /* the first ntrain are the trainer's own (kiln_train_option_at) */
    int json, quiet;
} train_cli;

/* the trainer's settings table, then the program's own options */
static void train_options(train_cli *t) {
    kiln_train_config d = kiln_train_defaults();
    t->ntrain = kiln_train_option_count();
    for (int i = 0; i < t->ntrain && t->n < MAX_OPTS; i++, t->n++) {
        const kiln_train_option *o = kiln_train_option_at(i);
        kiln_train_option_get(&d, o->name, t->defs[i], sizeof t->defs[i]);
        snprintf(t->helps[i], sizeof t->helps[i], "%s%s", o->resumable ? "* " : "", o->help);
        int shown = !o->flag && t->defs[i][0];
        t->opts[i] = (cli_opt){o->name, o->metavar, t->helps[i], shown ? t->defs[i] : NULL};
    }
    t->opts[t->n++] = (cli_opt){"json", NULL, "* print one JSON object with the results as the last line of stdout", NULL};
    t->opts[t->n++] = (cli_opt){"quiet", NULL, "* no progress and no log lines", NULL};
}

/* the settings saved in the checkpoint being resumed, as a JSON object (NULL: none kept) */
static int stored_settings(const char *path, json_t **out) {
    *out = NULL;
    char *text = NULL;
    if (kiln_checkpoint_settings(path, &text) != KILN_OK) return -1;
    if (!text) return 0;
    json_error_t err;
    *out = json_loads(text, 0, &err);
    free(text);
    if (!*out || !json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        kiln_fail(KILN_ERR_FORMAT, "%s: its kiln.settings metadata is not a JSON object", path);
        return -1;
    }
    return 0;
}

/* A given option against the resumed run's value: equal after parsing both
 * ("1.0" and "1" agree), or an error naming both. */
static int check_against(const char *name, const char *given, const char *stored, const char *path) {
    kiln_train_config a = kiln_train_defaults();
    char mine[4096];
    if (kiln_train_option_set(&a, name, given) != KILN_OK) return cli_usage_error("train", "%s", kiln_last_error());
    kiln_train_option_get(&a, name, mine, sizeof mine);
    if (strcmp(mine, stored) == 0) return 0;
    return cli_usage_error("train", "--%s %s contradicts the run saved in %s (--%s %s); the settings that may change on "
                           "--resume are marked * in 'kiln train --help'", name, given ? given : "", path, name, stored);
}

static int int_text(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

/* --batch-size is per rank: a run resumed on another number of ranks keeps the
 * global batch (--batch-size x ranks) and so trains on as the saved run would.
 * v: the per-rank batch to use (given, or the saved global one shared out) */
static int resume_batch(const char *path, const char *given, const char *saved, char *v, size_t len) {
    int64_t sworld = 1, world = kiln_dist_size(), sb, gb;
    if (kiln_checkpoint_world_size(path, &sworld) != KILN_OK) {
        fprintf(stderr, "kiln train: %s\n", kiln_last_error());
        return EXIT_USAGE;
    }
    snprintf(v, len, "%s", given ? given : saved);
    if (!int_text(saved, 1, KILN_MAX_BATCH, &sb)) return given ? check_against("batch-size", given, saved, path) : 0;
    long long global = (long long)(sb * sworld);
    if (given && (!int_text(given, 1, KILN_MAX_BATCH, &gb) || gb * world != global))
        return cli_usage_error("train", "--batch-size %s on %lld rank%s contradicts the run saved in %s (--batch-size %lld on %lld "
                               "rank%s, a global batch of %lld): --batch-size is per rank, and a resumed run keeps the global "
                               "batch", given, (long long)world, world == 1 ? "" : "s", path, (long long)sb, (long long)sworld,
                               sworld == 1 ? "" : "s", global);
    if (given) return 0;
    if (global % world)
        return cli_usage_error("train", "the run saved in %s has a global batch of %lld (%lld rank%s x %lld), which %lld ranks "
                               "cannot share evenly: resume on a number of ranks that divides it", path, global,
                               (long long)sworld, sworld == 1 ? "" : "s", (long long)sb, (long long)world);
    snprintf(v, len, "%lld", global / world);
    return 0;
}

/* defaults, then the resumed run's settings, then what the command line gives, in table order */
static int build_config(train_cli *t, const char **vals, const int *given, kiln_train_config *c, json_t **stored) {
    *c = kiln_train_defaults();
    int resume = -1;
    for (int i = 0; i < t->ntrain; i++)
        if (given[i] && strcmp(t->opts[i].name, "resume") == 0) resume = i;
    if (resume >= 0 && stored_settings(vals[resume], stored) != 0) {
        fprintf(stderr, "kiln train: %s\n", kiln_last_error());
        return EXIT_USAGE;
    }
    for (int i = 0; i < t->ntrain; i++) {
        const char *name = t->opts[i].name;
        json_t *s = *stored ? json_object_get(*stored, name) : NULL;
        const char *saved = json_is_string(s) ? json_string_value(s) : NULL;
        const char *v = given[i] ? vals[i] : saved;
        char batch[32];
        int rc = 0;
        if (saved && strcmp(name, "batch-size") == 0) {
            rc = resume_batch(vals[resume], given[i] ? vals[i] : NULL, saved, batch, sizeof batch);
            v = batch;
        } else if (given[i] && saved && !kiln_train_option_at(i)->resumable) rc = check_against(name, vals[i], saved, vals[resume]);
        if (rc) return rc;
        if ((given[i] || saved) && kiln_train_option_set(c, name, v) != KILN_OK) {
            if (given[i]) return cli_usage_error("train", "%s", kiln_last_error());
            fprintf(stderr, "kiln train: %s: its saved settings: %s\n", vals[resume], kiln_last_error());
            return EXIT_USAGE;
        }
    }
    return 0;
}

static void print_summary(const kiln_train_config *c, const kiln_train_result *r) {
    fprintf(stderr, "kiln: %lld steps in %.2f s (%.0f images/s, data-wait %.1f%%), final loss %.4f", (long long)r->steps,
            r->train_time_s, r->images_per_s, 100 * r->data_wait_frac, r->final_loss);
    if (r->test_accuracy >= 0) fprintf(stderr, ", test loss %.4f, test accuracy %.2f%%", r->test_loss, 100 * r->test_accuracy);
    fprintf(stderr, ", peak RSS %.0f MB\n", r->peak_rss_mb);
    if (r->world_size > 1)
        fprintf(stderr, "kiln: %d ranks, global batch %lld; gradient all-reduce in %d bucket%s: %.3f ms per step exposed, "
                "%.0f%% hidden behind backward (the last rank to arrive waited %.3f ms; arrival imbalance added %.3f ms a rank)\n",
                r->world_size, (long long)r->global_batch, r->buckets, r->buckets == 1 ? "" : "s", r->allreduce_exposed_ms,
                100 * r->allreduce_hidden_frac, r->allreduce_comm_exposed_ms, r->allreduce_skew_ms);
    if (r->skipped) fprintf(stderr, "kiln: --bad-samples skip replaced %lld bad samples\n", (long long)r->skipped);
    if (r->loss_scale > 0)
        fprintf(stderr, "kiln: loss scale %g at the end; %lld update%s skipped for inf or NaN gradients\n", r->loss_scale,
                (long long)r->skipped_updates, r->skipped_updates == 1 ? "" : "s");
    if (c->save) fprintf(stderr, "kiln: saved %s%s\n", c->save, r->interrupted ? " (resume with --resume)" : "");
}

static void print_train_json(const kiln_train_config *c, const kiln_train_result *r) {
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(c->model));
    json_object_set_new(o, "framework", json_string("kiln"));
    json_object_set_new(o, "epochs", json_integer(c->epochs));
    json_object_set_new(o, "steps", json_integer(r->steps));
    json_object_set_new(o, "batch_size", json_integer(r->batch_size));
    json_object_set_new(o, "world_size", json_integer(r->world_size));
    json_object_set_new(o, "global_batch", json_integer(r->global_batch));
    json_object_set_new(o, "train_time_s", cli_json_num(r->train_time_s));
    json_object_set_new(o, "compile_time_s", cli_json_num(r->compile_time_s));
    json_object_set_new(o, "images_per_s", cli_json_num(r->images_per_s));
    if (r->tokens_per_s > 0) json_object_set_new(o, "tokens_per_s", cli_json_num(r->tokens_per_s));
    json_object_set_new(o, "step_allocs", json_integer(r->step_allocs));
    json_object_set_new(o, "data_wait_frac", cli_json_num(r->data_wait_frac));
    json_object_set_new(o, "final_loss", cli_json_num(r->final_loss));
    if (r->loss_scale > 0) {
        json_object_set_new(o, "loss_scale", json_real(r->loss_scale));
        json_object_set_new(o, "skipped_updates", json_integer(r->skipped_updates));
    }
    json_object_set_new(o, "test_loss", r->test_accuracy >= 0 ? cli_json_num(r->test_loss) : json_null());
    json_object_set_new(o, "test_accuracy", r->test_accuracy >= 0 ? cli_json_num(r->test_accuracy) : json_null());
    json_object_set_new(o, "peak_rss_mb", cli_json_num(r->peak_rss_mb));
    json_object_set_new(o, "threads", json_integer(r->threads));
    json_object_set_new(o, "workers", json_integer(r->workers));
    json_object_set_new(o, "workers_auto", c->workers == KILN_WORKERS_AUTO ? json_string(r->workers_why) : json_null());
    json_object_set_new(o, "skipped_samples", json_integer(r->skipped));
    json_object_set_new(o, "ring_mb", cli_json_num((double)r->ring_bytes / 1048576.0));
    json_object_set_new(o, "optimizer", json_string(kiln_optim_name(c->optim.kind)));
    json_object_set_new(o, "arena_mb", cli_json_num(r->arena_bytes / 1048576.0));
    json_object_set_new(o, "arena_mb_plain", cli_json_num(r->arena_bytes_plain / 1048576.0)); /* without checkpointing */
    if (c->profile) {
        json_object_set_new(o, "step_ms", cli_json_num(r->step_ms));
        json_object_set_new(o, "kernel_ms", cli_json_num(r->kernel_ms));
        json_object_set_new(o, "overhead_ms", cli_json_num(r->overhead_ms));
        json_object_set_new(o, "forward_ms", cli_json_num(r->fwd_ms));
        json_object_set_new(o, "backward_ms", cli_json_num(r->bwd_ms));
        json_object_set_new(o, "optimizer_ms", cli_json_num(r->optim_ms));
    }
    if (r->world_size > 1) {
        json_object_set_new(o, "buckets", json_integer(r->buckets));
        json_object_set_new(o, "allreduce_exposed_ms", cli_json_num(r->allreduce_exposed_ms)); /* per step */
        json_object_set_new(o, "allreduce_hidden_frac", cli_json_num(r->allreduce_hidden_frac));
        json_object_set_new(o, "allreduce_comm_exposed_ms", cli_json_num(r->allreduce_comm_exposed_ms));
        json_object_set_new(o, "allreduce_skew_ms", cli_json_num(r->allreduce_skew_ms));
        json_object_set_new(o, "allreduce_comm_exposed_median_ms", cli_json_num(r->allreduce_comm_exposed_median_ms));
    }
    json_object_set_new(o, "interrupted", json_boolean(r->interrupted));
    cli_print_json(o);
}

/* A rank that fails ends the whole job (MPI_Abort: mpirun then exits with this
 * code): the other ranks may wait in a collective, and a rank that returned
 * through MPI_Finalize could wait there for them. */
static int train_failed(int code) {
    if (kiln_dist_size() > 1) kiln_dist_abort(code);
    kiln_dist_finalize();
    return code;
}

static int cmd_train(int argc, char **argv) {
    static train_cli t;
    memset(&t, 0, sizeof t);
    train_options(&t);
    const char *vals[MAX_OPTS];
    int given[MAX_OPTS];
    int rc = cli_parse("train", train_usage, t.opts, t.n, argc, argv, vals, given);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    /* under mpirun: join the job first, as a resumed run's batch depends on the ranks (resume_batch) */
    if (kiln_dist_init(kiln_train_defaults().timeout) != KILN_OK) {
        fprintf(stderr, "kiln train: %s\n", kiln_last_error());
        return EXIT_USAGE;
    }
    kiln_train_config c;
    json_t *stored = NULL;
    if ((rc = build_config(&t, vals, given, &c, &stored)) != 0) {
        json_decref(stored);
        return train_failed(rc);
    }
    kiln_dist_init(c.timeout);
    int json = given[t.ntrain], quiet = given[t.ntrain + 1];
    /* only rank 0 reports (the others print warnings and errors) */
    int rank = kiln_dist_rank();
    if (rank != 0) quiet = 1, json = 0;
    progress_ui ui;
    progress_init(&ui, quiet, c.log_every);
    if (quiet) kiln_log_set_level(KILN_LOG_WARN);
    kiln_log_set_sink(progress_log_sink, &ui);
    c.progress = progress_on_step;
    c.progress_user = &ui;
    c.stop_flag = &g_stop;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    kiln_train_result r;
    kiln_status st = kiln_train(&c, &r);
    progress_clear(&ui);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln train: %s\n", kiln_last_error());
        json_decref(stored);
        return train_failed(cli_exit_code(st));
    }
    kiln_dist_finalize();
    if (!quiet) print_summary(&c, &r);
    if (json) print_train_json(&c, &r);
    json_decref(stored);
    return r.interrupted ? 128 + SIGINT : 0;
}

int cli_train(int argc, char **argv) { return cmd_train(argc, argv); }

int cli_train_config(const char *cmd, const char *usage, const cli_opt *extra, int nextra, int argc, char **argv,
                     kiln_train_config *c, const char **extra_vals, int *extra_given) {
    static train_cli t;
    memset(&t, 0, sizeof t);
    train_options(&t);
    t.n = t.ntrain; /* the caller's options instead of train's --json and --quiet */
    for (int i = 0; i < nextra && t.n < MAX_OPTS; i++) t.opts[t.n++] = extra[i];
    const char *vals[MAX_OPTS];
    int given[MAX_OPTS];
    int rc = cli_parse(cmd, usage, t.opts, t.n, argc, argv, vals, given);
    if (rc) return rc > 0 ? 1 : EXIT_USAGE;
    for (int i = 0; i < t.ntrain; i++)
        if (given[i] && strcmp(t.opts[i].name, "resume") == 0)
            return cli_usage_error(cmd, "--resume: give the run's own options instead (the doctor trains short windows from scratch)");
    json_t *stored = NULL;
    if ((rc = build_config(&t, vals, given, c, &stored)) != 0) return rc;
    for (int i = 0; i < nextra; i++) {
        extra_vals[i] = vals[t.ntrain + i];
        extra_given[i] = given[t.ntrain + i];
    }
    return 0;
}

/* ---------------------------------------------------------------- eval */

static const char *eval_usage = "usage: kiln eval --load FILE [options]\n\n";

static const cli_opt eval_opts[] = {
    {"model", "NAME", "the model the weights belong to", "mnist-cnn"},
    {"data", "NAME|DIR", "dataset whose test split is measured", "fashion-mnist"},
    {"load", "FILE", "weights: a kiln checkpoint or any safetensors file with the model's tensor names (e.g. a PyTorch state_dict)", NULL},
    {"batch-size", "N", "samples per step", "1000"},
    {"workers", "N", "loader threads", "1"},
    {"threads", "N", "compute threads; 0: all cores", "0"},
    {"device", "cpu|cuda|auto", "where to evaluate (auto: cuda when a GPU is here)", "cpu"},
    {"resize", "N", "image folders: Resize(N), as the run was trained with", NULL},
    {"center-crop", "N", "image folders: CenterCrop(N) after the resize", NULL},
    {"random-resized-crop", "N[,lo,hi]", "the training run's crop: the test split is resized and center-cropped to N", NULL},
    {"normalize", "M/S|imagenet", "Normalize(mean, std), as the run was trained with", NULL},
    {"channels", "1|3", "image folders: 1 (grey) or 3 (RGB)", NULL},
    {"val-split", "X", "DIR/<class>/... folders: the share of the images that is the test split", NULL},
    {"layers", "N", "gpt: transformer blocks, as trained", NULL},
    {"heads", "N", "gpt: attention heads, as trained", NULL},
    {"dim", "N", "gpt: embedding width, as trained", NULL},
    {"block", "N", "gpt: context length, as trained (test_loss: the file's consecutive windows of N + 1 tokens)", NULL},
    {"vocab", "N", "gpt: vocabulary size, as trained", NULL},
    {"num-classes", "N", "the ResNets: the classifier's outputs, as the run was trained with", NULL},
    {"precision", "fp32|bf16|auto", "mixed precision (as kiln train): matmul-class steps with bf16 operands", NULL},
    {"fix-bias", NULL, "the model without the biases its batch norms cancel, as trained with --fix-bias", NULL},
    {"json", NULL, "print one JSON object as the last line of stdout", NULL},
};
enum { E_MODEL, E_DATA, E_LOAD, E_BATCH, E_WORKERS, E_THREADS, E_DEVICE, E_RESIZE, E_VAL_SPLIT = E_RESIZE + 5,
       E_NUM_CLASSES = E_VAL_SPLIT + 6, E_PRECISION, E_FIX_BIAS, E_JSON, E_N };

static int cmd_eval(int argc, char **argv) {
    const char *vals[E_N];
    int given[E_N];
    int rc = cli_parse("eval", eval_usage, eval_opts, E_N, argc, argv, vals, given);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    int64_t batch = 0;
    if (cli_int("eval", eval_opts, E_BATCH, vals, INT64_MIN, INT64_MAX, &batch)) return EXIT_USAGE; /* the library checks the range */
    /* --workers and --threads parse as train's do; the library checks every value the same way for both */
    /* so do the transforms: they must be the test split's of the run */
    kiln_train_config c = kiln_train_defaults();
    for (int i = E_WORKERS; i <= E_PRECISION; i++)
        if (i != E_DEVICE && vals[i] && kiln_train_option_set(&c, eval_opts[i].name, vals[i]) != KILN_OK)
            return cli_usage_error("eval", "%s", kiln_last_error());
    c.workers = vals[E_WORKERS] ? c.workers : 1;
    c.threads = vals[E_THREADS] ? c.threads : 0;
    c.fix_bias = given[E_FIX_BIAS];
    if (!vals[E_LOAD]) return cli_usage_error("eval", "%s", "--load FILE is required");
    const char *model = vals[E_MODEL] ? vals[E_MODEL] : eval_opts[E_MODEL].def;
    c.model = model;
    c.data = vals[E_DATA] ? vals[E_DATA] : eval_opts[E_DATA].def;
    c.device = vals[E_DEVICE];
    double loss = 0, acc = 0;
    int64_t samples = 0;
    kiln_status st = kiln_evaluate_config(&c, vals[E_LOAD], batch, &loss, &acc, &samples);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln eval: %s\n", kiln_last_error());
        return cli_exit_code(st);
    }
    fprintf(stderr, "kiln: test loss %.4f, test accuracy %.2f%% on %lld samples\n", loss, 100 * acc, (long long)samples);
    if (given[E_JSON]) {
        json_t *o = json_object();
        json_object_set_new(o, "model", json_string(model));
        json_object_set_new(o, "samples", json_integer(samples));
        json_object_set_new(o, "test_loss", cli_json_num(loss));
        json_object_set_new(o, "test_accuracy", cli_json_num(acc));
        json_object_set_new(o, "precision", json_string(kiln_precision_name(c.precision)));
        cli_print_json(o);
    }
    return 0;
}

/* ---------------------------------------------------------------- pack */

static const char *pack_usage = "usage: kiln pack --from fashion-mnist|DIR --to OUT [--format jpeg|png] [--size N]\n"
                                "       kiln pack --from fashion-mnist|DIR --to OUT --format shard [--decoded] [--shard-size N]\n\n"
                                "Writes OUT/train/<label>/<index>.jpg and OUT/test/... (torchvision's ImageFolder layout),\n"
                                "or shards OUT/train-00000.kshard ... and their manifest OUT/index.json (--data OUT reads them).\n\n";

static const cli_opt pack_opts[] = {
    {"from", "NAME|DIR", "fashion-mnist, mnist, a folder of IDX files or an image folder (DIR/train/<class>/..., or DIR/<class>/...)",
     "fashion-mnist"},
    {"to", "DIR", "the image folder to write (its train/ must not exist yet)", NULL},
    {"format", "jpeg|png|shard", "jpeg (quality 90), png, or shard: packed shards (an image folder's files kept as they are; "
                                 "IDX images as PNG)", "jpeg"},
    {"size", "N", "resize every image to N x N (bilinear, antialiased); 0: as the data", "0"},
    {"channels", "1|3", "1: grey; 3: RGB (grey copied to every channel, as PIL's convert('RGB')); default 1 for IDX data, "
                        "3 for an image folder", NULL},
    {"decoded", NULL, "shard: records are decoded 8-bit pixels (no decoding when training; larger files)", NULL},
    {"shard-size", "N", "shard: samples per shard file", "4096"},
};
enum { P_FROM, P_TO, P_FORMAT, P_SIZE, P_CHANNELS, P_DECODED, P_SHARD_SIZE, P_N };

static int cmd_pack(int argc, char **argv) {
    const char *vals[P_N];
    int given[P_N];
    int rc = cli_parse("pack", pack_usage, pack_opts, P_N, argc, argv, vals, given);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    int64_t size = 0, channels = 0, shard_size = 0;
    if (cli_int("pack", pack_opts, P_SIZE, vals, -1000000, 1000000, &size) ||
        (vals[P_CHANNELS] && cli_int("pack", pack_opts, P_CHANNELS, vals, -1000000, 1000000, &channels)) ||
        cli_int("pack", pack_opts, P_SHARD_SIZE, vals, -1, INT64_MAX, &shard_size))
        return EXIT_USAGE;
    if (!vals[P_TO]) return cli_usage_error("pack", "%s", "--to DIR is required");
    const char *from = vals[P_FROM] ? vals[P_FROM] : pack_opts[P_FROM].def;
    const char *format = vals[P_FORMAT] ? vals[P_FORMAT] : pack_opts[P_FORMAT].def;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int64_t n = 0;
    int shard = !strcmp(format, "shard");
    if (!shard && (given[P_DECODED] || vals[P_SHARD_SIZE]))
        return cli_usage_error("pack", "%s", "--decoded and --shard-size apply to --format shard");
    kiln_status st = shard ? kiln_pack_shards(from, vals[P_TO], given[P_DECODED], shard_size, (int)size, (int)channels, &n)
                           : kiln_pack_images(from, vals[P_TO], format, (int)size, (int)channels, &n);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln pack: %s\n", kiln_last_error());
        return cli_exit_code(st);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    fprintf(stderr, "kiln: wrote %lld %s %s to %s in %.1f s\n", (long long)n, shard ? "samples as" : format,
            shard ? (given[P_DECODED] ? "decoded shards" : "encoded shards") : "files", vals[P_TO], s);
    return 0;
}

/* ---------------------------------------------------------------- bench */

static const char *bench_usage =
    "usage: kiln bench loader --data DIR [--workers 0,1,2,4] [--pin-memory] [--batch-size N] [--batches N] [--json]\n"
    "                         [transforms, as train takes them]\n\n"
    "The dataloading benchmark: the training split with its random transforms, a\n"
    "seeded shuffled loader per workers value, a few warm-up batches, then batches\n"
    "fetched and released as fast as they come (no training); prints images/s.\n\n";

static const cli_opt bench_opts[] = {
    {"data", "DIR", "the dataset (an image folder, or fashion-mnist / an IDX folder)", NULL},
    {"workers", "N[,N...]", "loader threads, one measurement per value", "0,1,2,4"},
    {"pin-memory", NULL, "mlock the batch ring (the CPU meaning of pinned memory)", NULL},
    {"batch-size", "N", "samples per batch", "64"},
    {"batches", "N", "batches timed per setting; 0: about 2 s or 200 batches", "0"},
    {"warmup", "N", "batches fetched before timing", "5"},
    {"seed", "N", "seeds the shuffle and the random transforms", "1"},
    {"resize", "N", "Resize(N): the shorter side to N", NULL},
    {"center-crop", "N", "CenterCrop(N)", NULL},
    {"random-resized-crop", "N[,lo,hi]", "RandomResizedCrop(N, scale=(lo, hi))", NULL},
    {"hflip", NULL, "RandomHorizontalFlip(0.5)", NULL},
    {"normalize", "M/S|imagenet", "Normalize(mean, std)", NULL},
    {"channels", "1|3", "1 (grey) or 3 (RGB)", NULL},
    {"val-split", "X", "DIR/<class>/... folders: the share held out (the rest is measured)", NULL},
    {"block", "N", "token files: tokens per sample (windows of N + 1)", NULL},
    {"json", NULL, "one JSON line per setting: workers, pin_memory, images_per_s, batches (and epoch with --epochs)", NULL},
    {"cache", "DIR", "keep decoded samples in DIR (as train's --cache): the first epoch fills it, later ones read it", NULL},
    {"epochs", "N", "time N whole epochs one by one instead (no warm-up): a rate per epoch, e.g. the --cache's first against its second", "0"},
};
enum { B_DATA, B_WORKERS, B_PIN, B_BATCH, B_BATCHES, B_WARMUP, B_SEED, B_RESIZE, B_VAL_SPLIT = B_RESIZE + 6, B_BLOCK, B_JSON,
       B_CACHE, B_EPOCHS, B_N };
enum { BENCH_MAX_EPOCHS = 1000 };

enum { BENCH_MAX_SETTINGS = 32, BENCH_MAX_WORKERS = 256 };

/* "0,1,2,4" into counts[]; a usage error naming --workers otherwise */
static int bench_workers(const char *text, int *counts, int *n) {
    *n = 0;
    const char *p = text;
    for (;;) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > BENCH_MAX_WORKERS || (*end && *end != ',') || *n == BENCH_MAX_SETTINGS)
            return cli_usage_error("bench", "--workers: a comma-separated list of at most %d counts in 0..%d (got '%s')",
                                   BENCH_MAX_SETTINGS, BENCH_MAX_WORKERS, text);
        counts[(*n)++] = (int)x;
        if (!*end) return 0;
        p = end + 1;
    }
}

/* the transforms go through the trainer's option table, so they parse and fail exactly as train's */
static int bench_data_config(const char **vals, const int *given, kiln_data_config *dc) {
    kiln_train_config c = kiln_train_defaults();
    c.gpt.block = 0; /* no model here to give a default: a token file needs --block */
    for (int i = B_RESIZE; i <= B_BLOCK; i++)
        if (given[i] && kiln_train_option_set(&c, bench_opts[i].name, vals[i]) != KILN_OK)
            return cli_usage_error("bench", "%s", kiln_last_error());
    if (kiln_train_data_config(&c, dc) != KILN_OK) return cli_usage_error("bench", "%s", kiln_last_error());
    return 0;
}

/* epoch: 1-based with --epochs, 0 for the steady-state measurement */
static void bench_print(int workers, int pin, int64_t epoch, double rate, int64_t batches, int json) {
    if (!json) {
        char ep[32] = "";
        if (epoch) snprintf(ep, sizeof ep, ", epoch %lld", (long long)epoch);
        printf("workers %d, pin-memory %s%s: %.0f images/s (%lld batches)\n", workers, pin ? "on" : "off", ep, rate,
               (long long)batches);
        fflush(stdout);
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "workers", json_integer(workers));
    json_object_set_new(o, "pin_memory", json_boolean(pin));
    if (epoch) json_object_set_new(o, "epoch", json_integer(epoch));
    json_object_set_new(o, "images_per_s", cli_json_num(rate));
    json_object_set_new(o, "batches", json_integer(batches));
    cli_print_json(o);
    fflush(stdout);
}

static int bench_run(kiln_dataset *ds, kiln_loader_config *lc, const int *workers, int nw, int64_t warmup,
                     int64_t batches, int64_t epochs, int json) {
    for (int i = 0; i < nw; i++) {
        lc->workers = workers[i];
        double rate[BENCH_MAX_EPOCHS] = {0};
        int64_t done[BENCH_MAX_EPOCHS] = {0};
        kiln_status st = epochs ? kiln_loader_bench_epochs(ds, lc, epochs, rate, done)
                                : kiln_loader_bench(ds, lc, warmup, batches, rate, done);
        if (st != KILN_OK) {
            fprintf(stderr, "kiln bench: %s\n", kiln_last_error());
            return cli_exit_code(st);
        }
        for (int64_t e = 0; e < (epochs ? epochs : 1); e++) bench_print(workers[i], lc->lock_memory, epochs ? e + 1 : 0, rate[e], done[e], json);
    }
    return 0;
}

static int cmd_bench_loader(int argc, char **argv) {
    const char *vals[B_N];
    int given[B_N];
    int rc = cli_parse("bench", bench_usage, bench_opts, B_N, argc, argv, vals, given);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    if (!vals[B_DATA]) return cli_usage_error("bench", "%s", "--data DIR is required");
    int workers[BENCH_MAX_SETTINGS], nw = 0;
    int64_t batch = 0, batches = 0, warmup = 0, seed = 0, epochs = 0;
    if (bench_workers(vals[B_WORKERS] ? vals[B_WORKERS] : bench_opts[B_WORKERS].def, workers, &nw) ||
        cli_int("bench", bench_opts, B_BATCH, vals, 0, KILN_MAX_BATCH, &batch) || cli_int("bench", bench_opts, B_BATCHES, vals, 0, INT64_MAX / 2, &batches) ||
        cli_int("bench", bench_opts, B_WARMUP, vals, 0, 1000000, &warmup) || cli_int("bench", bench_opts, B_SEED, vals, 0, INT64_MAX, &seed) ||
        cli_int("bench", bench_opts, B_EPOCHS, vals, 0, BENCH_MAX_EPOCHS, &epochs))
        return EXIT_USAGE;
    if (batch < 1) return cli_usage_error("bench", "--batch-size: must be >= 1 (got %lld)", (long long)batch);
    kiln_data_config dc;
    if (bench_data_config(vals, given, &dc)) return EXIT_USAGE;
    dc.cache = vals[B_CACHE];
    kiln_dataset *ds = NULL;
    kiln_status st = kiln_dataset_open_config(vals[B_DATA], 1, &dc, &ds);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln bench: %s\n", kiln_last_error());
        return cli_exit_code(st);
    }
    kiln_loader_config lc = kiln_loader_defaults();
    lc.batch_size = batch;
    lc.shuffle = 1;
    lc.seed = (uint64_t)seed;
    lc.lock_memory = given[B_PIN];
    rc = bench_run(ds, &lc, workers, nw, warmup, batches, epochs, given[B_JSON]);
    kiln_dataset_free(ds);
    return rc;
}

static int cmd_bench(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "loader")) return cmd_bench_loader(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "step")) return cli_bench_step(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "conv")) return cli_bench_conv(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "pointwise")) return cli_bench_pointwise(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "peak")) return cli_bench_peak(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(bench_usage, stdout);
        return 0;
    }
    fprintf(stderr, "kiln bench: which benchmark? kiln bench loader --data DIR, kiln bench step --model NAME, kiln bench conv --shape NxCxHxW, kiln bench pointwise --op gelu-chain, or kiln bench peak\n");
    return EXIT_USAGE;
}

int main(int argc, char **argv) {
    /* a file-size limit (ulimit -f) makes a write fail with EFBIG, reported as an error, instead of killing kiln */
    signal(SIGXFSZ, SIG_IGN);
    const char *lvl = getenv("KILN_LOG");
    if (lvl && !strcmp(lvl, "debug")) kiln_log_set_level(KILN_LOG_DEBUG);
    if (argc < 2) {
        fputs(main_help, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        fputs(main_help, stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("kiln %s\n", KILN_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(cmd, "eval")) return cmd_eval(argc - 1, argv + 1);
    if (!strcmp(cmd, "pack")) return cmd_pack(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "predict")) return cli_predict(argc - 1, argv + 1);
    if (!strcmp(cmd, "inspect")) return cli_inspect(argc - 1, argv + 1);
    if (!strcmp(cmd, "tune")) return cli_tune(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cli_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "sample")) return cli_sample(argc - 1, argv + 1);
    if (!strcmp(cmd, "doctor")) return cli_doctor(argc - 1, argv + 1);
    if (!strcmp(cmd, "plot")) return cli_plot(argc - 1, argv + 1);
    if (!strcmp(cmd, "gradcheck")) return cli_gradcheck(argc - 1, argv + 1);
    fprintf(stderr, "kiln: unknown command '%s'\n\n%s", cmd, main_help);
    return EXIT_USAGE;
}
