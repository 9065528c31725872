/* A metrics file (--metrics, metrics.c) read back, for kiln plot: outside
 * bytes, so every line is checked and a bad one is named "FILE:LINE: ...". */
#ifndef KILN_METRICS_READ_H
#define KILN_METRICS_READ_H

#include <stdint.h>
#include "kiln/status.h"

/* one line; a number the line does not hold (or holds as null) is NAN */
typedef struct kiln_metrics_row {
    int64_t step, epoch;
    double loss;                     /* step lines: "loss"; epoch lines: "train_loss" */
    double lr, images_per_s, data_wait, time_s;
    double test_loss, test_accuracy; /* epoch lines that were evaluated */
} kiln_metrics_row;

/* the step lines and the epoch lines, each in file order (a resumed run's appended lines follow) */
typedef struct kiln_metrics_log {
    kiln_metrics_row *steps, *epochs;
    int64_t nsteps, nepochs;
} kiln_metrics_log;

/* FORMAT for a line that is not a JSON object, lacks "kind" or "step", or
 * holds a number field of another type; lines of other kinds are skipped
 * (later versions may add some); a file without a step or epoch line fails */
kiln_status kiln_metrics_read(const char *path, kiln_metrics_log *out);
void kiln_metrics_log_free(kiln_metrics_log *log);

#endif
