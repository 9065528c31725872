/* The optimizer's steps on a backend: clipping and the update over the runs
 * of the flat gradient buffer, built from the op table (update.c) and run by
 * the backend like a plan's steps, so a device backend keeps them on the device. */
#ifndef KILN_OPTIM_STEPS_H
#define KILN_OPTIM_STEPS_H

#include "backends/internal/backend.h"
#include "kiln/optim.h"

/* Appends clip_grad_norm's steps (a sum of squares into *acc per run, then a
 * scale per run) for the runs of P that have a gradient; returns how many
 * steps were written to out (at most max), or -1 with a message. */
int kiln_clip_steps(kiln_params *P, double max_norm, double *acc, kiln_step *out, int max);
/* grad_scaler.c: the scaler's steps in front of an update (a sum of squares of the scaled gradients into
 * *acc, then their unscaling), written to out; returns how many (at most max), or -1 with a message. The
 * scaler's update step, written to *s, ends the list. */
int kiln_amp_steps(kiln_params *P, kiln_amp_state *amp, double *acc, kiln_step *out, int max);
void kiln_amp_update_step(kiln_amp_state *amp, const kiln_grad_scaler_config *c, kiln_step *s);
/* a step outside the graph, its tensors still to fill */
kiln_step kiln_flat_step(kiln_op op, const char *name);

#endif
