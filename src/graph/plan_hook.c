/* The run-time hook between steps and what a caller needs to place it: the
 * step lists and, per parameter, the last step that writes its gradient.
 * plan_exec.c calls the hook. See graph/internal/plan_hook.h. */
#include <stdlib.h>
#include "graph/internal/plan.h"
#include "graph/internal/plan_hook.h"

int kiln_plan_list_count(const kiln_plan *pl) { return pl->nlists; }
int64_t kiln_plan_list_batch(const kiln_plan *pl, int list) { return pl->lists[list].batch; }
int kiln_plan_list_steps(const kiln_plan *pl, int list) { return pl->lists[list].nsteps; }

int kiln_plan_list_of(const kiln_plan *pl, int64_t batch) {
    for (int i = 0; i < pl->nlists; i++)
        if (pl->lists[i].batch == batch) return i;
    return -1;
}

/* the bytes [lo, hi) a step's output spans */
static int out_bytes(const kiln_tdesc *t, const char **lo, const char **hi) {
    if (!t->data || t->numel <= 0) return 0;
    *lo = t->data;
    *hi = *lo + (size_t)kiln_tdesc_span(t) * kiln_dtype_size(t->dtype);
    return 1;
}

kiln_status kiln_plan_grad_writers(const kiln_plan *pl, int list, int *last) {
    if (list < 0 || list >= pl->nlists) return kiln_fail(KILN_ERR_INVALID_ARG, "plan: no step list %d", list);
    kiln_params *P = pl->P;
    const char *grad = kiln_params_grad(P);
    int np = kiln_params_count(P);
    for (int p = 0; p < np; p++) last[p] = -1;
    const kiln_steplist *L = &pl->lists[list];
    for (int s = 0; grad && s < L->nsteps; s++)
        for (int k = 0; k < L->steps[s].nout; k++) {
            const char *lo, *hi;
            if (!out_bytes(&L->steps[s].out[k], &lo, &hi)) continue;
            for (int p = 0; p < np; p++) {
                const char *a = grad + (size_t)kiln_params_offset(P, p) * pl->elem;
                const char *b = a + (size_t)kiln_params_numel(P, p) * pl->elem;
                if (lo < b && a < hi) last[p] = s;
            }
        }
    return KILN_OK;
}

kiln_status kiln_plan_set_hook(kiln_plan *pl, kiln_plan_hook_fn fn, void *user) {
    for (int i = 0; i < pl->nlists; i++) {
        free(pl->lists[i].mark);
        pl->lists[i].mark = NULL;
    }
    pl->hook = fn;
    pl->hook_user = user;
    return KILN_OK;
}

kiln_status kiln_plan_hook_after(kiln_plan *pl, int list, int step) {
    if (!pl->hook) return kiln_fail(KILN_ERR_INVALID_ARG, "plan: a hook point without a hook");
    if (list < 0 || list >= pl->nlists || step < 0 || step >= pl->lists[list].nsteps)
        return kiln_fail(KILN_ERR_INVALID_ARG, "plan: no step %d in step list %d", step, list);
    kiln_steplist *L = &pl->lists[list];
    if (!L->mark && !(L->mark = calloc((size_t)L->nsteps, 1))) return kiln_fail(KILN_ERR_NOMEM, "plan: out of memory");
    L->mark[step] = 1;
    return KILN_OK;
}
