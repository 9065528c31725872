/* Parameters live in one flat buffer, their gradients in another, with named
 * views (llm.c's layout): the optimizer is one loop over the buffer, a
 * checkpoint is a list of views, and a DDP bucket is a slice. Buffers
 * (non-trainable state such as batch norm's running statistics) are few and
 * small: each has its own aligned block and keeps its dtype (i64 counters).
 * All of it lives in a backend's memory (host memory for cpu and ref); the
 * host reads and writes it only through kiln_params_read/write, which copy. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backends/internal/backend.h"
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
    const kiln_backend *be;
    kiln_dtype dtype;
    int count, nbuf;
    state_view *views, *bufs;
    int64_t total;
    void *data, *grad;
    uint8_t *has_grad;
    uint64_t has_grad_version;
    uint8_t *cancelled; /* per parameter: a bias a batch norm cancels (a checkpoint may lack it) */
    char *removed;      /* what kiln_graph_fix_bias took out of the graph ("" if nothing) */
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

/* backend memory of `bytes`, zeroed (through a host copy when it is not host memory) */
static void *zeroed(const kiln_backend *be, size_t bytes) {
    void *p = be->alloc(bytes);
    if (!p || be->host_memory) {
        if (p) memset(p, 0, bytes);
        return p;
    }
    void *z = calloc(1, bytes);
    kiln_status st = z ? be->copy(p, z, bytes, 0) : KILN_ERR_NOMEM;
    free(z);
    if (st != KILN_OK) {
        be->free(p);
        return NULL;
    }
    return p;
}

/* the biases a batch norm cancels: loading a checkpoint without them gives them zero */
static int mark_cancelled(const kiln_graph *g, kiln_params *P) {
    uint8_t *marks = calloc((size_t)(g->nvals ? g->nvals : 1), 1);
    if (!marks || kiln_pass_mark_cancelled_biases(g, marks) < 0) {
        free(marks);
        return -1;
    }
    for (int i = 0; i < g->nparams; i++) P->cancelled[i] = marks[g->param_vals[i]];
    free(marks);
    return 0;
}

kiln_status kiln_params_new_on(const kiln_graph *g, const char *backend, kiln_params **out) {
    *out = NULL;
    if (kiln_graph_status(g) != KILN_OK) return kiln_graph_status(g);
    const kiln_backend *be = kiln_backend_get(backend);
    if (!be) return kiln_fail(KILN_ERR_INVALID_ARG, "parameters: unknown backend '%s' (cpu, ref%s)", backend ? backend : "",
                              kiln_backend_get("cuda") ? ", cuda" : "; cuda was not built");
    char why[192];
    if (!kiln_backend_available(be, why, sizeof why)) return kiln_fail(KILN_ERR_INVALID_ARG, "backend %s: %s", be->name, why);
    kiln_params *P = calloc(1, sizeof *P);
    if (!P) return kiln_fail(KILN_ERR_NOMEM, "parameters: out of memory");
    P->be = be;
    P->dtype = be->float_dtype;
    P->count = g->nparams;
    P->nbuf = g->nbuffers;
    P->views = calloc((size_t)(g->nparams ? g->nparams : 1), sizeof *P->views);
    P->bufs = calloc((size_t)(g->nbuffers ? g->nbuffers : 1), sizeof *P->bufs);
    P->has_grad = calloc((size_t)(g->nparams ? g->nparams : 1), 1);
    P->cancelled = calloc((size_t)(g->nparams ? g->nparams : 1), 1);
    P->removed = strdup(g->fixed_biases ? g->fixed_biases : "");
    if (!P->views || !P->bufs || !P->has_grad || !P->cancelled || !P->removed || mark_cancelled(g, P)) goto oom;
    size_t es = kiln_dtype_size(P->dtype);
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
        bv->dtype = v->dtype == KILN_F32 ? P->dtype : v->dtype;
        if (!(bv->data = zeroed(be, (size_t)(bv->numel ? bv->numel : 1) * kiln_dtype_size(bv->dtype)))) goto oom;
    }
    P->data = zeroed(be, (size_t)(P->total ? P->total : 1) * es);
    P->grad = zeroed(be, (size_t)(P->total ? P->total : 1) * es);
    if (!P->data || !P->grad) goto oom;
    *out = P;
    return KILN_OK;
oom:
    kiln_params_free(P);
    return kiln_fail(KILN_ERR_NOMEM, "parameters: out of memory");
}

