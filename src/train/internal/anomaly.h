/* --detect-anomaly in the trainer (src/train/anomaly.c): switching it on for
 * the training plan, and what it cost at the end of the run. */
#ifndef KILN_TRAIN_ANOMALY_H
#define KILN_TRAIN_ANOMALY_H

#include "kiln/graph.h"

/* on: the plan checks every step's outputs; says so, or why not (a device backend: the run goes on without) */
void kiln_train_anomaly_begin(kiln_plan *plan, int on);
/* the checks' share of the step time (step_s: the runs and updates, checks included) */
void kiln_train_anomaly_report(const kiln_plan *plan, int on, double step_s, int64_t steps);

#endif
