/* One training step of a zoo model, for the pass tests that compare plans
 * with and without a pass (test_norm_passes.c, test_shortcut_pass.c). */
#ifndef KILN_TESTS_TRAIN_ONCE_H
#define KILN_TESTS_TRAIN_ONCE_H
#include <math.h>
#include "kiln/graph.h"
#include "kiln/nn.h"
#include "testutil.h"

/* compiles m's training plan on `backend` (autotune off, fusion passes on or off), runs one step on (x, y) and
 * copies the parameter gradients into grad as doubles; the plan is the caller's to inspect and free (NULL when
 * compiling failed, which CHECK_OK has counted) */
static inline kiln_plan *tu_train_once(kiln_graph *g, kiln_params *P, const kiln_model *m, const char *backend, int fuse,
                                       int64_t B, const float *x, const int32_t *y, double *grad) {
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    o.max_batch = B;
    o.autotune = 0;
    o.fuse = fuse;
    o.backend = backend;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_compile(g, P, &m->loss, 1, &o, &pl));
    if (!pl) return NULL;
    kiln_plan_bind(pl, m->x, x);
    kiln_plan_bind(pl, m->y, y);
    CHECK_OK(kiln_plan_run(pl, B));
    int ref = strcmp(kiln_plan_backend(pl), "ref") == 0;
    for (int64_t i = 0; i < kiln_params_total(P); i++)
        grad[i] = ref ? ((const double *)kiln_params_grad(P))[i] : ((const float *)kiln_params_grad(P))[i];
    return pl;
}

/* the largest difference relative to b's largest magnitude */
static inline double tu_rel_max(const double *a, const double *b, int64_t n) {
    double num = 0, den = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        num = fmax(num, fabs(a[i] - b[i]));
        den = fmax(den, fabs(b[i]));
    }
    return num / den;
}
#endif
