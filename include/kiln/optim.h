/* kiln/optim.h — optimizers fused over the flat parameter buffer, LR schedules.
 *
 *     kiln_optim_config oc = kiln_optim_defaults(KILN_OPT_ADADELTA);
 *     oc.lr = 1.0f;
 *     kiln_optim *opt; kiln_optim_new(&oc, params, &opt);
 *     kiln_optim_set_clip(opt, 1.0);           // optional: clip_grad_norm_ before each update
 *     ... after each backward: kiln_optim_step(opt);
 *     ... after each epoch:    kiln_optim_set_lr(opt, kiln_lr_step_schedule(1.0f, 0.7f, 1, epoch + 1));
 *
 * Semantics are PyTorch 1.13's (torch.optim.SGD, AdamW, Adadelta); LAMB, LARS
 * and NovoGrad follow their papers (docs/optimizers.md). One pass over the
 * whole flat buffer when every parameter has a gradient (the layer-wise ones:
 * one pass for each tensor's norms, one to update); parameters that got none
 * in the last step are skipped (the grad = None rule). Weight decay skips
 * parameters of fewer than 2 dims (biases, norm weights) unless decay_all.
 */
#ifndef KILN_OPTIM_H
#define KILN_OPTIM_H

#include "kiln/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { KILN_OPT_SGD, KILN_OPT_ADAMW, KILN_OPT_ADADELTA, KILN_OPT_LAMB, KILN_OPT_LARS, KILN_OPT_NOVOGRAD } kiln_optim_kind;

typedef struct kiln_optim_config {
    kiln_optim_kind kind;
    float lr;
    float weight_decay;
    float momentum, dampening; /* SGD (momentum also LARS's) */
    int nesterov;              /* SGD */
    float beta1, beta2, eps;   /* AdamW, LAMB, NovoGrad (eps also Adadelta's) */
    float rho;                 /* Adadelta */
    float trust;               /* LARS: the trust coefficient eta */
    int decay_all;             /* 1: weight decay on every parameter; 0: only on those of 2 or more dims */
} kiln_optim_config;

/* PyTorch's defaults for each optimizer (LAMB: APEX FusedLAMB's; LARS: eta 0.001,
 * momentum 0.9; NovoGrad: NVIDIA NeMo's) */
kiln_optim_config kiln_optim_defaults(kiln_optim_kind kind);
/* "sgd", "adamw", "adadelta", "lamb", "lars", "novograd" -> kind; 0 on success */
int kiln_optim_parse(const char *name, kiln_optim_kind *out);
const char *kiln_optim_name(kiln_optim_kind kind);

typedef struct kiln_optim kiln_optim;
kiln_status kiln_optim_new(const kiln_optim_config *cfg, kiln_params *P, kiln_optim **out);
void kiln_optim_free(kiln_optim *o);
/* One update (clipping first when set), as steps on the parameters' backend. */
kiln_status kiln_optim_step(kiln_optim *o);
/* clip the global gradient norm to max_norm before each update (0: off), as clip_grad_norm_ */
void kiln_optim_set_clip(kiln_optim *o, double max_norm);
/* the gradient norm the last clipped update saw (NaN without clipping) */
double kiln_optim_grad_norm(const kiln_optim *o);
const kiln_optim_config *kiln_optim_get_config(const kiln_optim *o);
void kiln_optim_set_lr(kiln_optim *o, float lr);
kiln_optim_kind kiln_optim_get_kind(const kiln_optim *o);
float kiln_optim_lr(const kiln_optim *o);
int64_t kiln_optim_steps(const kiln_optim *o);       /* updates done so far */

/* Dynamic loss scaling for fp16 (PyTorch's torch.cuda.amp.GradScaler, its defaults): the loss's backward seed
 * is multiplied by a scale (a power of 2), each update first divides the gradients by it, and a step whose
 * scaled gradients hold an inf or NaN is skipped (parameters and optimizer state untouched) and halves the
 * scale; `growth_interval` good steps in a row double it. The state lives on the parameters' backend and a
 * device decides each step on its own: the host never waits for it. A plan seeds backward with the scale once
 * told where it is: kiln_plan_set_grad_scaler(plan, kiln_optim_grad_scaler(opt)). */
