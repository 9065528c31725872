/* Graph builder. Every op goes through kiln_graph_apply, which asks the op
 * table for the op's arity and shape inference. Errors are sticky: the first
 * one is kept with the node's name, later calls return -1, and
 * kiln_graph_status reports it, so model code can build a whole graph and
 * check once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "graph/internal/graph.h"

kiln_graph *kiln_graph_new(void) {
    kiln_graph *g = calloc(1, sizeof(kiln_graph));
    if (g) g->cur_block = -1;
    return g;
}

void kiln_graph_free(kiln_graph *g) {
    if (!g) return;
    free(g->vals);
    free(g->nodes);
    free(g->param_vals);
    free(g->buffer_vals);
    free(g->fixed_biases);
    free(g->blocks);
    for (int i = 0; i < g->nfused; i++) free(g->fused[i]);
    free(g->fused);
    free(g);
}

kiln_fused_prog *kiln_graph_add_prog(kiln_graph *g) {
    kiln_fused_prog **np = realloc(g->fused, (size_t)(g->nfused + 1) * sizeof *np);
    if (!np) return NULL;
    g->fused = np;
    kiln_fused_prog *p = calloc(1, sizeof *p);
    if (p) g->fused[g->nfused++] = p;
    return p;
}

/* a compiled graph's fused nodes get copies of their programs */
static int clone_progs(kiln_graph *c, const kiln_graph *g) {
    for (int j = 0; j < g->nfused; j++) {
        kiln_fused_prog *p = kiln_graph_add_prog(c);
        if (!p) return -1;
        *p = *g->fused[j];
        for (int i = 0; i < c->nnodes; i++)
            if ((c->nodes[i].op == KILN_OP_FUSED || c->nodes[i].op == KILN_OP_FUSED_PLAIN) && c->nodes[i].attr.fused == g->fused[j])
                c->nodes[i].attr.fused = p;
    }
    return 0;
}

kiln_status kiln_graph_status(const kiln_graph *g) {
    if (!g) return kiln_fail(KILN_ERR_INVALID_ARG, "graph is NULL");
    if (g->status != KILN_OK) kiln_fail(g->status, "%s", g->error);
    return g->status;
}

int kiln_graph_fail(kiln_graph *g, kiln_status s, const char *fmt, ...) {
    if (g->status == KILN_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g->error, sizeof g->error, fmt, ap);
        va_end(ap);
        g->status = s;
    }
    return -1;
}

int64_t kiln_val_numel(const kiln_val *v, int64_t batch) {
    int64_t n = 1;
    for (int i = 0; i < v->ndim; i++) n *= (i == 0 && v->batched) ? batch : v->shape[i];
    return n;
}

void kiln_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride) {
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= shape[d] > 0 ? shape[d] : 1; /* the batch dimension is outermost: its size never matters */
    }
}

int kiln_val_contiguous(const kiln_val *v) {
    int64_t s = 1;
    for (int d = v->ndim - 1; d >= 0; d--) {
        int64_t n = d == 0 && v->batched ? 2 : v->shape[d]; /* the batch counts as more than one row */
        if (n != 1 && v->stride[d] != s) return 0;
        s *= v->shape[d] > 0 ? v->shape[d] : 1;
    }
    return 1;
}

int *kiln_graph_producers(const kiln_graph *g, int *writers) {
    int *producer = malloc((size_t)(g->nvals ? g->nvals : 1) * sizeof *producer);
    if (!producer) return NULL;
    for (int v = 0; v < g->nvals; v++) producer[v] = -1;
    for (int v = 0; writers && v < g->nvals; v++) writers[v] = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        for (int k = 0; k < n->nout && !n->dead; k++) {
            if (n->out[k] < 0) continue; /* an optional output not produced */
            if (producer[n->out[k]] < 0) producer[n->out[k]] = i;
            if (writers) writers[n->out[k]]++;
        }
    }
    return producer;
}

int *kiln_graph_readers(const kiln_graph *g, int *last) {
    int *count = calloc((size_t)(g->nvals ? g->nvals : 1), sizeof *count);
    if (!count) return NULL;
    for (int v = 0; last && v < g->nvals; v++) last[v] = -1;
    for (int i = 0; i < g->nnodes; i++) {
        if (g->nodes[i].dead) continue;
        for (int k = 0; k < g->nodes[i].nin; k++) {
            count[g->nodes[i].in[k]]++;
            if (last) last[g->nodes[i].in[k]] = i;
        }
    }
    return count;
}

