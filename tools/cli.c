/* Option parsing for every command, from one table per command: getopt_long
 * does the parsing (--flag value and --flag=value), the same table prints
 * --help, and an unknown option names the closest known one. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kiln %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(see 'kiln %s --help')\n", cmd);
    return EXIT_USAGE;
}

/* help text wrapped to 80 columns under its option */
static void print_wrapped(const char *text, int indent, int width) {
    int col = indent;
    while (*text) {
        int w = (int)strcspn(text, " ");
        if (col > indent && col + 1 + w > width) {
            printf("\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            putchar(' ');
            col++;
        }
        printf("%.*s", w, text);
        col += w;
        text += w;
        while (*text == ' ') text++;
    }
    putchar('\n');
}

void cli_help(const char *usage, const cli_opt *opts, int nopts) {
    fputs(usage, stdout);
    for (int i = 0; i < nopts; i++) {
        char left[64], text[512];
        snprintf(left, sizeof left, "--%s%s%s", opts[i].name, opts[i].metavar ? " " : "", opts[i].metavar ? opts[i].metavar : "");
        snprintf(text, sizeof text, "%s%s%s%s", opts[i].help, opts[i].def ? " [" : "", opts[i].def ? opts[i].def : "",
                 opts[i].def ? "]" : "");
        printf("  %-22s ", left);
        if (strlen(left) > 22) printf("\n%*s", 25, "");
        print_wrapped(text, 25, 80);
    }
}

/* edit distance, for "did you mean" */
static int distance(const char *a, const char *b) {
    size_t n = strlen(b);
    if (n > 63) return 99;
    int row[64];
    for (size_t j = 0; j <= n; j++) row[j] = (int)j;
    for (size_t i = 1; a[i - 1]; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= n; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[n];
}

static int unknown_option(const char *cmd, const char *arg, const cli_opt *opts, int nopts) {
    char name[64];
    const char *a = arg;
    while (*a == '-') a++;
    snprintf(name, sizeof name, "%.*s", (int)strcspn(a, "="), a);
    int best = -1, bd = 99;
    for (int i = 0; i < nopts; i++) {
        int d = distance(name, opts[i].name);
        if (d < bd) {
            bd = d;
            best = i;
        }
    }
    int limit = (int)strlen(name) / 3 > 2 ? (int)strlen(name) / 3 : 2;
    if (best >= 0 && bd <= limit)
        return cli_usage_error(cmd, "unknown option %.*s; did you mean --%s?", (int)strcspn(arg, "="), arg, opts[best].name);
    return cli_usage_error(cmd, "unknown option %.*s", (int)strcspn(arg, "="), arg);
}

int cli_parse(const char *cmd, const char *usage, const cli_opt *opts, int nopts, int argc, char **argv, const char **vals,
              int *given) {
    struct option *lo = calloc((size_t)nopts + 2, sizeof *lo);
    if (!lo) return cli_usage_error(cmd, "out of memory") ? -1 : -1;
    for (int i = 0; i < nopts; i++) {
        lo[i] = (struct option){opts[i].name, opts[i].metavar ? required_argument : no_argument, NULL, 1000 + i};
        vals[i] = NULL;
        given[i] = 0;
    }
    lo[nopts] = (struct option){"help", no_argument, NULL, 'h'};
    opterr = 0;
    optind = 1;
    int rc = 0, c;
    while (rc == 0 && (c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
        if (c == 'h') {
            cli_help(usage, opts, nopts);
            rc = 1;
        } else if (c == ':') {
            rc = -1;
            cli_usage_error(cmd, "%s needs a value", argv[optind - 1]);
        } else if (c == '?') {
            rc = -1;
            unknown_option(cmd, argv[optind - 1], opts, nopts);
        } else {
            vals[c - 1000] = optarg;
            given[c - 1000] = 1;
        }
    }
    if (rc == 0 && optind < argc) {
        rc = -1;
        cli_usage_error(cmd, "unexpected argument '%s' (options start with --)", argv[optind]);
    }
    free(lo);
    return rc;
}

int cli_int(const char *cmd, const cli_opt *opts, int i, const char **vals, int64_t lo, int64_t hi, int64_t *out) {
    const char *v = vals[i] ? vals[i] : opts[i].def;
    char *end;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || end == v || *end)
        return cli_usage_error(cmd, "--%s: not an integer: %s", opts[i].name, v ? v : "");
    if (errno || x < lo || x > hi)
        return cli_usage_error(cmd, "--%s: not an integer in %lld..%lld: %s", opts[i].name, (long long)lo, (long long)hi,
                               v ? v : "");
    *out = x;
    return 0;
}

int cli_exit_code(kiln_status s) {
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

json_t *cli_json_num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

void cli_print_json(json_t *o) {
    char *s = json_dumps(o, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    if (s) printf("%s\n", s);
    free(s);
    json_decref(o);
}

int cli_model_opts(const char *cmd, const cli_opt *opts, int i_size, int i_classes, const char **vals, kiln_model_opts *mo) {
    int64_t size = 0, classes = 0;
    if ((i_size >= 0 && vals[i_size] && cli_int(cmd, opts, i_size, vals, 1, 1 << 14, &size)) ||
        (i_classes >= 0 && vals[i_classes] && cli_int(cmd, opts, i_classes, vals, 1, KILN_MAX_CLASSES, &classes)))
        return -1;
    mo->height = mo->width = size;
    mo->num_classes = (int)classes;
    return 0;
}

int cli_checkpoint(const char *cmd, const cli_opt *opts, int i, const char **vals, const char **out) {
    const char *v = vals[i] ? vals[i] : opts[i].def;
    *out = v && v[0] && strcmp(v, "none") != 0 ? v : NULL;
    if (kiln_checkpoint_check(*out) == KILN_OK) return 0;
    cli_usage_error(cmd, "--%s: %s", opts[i].name, kiln_last_error());
    return -1;
}

int cli_precision(const char *cmd, const cli_opt *opts, int i, const char **vals, int *out) {
    const char *v = vals[i] ? vals[i] : opts[i].def;
    kiln_precision p = KILN_PRECISION_FP32;
    if (v && kiln_precision_parse(v, &p)) {
        cli_usage_error(cmd, "--%s: '%s' is not fp32, bf16 or auto", opts[i].name, v);
        return -1;
    }
    *out = (int)p;
    return 0;
}

int cli_gpt_opts(const char *cmd, const cli_opt *opts, int i, const char **vals, kiln_gpt_config *gpt) {
    int *f[CLI_GPT_NOPTS] = {&gpt->layers, &gpt->heads, &gpt->dim, &gpt->block, &gpt->vocab};
    for (int k = 0; k < CLI_GPT_NOPTS; k++) {
        int64_t v;
        if (cli_int(cmd, opts, i + k, vals, 1, 1 << 20, &v)) return -1;
        *f[k] = (int)v;
    }
    return 0;
}

int cli_on_off(const char *cmd, const cli_opt *opts, int i, const char **vals) {
    const char *v = vals[i] ? vals[i] : opts[i].def;
    if (v && !strcmp(v, "on")) return 1;
    if (v && !strcmp(v, "off")) return 0;
    cli_usage_error(cmd, "--%s: on or off (got '%s')", opts[i].name, v ? v : "");
    return -1;
}
