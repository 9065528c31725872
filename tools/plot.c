/* kiln plot: one or more metrics files (kiln train --metrics) as one PNG or
 * SVG picture (kiln_plot in src/train/plot.c). The files are the arguments
 * that are neither options nor their values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "kiln/plot.h"

static const char *usage =
    "usage: kiln plot RUN.jsonl [OTHER.jsonl ...] --out FILE.png|FILE.svg [--width N] [--height N]\n\n"
    "Draws the metrics files of one or more runs (kiln train --metrics) on one picture, one colour per\n"
    "run: loss (step lines, epoch train loss as dots, test loss dashed), test accuracy (%), throughput\n"
    "(images/s) and data-wait (% of the time spent waiting for a batch), each against the global step.\n"
    "The extension of --out picks PNG or SVG. A bad line in a metrics file is named FILE:LINE (exit 2).\n\n";

static const cli_opt opts[] = {
    {"out", "FILE", "the picture: .png or .svg", NULL},
    {"width", "N", "pixels (SVG: points)", "1200"},
    {"height", "N", "pixels (SVG: points)", "800"},
};
enum { P_OUT, P_WIDTH, P_HEIGHT, P_N };

/* moves the metrics files out of argv (every option here but --help takes a value); returns their count */
static int take_runs(int *argc, char **argv, const char **runs) {
    int n = 0, out = 1, only_files = 0;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        if (only_files || strncmp(a, "--", 2) != 0) runs[n++] = a;
        else if (!strcmp(a, "--")) only_files = 1;
        else {
            argv[out++] = argv[i];
            if (!strchr(a, '=') && strcmp(a, "--help") != 0 && i + 1 < *argc) argv[out++] = argv[++i];
        }
    }
    *argc = out;
    return n;
}

int cli_plot(int argc, char **argv) {
    const char **runs = calloc((size_t)argc + 1, sizeof *runs);
    if (!runs) return 1;
    int nruns = take_runs(&argc, argv, runs);
    const char *vals[P_N];
    int given[P_N];
    int64_t w, h;
    int rc = cli_parse("plot", usage, opts, P_N, argc, argv, vals, given);
    if (rc) rc = rc > 0 ? 0 : EXIT_USAGE;
    else if (cli_int("plot", opts, P_WIDTH, vals, KILN_PLOT_MIN_SIZE, KILN_PLOT_MAX_SIZE, &w) ||
             cli_int("plot", opts, P_HEIGHT, vals, KILN_PLOT_MIN_SIZE, KILN_PLOT_MAX_SIZE, &h))
        rc = EXIT_USAGE;
    else if (!vals[P_OUT]) rc = (cli_usage_error("plot", "--out FILE.png|FILE.svg is required"), EXIT_USAGE);
    else if (nruns < 1 || nruns > KILN_PLOT_MAX_RUNS)
        rc = (cli_usage_error("plot", "name 1 to %d metrics files (got %d)", KILN_PLOT_MAX_RUNS, nruns), EXIT_USAGE);
    else {
        kiln_status st = kiln_plot(runs, nruns, vals[P_OUT], (int)w, (int)h);
        if (st != KILN_OK) fprintf(stderr, "kiln plot: %s\n", kiln_last_error());
        else fprintf(stderr, "kiln plot: %d run%s drawn to %s\n", nruns, nruns > 1 ? "s" : "", vals[P_OUT]);
        rc = cli_exit_code(st);
    }
    free(runs);
    return rc;
}