kiln_value kiln_val_root(const kiln_graph *g, kiln_value v) {
    while (g->vals[v].alias_of >= 0) v = g->vals[v].alias_of;
    return v;
}

kiln_value kiln_graph_add_value(kiln_graph *g, const char *name, kiln_dtype dtype, int ndim,
                                const int64_t *shape, int batched, kiln_val_kind kind) {
    if (g->nvals == g->cap_vals) {
        int cap = g->cap_vals ? g->cap_vals * 2 : 32;
        kiln_val *nv = realloc(g->vals, (size_t)cap * sizeof *nv);
        if (!nv) return kiln_graph_fail(g, KILN_ERR_NOMEM, "out of memory building the graph");
        g->vals = nv;
        g->cap_vals = cap;
    }
    kiln_val *v = &g->vals[g->nvals];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s", name ? name : "");
    v->dtype = dtype;
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++) v->shape[i] = shape[i];
    v->batched = batched;
    if (batched) v->shape[0] = KILN_BATCH;
    kiln_contiguous_strides(ndim, v->shape, v->stride);
    v->kind = kind;
    v->param = -1;
    v->alias_of = -1;
    v->grad_of = -1;
    return g->nvals++;
}

int kiln_graph_add_node(kiln_graph *g, kiln_op op, const kiln_value *in, int nin, const kiln_value *out, int nout) {
    if (g->nnodes == g->cap_nodes) {
        int cap = g->cap_nodes ? g->cap_nodes * 2 : 32;
        kiln_node *nn = realloc(g->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return kiln_graph_fail(g, KILN_ERR_NOMEM, "out of memory building the graph");
        g->nodes = nn;
        g->cap_nodes = cap;
    }
    kiln_node *n = &g->nodes[g->nnodes];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->nin = nin;
    n->nout = nout;
    for (int i = 0; i < nin; i++) n->in[i] = in[i];
    for (int i = 0; i < nout; i++) n->out[i] = out[i];
    n->fwd = -1;
    n->block = g->cur_block;
    n->recompute_of = -1;
    snprintf(n->name, sizeof n->name, "%s#%d", kiln_op_name(op), g->nnodes);
    return g->nnodes++;
}

int kiln_graph_move_node(kiln_graph *g, int node, int at) {
    if (node != g->nnodes - 1 || at < 0 || at > node) return -1;
    kiln_node n = g->nodes[node];
    memmove(&g->nodes[at + 1], &g->nodes[at], (size_t)(node - at) * sizeof n);
    g->nodes[at] = n;
    for (int i = 0; i < g->nnodes; i++) {
        if (g->nodes[i].fwd >= at) g->nodes[i].fwd++;
        if (g->nodes[i].recompute_of >= at) g->nodes[i].recompute_of++;
    }
    return at;
}

static void *dup_array(const void *p, int n, size_t size) {
    void *c = malloc((size_t)(n > 0 ? n : 1) * size);
    if (c && n > 0) memcpy(c, p, (size_t)n * size);
    return c;
}

kiln_graph *kiln_graph_clone(const kiln_graph *g) {
    kiln_graph *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    *c = *g;
    c->fused = NULL; /* copied below */
    c->nfused = 0;
    c->vals = dup_array(g->vals, g->nvals, sizeof *g->vals);
    c->nodes = dup_array(g->nodes, g->nnodes, sizeof *g->nodes);
    c->param_vals = dup_array(g->param_vals, g->nparams, sizeof *g->param_vals);
    c->buffer_vals = dup_array(g->buffer_vals, g->nbuffers, sizeof *g->buffer_vals);
    c->fixed_biases = g->fixed_biases ? strdup(g->fixed_biases) : NULL;
    c->blocks = dup_array(g->blocks, g->nblocks, sizeof *g->blocks);
    c->cap_vals = g->nvals;
    c->cap_nodes = g->nnodes;
    int progs = c->nodes ? clone_progs(c, g) : -1;
    if (!c->vals || !c->nodes || !c->param_vals || !c->buffer_vals || (g->fixed_biases && !c->fixed_biases) || !c->blocks ||
        progs < 0) {
        kiln_graph_free(c);
        return NULL;
    }
    return c;
}

void kiln_graph_block_begin(kiln_graph *g, const char *name) {
    if (!g || g->status != KILN_OK) return;
    if (g->cur_block >= 0) {
        kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "block '%s' begun inside block '%s' (blocks do not nest)", name ? name : "",
                        g->blocks[g->cur_block].name);
        return;
    }
    kiln_block_name *nb = realloc(g->blocks, (size_t)(g->nblocks + 1) * sizeof *nb);
    if (!nb) {
        kiln_graph_fail(g, KILN_ERR_NOMEM, "out of memory building the graph");
        return;
    }
    g->blocks = nb;
    snprintf(nb[g->nblocks].name, sizeof nb->name, "%s", name ? name : "");
    g->cur_block = g->nblocks++;
}

