/* Data parallel training over MPI (docs/distributed.md). Launched under
 * mpirun, every process is one rank of a job; otherwise a world of one, with
 * no MPI needed. The CLI joins the job before training and ends it on error. */
#ifndef KILN_DIST_H
#define KILN_DIST_H

#include "kiln/status.h"

/* joins the job when launched under an MPI launcher (else a world of one);
 * idempotent. timeout_s: what a collective may wait for the other ranks */
kiln_status kiln_dist_init(double timeout_s);
int kiln_dist_rank(void);  /* 0 without MPI */
int kiln_dist_size(void);  /* 1 without MPI */
/* ends every rank of the job with this exit code (MPI_Abort); without MPI, exit */
void kiln_dist_abort(int code);
void kiln_dist_finalize(void);

#endif
