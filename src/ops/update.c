/* Steps outside the graph that a training step still runs on the backend, so
 * a device backend keeps a whole step on the device: the loss read-out,
 * gradient clipping by global norm (a sum of squares, then a scale) and the
 * fused optimizer updates (PyTorch 1.13 semantics) over runs of the flat
 * parameter, gradient and state buffers. The learning rate and the step count
 * change every step and come from the run's scalars, not from attributes.
 * sgd, adamw and adadelta take an optional second input, the layer-wise ops'
 * tensor table: then each tensor gets its own weight decay (the decay filter). */
#include "graph/internal/graph.h"

static const kiln_attr_spec clip_attrs[] = {KILN_ATTR("max_norm", KILN_ATTR_F64, clip.max_norm), {0}};
static const kiln_attr_spec sgd_attrs[] = {KILN_ATTR("momentum", KILN_ATTR_F32, sgd.momentum),
                                           KILN_ATTR("dampening", KILN_ATTR_F32, sgd.dampening),
                                           KILN_ATTR("weight_decay", KILN_ATTR_F32, sgd.weight_decay),
                                           KILN_ATTR("nesterov", KILN_ATTR_INT, sgd.nesterov), {0}};
static const kiln_attr_spec adamw_attrs[] = {KILN_ATTR("beta1", KILN_ATTR_F32, adamw.beta1),
                                             KILN_ATTR("beta2", KILN_ATTR_F32, adamw.beta2),
                                             KILN_ATTR("eps", KILN_ATTR_F32, adamw.eps),
                                             KILN_ATTR("weight_decay", KILN_ATTR_F32, adamw.weight_decay), {0}};
static const kiln_attr_spec adadelta_attrs[] = {KILN_ATTR("rho", KILN_ATTR_F32, adadelta.rho),
                                                KILN_ATTR("eps", KILN_ATTR_F32, adadelta.eps),
                                                KILN_ATTR("weight_decay", KILN_ATTR_F32, adadelta.weight_decay), {0}};

const kiln_op_def kiln_op_readout = {.name = "readout", .min_in = 1, .max_in = 1, .flags = KILN_OPF_STEP_ONLY};
const kiln_op_def kiln_op_sumsq = {.name = "sumsq", .min_in = 1, .max_in = 1, .flags = KILN_OPF_STEP_ONLY};
const kiln_op_def kiln_op_clip_scale = {
    .name = "clip_scale", .min_in = 1, .max_in = 1, .flags = KILN_OPF_STEP_ONLY, .attrs = clip_attrs,
};
const kiln_op_def kiln_op_sgd_update = {
    .name = "sgd", .min_in = 1, .max_in = 2, .flags = KILN_OPF_STEP_ONLY, .attrs = sgd_attrs,
};
const kiln_op_def kiln_op_adamw_update = {
    .name = "adamw", .min_in = 1, .max_in = 2, .flags = KILN_OPF_STEP_ONLY, .attrs = adamw_attrs,
};
const kiln_op_def kiln_op_adadelta_update = {
    .name = "adadelta", .min_in = 1, .max_in = 2, .flags = KILN_OPF_STEP_ONLY, .attrs = adadelta_attrs,
};

/* LAMB, LARS and NovoGrad: the same step twice per run, phase 0 computing each
 * parameter tensor's norms, phase 1 the update that needs them */
static const kiln_attr_spec layerwise_attrs[] = {KILN_ATTR("beta1", KILN_ATTR_F32, layerwise.beta1),
                                                 KILN_ATTR("beta2", KILN_ATTR_F32, layerwise.beta2),
                                                 KILN_ATTR("eps", KILN_ATTR_F32, layerwise.eps),
                                                 KILN_ATTR("weight_decay", KILN_ATTR_F32, layerwise.weight_decay),
                                                 KILN_ATTR("momentum", KILN_ATTR_F32, layerwise.momentum),
                                                 KILN_ATTR("trust", KILN_ATTR_F32, layerwise.trust),
                                                 KILN_ATTR("phase", KILN_ATTR_INT, layerwise.phase), {0}};
#define LAYERWISE(nm) {.name = nm, .min_in = 2, .max_in = 2, .flags = KILN_OPF_STEP_ONLY, .attrs = layerwise_attrs}
const kiln_op_def kiln_op_lamb_update = LAYERWISE("lamb");
const kiln_op_def kiln_op_lars_update = LAYERWISE("lars");
const kiln_op_def kiln_op_novograd_update = LAYERWISE("novograd");

/* the gradient scaler (PyTorch's GradScaler, src/optim/grad_scaler.c): amp_unscale divides a run of the scaled
 * gradients by the scale unless their sum of squares is not finite (then the first run's step records found_inf);
 * amp_update backs the scale off after such a step, or grows it after `interval` good ones */
static const kiln_attr_spec amp_attrs[] = {KILN_ATTR("growth", KILN_ATTR_F32, amp.growth),
                                           KILN_ATTR("backoff", KILN_ATTR_F32, amp.backoff),
                                           KILN_ATTR("interval", KILN_ATTR_I64, amp.interval),
                                           KILN_ATTR("first", KILN_ATTR_INT, amp.first), {0}};
const kiln_op_def kiln_op_amp_unscale = {
    .name = "amp_unscale", .min_in = 1, .max_in = 1, .flags = KILN_OPF_STEP_ONLY, .attrs = amp_attrs,
};
const kiln_op_def kiln_op_amp_update = {
    .name = "amp_update", .min_in = 0, .max_in = 0, .flags = KILN_OPF_STEP_ONLY, .attrs = amp_attrs,
};
