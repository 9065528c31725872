/* The gradient scaler's state (PyTorch's GradScaler: dynamic loss scaling
 * for fp16), one small struct in the backend's memory that the scaler's steps
 * write and kernels read, so a device decides on its own whether a step's
 * update happens: the host never waits for it (src/optim/grad_scaler.c).
 * Plain C: the CUDA kernels include it too. */
#ifndef KILN_BACKENDS_AMP_STATE_H
#define KILN_BACKENDS_AMP_STATE_H
#include <stdint.h>

typedef struct kiln_amp_state {
    float scale;          /* the backward seed is multiplied by it */
    int32_t tracker;      /* updates made since the scale last changed */
    int32_t found_inf;    /* this step's scaled gradients hold a non-finite value: its update is skipped */
    int32_t pad;
    int64_t skipped;      /* updates skipped so far (the optimizers' bias corrections count the others) */
} kiln_amp_state;

#ifdef __CUDACC__
#define KILN_AMP_FN __host__ __device__ static inline
#else
#define KILN_AMP_FN static inline
#endif

/* GradScaler.update: after a step with a non-finite gradient the scale backs off (and the step counts as
 * skipped); after `interval` good steps in a row it grows */
KILN_AMP_FN void kiln_amp_update(kiln_amp_state *a, float growth, float backoff, int64_t interval) {
    if (a->found_inf) {
        a->scale *= backoff;
        a->tracker = 0;
        a->skipped++;
    } else if (++a->tracker >= interval) {
        float grown = a->scale * growth;
        if (grown <= 3.40282347e38f) a->scale = grown; /* as PyTorch's: never grown to inf */
        a->tracker = 0;
    }
}

/* the optimizer step its bias corrections see: updates made, skipped ones not counted */
KILN_AMP_FN int64_t kiln_amp_step(const kiln_amp_state *a, int64_t optim_step) { return a ? optim_step - a->skipped : optim_step; }

#endif
