/* kiln/gradcheck.h — finite differences against backward, in double (`kiln gradcheck`).
 *
 *     kiln_gradcheck_config c = kiln_gradcheck_defaults();
 *     c.model = "resnet20";
 *     kiln_gradcheck_result r;
 *     if (kiln_gradcheck(&c, &r) != KILN_OK) ... kiln_last_error()
 *     for (int i = 0; i < r.n; i++) printf("%s %g\n", r.t[i].name, r.t[i].worst_rel);
 *     kiln_gradcheck_result_free(&r);
 *
 * The model is built and compiled for training on the reference backend
 * (every kernel in double), dropout off, on a small random batch; backward
 * gives the gradient once, then K sampled elements of every parameter tensor
 * are moved by +-eps and the forward steps run again: central differences
 * (L(p + eps) - L(p - eps)) / 2 eps against backward's value. The torch
 * counterpart is torch.autograd.gradcheck; like it, a debugging aid.
 */
#ifndef KILN_GRADCHECK_H
#define KILN_GRADCHECK_H

#include "kiln/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_gradcheck_config {
    const char *model;          /* a zoo name */
    kiln_model_opts model_opts; /* 0: gradcheck's small defaults (32x32 ResNets; a 1-layer gpt of width 32, block 8, vocab 32) */
    int64_t batch;              /* 0: 2, 4 for resnet18/34/50 (their 1x1 maps at 32x32: batch norm over 2 values is
                                   ill-conditioned, gradients of 1e6) */
    int samples;                /* elements checked per tensor (all when it has fewer); 0: 4, 1 for resnet18/34/50 */
    int tensors;                /* check this many parameter tensors, evenly spread (first and last included); 0: all */
    double eps;                 /* 1e-6 */
    double tol;                 /* the largest relative error that passes: 1e-3 (torch.autograd.gradcheck's rtol) */
    uint64_t seed;              /* parameters, the batch and the sampled elements */
} kiln_gradcheck_config;
kiln_gradcheck_config kiln_gradcheck_defaults(void);

typedef struct kiln_gradcheck_tensor {
    char name[64];              /* the parameter: "conv1.weight" */
    int64_t numel;
    int checked;                /* elements compared */
    int retried;                /* of which over tol at eps and better at eps / 10, / 100 or x 10 (a ReLU's kink, or rounding) */
    double worst_rel;           /* the largest |a - n| / max(|a|, |n|, 1e-5) over them */
    int64_t worst_at;           /* its element (flat index in the tensor) */
    double analytic, numeric;   /* backward's and the differences' value there */
} kiln_gradcheck_tensor;

typedef struct kiln_gradcheck_result {
    int n;                      /* tensors checked (every parameter with a gradient) */
    kiln_gradcheck_tensor *t;
    double worst_rel;           /* over all tensors */
    int failed;                 /* tensors over tol */
    int runs;                   /* forward runs made */
    double loss;                /* the batch's loss at the unperturbed parameters */
    int64_t batch;
    int samples;
} kiln_gradcheck_result;

/* KILN_OK with r filled (r->failed says whether it passed); an error for a bad model or option */
kiln_status kiln_gradcheck(const kiln_gradcheck_config *c, kiln_gradcheck_result *r);
void kiln_gradcheck_result_free(kiln_gradcheck_result *r);

/* The check over a compiled training plan on the reference backend whose inputs are bound (tests: their own
 * graphs, e.g. one with a deliberately wrong backward); the parameters are restored after each difference. */
kiln_status kiln_gradcheck_plan(kiln_plan *plan, kiln_params *P, int64_t batch, const kiln_gradcheck_config *c,
                                kiln_gradcheck_result *r);

#ifdef __cplusplus
}
#endif
#endif
