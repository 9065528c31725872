/* Helpers shared by the golden model tests (test_models.c, test_gpt.c): a
 * fixture's weights into kiln's parameters, the gradients back, and the
 * relative error against PyTorch's. Include after testutil.h. */
#ifndef KILN_GOLDEN_H
#define KILN_GOLDEN_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kiln/graph.h"
#include "kiln/safetensors.h"
#include "testutil.h"

/* max |got - ref| over max |ref| */
static inline double rel_err(const double *got, const float *ref, int64_t n) {
    double num = 0, den = 1e-12;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - ref[i]);
        if (!(e <= num)) num = isnan(e) ? INFINITY : e;
        den = fmax(den, fabs((double)ref[i]));
    }
    return num / den;
}

/* parameters (f32 in the fixture) into P: double on ref, float on cpu */
static inline void load_weights(kiln_st_file *f, kiln_params *P, int ref) {
    int64_t total = kiln_params_total(P);
    float *q = calloc((size_t)total + 1, sizeof *q);
    for (int i = 0; i < kiln_params_count(P); i++) {
        char name[128];
        snprintf(name, sizeof name, "w.%s", kiln_params_name(P, i));
        const kiln_tensor *t = kiln_st_find(f, name);
        CHECK_MSG(t && t->dtype == KILN_F32 && kiln_tensor_numel(t) == kiln_params_numel(P, i),
                  "%s: missing or not shaped as kiln's", name);
        if (t && kiln_tensor_numel(t) == kiln_params_numel(P, i))
            memcpy(q + kiln_params_offset(P, i), t->data, (size_t)kiln_params_numel(P, i) * 4);
    }
    if (ref)
        for (int64_t i = 0; i < total; i++) ((double *)kiln_params_data(P))[i] = q[i];
    else
        CHECK_OK(kiln_params_write(P, q));
    free(q);
}

/* the gradients (host doubles) of P */
static inline double *grads_of(kiln_params *P, int ref) {
    int64_t total = kiln_params_total(P);
    double *g = malloc((size_t)(total + 1) * sizeof *g);
    if (ref) {
        memcpy(g, kiln_params_grad(P), (size_t)total * sizeof *g);
        return g;
    }
    float *q = malloc((size_t)(total + 1) * sizeof *q);
    CHECK_OK(kiln_params_grad_read(P, q));
    for (int64_t i = 0; i < total; i++) g[i] = q[i];
    free(q);
    return g;
}

/* every parameter's gradient against the fixture's "grad.<name>" within tol;
 * prints the model's loss beside PyTorch's and the worst error */
static inline void check_grads(kiln_st_file *f, kiln_params *P, const char *model, const char *backend, int ref,
                               double tol, double loss, double loss_pt) {
    double *gr = grads_of(P, ref), worst = 0;
    for (int i = 0; i < kiln_params_count(P); i++) {
        char name[128];
        snprintf(name, sizeof name, "grad.%s", kiln_params_name(P, i));
        const kiln_tensor *t = kiln_st_find(f, name);
        CHECK_MSG(t != NULL, "%s missing", name);
        if (!t) continue;
        double err = rel_err(gr + kiln_params_offset(P, i), t->data, kiln_params_numel(P, i));
        CHECK_MSG(err <= tol, "%s: gradient of %s off by %.3g", backend, kiln_params_name(P, i), err);
        worst = fmax(worst, err);
    }
    printf("%s on %s: loss %.8f (PyTorch %.8f), worst gradient error %.3g\n", model, backend, loss, loss_pt, worst);
    free(gr);
}

#endif
