/* Parameters live in one flat buffer, their gradients in another, with named
 * views (llm.c's layout): the optimizer is one loop over the buffer, a
 * checkpoint is a list of views, and a DDP bucket is a slice. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/internal/rng.h"
#include "graph/internal/graph.h"

typedef struct {
    char name[64];
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    int64_t offset, numel, fan_in;
} param_view;

struct kiln_params {
    kiln_dtype dtype;
    int count;
    param_view *views;
    int64_t total;
    void *data, *grad;
    uint8_t *has_grad;
};

kiln_status kiln_params_new(const kiln_graph *g, kiln_dtype dtype, kiln_params **out) {
    *out = NULL;
    if (kiln_graph_status(g) != KILN_OK) return kiln_graph_status(g);
    if (dtype != KILN_F32 && dtype != KILN_F64)
        return kiln_fail(KILN_ERR_INVALID_ARG, "parameters: dtype %s (f32 or f64)", kiln_dtype_name(dtype));
    kiln_params *P = calloc(1, sizeof *P);
    if (!P) return kiln_fail(KILN_ERR_NOMEM, "parameters: out of memory");
    P->dtype = dtype;
    P->count = g->nparams;
    P->views = calloc((size_t)(g->nparams ? g->nparams : 1), sizeof *P->views);
    P->has_grad = calloc((size_t)(g->nparams ? g->nparams : 1), 1);
    if (!P->views || !P->has_grad) goto oom;
    size_t es = kiln_dtype_size(dtype);
    for (int i = 0; i < g->nparams; i++) {
        const kiln_val *v = &g->vals[g->param_vals[i]];
        param_view *pv = &P->views[i];
        memcpy(pv->name, v->name, sizeof pv->name);
        pv->ndim = v->ndim;
        memcpy(pv->shape, v->shape, sizeof pv->shape);
        pv->numel = kiln_shape_numel(v->ndim, v->shape);
        pv->fan_in = v->fan_in;
        pv->offset = P->total;
        /* each view starts on a 64-byte line so kernels see aligned tensors */
        P->total += (pv->numel + (int64_t)(64 / es) - 1) / (int64_t)(64 / es) * (int64_t)(64 / es);
    }
    P->data = kiln_calloc((size_t)(P->total ? P->total : 1) * es);
    P->grad = kiln_calloc((size_t)(P->total ? P->total : 1) * es);
    if (!P->data || !P->grad) goto oom;
    *out = P;
    return KILN_OK;
oom:
    kiln_params_free(P);
    return kiln_fail(KILN_ERR_NOMEM, "parameters: out of memory");
}

void kiln_params_free(kiln_params *P) {
    if (!P) return;
    kiln_free(P->data);
    kiln_free(P->grad);
    free(P->views);
    free(P->has_grad);
    free(P);
}

void kiln_params_init(kiln_params *P, uint64_t seed) {
    for (int i = 0; i < P->count; i++) {
        const param_view *pv = &P->views[i];
        float bound = (float)(1.0 / sqrt((double)pv->fan_in));
        uint64_t key = kiln_rng_key(seed, 0x9a7a, (uint64_t)i);
        for (int64_t j = 0; j < pv->numel; j++) {
            float u = kiln_rng_uniform(key, 0, (uint64_t)j, -bound, bound);
            if (P->dtype == KILN_F32) ((float *)P->data)[pv->offset + j] = u;
            else ((double *)P->data)[pv->offset + j] = u;
        }
    }
}

int kiln_params_count(const kiln_params *P) { return P->count; }
const char *kiln_params_name(const kiln_params *P, int i) { return P->views[i].name; }
int kiln_params_find(const kiln_params *P, const char *name) {
    for (int i = 0; i < P->count; i++)
        if (strcmp(P->views[i].name, name) == 0) return i;
    return -1;
}
int kiln_params_shape(const kiln_params *P, int i, int64_t *shape) {
    memcpy(shape, P->views[i].shape, sizeof(int64_t) * (size_t)P->views[i].ndim);
    return P->views[i].ndim;
}
int64_t kiln_params_offset(const kiln_params *P, int i) { return P->views[i].offset; }
int64_t kiln_params_numel(const kiln_params *P, int i) { return P->views[i].numel; }
int64_t kiln_params_total(const kiln_params *P) { return P->total; }
kiln_dtype kiln_params_dtype(const kiln_params *P) { return P->dtype; }
void *kiln_params_data(kiln_params *P) { return P->data; }
void *kiln_params_grad(kiln_params *P) { return P->grad; }
const uint8_t *kiln_params_has_grad(const kiln_params *P) { return P->has_grad; }
uint8_t *kiln_params_has_grad_mut(kiln_params *P) { return P->has_grad; }

void kiln_params_grad_runs(kiln_params *P, kiln_params_run_fn fn, void *ctx) {
    for (int i = 0; i < P->count;) {
        if (!P->has_grad[i]) {
            i++;
            continue;
        }
        int j = i;
        while (j + 1 < P->count && P->has_grad[j + 1]) j++;
        int64_t end = j + 1 < P->count ? P->views[j + 1].offset : P->total;
        fn(P, P->views[i].offset, end - P->views[i].offset, ctx);
        i = j + 1;
    }
}
