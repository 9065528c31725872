/* Parameters live in one flat buffer, their gradients in another, with named
 * views (llm.c's layout): the optimizer is one loop over the buffer, a
 * checkpoint is a list of views, and a DDP bucket is a slice. Buffers
 * (non-trainable state such as batch norm's running statistics) are few and
 * small: each has its own aligned block and keeps its dtype (i64 counters). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/internal/rng.h"
#include "graph/internal/graph.h"

typedef struct {
    char name[64];
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    int64_t offset, numel;
    kiln_init_kind init;
    double init_value;
    int64_t fan_in;
    kiln_dtype dtype; /* buffers */
    void *data;       /* buffers */
} state_view;

struct kiln_params {
    kiln_dtype dtype;
    int count, nbuf;
    state_view *views, *bufs;
    int64_t total;
    void *data, *grad;
    uint8_t *has_grad;
    uint64_t has_grad_version;
};

static void view_of(state_view *sv, const kiln_val *v) {
    memcpy(sv->name, v->name, sizeof sv->name);
    sv->ndim = v->ndim;
    memcpy(sv->shape, v->shape, sizeof sv->shape);
    sv->numel = kiln_shape_numel(v->ndim, v->shape);
    sv->init = v->init;
    sv->init_value = v->init_value;
    sv->fan_in = v->fan_in;
}

kiln_status kiln_params_new(const kiln_graph *g, kiln_dtype dtype, kiln_params **out) {
    *out = NULL;
    if (kiln_graph_status(g) != KILN_OK) return kiln_graph_status(g);
    if (dtype != KILN_F32 && dtype != KILN_F64)
        return kiln_fail(KILN_ERR_INVALID_ARG, "parameters: dtype %s (f32 or f64)", kiln_dtype_name(dtype));
    kiln_params *P = calloc(1, sizeof *P);
    if (!P) return kiln_fail(KILN_ERR_NOMEM, "parameters: out of memory");
    P->dtype = dtype;
    P->count = g->nparams;
    P->nbuf = g->nbuffers;
    P->views = calloc((size_t)(g->nparams ? g->nparams : 1), sizeof *P->views);
    P->bufs = calloc((size_t)(g->nbuffers ? g->nbuffers : 1), sizeof *P->bufs);
    P->has_grad = calloc((size_t)(g->nparams ? g->nparams : 1), 1);
    if (!P->views || !P->bufs || !P->has_grad) goto oom;
    size_t es = kiln_dtype_size(dtype);
    for (int i = 0; i < g->nparams; i++) {
        state_view *pv = &P->views[i];
        view_of(pv, &g->vals[g->param_vals[i]]);
        pv->offset = P->total;
        /* each view starts on a 64-byte line so kernels see aligned tensors */
        P->total += (pv->numel + (int64_t)(64 / es) - 1) / (int64_t)(64 / es) * (int64_t)(64 / es);
    }
    for (int i = 0; i < g->nbuffers; i++) {
        state_view *bv = &P->bufs[i];
        const kiln_val *v = &g->vals[g->buffer_vals[i]];
        view_of(bv, v);
        bv->dtype = v->dtype == KILN_F32 ? dtype : v->dtype;
        if (!(bv->data = kiln_calloc((size_t)(bv->numel ? bv->numel : 1) * kiln_dtype_size(bv->dtype)))) goto oom;
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
    for (int i = 0; P->bufs && i < P->nbuf; i++) kiln_free(P->bufs[i].data);
    free(P->views);
    free(P->bufs);
    free(P->has_grad);
    free(P);
}

static void put(void *base, kiln_dtype dt, int64_t i, double v) {
    if (dt == KILN_F32) ((float *)base)[i] = (float)v;
    else if (dt == KILN_F64) ((double *)base)[i] = v;
    else ((int64_t *)base)[i] = (int64_t)v;
}

void kiln_params_init(kiln_params *P, uint64_t seed) {
    for (int i = 0; i < P->count; i++) {
        const state_view *pv = &P->views[i];
        float bound = (float)(1.0 / sqrt((double)(pv->fan_in > 0 ? pv->fan_in : 1)));
        uint64_t key = kiln_rng_key(seed, 0x9a7a, (uint64_t)i);
        for (int64_t j = 0; j < pv->numel; j++) {
            float u = pv->init == KILN_INIT_CONST ? (float)pv->init_value : kiln_rng_uniform(key, 0, (uint64_t)j, -bound, bound);
            put(P->data, P->dtype, pv->offset + j, u);
        }
    }
    for (int i = 0; i < P->nbuf; i++)
        for (int64_t j = 0; j < P->bufs[i].numel; j++) put(P->bufs[i].data, P->bufs[i].dtype, j, P->bufs[i].init_value);
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
uint64_t kiln_params_has_grad_version(const kiln_params *P) { return P->has_grad_version; }
uint8_t *kiln_params_has_grad_mut(kiln_params *P) {
    P->has_grad_version++;
    return P->has_grad;
}

int kiln_params_buffer_count(const kiln_params *P) { return P->nbuf; }
const char *kiln_params_buffer_name(const kiln_params *P, int i) { return P->bufs[i].name; }
int kiln_params_buffer_shape(const kiln_params *P, int i, int64_t *shape) {
    memcpy(shape, P->bufs[i].shape, sizeof(int64_t) * (size_t)P->bufs[i].ndim);
    return P->bufs[i].ndim;
}
kiln_dtype kiln_params_buffer_dtype(const kiln_params *P, int i) { return P->bufs[i].dtype; }
int64_t kiln_params_buffer_numel(const kiln_params *P, int i) { return P->bufs[i].numel; }
void *kiln_params_buffer_data(kiln_params *P, int i) { return P->bufs[i].data; }
int kiln_params_buffer_find(const kiln_params *P, const char *name) {
    for (int i = 0; i < P->nbuf; i++)
        if (strcmp(P->bufs[i].name, name) == 0) return i;
    return -1;
}

int kiln_params_grad_runs(const kiln_params *P, int64_t *offset, int64_t *count, int max) {
    int n = 0;
    for (int i = 0; i < P->count && n < max;) {
        if (!P->has_grad[i]) {
            i++;
            continue;
        }
        int j = i;
        while (j + 1 < P->count && P->has_grad[j + 1]) j++;
        offset[n] = P->views[i].offset;
        count[n++] = (j + 1 < P->count ? P->views[j + 1].offset : P->total) - P->views[i].offset;
        i = j + 1;
    }
    return n;
}
