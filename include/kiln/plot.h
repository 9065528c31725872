/* kiln/plot.h — pictures of training runs from their metrics files (`kiln plot`).
 *
 *     const char *runs[] = {"a.jsonl", "b.jsonl"};
 *     if (kiln_plot(runs, 2, "curves.png", 1200, 800) != KILN_OK) ... kiln_last_error()
 *
 * One picture (PNG or SVG, by the output's extension) drawn with cairo: a
 * legend naming each run in its colour, and four panels against the global
 * step: loss (the step lines' mean loss as a line, each epoch's train loss as
 * dots, the test loss dashed), test accuracy (%), throughput (images/s) and
 * data-wait (% of the time the training thread waited for a batch). Axes
 * carry their units and ticks at round numbers. A bad metrics line fails with
 * KILN_ERR_FORMAT naming "FILE:LINE".
 */
#ifndef KILN_PLOT_H
#define KILN_PLOT_H

#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_PLOT_MAX_RUNS 64
#define KILN_PLOT_MIN_SIZE 200   /* pixels (SVG: points), each side */
#define KILN_PLOT_MAX_SIZE 10000

/* runs: nruns metrics files (1..KILN_PLOT_MAX_RUNS); out: *.png or *.svg */
kiln_status kiln_plot(const char *const *runs, int nruns, const char *out, int width, int height);

#ifdef __cplusplus
}
#endif
#endif
