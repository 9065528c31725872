/* The command line's shared parts: option tables and their parser (getopt_long
 * underneath), --help from the same table, did-you-mean for unknown options
 * (cli.c); the progress bar and the log sink that keeps messages off the
 * bar's line (progress.c). */
#ifndef KILN_TOOLS_CLI_H
#define KILN_TOOLS_CLI_H

#include <stdint.h>
#include <jansson.h>
#include "kiln/train.h"

#define EXIT_USAGE 2

typedef struct cli_opt {
    const char *name;     /* "batch-size" (given as --batch-size V or --batch-size=V) */
    const char *metavar;  /* NULL: a flag */
    const char *help;
    const char *def;      /* the default as shown by --help, NULL: none shown */
} cli_opt;

/* The values given on the command line: vals[i] for opts[i] (NULL for a flag
 * given, or not given), given[i] = 1 when it was. Returns 0, -1 after printing
 * a usage error, or 1 when --help was printed. */
int cli_parse(const char *cmd, const char *usage, const cli_opt *opts, int nopts, int argc, char **argv, const char **vals,
              int *given);
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cli_help(const char *usage, const cli_opt *opts, int nopts);
/* opts[i]'s value (or its default) as an integer in lo..hi; 0, or -1 after a usage error naming the flag */
int cli_int(const char *cmd, const cli_opt *opts, int i, const char **vals, int64_t lo, int64_t hi, int64_t *out);

/* the exit code of a library failure: 2 for bad input or usage (a file, an
 * argument, a shape, a batch too large for the memory), 1 for anything else */
int cli_exit_code(kiln_status s);

/* bench_step.c: kiln bench step */
int cli_bench_step(int argc, char **argv);
/* bench_conv.c: kiln bench conv */
int cli_bench_conv(int argc, char **argv);
/* bench_pointwise.c: kiln bench pointwise */
int cli_bench_pointwise(int argc, char **argv);
int cli_bench_peak(int argc, char **argv);
/* predict.c: kiln predict */
int cli_predict(int argc, char **argv);
/* inspect.c: kiln inspect */
int cli_inspect(int argc, char **argv);
/* tune.c: kiln tune */
int cli_tune(int argc, char **argv);
int cli_tokenize(int argc, char **argv); /* tokenize.c */
int cli_sample(int argc, char **argv);   /* sample.c */
int cli_doctor(int argc, char **argv);   /* doctor.c */
/* kiln.c: kiln train itself, and train's options (without --json, --quiet) plus a command's own extra ones,
 * parsed into c and extra_vals/extra_given; 0, 1 after --help, or an exit code after an error */
int cli_train(int argc, char **argv);
int cli_train_config(const char *cmd, const char *usage, const cli_opt *extra, int nextra, int argc, char **argv,
                     kiln_train_config *c, const char **extra_vals, int *extra_given);
int cli_plot(int argc, char **argv);     /* plot.c */
int cli_gradcheck(int argc, char **argv); /* gradcheck.c */

/* progress.c */
typedef struct progress_ui {
    int tty, quiet;
    int64_t log_every;
    int bar_shown;            /* a bar is on the terminal's last line */
    char bar[512];            /* the last bar drawn, redrawn after a message */
} progress_ui;
void progress_init(progress_ui *ui, int quiet, int64_t log_every);
void progress_on_step(const kiln_progress *p, void *user);
/* the logger's sink: messages go above the bar, never onto its line */
void progress_log_sink(kiln_log_level level, const char *msg, void *user);
/* erase the bar (before the final summary, or an error) */
void progress_clear(progress_ui *ui);

/* a number for --json output: null when not finite (JSON has no NaN) */
json_t *cli_json_num(double v);
/* one JSON object as the last line of stdout; takes the reference */
void cli_print_json(json_t *o);

/* the ResNets' --size N and --num-classes N (opts[i_size], opts[i_classes]; -1: the command has none), when
 * given, into *mo; 0, or -1 after a usage error naming the option */
int cli_model_opts(const char *cmd, const cli_opt *opts, int i_size, int i_classes, const char **vals, kiln_model_opts *mo);
/* the gpt's shape options, in this order in a command's table (CLI_GPT_OPTS at index i) */
#define CLI_GPT_OPTS                                                                                              \
    {"layers", "N", "gpt: transformer blocks", "4"}, {"heads", "N", "gpt: attention heads (divides --dim)", "4"}, \
        {"dim", "N", "gpt: embedding width", "256"}, {"block", "N", "gpt: context length", "128"},                \
        {"vocab", "N", "gpt: vocabulary size", "256"}
#define CLI_GPT_NOPTS 5
int cli_gpt_opts(const char *cmd, const cli_opt *opts, int i, const char **vals, kiln_gpt_config *gpt);
/* opts[i]'s on|off value (or its default): 1 or 0, or -1 after a usage error naming it */
int cli_on_off(const char *cmd, const cli_opt *opts, int i, const char **vals);
/* option i as a checkpoint_activations choice (kiln_checkpoint_check): *out NULL for none; -1 after a usage error */
int cli_checkpoint(const char *cmd, const cli_opt *opts, int i, const char **vals, const char **out);
/* option i as a kiln_precision (fp32|bf16|auto); -1 after a usage error naming it */
int cli_precision(const char *cmd, const cli_opt *opts, int i, const char **vals, int *out);

#endif
