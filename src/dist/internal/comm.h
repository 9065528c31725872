/* The process group a run trains in. Launched under mpirun (or srun, or any
 * launcher that sets the PMI/PMIx environment) it is MPI's COMM_WORLD, through
 * the plugin libkiln_mpi.so loaded at that moment; otherwise a world of one
 * that needs no MPI installed. Only the training thread calls it.
 *
 * Every wait honours a timeout: a collective that the other ranks do not join
 * within it (a rank died or hangs) fails with a message naming the collective,
 * and the caller ends the job (kiln_comm_abort) instead of hanging. */
#ifndef KILN_DIST_COMM_H
#define KILN_DIST_COMM_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/status.h"

typedef struct kiln_comm kiln_comm;

/* 1 when this process was started by an MPI launcher (its environment says so) */
int kiln_comm_launched(void);
/* MPI when launched under it, else a world of one. timeout_s: what a wait allows (> 0) */
kiln_status kiln_comm_open(double timeout_s, kiln_comm **out);
void kiln_comm_close(kiln_comm *c); /* MPI_Finalize; NULL is fine */
void kiln_comm_set_timeout(kiln_comm *c, double timeout_s);
double kiln_comm_timeout(const kiln_comm *c); /* seconds a wait allows */

int kiln_comm_rank(const kiln_comm *c);
int kiln_comm_size(const kiln_comm *c);
int kiln_comm_local_rank(const kiln_comm *c); /* among the ranks of this host */
int kiln_comm_local_size(const kiln_comm *c);
const char *kiln_comm_host(const kiln_comm *c);
const char *kiln_comm_library(const kiln_comm *c); /* "none" for a world of one */

/* blocking (with the timeout), in place, on every rank: what names the collective in errors */
kiln_status kiln_comm_allreduce_f64(kiln_comm *c, double *buf, int64_t n, const char *what);
kiln_status kiln_comm_allreduce_f32(kiln_comm *c, float *buf, int64_t n, const char *what);
kiln_status kiln_comm_bcast(kiln_comm *c, void *buf, size_t bytes, int root, const char *what);
/* all: size * bytes, rank r's block at r * bytes */
kiln_status kiln_comm_allgather(kiln_comm *c, const void *mine, void *all, size_t bytes, const char *what);

/* a non-blocking sum of floats in place: start it, then test (progresses it)
 * or wait; a world of one completes at once */
typedef struct {
    int slot;        /* the plugin's request, -1: none (done) */
    const char *what;
} kiln_comm_req;
kiln_status kiln_comm_iallreduce_f32(kiln_comm *c, float *buf, int64_t n, const char *what, kiln_comm_req *req);
/* 1 done, 0 in flight; < 0 error (message set) */
int kiln_comm_test(kiln_comm *c, kiln_comm_req *req);
kiln_status kiln_comm_wait(kiln_comm *c, kiln_comm_req *req);

/* ends every rank's process with this exit code (MPI_Abort); a world of one: exit */
void kiln_comm_abort(kiln_comm *c, int code);

#endif
