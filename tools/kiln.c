/* kiln — the command-line program: train and evaluate models from the zoo.
 * An interrupted run (Ctrl-C, SIGTERM) saves its checkpoint and exits 130.
 * Exit codes: 0 success, 2 bad input or usage (including a batch too large
 * for the machine's memory), 1 anything else (a diverging loss, oneDNN). */
#include <errno.h>
#include <signal.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kiln/train.h"

#define EXIT_USAGE 2

static const char *main_help =
    "kiln — a neural-network training engine for the CPU\n"
    "\n"
    "usage: kiln <command> [options]\n"
    "\n"
    "commands:\n"
    "  train   train a model from the zoo on a dataset, optionally save a checkpoint\n"
    "  eval    measure a saved model's test accuracy\n"
    "\n"
    "  kiln <command> --help   describes each command's options\n"
    "\n"
    "examples:\n"
    "  kiln train --model mnist-cnn --data fashion-mnist --epochs 1 --save run.safetensors\n"
    "  kiln eval --model mnist-cnn --data fashion-mnist --load run.safetensors --json\n";

static const char *train_help =
    "usage: kiln train [options]\n"
    "\n"
    "  --model NAME          mnist-cnn (PyTorch's examples/mnist network) or mlp   [mnist-cnn]\n"
    "  --data NAME|DIR       fashion-mnist (Debian's dataset-fashion-mnist) or a folder\n"
    "                        holding {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]   [fashion-mnist]\n"
    "  --epochs N            passes over the training set   [1]\n"
    "  --batch-size N|auto   samples per step; the last batch of an epoch may be smaller   [64]\n"
    "                        auto: the largest power of two whose activations and gradients\n"
    "                        fit in --memory-budget-mb (the planner knows before running)\n"
    "  --test-batch-size N   samples per evaluation step   [1000]\n"
    "  --accumulate N        gradient accumulation: N batches per optimizer step (their\n"
    "                        mean gradient, as one batch N times larger)   [1]\n"
    "  --optimizer NAME      adadelta, adamw or sgd   [adadelta]\n"
    "  --lr X                learning rate   [1.0 for adadelta, 1e-3 adamw, 0.01 sgd]\n"
    "  --momentum X          sgd momentum   [0]\n"
    "  --nesterov            sgd: Nesterov momentum\n"
    "  --weight-decay X      L2 (sgd, adadelta) or decoupled (adamw) weight decay\n"
    "  --lr-step-gamma X     StepLR: multiply the learning rate by X every --lr-step-size epochs   [0.7]\n"
    "  --lr-step-size N      [1]\n"
    "  --clip-grad-norm X    clip the global L2 norm of the gradients to X before each update\n"
    "  --workers N           loader threads; 0 loads on the training thread   [1]\n"
    "  --prefetch N          batches in flight per worker   [2]\n"
    "  --pin-memory          mlock the batch ring (the CPU meaning of pinned memory)\n"
    "  --threads N           compute threads (one OpenMP team, shared with oneDNN); 0: all cores   [0]\n"
    "  --seed N              seeds initial weights, shuffling and dropout   [1]\n"
    "  --max-steps N         stop when the run reaches global step N (counting resumed steps)   [0: no limit]\n"
    "  --save FILE           write a checkpoint (safetensors) at the end, atomically\n"
    "  --save-every N        also write the checkpoint every N steps (atomically)\n"
    "  --resume FILE         continue the run saved in FILE exactly where it stopped\n"
    "  --load FILE           start from these weights (a kiln checkpoint or a PyTorch\n"
    "                        state_dict in safetensors with the model's tensor names)\n"
    "  --no-test             skip the test-set evaluation\n"
    "  --no-fuse             disable the fusion pass (relu folded into conv/linear)\n"
    "  --no-autotune         use oneDNN's default convolution algorithms instead of timing them\n"
    "  --dropout-off         train with dropout disabled\n"
    "  --profile             time every kernel and print the per-step breakdown at the end\n"
    "  --memory-budget-mb X  refuse a plan whose activations and gradients need more   [90% of RAM]\n"
    "  --log-every N         progress lines when stderr is not a terminal   [100]\n"
    "  --json                print one JSON object with the results as the last line of stdout\n"
    "  --quiet               no progress and no log lines\n";

