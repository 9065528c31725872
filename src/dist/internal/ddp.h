/* Data parallel training over a kiln_comm (DistributedDataParallel's part of
 * a run): the start-up checks and broadcast, and the gradient all-reduce of
 * each optimizer step. The trainer calls it at fixed points; with a world of
 * one every call is free. */
#ifndef KILN_DIST_DDP_H
#define KILN_DIST_DDP_H

#include "dist/internal/comm.h"
#include "kiln/graph.h"

typedef struct kiln_ddp kiln_ddp;

typedef struct {
    double bucket_mb;     /* gradient bucket size (--bucket-mb, default 25) */
    int overlap;          /* 1: each bucket's all-reduce starts inside backward (--overlap on) */
    const char *settings; /* the run-defining settings as JSON: every rank's must equal rank 0's */
} kiln_ddp_opts;
kiln_ddp_opts kiln_ddp_defaults(void);

/* Checks that every rank built the same model (parameter count, shapes, names:
 * a hash, and the first difference named) and was given the same settings
 * (the differing flag named), then broadcasts rank 0's parameters and buffers.
 * Collective: every rank fails together when one differs. */
kiln_status kiln_ddp_open(kiln_comm *c, kiln_params *P, const kiln_ddp_opts *o, kiln_ddp **out);
void kiln_ddp_free(kiln_ddp *d);

/* the training plan whose backward writes the gradients (buckets, overlap hooks) */
kiln_status kiln_ddp_attach(kiln_ddp *d, kiln_plan *plan);
/* another plan the run steps with (--batch-tokens: each length bucket's), attached after the first: its backward
 * starts and progresses the same buckets, at its own ready steps */
#define KILN_DDP_MAX_PLANS 16
kiln_status kiln_ddp_attach_more(kiln_ddp *d, kiln_plan *plan);
/* parameters in a device's memory: how and when its gradients travel ("by NCCL 2.28.9, each bucket as soon as ..."); NULL: host */
const char *kiln_ddp_transport(kiln_ddp *d);
/* before a micro-batch's run: sync = 0 for the first K-1 micro-batches of
 * --accumulate K (no_sync: they accumulate locally), 1 for the one that reduces */
void kiln_ddp_begin_micro(kiln_ddp *d, int sync);
/* before the optimizer: every bucket reduced (started now when not overlapped),
 * averaged over the ranks, waited for */
kiln_status kiln_ddp_reduce(kiln_ddp *d);
/* the mean of a per-rank value over the ranks (the step's loss) */
kiln_status kiln_ddp_mean(kiln_ddp *d, double *v, int n, const char *what);
/* the same for a reducing step's values (the loss), with each rank's wait in
 * kiln_ddp_reduce carried along in the same all-reduce: the last-arriving
 * rank's wait (the smallest) is the communication the step waited for, the
 * others' extra wait is arrival imbalance (stats last_exposed_s, skew_s) */
#define KILN_DDP_STEP_VALUES 8
kiln_status kiln_ddp_step_mean(kiln_ddp *d, double *v, int n, const char *what);
/* rank 0's buffers (batch norm's running statistics) on every rank */
kiln_status kiln_ddp_sync_buffers(kiln_ddp *d);

/* what the summary reports: all-reduce time the optimizer waited for (exposed)
 * and the share of all-reduce time hidden behind backward, per reducing step.
 * comm_s is the time some bucket was in flight (the union of their spans):
 * a completion is seen at the next test, after a backward step, so with
 * overlap it is known to a step's length. */
typedef struct {
    int64_t reductions;   /* steps that reduced */
    double exposed_s;     /* summed over them: from kiln_ddp_reduce's call to its return */
    double comm_s;        /* summed over them: some bucket in flight */
    double hidden_frac;   /* 1 - exposed / comm (0 when nothing was reduced) */
    double last_exposed_s; /* summed: each step's wait of the rank that arrived last (kiln_ddp_step_mean) */
    double skew_s;        /* summed: this rank's wait beyond that one (arrival imbalance) */
    double last_exposed_median_s; /* the median step's last-arriving rank's wait, over the latest 256
                                   * steps (a step where a peer was descheduled does not move it) */
    int buckets;          /* 0 in a world of one */
} kiln_ddp_stats;
kiln_ddp_stats kiln_ddp_stats_of(const kiln_ddp *d);

#endif