void kiln_graph_block_end(kiln_graph *g) {
    if (!g || g->status != KILN_OK) return;
    if (g->cur_block < 0) {
        kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "kiln_graph_block_end without a block begun");
        return;
    }
    g->cur_block = -1;
}

/* conv/linear/norm nodes take their layer's name from the weight ("conv2.weight" -> "conv2"),
 * so plans, profiles and messages speak the model's language */
static void name_after_weight(kiln_graph *g, int node, kiln_value w) {
    const char *wn = g->vals[w].name;
    const char *dot = strrchr(wn, '.');
    if (g->vals[w].kind != KILN_VAL_PARAM || !dot || strcmp(dot, ".weight") != 0 || dot == wn) return;
    kiln_node *n = &g->nodes[node];
    snprintf(n->name, sizeof n->name, "%.*s", (int)(dot - wn) < 40 ? (int)(dot - wn) : 40, wn);
}

static kiln_value make_output(kiln_graph *g, int node, int k, const kiln_op_def *d, const kiln_out_spec *s, kiln_value in0) {
    char name[64];
    if (k == 0) snprintf(name, sizeof name, "%s#%d", d->name, node);
    else snprintf(name, sizeof name, "%s#%d.%d", d->name, node, k);
    kiln_value v = kiln_graph_add_value(g, name, s->dtype, s->ndim, s->shape, s->batched, KILN_VAL_ACT);
    if (v < 0 || k > 0 || !(d->flags & KILN_OPF_VIEW)) return v;
    kiln_val *V = &g->vals[v];
    V->alias_of = in0;
    V->offset = s->offset;
    for (int i = 0; i < s->ndim; i++) V->stride[i] = s->stride[i];
    return v;
}

int kiln_graph_apply(kiln_graph *g, kiln_op op, const kiln_value *in0, int nin, const kiln_attrs *attr) {
    if (!g || g->status != KILN_OK) return -1;
    const kiln_op_def *d = kiln_op_get(op);
    if (nin < d->min_in || nin > d->max_in)
        return kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "%s#%d: %d inputs (want %d to %d)", d->name, g->nnodes, nin,
                               d->min_in, d->max_in);
    kiln_value in[KILN_OP_MAX_IN];
    for (int k = 0; k < nin; k++) {
        in[k] = in0[k];
        if (in[k] < 0 || in[k] >= g->nvals)
            return kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "%s#%d: input %d is not a value of this graph (%d)", d->name,
                                   g->nnodes, k, in[k]);
        /* a strided view reaches an op that needs packed rows through a copy */
        if (!(d->strided_in & (1u << k)) && !kiln_val_contiguous(&g->vals[in[k]])) {
            kiln_attrs none = {0};
            int c = kiln_graph_apply(g, KILN_OP_CONTIGUOUS, &in[k], 1, &none);
            if (c < 0) return -1;
            in[k] = g->nodes[c].out[0];
        }
    }
    kiln_attrs a = attr ? *attr : (kiln_attrs){0};
    kiln_infer ix = {.g = g, .op = op, .node = g->nnodes, .nin = nin, .attr = &a, .nout = d->nout};
    for (int k = 0; k < nin; k++) ix.in[k] = &g->vals[in[k]];
    if (d->infer(&ix)) return -1;
    int node = g->nnodes;
    kiln_value out[KILN_OP_MAX_OUT];
    for (int k = 0; k < d->nout; k++)
        if ((out[k] = make_output(g, node, k, d, &ix.out[k], in[0])) < 0) return -1;
    if (kiln_graph_add_node(g, op, in, nin, out, d->nout) < 0) return -1;
    g->nodes[node].attr = a;
    if ((d->flags & KILN_OPF_LAYER) && nin > 1) name_after_weight(g, node, in[1]);
    return node;
}

