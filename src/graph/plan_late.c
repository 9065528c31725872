/* The loss read a step late. A device backend's read-out normally waits for
 * the device (the one synchronisation of a training step): the host then
 * queues the optimizer and the next batch while the device idles. With
 * kiln_plan_set_late_loss the read-out only queues its copy into one of the
 * backend's slots (kiln_backend.readout_take), each run gets a ticket, and the
 * caller takes a run's loss when it chooses: after queuing the next run, so
 * the device always has work. A slot is reused every KILN_PLAN_LATE_RUNS runs:
 * a run still untaken in it is waited for then, and its loss dropped. */
#include <math.h>
#include <stdio.h>
#include "graph/internal/plan.h"

_Static_assert(KILN_PLAN_LATE_RUNS == KILN_READOUT_SLOTS, "a late run per backend read-out slot");

/* only a plan whose runs end in a read-out (a scalar loss) has late losses to take */
int kiln_plan_set_late_loss(kiln_plan *pl, int late) {
    const kiln_val *loss = pl->nout ? &pl->g->vals[pl->outputs[0]] : NULL;
    pl->late = late && pl->be->readout_take && loss && loss->ndim == 0 && loss->dtype == KILN_F32;
    return pl->late;
}

uint64_t kiln_plan_ticket(const kiln_plan *pl) { return pl->tickets; }

static void keep_message(kiln_plan *pl, int k) {
    if (pl->late_runs[k].st != KILN_OK) snprintf(pl->late_runs[k].msg, sizeof pl->late_runs[k].msg, "%s", kiln_last_error());
}

static kiln_status take_slot(kiln_plan *pl, int k) {
    if (pl->late_runs[k].ticket && !pl->late_runs[k].taken) {
        pl->late_runs[k].st = pl->be->readout_take(k, &pl->late_runs[k].loss);
        pl->late_runs[k].taken = 1;
        keep_message(pl, k);
    }
    return pl->late_runs[k].st;
}

/* before a late run: its slot free (the run that held it taken), and the read-out told where to go */
kiln_status kiln_plan_late_begin(kiln_plan *pl) {
    int k = (int)(pl->tickets % KILN_PLAN_LATE_RUNS);
    (void)take_slot(pl, k); /* its error stays with its ticket */
    pl->late_runs[k].ticket = 0;
    pl->rc.late_slot = k + 1;
    return KILN_OK;
}

/* after it: the ticket is the run's whatever happened (a failed run's ticket gives its error) */
void kiln_plan_late_end(kiln_plan *pl, kiln_status st) {
    int k = pl->rc.late_slot - 1;
    pl->rc.late_slot = 0;
    pl->late_runs[k].ticket = ++pl->tickets;
    pl->late_runs[k].taken = st != KILN_OK;
    pl->late_runs[k].loss = NAN;
    pl->late_runs[k].st = st;
    keep_message(pl, k);
}

kiln_status kiln_plan_take_loss(kiln_plan *pl, uint64_t ticket, double *loss) {
    *loss = NAN;
    int k = (int)((ticket + KILN_PLAN_LATE_RUNS - 1) % KILN_PLAN_LATE_RUNS);
    if (ticket && pl->late_runs[k].ticket == ticket) {
        kiln_status st = take_slot(pl, k);
        *loss = pl->late_runs[k].loss;
        return st == KILN_OK ? KILN_OK : kiln_fail(st, "%s", pl->late_runs[k].msg);
    }
    if (ticket && ticket == pl->tickets && !pl->last_late) { /* a run whose read-out waited */
        *loss = pl->loss_host;
        return KILN_OK;
    }
    return kiln_fail(KILN_ERR_INVALID_ARG, "take_loss: run %llu has no loss to take (the last run is %llu; late "
                     "runs are kept for %d runs)", (unsigned long long)ticket, (unsigned long long)pl->tickets,
                     KILN_PLAN_LATE_RUNS);
}