static const char *eval_help =
    "usage: kiln eval --load FILE [options]\n"
    "\n"
    "  --model NAME          the model the weights belong to   [mnist-cnn]\n"
    "  --data NAME|DIR       dataset whose test split is measured   [fashion-mnist]\n"
    "  --load FILE           weights: a kiln checkpoint or any safetensors file with the\n"
    "                        model's tensor names (e.g. a PyTorch state_dict)\n"
    "  --batch-size N        samples per step   [1000]\n"
    "  --workers N           loader threads   [1]\n"
    "  --threads N           compute threads; 0: all cores   [0]\n"
    "  --json                print one JSON object as the last line of stdout\n";

static int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kiln %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(see 'kiln %s --help')\n", cmd);
    return EXIT_USAGE;
}

static int exit_code(kiln_status s) {
    switch (s) {
    case KILN_OK: return 0;
    case KILN_ERR_INVALID_ARG:
    case KILN_ERR_IO:
    case KILN_ERR_FORMAT:
    case KILN_ERR_SHAPE:
    case KILN_ERR_NOMEM: /* a plan too big for the machine: the batch size asked for it */
        return EXIT_USAGE;
    default: return 1;
    }
}

static int parse_i64(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return -1;
    *out = v;
    return 0;
}

static int parse_f(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

typedef struct {
    int tty, quiet;
    int64_t log_every;
    int printed;
} progress_ui;

static void fmt_time(double s, char *buf, size_t n) {
    if (!(s >= 0) || s > 1e7) snprintf(buf, n, "--:--");
    else snprintf(buf, n, "%d:%02d", (int)s / 60, (int)s % 60);
}

static void on_progress(const kiln_progress *p, void *user) {
    progress_ui *ui = user;
    if (ui->quiet) return;
    char eta[16], el[16];
    fmt_time(p->eta_s, eta, sizeof eta);
    fmt_time(p->elapsed_s, el, sizeof el);
    if (ui->tty) {
        int width = 24, filled = (int)(width * (double)p->step / (double)(p->total_steps ? p->total_steps : 1));
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
        bar[width] = 0;
        fprintf(stderr, "\r[%s] step %lld/%lld  epoch %lld/%lld  loss %.4f  %.0f img/s  data-wait %.1f%%  %s elapsed  ETA %s ",
                bar, (long long)p->step, (long long)p->total_steps, (long long)p->epoch + 1, (long long)p->epochs, p->loss,
                p->images_per_s, 100 * p->data_wait_frac, el, eta);
        if (p->done) fputc('\n', stderr);
        fflush(stderr);
    } else if (p->step % ui->log_every == 0 || p->done) {
        fprintf(stderr, "kiln: step %lld/%lld epoch %lld/%lld loss %.4f %.0f img/s data-wait %.1f%% ETA %s\n",
                (long long)p->step, (long long)p->total_steps, (long long)p->epoch + 1, (long long)p->epochs, p->loss,
                p->images_per_s, 100 * p->data_wait_frac, eta);
    }
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

static void json_num(double v) {
    if (isfinite(v)) printf("%.6g", v);
    else printf("null");
}

/* Ctrl-C (or SIGTERM) asks the trainer to stop after the current step and
 * write its checkpoint; a second one kills the process as usual. */
static volatile int g_stop;
static void on_signal(int sig) {
    g_stop = 1;
    signal(sig, SIG_DFL);
}

static int cmd_train(int argc, char **argv) {
    kiln_train_config c = kiln_train_defaults();
    progress_ui ui = {isatty(2), 0, 100, 0};
    int json = 0, lr_given = 0;
    const char *opt_name = "adadelta";
    float lr = 0, momentum = 0, wd = 0;
    int nesterov = 0, wd_given = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n;
#define NEED_VALUE() \
    if (!v) return usage_error("train", "%s needs a value", a); \
    i++;
#define INT_ARG(field) \
    NEED_VALUE(); \
    if (parse_i64(v, &n)) return usage_error("train", "%s: not an integer: %s", a, v); \
    field = n;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(train_help, stdout); return 0; }
        else if (!strcmp(a, "--model")) { NEED_VALUE(); c.model = v; }
        else if (!strcmp(a, "--data")) { NEED_VALUE(); c.data = v; }
        else if (!strcmp(a, "--epochs")) { INT_ARG(c.epochs); }
        else if (!strcmp(a, "--batch-size") && v && !strcmp(v, "auto")) {
            c.find_batch_size = 1;
            i++;
        }
        else if (!strcmp(a, "--batch-size")) { INT_ARG(c.batch_size); }
        else if (!strcmp(a, "--test-batch-size")) { INT_ARG(c.test_batch_size); }
        else if (!strcmp(a, "--accumulate")) {
            INT_ARG(c.accumulate);
            if (c.accumulate < 1) return usage_error("train", "--accumulate: %s (want >= 1)", v);
        }
        else if (!strcmp(a, "--optimizer")) { NEED_VALUE(); opt_name = v; }
        else if (!strcmp(a, "--lr")) { NEED_VALUE(); if (parse_f(v, &lr)) return usage_error("train", "%s: not a number: %s", a, v); lr_given = 1; }
        else if (!strcmp(a, "--momentum")) { NEED_VALUE(); if (parse_f(v, &momentum)) return usage_error("train", "%s: not a number: %s", a, v); }
        else if (!strcmp(a, "--nesterov")) nesterov = 1;
        else if (!strcmp(a, "--weight-decay")) { NEED_VALUE(); if (parse_f(v, &wd)) return usage_error("train", "%s: not a number: %s", a, v); wd_given = 1; }
        else if (!strcmp(a, "--lr-step-gamma")) { NEED_VALUE(); if (parse_f(v, &c.lr_step_gamma)) return usage_error("train", "%s: not a number: %s", a, v); }
        else if (!strcmp(a, "--lr-step-size")) { INT_ARG(c.lr_step_size); }
        else if (!strcmp(a, "--clip-grad-norm")) {
            NEED_VALUE();
            if (parse_f(v, &c.clip_grad_norm) || c.clip_grad_norm <= 0)
                return usage_error("train", "--clip-grad-norm: not a positive number: %s", v);
        }
        else if (!strcmp(a, "--workers")) { INT_ARG(c.workers); }
        else if (!strcmp(a, "--prefetch")) { INT_ARG(c.prefetch); }
        else if (!strcmp(a, "--pin-memory")) c.lock_memory = 1;
        else if (!strcmp(a, "--threads")) { INT_ARG(c.threads); }
        else if (!strcmp(a, "--seed")) { INT_ARG(c.seed); }
        else if (!strcmp(a, "--max-steps")) { INT_ARG(c.max_steps); }
        else if (!strcmp(a, "--save")) { NEED_VALUE(); c.save = v; }
        else if (!strcmp(a, "--resume")) { NEED_VALUE(); c.resume = v; }
        else if (!strcmp(a, "--load")) { NEED_VALUE(); c.load = v; }
        else if (!strcmp(a, "--save-every")) { INT_ARG(c.save_every); }
        else if (!strcmp(a, "--no-test")) c.test = 0;
        else if (!strcmp(a, "--no-fuse")) c.fuse = 0;
        else if (!strcmp(a, "--no-autotune")) c.autotune = 0;
        else if (!strcmp(a, "--dropout-off")) c.dropout_off = 1;
        else if (!strcmp(a, "--profile")) c.profile = 1;
        else if (!strcmp(a, "--memory-budget-mb")) {
            NEED_VALUE();
            float mb;
            if (parse_f(v, &mb) || mb <= 0) return usage_error("train", "--memory-budget-mb: not a positive number: %s", v);
            c.memory_budget = (double)mb * 1048576.0;
        }
        else if (!strcmp(a, "--log-every")) { INT_ARG(ui.log_every); if (ui.log_every < 1) ui.log_every = 1; }
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--quiet")) ui.quiet = 1;
        else return usage_error("train", "unknown option: %s", a);
    }
    kiln_optim_kind kind;
    if (kiln_optim_parse(opt_name, &kind)) return usage_error("train", "unknown optimizer '%s' (adadelta, adamw, sgd)", opt_name);
    c.optim = kiln_optim_defaults(kind);
    if (lr_given) c.optim.lr = lr;
    if (wd_given) c.optim.weight_decay = wd;
    c.optim.momentum = momentum;
    c.optim.nesterov = nesterov;
    if (ui.quiet) kiln_log_set_level(KILN_LOG_WARN);
    c.progress = on_progress;
    c.progress_user = &ui;
    c.stop_flag = &g_stop;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    kiln_train_result r;
    kiln_status st = kiln_train(&c, &r);
    if (st != KILN_OK) {
        if (ui.tty && !ui.quiet) fputc('\n', stderr);
        fprintf(stderr, "kiln train: %s\n", kiln_last_error());
        return exit_code(st);
    }
    if (r.interrupted && ui.tty && !ui.quiet) fputc('\n', stderr); /* the bar did not finish its line */
    if (!ui.quiet) {
        fprintf(stderr, "kiln: %lld steps in %.2f s (%.0f images/s, data-wait %.1f%%), final loss %.4f", (long long)r.steps,
                r.train_time_s, r.images_per_s, 100 * r.data_wait_frac, r.final_loss);
        if (r.test_accuracy >= 0) fprintf(stderr, ", test accuracy %.2f%%", 100 * r.test_accuracy);
        fprintf(stderr, ", peak RSS %.0f MB\n", r.peak_rss_mb);
        if (c.save) fprintf(stderr, "kiln: saved %s%s\n", c.save, r.interrupted ? " (resume with --resume)" : "");
    }
    if (json) {
        printf("{\"model\": ");
        json_str(c.model);
        printf(", \"framework\": \"kiln\", \"epochs\": %lld, \"steps\": %lld, \"batch_size\": %lld, \"train_time_s\": ",
               (long long)c.epochs, (long long)r.steps, (long long)r.batch_size);
        json_num(r.train_time_s);
        printf(", \"compile_time_s\": ");
        json_num(r.compile_time_s);
        printf(", \"images_per_s\": ");
        json_num(r.images_per_s);
        printf(", \"data_wait_frac\": ");
        json_num(r.data_wait_frac);
        printf(", \"final_loss\": ");
        json_num(r.final_loss);
        printf(", \"test_accuracy\": ");
        if (r.test_accuracy >= 0) json_num(r.test_accuracy);
        else printf("null");
        printf(", \"peak_rss_mb\": ");
        json_num(r.peak_rss_mb);
        printf(", \"threads\": %d, \"workers\": %d, \"optimizer\": ", r.threads, r.workers);
        json_str(kiln_optim_name(c.optim.kind));
        printf(", \"arena_mb\": ");
        json_num(r.arena_bytes / 1048576.0);
        printf(", \"interrupted\": %s}\n", r.interrupted ? "true" : "false");
    }
    return r.interrupted ? 128 + SIGINT : 0;
}