static kiln_value apply1(kiln_graph *g, kiln_op op, const kiln_value *in, int nin, const kiln_attrs *attr) {
    int node = kiln_graph_apply(g, op, in, nin, attr);
    return node < 0 ? -1 : g->nodes[node].out[0];
}

/* ---- inputs, parameters, buffers ---- */

kiln_value kiln_input(kiln_graph *g, const char *name, kiln_dtype dtype, int ndim, const int64_t *shape) {
    if (!g || g->status != KILN_OK) return -1;
    if (ndim < 0 || ndim > KILN_MAX_DIMS)
        return kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "input '%s': %d dims (at most %d)", name, ndim, KILN_MAX_DIMS);
    if (dtype != KILN_F32 && dtype != KILN_I32)
        return kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "input '%s': dtype %s (f32 or i32)", name, kiln_dtype_name(dtype));
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0 && !(i == 0 && shape[i] == KILN_BATCH))
            return kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "input '%s': dim %d is %lld", name, i, (long long)shape[i]);
    return kiln_graph_add_value(g, name, dtype, ndim, shape, ndim > 0 && shape[0] == KILN_BATCH, KILN_VAL_INPUT);
}

/* a named parameter or buffer: unique names, positive dims */
static kiln_value named_state(kiln_graph *g, const char *what, const char *name, kiln_dtype dtype, int ndim,
                              const int64_t *shape, kiln_val_kind kind) {
    if (!g || g->status != KILN_OK) return -1;
    if (!name || !name[0]) return kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "%s without a name", what);
    if (ndim < 0 || ndim > KILN_MAX_DIMS)
        return kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "%s '%s': %d dims (at most %d)", what, name, ndim, KILN_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0)
            return kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "%s '%s': dim %d is %lld", what, name, i, (long long)shape[i]);
    for (int p = 0; p < g->nparams + g->nbuffers; p++) {
        kiln_value o = p < g->nparams ? g->param_vals[p] : g->buffer_vals[p - g->nparams];
        if (strcmp(g->vals[o].name, name) == 0) return kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "'%s' declared twice", name);
    }
    kiln_value v = kiln_graph_add_value(g, name, dtype, ndim, shape, 0, kind);
    if (v < 0) return -1;
    int *count = kind == KILN_VAL_PARAM ? &g->nparams : &g->nbuffers;
    kiln_value **list = kind == KILN_VAL_PARAM ? &g->param_vals : &g->buffer_vals;
    kiln_value *nl = realloc(*list, (size_t)(*count + 1) * sizeof *nl);
    if (!nl) return kiln_graph_fail(g, KILN_ERR_NOMEM, "out of memory building the graph");
    *list = nl;
    g->vals[v].param = *count;
    nl[(*count)++] = v;
    return v;
}

kiln_value kiln_param(kiln_graph *g, const char *name, int ndim, const int64_t *shape, int64_t fan_in) {
    kiln_value v = named_state(g, "parameter", name, KILN_F32, ndim, shape, KILN_VAL_PARAM);
    if (v >= 0) {
        g->vals[v].init = KILN_INIT_UNIFORM_FAN_IN;
        g->vals[v].fan_in = fan_in > 0 ? fan_in : 1;
    }
    return v;
}

kiln_value kiln_param_fill(kiln_graph *g, const char *name, int ndim, const int64_t *shape, float value) {
    kiln_value v = named_state(g, "parameter", name, KILN_F32, ndim, shape, KILN_VAL_PARAM);
    if (v >= 0) {
        g->vals[v].init = KILN_INIT_CONST;
        g->vals[v].init_value = value;
    }
    return v;
}

