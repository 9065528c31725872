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
 * collectives queued on the device and returned at once */
kiln_status kiln_ddp_dev_sum(kiln_ddp_dev *d);

#endif
