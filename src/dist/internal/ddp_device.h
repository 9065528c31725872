/* Data parallel training on a device backend (parameters, gradients and
 * buffers in its memory): src/dist/ddp.c's calls when the parameters are not
 * in host memory. One process per device, checked; the backend's own
 * collectives (cuda: NCCL) when every rank can load them, else host staging
 * over the run's MPI. Collective: every rank calls each function in turn. */
#ifndef KILN_DIST_DDP_DEVICE_H
#define KILN_DIST_DDP_DEVICE_H

#include "dist/internal/comm.h"
#include "kiln/graph.h"

typedef struct kiln_ddp_dev kiln_ddp_dev;

/* *out is set even on failure (free it) */
kiln_status kiln_ddp_dev_open(kiln_comm *c, kiln_params *P, kiln_ddp_dev **out);
void kiln_ddp_dev_free(kiln_ddp_dev *d);
/* how the gradients travel: "by NCCL 2.28.9", "through host memory and Open MPI ..." */
const char *kiln_ddp_dev_transport(const kiln_ddp_dev *d);
/* rank 0's parameters, its buffers, on every rank */
kiln_status kiln_ddp_dev_bcast_params(kiln_ddp_dev *d);
kiln_status kiln_ddp_dev_bcast_buffers(kiln_ddp_dev *d);
/* every rank's gradients summed in place (the whole flat buffer); with the
 * collectives queued on the device and returned at once, else staged */
kiln_status kiln_ddp_dev_sum(kiln_ddp_dev *d);
/* 1: the backend's collectives, whose sums can start inside backward, a bucket at a time */
int kiln_ddp_dev_collective(const kiln_ddp_dev *d);
/* (collectives only) the sum of n gradients from off started after what the device has queued */
kiln_status kiln_ddp_dev_sum_start(kiln_ddp_dev *d, int64_t off, int64_t n);
/* (collectives only) what the device runs next waits for every sum started */
kiln_status kiln_ddp_dev_join(kiln_ddp_dev *d);

#endif