kiln_value kiln_param_normal(kiln_graph *g, const char *name, int ndim, const int64_t *shape, float std) {
    kiln_value v = named_state(g, "parameter", name, KILN_F32, ndim, shape, KILN_VAL_PARAM);
    if (v >= 0) {
        g->vals[v].init = KILN_INIT_NORMAL;
        g->vals[v].init_value = std;
    }
    return v;
}

kiln_value kiln_buffer(kiln_graph *g, const char *name, kiln_dtype dtype, int ndim, const int64_t *shape, double value) {
    if (g && g->status == KILN_OK && dtype != KILN_F32 && dtype != KILN_I64)
        return kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "buffer '%s': dtype %s (f32 or i64)", name ? name : "",
                               kiln_dtype_name(dtype));
    kiln_value v = named_state(g, "buffer", name, dtype, ndim, shape, KILN_VAL_BUFFER);
    if (v >= 0) {
        g->vals[v].init = KILN_INIT_CONST;
        g->vals[v].init_value = value;
    }
    return v;
}

/* ---- ops ---- */

kiln_value kiln_conv2d(kiln_graph *g, kiln_value x, kiln_value w, kiln_value b, int64_t stride, int64_t pad) {
    return kiln_conv2d_ex(g, x, w, b, stride, pad, 1, 1);
}

kiln_value kiln_conv2d_ex(kiln_graph *g, kiln_value x, kiln_value w, kiln_value b, int64_t stride, int64_t pad,
                          int64_t dilation, int64_t groups) {
    kiln_value in[3] = {x, w, b};
    kiln_attrs a = {.conv = {stride, pad, dilation, groups}};
    return apply1(g, KILN_OP_CONV2D, in, b >= 0 ? 3 : 2, &a);
}

kiln_value kiln_linear(kiln_graph *g, kiln_value x, kiln_value w, kiln_value b) {
    kiln_value in[3] = {x, w, b};
    return apply1(g, KILN_OP_LINEAR, in, b >= 0 ? 3 : 2, NULL);
}

kiln_value kiln_matmul(kiln_graph *g, kiln_value x, kiln_value w, kiln_value b) {
    kiln_value in[3] = {x, w, b};
    return apply1(g, KILN_OP_MATMUL, in, b >= 0 ? 3 : 2, NULL);
}

kiln_value kiln_relu(kiln_graph *g, kiln_value x) { return apply1(g, KILN_OP_RELU, &x, 1, NULL); }

kiln_value kiln_dropout(kiln_graph *g, kiln_value x, float p) {
    kiln_attrs a = {.dropout = {p}};
    return apply1(g, KILN_OP_DROPOUT, &x, 1, &a);
}

kiln_value kiln_mse_loss(kiln_graph *g, kiln_value x, kiln_value target) {
    kiln_value in[2] = {x, target};
    return apply1(g, KILN_OP_MSE_LOSS, in, 2, NULL);
}

kiln_value kiln_log_softmax(kiln_graph *g, kiln_value x) { return apply1(g, KILN_OP_LOG_SOFTMAX, &x, 1, NULL); }

kiln_value kiln_max_pool2d(kiln_graph *g, kiln_value x, int64_t kernel, int64_t stride) {
    return kiln_max_pool2d_ex(g, x, kernel, stride, 0);
}

kiln_value kiln_max_pool2d_ex(kiln_graph *g, kiln_value x, int64_t kernel, int64_t stride, int64_t pad) {
    kiln_attrs a = {.pool = {kernel, stride, pad}};
    return apply1(g, KILN_OP_MAX_POOL2D, &x, 1, &a);
}

kiln_value kiln_reshape(kiln_graph *g, kiln_value x, int ndim, const int64_t *shape) {
    kiln_attrs a = {.reshape = {ndim, {0}}};
    for (int d = 0; d < ndim && d < KILN_MAX_DIMS; d++) a.reshape.shape[d] = shape[d];
    return apply1(g, KILN_OP_RESHAPE, &x, 1, &a);
}

