/* kiln plot's parts (plot.c draws, plot_axis.c picks round ticks), internal so
 * the fuzz target and tests can draw logs already read and check the ticks. */
#ifndef KILN_PLOT_INTERNAL_H
#define KILN_PLOT_INTERNAL_H

#include <stddef.h>
#include "kiln/plot.h"
#include "train/internal/metrics_read.h"

typedef enum { KILN_PLOT_PNG, KILN_PLOT_SVG } kiln_plot_format;

/* logs[i] drawn in run colour i, named names[i] in the legend, written to out */
kiln_status kiln_plot_logs(const kiln_metrics_log *logs, const char *const *names, int n, kiln_plot_format fmt,
                           const char *out, int width, int height);

/* gives back cairo's font caches and fontconfig's (kiln_plot does it after each picture):
 * fontconfig sets up again on the next use, and LeakSanitizer finds nothing held at exit */
void kiln_plot_release(void);

/* an axis from lo to hi in nticks - 1 equal steps of 1, 2 or 5 times a power of ten */
typedef struct kiln_axis {
    double lo, hi, step;
    int nticks;
    int decimals; /* -1: labels in %g form with `digits` significant digits */
    int digits;
} kiln_axis;

/* the round axis that covers [lo, hi] with about `target` ticks (an empty range is widened first) */
void kiln_axis_nice(double lo, double hi, int target, kiln_axis *a);
double kiln_axis_tick(const kiln_axis *a, int i);
/* tick i's label, as short as the step allows ("0.25", "1500", "1.25e+07") */
void kiln_axis_label(const kiln_axis *a, int i, char *buf, size_t n);

#endif
