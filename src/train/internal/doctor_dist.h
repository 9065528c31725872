/* The doctor under mpirun (docs/doctor.md): the baseline's all-reduce figures,
 * the remedies for the gradient all-reduce (--overlap, --bucket-mb) and for
 * the ranks' share of the cores (--threads, --bind), and one report on every
 * rank (rank 0's), so that every rank runs the same trial windows and
 * --apply gives every rank the same command line. A world of one: nothing. */
#ifndef KILN_TRAIN_DOCTOR_DIST_H
#define KILN_TRAIN_DOCTOR_DIST_H

#include <jansson.h>
#include "kiln/doctor.h"

/* the baseline window's data-parallel figures into r */
void kiln_doctor_dist_baseline(const kiln_train_result *res, kiln_doctor_report *r);
/* rank 0's report on every rank, then the MPI remedies, each measured by a
 * trial window of steps steps (collective: every rank calls it) */
kiln_status kiln_doctor_dist_remedies(const kiln_train_config *c, int64_t steps, kiln_doctor_report *r);
/* "threads" when the host's ranks x threads exceed its cores, "all-reduce" when the
 * optimizer waits for it 10 % of a step or more; else r's bottleneck stays */
void kiln_doctor_dist_bottleneck(kiln_doctor_report *r);
/* {"world_size", "local_ranks", "buckets", ...}; null in a world of one */
json_t *kiln_doctor_dist_json(const kiln_doctor_report *r);

#endif