kiln_value kiln_flatten(kiln_graph *g, kiln_value x, int start_dim) {
    if (!g || g->status != KILN_OK) return -1;
    if (x < 0 || x >= g->nvals)
        return kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "flatten#%d: input is not a value of this graph (%d)", g->nnodes, x);
    const kiln_val *X = &g->vals[x];
    if (start_dim < 0 || start_dim >= X->ndim)
        return kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "flatten#%d: start_dim %d of a %d-dim value", g->nnodes, start_dim, X->ndim);
    if (start_dim == 0 && X->batched)
        return kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "flatten#%d: cannot flatten the batch dimension", g->nnodes);
    int64_t shape[KILN_MAX_DIMS], rest = 1;
    for (int i = 0; i < start_dim; i++) shape[i] = X->shape[i];
    for (int i = start_dim; i < X->ndim; i++) rest *= X->shape[i];
    shape[start_dim] = rest;
    return kiln_reshape(g, x, start_dim + 1, shape);
}

kiln_value kiln_transpose(kiln_graph *g, kiln_value x, int dim0, int dim1) {
    kiln_attrs a = {.transpose = {dim0, dim1}};
    return apply1(g, KILN_OP_TRANSPOSE, &x, 1, &a);
}

kiln_value kiln_slice(kiln_graph *g, kiln_value x, int dim, int64_t start, int64_t end) {
    return kiln_slice_step(g, x, dim, start, end, 1);
}

kiln_value kiln_slice_step(kiln_graph *g, kiln_value x, int dim, int64_t start, int64_t end, int64_t step) {
    kiln_attrs a = {.slice = {dim, start, end, step}};
    return apply1(g, KILN_OP_SLICE, &x, 1, &a);
}

kiln_value kiln_pad(kiln_graph *g, kiln_value x, int dim, int64_t before, int64_t after) {
    kiln_attrs a = {.pad = {dim, before, after}};
    return apply1(g, KILN_OP_PAD, &x, 1, &a);
}

kiln_value kiln_avg_pool2d(kiln_graph *g, kiln_value x, int64_t kernel, int64_t stride, int64_t pad,
                           int count_include_pad) {
    kiln_attrs a = {.avg_pool = {.kernel = kernel, .stride = stride, .pad = pad, .count_include_pad = count_include_pad}};
    return apply1(g, KILN_OP_AVG_POOL2D, &x, 1, &a);
}

kiln_value kiln_adaptive_avg_pool2d(kiln_graph *g, kiln_value x, int64_t out_h, int64_t out_w) {
    kiln_attrs a = {.avg_pool = {.out_h = out_h, .out_w = out_w, .adaptive = 1}};
    return apply1(g, KILN_OP_ADAPTIVE_AVG_POOL2D, &x, 1, &a);
}

kiln_value kiln_contiguous(kiln_graph *g, kiln_value x) { return apply1(g, KILN_OP_CONTIGUOUS, &x, 1, NULL); }
kiln_value kiln_sum(kiln_graph *g, kiln_value x) { return apply1(g, KILN_OP_SUM, &x, 1, NULL); }

kiln_value kiln_nll_loss(kiln_graph *g, kiln_value logp, kiln_value target) {
    kiln_value in[2] = {logp, target};
    return apply1(g, KILN_OP_NLL_LOSS, in, 2, NULL);
}

kiln_value kiln_cross_entropy(kiln_graph *g, kiln_value logits, kiln_value target) {
    kiln_value in[2] = {logits, target};
    return apply1(g, KILN_OP_CROSS_ENTROPY, in, 2, NULL);
}

kiln_value kiln_cross_entropy_masked(kiln_graph *g, kiln_value logits, kiln_value target) {
    kiln_value in[2] = {logits, target};
    kiln_attrs a = {.loss = {.ignore = 1}};
    return apply1(g, KILN_OP_CROSS_ENTROPY, in, 2, &a);
}

/* an operand with fewer dims than the other is added to each of the other's rows
 * (add_bcast checks that it is the other's trailing dims; addition commutes, so it
 * goes second); same shapes stay the pointwise add */
kiln_value kiln_add(kiln_graph *g, kiln_value a, kiln_value b) {
    int ok = g && a >= 0 && b >= 0 && a < g->nvals && b < g->nvals;
    int swap = ok && g->vals[a].ndim < g->vals[b].ndim, bcast = ok && g->vals[a].ndim != g->vals[b].ndim;
    kiln_value in[2] = {swap ? b : a, swap ? a : b};
    return apply1(g, bcast ? KILN_OP_ADD_BCAST : KILN_OP_ADD, in, 2, NULL);
}

