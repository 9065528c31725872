/* kiln/inspect.h — a zoo model's compiled plan, described (`kiln inspect`).
 *
 *     kiln_inspect_config c = kiln_inspect_defaults();
 *     c.model = "resnet18"; c.batch = 32;
 *     char *json;
 *     if (kiln_inspect(&c, &json) != KILN_OK) ... kiln_last_error()
 *     puts(json); free(json);
 *
 * The model is built and compiled exactly as training (or, with eval, as
 * inference) compiles it, and described as one JSON object: the totals
 * (parameters, arena, conv and linear FLOPs per run, reorders) and every step
 * (kiln_step_info: op, shapes, layouts, attributes, epilogue, the kernel
 * chosen, its reorders and FLOPs). Nothing is run; compiling may autotune.
 */
#ifndef KILN_INSPECT_H
#define KILN_INSPECT_H

#include "kiln/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_inspect_config {
    const char *model;          /* a zoo name */
    kiln_model_opts model_opts;
    int64_t batch;
    int eval;                   /* 1: the inference plan */
    int autotune;               /* as kiln_compile_opts.autotune */
    const char *checkpoint_activations; /* as kiln_compile_opts (NULL: none) */
    int precision;              /* as kiln_compile_opts (kiln_precision) */
} kiln_inspect_config;
kiln_inspect_config kiln_inspect_defaults(void); /* batch 32, training, autotune on */

/* *json (malloc'd): {"model", "batch", "mode", "backend", "params", "arena_bytes", "arena_bytes_plain" (without
 * checkpoint_activations), "workspace_bytes" (the kernels' shared workspace, beside the arena), "recomputed" (nodes
 * it recomputes: steps of phase "recompute"), "flops", "reorders",
 * "weight_reorders", "steps": [{"name", "op", "phase", "in": [{"shape", "layout"}], "out": [...], "attrs",
 * "epilogue", "precision" ("fp32" or "bf16"), "kernel", "reorders", "weight_reorders", "flops"}]} */
kiln_status kiln_inspect(const kiln_inspect_config *c, char **json);

#ifdef __cplusplus
}
#endif
#endif
