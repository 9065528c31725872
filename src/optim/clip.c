/* Gradient clipping by global norm, PyTorch's clip_grad_norm_ (norm_type 2):
 * a sum of squares over the flat gradient buffer's runs of parameters that
 * have a gradient (in double, the same bits for any thread count), then one
 * scale by max_norm / (norm + 1e-6) when that is below 1. Both are backend
 * steps (op table: sumsq, clip_scale). */
#include <math.h>
#include <stdlib.h>
#include "kiln/optim.h"
#include "optim/internal/steps.h"

kiln_step kiln_flat_step(kiln_op op, const char *name) {
    kiln_step s = {0};
    s.op = op;
    s.name = name;
    s.node = -1;
    s.fwd_step = -1;
    return s;
}

int kiln_clip_steps(kiln_params *P, double max_norm, double *acc, kiln_step *out, int max) {
    int np = kiln_params_count(P);
    int64_t *off = malloc((size_t)(np ? np : 1) * sizeof *off), *cnt = malloc((size_t)(np ? np : 1) * sizeof *cnt);
    if (!off || !cnt) {
        free(off);
        free(cnt);
        kiln_fail(KILN_ERR_NOMEM, "clip_grad_norm: out of memory");
        return -1;
    }
    int runs = kiln_params_grad_runs(P, off, cnt, np), n = 0;
    kiln_dtype dt = kiln_params_dtype(P);
    size_t es = kiln_dtype_size(dt);
    char *grad = kiln_params_grad(P);
    for (int pass = 0; pass < 2; pass++)
        for (int r = 0; r < runs && n < max; r++) {
            kiln_step *s = &out[n++];
            *s = kiln_flat_step(pass ? KILN_OP_CLIP_SCALE : KILN_OP_SUMSQ, pass ? "clip_scale" : "sumsq");
            s->nin = s->nout = 1;
            kiln_tdesc g = kiln_tdesc_flat(grad + (size_t)off[r] * es, dt, cnt[r]), a = kiln_tdesc_flat(acc, KILN_F64, 1);
            s->in[0] = pass ? a : g;
            s->out[0] = pass ? g : a;
            s->acc[0] = !pass && r > 0; /* the first run writes the sum, later ones add */
            s->attr.clip.max_norm = max_norm;
        }
    free(off);
    free(cnt);
    return n;
}

kiln_status kiln_clip_grad_norm(kiln_params *P, double max_norm, double *total_norm) {
    if (!(max_norm > 0)) return kiln_fail(KILN_ERR_INVALID_ARG, "clip_grad_norm: max_norm is %g; it must be > 0", max_norm);
    const kiln_backend *be = kiln_backend_get(kiln_params_backend(P));
    int max = 2 * kiln_params_count(P) + 1;
    kiln_step *steps = calloc((size_t)max, sizeof *steps);
    double acc = 0;
    if (!steps) return kiln_fail(KILN_ERR_NOMEM, "clip_grad_norm: out of memory");
    int n = kiln_clip_steps(P, max_norm, &acc, steps, max);
    kiln_status st = n < 0 ? KILN_ERR_NOMEM : KILN_OK;
    for (int i = 0; st == KILN_OK && i < n; i++) st = kiln_backend_prepare(be, &steps[i], NULL);
    kiln_run_ctx rc = {0};
    if (st == KILN_OK) st = kiln_backend_run(be, steps, n, &rc, NULL);
    if (total_norm) *total_norm = sqrt(acc);
    free(steps);
    return st;
}