kiln_value kiln_mul(kiln_graph *g, kiln_value a, kiln_value b) {
    kiln_value in[2] = {a, b};
    return apply1(g, KILN_OP_MUL, in, 2, NULL);
}

kiln_value kiln_affine(kiln_graph *g, kiln_value x, float scale, float shift) {
    kiln_attrs a = {.affine = {scale, shift}};
    return apply1(g, KILN_OP_AFFINE, &x, 1, &a);
}

kiln_value kiln_scale(kiln_graph *g, kiln_value x, float a) { return kiln_affine(g, x, a, 0.0f); }
kiln_value kiln_add_scalar(kiln_graph *g, kiln_value x, float a) { return kiln_affine(g, x, 1.0f, a); }
kiln_value kiln_erf(kiln_graph *g, kiln_value x) { return apply1(g, KILN_OP_ERF, &x, 1, NULL); }
kiln_value kiln_tanh(kiln_graph *g, kiln_value x) { return apply1(g, KILN_OP_TANH, &x, 1, NULL); }

kiln_value kiln_batch_norm2d(kiln_graph *g, kiln_value x, kiln_value weight, kiln_value bias, kiln_value running_mean,
                             kiln_value running_var, kiln_value num_batches_tracked, float momentum, float eps) {
    kiln_value in[6] = {x, weight, bias, running_mean, running_var, num_batches_tracked};
    kiln_attrs a = {.bn = {momentum, eps, 1}};
    return apply1(g, KILN_OP_BATCH_NORM2D, in, 6, &a);
}

kiln_value kiln_bmm(kiln_graph *g, kiln_value a, kiln_value b) {
    kiln_value in[2] = {a, b};
    return apply1(g, KILN_OP_BMM, in, 2, NULL);
}

kiln_value kiln_causal_attention(kiln_graph *g, kiln_value q, kiln_value k, kiln_value v, int heads) {
    kiln_value in[3] = {q, k, v};
    for (int i = 0; i < 3 && g && g->status == KILN_OK; i++) { /* strided rows are fine, strided columns get a copy */
        const kiln_val *V = in[i] >= 0 && in[i] < g->nvals ? &g->vals[in[i]] : NULL;
        if (V && V->ndim == 3 && V->shape[2] > 1 && V->stride[2] != 1) in[i] = kiln_contiguous(g, in[i]);
    }
    kiln_attrs a = {.attn = {heads}};
    return apply1(g, KILN_OP_CAUSAL_ATTENTION, in, 3, &a);
}

kiln_value kiln_embedding(kiln_graph *g, kiln_value idx, kiln_value weight) {
    kiln_value in[2] = {idx, weight};
    return apply1(g, KILN_OP_EMBEDDING, in, 2, NULL);
}

kiln_value kiln_layer_norm(kiln_graph *g, kiln_value x, kiln_value w, kiln_value b, float eps) {
    kiln_value in[3] = {x, w, b};
    kiln_attrs a = {.ln = {eps}};
    return apply1(g, KILN_OP_LAYER_NORM, in, 3, &a);
}

kiln_value kiln_gelu(kiln_graph *g, kiln_value x, int tanh_form) {
    kiln_attrs a = {.gelu = {tanh_form}};
    return apply1(g, KILN_OP_GELU, &x, 1, &a);
}

kiln_value kiln_softmax(kiln_graph *g, kiln_value x) { return apply1(g, KILN_OP_SOFTMAX, &x, 1, NULL); }

int kiln_value_shape(const kiln_graph *g, kiln_value v, int64_t *shape) {
    if (!g || v < 0 || v >= g->nvals) return -1;
    for (int i = 0; i < g->vals[v].ndim; i++) shape[i] = g->vals[v].shape[i];
    return g->vals[v].ndim;
}

const char *kiln_value_name(const kiln_graph *g, kiln_value v) {
    return (g && v >= 0 && v < g->nvals) ? g->vals[v].name : "?";
}

kiln_dtype kiln_value_dtype(const kiln_graph *g, kiln_value v) {
    return (g && v >= 0 && v < g->nvals) ? g->vals[v].dtype : KILN_F32;
}