typedef struct kiln_grad_scaler_config {
    float init_scale, growth_factor, backoff_factor;
    int64_t growth_interval;
} kiln_grad_scaler_config;
kiln_grad_scaler_config kiln_grad_scaler_defaults(void); /* 65536, 2, 0.5, 2000 */
/* NULL switches it off */
kiln_status kiln_optim_set_grad_scaler(kiln_optim *o, const kiln_grad_scaler_config *c);
/* the state a plan reads (in the backend's memory), NULL when off */
const void *kiln_optim_grad_scaler(const kiln_optim *o);
typedef struct kiln_grad_scaler_info {
    double scale;
    int64_t tracker;  /* good steps since the scale last changed */
    int64_t skipped;  /* updates skipped so far */
} kiln_grad_scaler_info;
/* the state as it stands (waits for a device), and written back (a checkpoint's, on resume) */
kiln_status kiln_optim_grad_scaler_read(const kiln_optim *o, kiln_grad_scaler_info *out);
kiln_status kiln_optim_grad_scaler_write(kiln_optim *o, const kiln_grad_scaler_info *in);
void kiln_optim_set_steps(kiln_optim *o, int64_t steps);
/* state buffers (flat, like the parameters, on the parameters' backend): "square_avg", "acc_delta", "exp_avg", ... */
int kiln_optim_state_count(const kiln_optim *o);
const char *kiln_optim_state_name(const kiln_optim *o, int i);
void *kiln_optim_state(kiln_optim *o, int i); /* in the parameters' backend memory */
/* 1 when state i can never be negative (an average of squares): checkpoints holding one are refused */
int kiln_optim_state_nonnegative(const kiln_optim *o, int i);
/* 1 when state i holds one value per parameter tensor (NovoGrad's exp_avg_sq), in
 * parameter order, instead of one per element of the flat buffer */
int kiln_optim_state_per_tensor(const kiln_optim *o, int i);
/* 1 when parameter i takes weight decay (2 or more dims, or decay_all) */
int kiln_optim_decays(const kiln_optim *o, int i);
/* a state buffer (kiln_params_total elements, or kiln_params_count per tensor) to or from the host */
kiln_status kiln_optim_state_read(const kiln_optim *o, int i, void *host);
kiln_status kiln_optim_state_write(kiln_optim *o, int i, const void *host);

/* torch.nn.utils.clip_grad_norm_: the global L2 norm of every gradient the
 * last step produced (*total_norm, before clipping); when it exceeds max_norm,
 * the gradients are scaled by max_norm / (norm + 1e-6). */
kiln_status kiln_clip_grad_norm(kiln_params *P, double max_norm, double *total_norm);

/* StepLR: base * gamma^(epoch / step_size) */
float kiln_lr_step_schedule(float base, float gamma, int64_t step_size, int64_t epoch);

/* The learning rate of each optimizer step (docs/optimizers.md). Update s
 * (0-based) of a run of `total` updates gets
 *   s < warmup:  lr * (s + 1) / warmup                      (linear warmup from lr / warmup)
 *   cosine:      min_lr + (lr - min_lr) * (1 + cos(pi * q)) / 2,  q = (s - warmup) / (total - warmup)
 *   linear:      lr - (lr - min_lr) * q
 *   step:        StepLR's lr * gamma^(epoch / step_size), per epoch (warmup scales it too)
 *   none:        lr */
typedef enum { KILN_LR_STEP, KILN_LR_NONE, KILN_LR_COSINE, KILN_LR_LINEAR } kiln_lr_decay;
typedef struct kiln_lr_schedule {
    kiln_lr_decay decay;
    float lr, min_lr;
    int64_t warmup, total;         /* optimizer steps */
    float gamma;                   /* step */
    int64_t step_size;             /* step: epochs */
} kiln_lr_schedule;
double kiln_lr_at(const kiln_lr_schedule *s, int64_t step, int64_t epoch);
/* "step", "none", "cosine", "linear" -> decay; 0 on success */
int kiln_lr_decay_parse(const char *name, kiln_lr_decay *out);
const char *kiln_lr_decay_name(kiln_lr_decay d);
/* one line stating the schedule, as the trainer logs it */
void kiln_lr_describe(const kiln_lr_schedule *s, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