kiln_status kiln_params_new(const kiln_graph *g, kiln_dtype dtype, kiln_params **out) {
    const kiln_backend *be = kiln_backend_for_dtype(dtype);
    if (!be) {
        *out = NULL;
        return kiln_fail(KILN_ERR_INVALID_ARG, "parameters: dtype %s (f32 or f64)", kiln_dtype_name(dtype));
    }
    return kiln_params_new_on(g, be->name, out);
}

void kiln_params_free(kiln_params *P) {
    if (!P) return;
    if (P->data) P->be->free(P->data);
    if (P->grad) P->be->free(P->grad);
    for (int i = 0; P->bufs && i < P->nbuf; i++)
        if (P->bufs[i].data) P->be->free(P->bufs[i].data);
    free(P->views);
    free(P->bufs);
    free(P->has_grad);
    free(P->cancelled);
    free(P->removed);
    free(P);
}

static void put(void *base, kiln_dtype dt, int64_t i, double v) {
    if (dt == KILN_F32) ((float *)base)[i] = (float)v;
    else if (dt == KILN_F64) ((double *)base)[i] = v;
    else ((int64_t *)base)[i] = (int64_t)v;
}

/* a standard normal draw for element i (Box-Muller over two uniforms of the key) */
static double normal(uint64_t key, uint64_t i) {
    double u1 = kiln_rng_uniform(key, 1, i, 0.0f, 1.0f), u2 = kiln_rng_uniform(key, 2, i, 0.0f, 1.0f);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2); /* 1 - u1 in (0, 1]: never log(0) */
}

/* values are drawn on the host and copied to the backend */
void kiln_params_init(kiln_params *P, uint64_t seed) {
    size_t es = kiln_dtype_size(P->dtype);
    char *host = calloc((size_t)(P->total ? P->total : 1), es);
    if (!host) return;
    for (int i = 0; i < P->count; i++) {
        const state_view *pv = &P->views[i];
        float bound = (float)(1.0 / sqrt((double)(pv->fan_in > 0 ? pv->fan_in : 1)));
        uint64_t key = kiln_rng_key(seed, 0x9a7a, (uint64_t)i);
        for (int64_t j = 0; j < pv->numel; j++) {
            float u = pv->init == KILN_INIT_CONST    ? (float)pv->init_value
                      : pv->init == KILN_INIT_NORMAL ? (float)(pv->init_value * normal(key, (uint64_t)j))
                                                     : kiln_rng_uniform(key, 0, (uint64_t)j, -bound, bound);
            put(host, P->dtype, pv->offset + j, u);
        }
    }
    kiln_params_write(P, host);
    free(host);
    for (int i = 0; i < P->nbuf; i++) {
        state_view *bv = &P->bufs[i];
        char *b = calloc((size_t)(bv->numel ? bv->numel : 1), kiln_dtype_size(bv->dtype));
        for (int64_t j = 0; b && j < bv->numel; j++) put(b, bv->dtype, j, bv->init_value);
        if (b) kiln_params_buffer_write(P, i, b);
        free(b);
    }
}

kiln_status kiln_params_read(const kiln_params *P, void *host) {
    return P->be->copy(host, P->data, (size_t)P->total * kiln_dtype_size(P->dtype), 0);
}
kiln_status kiln_params_grad_read(const kiln_params *P, void *host) {
    return P->be->copy(host, P->grad, (size_t)P->total * kiln_dtype_size(P->dtype), 0);
}
void kiln_params_host_allocator(const kiln_params *P, void *(**alloc)(size_t), void (**free_fn)(void *)) {
    *alloc = P->be->pinned_alloc;
    *free_fn = P->be->pinned_alloc ? P->be->pinned_free : NULL;
}
kiln_status kiln_params_write(kiln_params *P, const void *host) {
    return P->be->copy(P->data, host, (size_t)P->total * kiln_dtype_size(P->dtype), 0);
}
kiln_status kiln_params_buffer_read(const kiln_params *P, int i, void *host) {
    return P->be->copy(host, P->bufs[i].data, (size_t)P->bufs[i].numel * kiln_dtype_size(P->bufs[i].dtype), 0);
}
kiln_status kiln_params_buffer_write(kiln_params *P, int i, const void *host) {
    return P->be->copy(P->bufs[i].data, host, (size_t)P->bufs[i].numel * kiln_dtype_size(P->bufs[i].dtype), 0);
}
const char *kiln_params_backend(const kiln_params *P) { return P->be->name; }
int kiln_params_host_memory(const kiln_params *P) { return P->be->host_memory; }

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
int kiln_params_cancelled(const kiln_params *P, int i) { return P->cancelled[i]; }
const char *kiln_params_removed(const kiln_params *P) { return P->removed; }
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
