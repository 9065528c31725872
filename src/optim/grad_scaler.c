/* Dynamic loss scaling (PyTorch's GradScaler), as steps on the parameters'
 * backend so a device keeps a step's decision on the device. Before the
 * update: a sum of squares of the scaled gradients over every run that has a
 * gradient (non-finite when any gradient is inf or NaN: squares of floats do
 * not overflow a double), then each run divided by the scale unless that sum
 * is not finite, the first recording found_inf. Clipping and the update
 * follow; a device's kernels skip themselves on found_inf, a host backend's
 * optimizer skips them (optim.c). Last, amp_update backs the scale off or
 * grows it. The scale stays a power of 2, so scaling and unscaling are exact:
 * without an overflow, training with the scaler gives the bits it gives
 * without. */
#include <stdlib.h>
#include "optim/internal/steps.h"

kiln_grad_scaler_config kiln_grad_scaler_defaults(void) {
    return (kiln_grad_scaler_config){.init_scale = 65536.0f, .growth_factor = 2.0f, .backoff_factor = 0.5f,
                                     .growth_interval = 2000};
}

int kiln_amp_steps(kiln_params *P, kiln_amp_state *amp, double *acc, kiln_step *out, int max) {
    int np = kiln_params_count(P);
    int64_t *off = malloc((size_t)(np ? np : 1) * sizeof *off), *cnt = malloc((size_t)(np ? np : 1) * sizeof *cnt);
    int runs = off && cnt ? kiln_params_grad_runs(P, off, cnt, np) : -1, n = 0;
    kiln_dtype dt = kiln_params_dtype(P);
    char *grad = kiln_params_grad(P);
    for (int pass = 0; pass < 2; pass++)
        for (int r = 0; r < runs && n < max; r++) {
            kiln_step *s = &out[n++];
            kiln_tdesc g = kiln_tdesc_flat(grad + (size_t)off[r] * kiln_dtype_size(dt), dt, cnt[r]);
            kiln_tdesc a = kiln_tdesc_flat(acc, KILN_F64, 1);
            *s = kiln_flat_step(pass ? KILN_OP_AMP_UNSCALE : KILN_OP_SUMSQ, pass ? "amp_unscale" : "amp_sumsq");
            s->nin = 1;
            s->in[0] = pass ? a : g;
            s->out[0] = pass ? g : a;
            s->nout = 1 + pass;
            s->out[1] = kiln_tdesc_flat(amp, KILN_I64, sizeof *amp / 8);
            s->acc[0] = !pass && r > 0; /* the first run writes the sum, later ones add */
            s->attr.amp.first = pass && r == 0;
        }
    free(off);
    free(cnt);
    if (runs < 0) kiln_fail(KILN_ERR_NOMEM, "grad scaler: out of memory");
    return runs < 0 ? -1 : n;
}

void kiln_amp_update_step(kiln_amp_state *amp, const kiln_grad_scaler_config *c, kiln_step *s) {
    *s = kiln_flat_step(KILN_OP_AMP_UPDATE, "amp_update");
    s->nout = 1;
    s->out[0] = kiln_tdesc_flat(amp, KILN_I64, sizeof *amp / 8);
    s->attr.amp = (kiln_amp_attrs){c->growth_factor, c->backoff_factor, c->growth_interval, 0};
}
