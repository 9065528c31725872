/* The metrics file (--metrics FILE): one JSON object per line (JSONL), a
 * "step" line every --log-every steps and an "epoch" line per epoch, so a run
 * can be plotted while it trains. Written with jansson, flushed per line.
 * With --tensorboard DIR the same numbers go to a TensorBoard event file. */
#ifndef KILN_METRICS_H
#define KILN_METRICS_H

#include <stdint.h>
#include "kiln/status.h"

typedef struct kiln_metrics kiln_metrics;

/* what happened since the previous step line; times in seconds since the run's clock started */
typedef struct kiln_metrics_window {
    double t0, wait0;
    int64_t samples, steps;
    double loss_sum;
} kiln_metrics_window;

typedef struct kiln_metrics_epoch_line {
    int64_t epoch, step;           /* epoch counts from 1 */
    double train_loss, lr, images_per_s, data_wait, time_s;
    int evaluated;
    double test_loss, test_accuracy;
} kiln_metrics_epoch_line;

/* path (NULL: no JSONL file) and tensorboard (NULL: no event file, else its folder);
 * append: a resumed run continues the file; otherwise it starts afresh (a
 * resumed run's events go to a new event file beside the old) */
kiln_status kiln_metrics_open(const char *path, const char *tensorboard, int append, kiln_metrics **out);
void kiln_metrics_close(kiln_metrics *m);
/* a step line from the window (loss: its mean step loss), then the window restarts at (t, wait) */
kiln_status kiln_metrics_step(kiln_metrics *m, kiln_metrics_window *w, int64_t step, int64_t epoch, double lr, double t,
                              double wait);
kiln_status kiln_metrics_epoch(kiln_metrics *m, const kiln_metrics_epoch_line *e);

#endif
