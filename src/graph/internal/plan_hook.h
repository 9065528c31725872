/* A call between the steps of a run: what lets a caller act while backward
 * is still going (data parallel training starts each gradient bucket's
 * all-reduce as soon as its last gradient is written). The plan knows nothing
 * of what the hook does; it runs the step list in segments and calls it after
 * each marked step. Without a hook (the default) a run is one call to the
 * backend, as before. docs/plan-and-passes.md. */
#ifndef KILN_PLAN_HOOK_H
#define KILN_PLAN_HOOK_H

#include "kiln/graph.h"

/* after step done-1 of step list `list` has run; an error ends the run with it */
typedef kiln_status (*kiln_plan_hook_fn)(void *user, int list, int done);

/* the step lists, one per compiled batch size (the epoch's smaller last batch has its own) */
int kiln_plan_list_count(const kiln_plan *pl);
int64_t kiln_plan_list_batch(const kiln_plan *pl, int list);
int kiln_plan_list_steps(const kiln_plan *pl, int list);
/* the list kiln_plan_run(pl, batch) runs, -1 if none */
int kiln_plan_list_of(const kiln_plan *pl, int64_t batch);

/* last[p], per parameter of the plan's kiln_params: the last step of the list
 * whose output lies in parameter p's part of the flat gradient buffer (-1:
 * none writes it). Judged by addresses, so a gradient some later step copies
 * or adds into (a reorder, a second use of a shared weight) counts that step. */
kiln_status kiln_plan_grad_writers(const kiln_plan *pl, int list, int *last);

/* fn is called after every marked step; fn NULL removes the hook and all marks */
kiln_status kiln_plan_set_hook(kiln_plan *pl, kiln_plan_hook_fn fn, void *user);
/* marks step `step` of `list` (the hook is called with done = step + 1) */
kiln_status kiln_plan_hook_after(kiln_plan *pl, int list, int step);

#endif