static int cmd_eval(int argc, char **argv) {
    const char *model = "mnist-cnn", *data = "fashion-mnist", *load = NULL;
    int64_t batch = 1000, workers = 1, threads = 0;
    int json = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n;
#undef NEED_VALUE
#define NEED_VALUE() \
    if (!v) return usage_error("eval", "%s needs a value", a); \
    i++;
#undef INT_ARG
#define INT_ARG(field) \
    NEED_VALUE(); \
    if (parse_i64(v, &n)) return usage_error("eval", "%s: not an integer: %s", a, v); \
    field = n;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(eval_help, stdout); return 0; }
        else if (!strcmp(a, "--model")) { NEED_VALUE(); model = v; }
        else if (!strcmp(a, "--data")) { NEED_VALUE(); data = v; }
        else if (!strcmp(a, "--load")) { NEED_VALUE(); load = v; }
        else if (!strcmp(a, "--batch-size")) { INT_ARG(batch); }
        else if (!strcmp(a, "--workers")) { INT_ARG(workers); }
        else if (!strcmp(a, "--threads")) { INT_ARG(threads); }
        else if (!strcmp(a, "--json")) json = 1;
        else return usage_error("eval", "unknown option: %s", a);
    }
    if (!load) return usage_error("eval", "%s", "--load FILE is required");
    if (workers < 0 || workers > 64) return usage_error("eval", "%s", "--workers must be 0..64");
    double acc = 0;
    int64_t samples = 0;
    kiln_status st = kiln_evaluate(model, data, load, batch, (int)workers, (int)threads, &acc, &samples);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln eval: %s\n", kiln_last_error());
        return exit_code(st);
    }
    fprintf(stderr, "kiln: test accuracy %.2f%% on %lld samples\n", 100 * acc, (long long)samples);
    if (json) {
        printf("{\"model\": ");
        json_str(model);
        printf(", \"samples\": %lld, \"test_accuracy\": ", (long long)samples);
        json_num(acc);
        printf("}\n");
    }
    return 0;
}

int main(int argc, char **argv) {
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
    if (!strcmp(cmd, "train")) return cmd_train(argc - 2, argv + 2);
    if (!strcmp(cmd, "eval")) return cmd_eval(argc - 2, argv + 2);
    fprintf(stderr, "kiln: unknown command '%s'\n\n%s", cmd, main_help);
    return EXIT_USAGE;
}
