/* Gradient clipping by global norm, PyTorch's clip_grad_norm_ (norm_type 2):
 * one pass for the sum of squares, one to scale, over the flat gradient
 * buffer's runs of parameters that have a gradient. */
#include <math.h>
#include "graph/internal/graph.h"
#include "kernels/internal/kernels.h"
#include "kiln/optim.h"

/* padding between views is never written and stays zero, so runs can include it */
static void sumsq(kiln_params *P, int64_t off, int64_t n, void *ctx) {
    double *s = ctx;
    if (kiln_params_dtype(P) == KILN_F64) *s += kiln_ref_sumsq(n, (const double *)kiln_params_grad(P) + off);
    else *s += kiln_cpu_sumsq(n, (const float *)kiln_params_grad(P) + off);
}

static void scale(kiln_params *P, int64_t off, int64_t n, void *ctx) {
    double c = *(double *)ctx;
    if (kiln_params_dtype(P) == KILN_F64) kiln_ref_scale(n, (double *)kiln_params_grad(P) + off, c);
    else kiln_cpu_scale(n, (float *)kiln_params_grad(P) + off, (float)c);
}

kiln_status kiln_clip_grad_norm(kiln_params *P, double max_norm, double *total_norm) {
    if (!(max_norm > 0)) return kiln_fail(KILN_ERR_INVALID_ARG, "clip_grad_norm: max_norm is %g; it must be > 0", max_norm);
    double ss = 0;
    kiln_params_grad_runs(P, sumsq, &ss);
    double norm = sqrt(ss);
    if (total_norm) *total_norm = norm;
    if (!isfinite(norm)) return kiln_fail(KILN_ERR_NUMERIC, "clip_grad_norm: the gradient norm is %g", norm);
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) kiln_params_grad_runs(P, scale, &coef);
    return KILN_OK;
}
