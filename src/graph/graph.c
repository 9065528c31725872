/* Graph builder with shape inference. Errors are sticky: the first one is
 * kept with the node's name, later calls return -1, and kiln_graph_status
 * reports it, so model code can build a whole graph and check once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "graph/internal/graph.h"

static const char *op_names[KILN_OP_COUNT] = {
    "conv2d", "linear", "relu", "max_pool2d", "dropout", "reshape", "log_softmax", "nll_loss",
    "cross_entropy", "add", "mul", "ones", "conv2d_bwd_data", "conv2d_bwd_weight", "linear_bwd_data",
    "linear_bwd_weight", "relu_bwd", "max_pool2d_bwd", "dropout_bwd", "log_softmax_bwd", "nll_loss_bwd",
    "cross_entropy_bwd", "grad_copy", "mul_bwd",
};

const char *kiln_op_name(kiln_op op) { return op >= 0 && op < KILN_OP_COUNT ? op_names[op] : "?"; }

kiln_graph *kiln_graph_new(void) { return calloc(1, sizeof(kiln_graph)); }

void kiln_graph_free(kiln_graph *g) {
    if (!g) return;
    free(g->vals);
    free(g->nodes);
    free(g->param_vals);
    free(g);
}

kiln_status kiln_graph_status(const kiln_graph *g) {
    if (!g) return kiln_fail(KILN_ERR_INVALID_ARG, "graph is NULL");
    if (g->status != KILN_OK) kiln_fail(g->status, "%s", g->error);
    return g->status;
}

static kiln_value graph_error(kiln_graph *g, kiln_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static kiln_value graph_error(kiln_graph *g, kiln_status s, const char *fmt, ...) {
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

kiln_value kiln_graph_add_value(kiln_graph *g, const char *name, kiln_dtype dtype, int ndim,
                                const int64_t *shape, int batched, kiln_val_kind kind) {
    if (g->nvals == g->cap_vals) {
        int cap = g->cap_vals ? g->cap_vals * 2 : 32;
        kiln_val *nv = realloc(g->vals, (size_t)cap * sizeof *nv);
        if (!nv) return graph_error(g, KILN_ERR_NOMEM, "out of memory building the graph");
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
        if (!nn) {
            graph_error(g, KILN_ERR_NOMEM, "out of memory building the graph");
            return -1;
        }
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
    snprintf(n->name, sizeof n->name, "%s#%d", kiln_op_name(op), g->nnodes);
    return g->nnodes++;
}

kiln_graph *kiln_graph_clone(const kiln_graph *g) {
    kiln_graph *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    *c = *g;
    c->vals = malloc((size_t)(g->cap_vals ? g->cap_vals : 1) * sizeof *c->vals);
    c->nodes = malloc((size_t)(g->cap_nodes ? g->cap_nodes : 1) * sizeof *c->nodes);
    c->param_vals = malloc((size_t)(g->nparams ? g->nparams : 1) * sizeof *c->param_vals);
    if (!c->vals || !c->nodes || !c->param_vals) {
        kiln_graph_free(c);
        return NULL;
    }
    memcpy(c->vals, g->vals, (size_t)g->nvals * sizeof *c->vals);
    memcpy(c->nodes, g->nodes, (size_t)g->nnodes * sizeof *c->nodes);
    memcpy(c->param_vals, g->param_vals, (size_t)g->nparams * sizeof *c->param_vals);
    return c;
}

/* ---- validation helpers ---- */

static int valid(kiln_graph *g, kiln_value v, const char *op, const char *what) {
    if (g->status != KILN_OK) return 0;
    if (v < 0 || v >= g->nvals) {
        graph_error(g, KILN_ERR_INVALID_ARG, "%s#%d: %s is not a value of this graph (%d)", op, g->nnodes, what, v);
        return 0;
    }
    return 1;
}

static const char *shp(const kiln_val *v, char *buf) {
    return kiln_shape_str(v->ndim, v->shape, buf, 96);
}

static kiln_value emit1(kiln_graph *g, kiln_op op, const kiln_value *in, int nin, kiln_dtype dt, int ndim,
                        const int64_t *shape, int batched) {
    char name[48];
    snprintf(name, sizeof name, "%s#%d", kiln_op_name(op), g->nnodes);
    kiln_value out = kiln_graph_add_value(g, name, dt, ndim, shape, batched, KILN_VAL_ACT);
    if (out < 0) return -1;
    if (kiln_graph_add_node(g, op, in, nin, &out, 1) < 0) return -1;
    return out;
}

/* conv/linear nodes take their layer's name from the weight ("conv2.weight" -> "conv2"),
 * so plans, profiles and messages speak the model's language */
static void name_after_weight(kiln_graph *g, kiln_value w) {
    const char *wn = g->vals[w].name;
    const char *dot = strrchr(wn, '.');
    if (g->vals[w].kind != KILN_VAL_PARAM || !dot || strcmp(dot, ".weight") != 0 || dot == wn) return;
    kiln_node *n = &g->nodes[g->nnodes - 1];
    snprintf(n->name, sizeof n->name, "%.*s", (int)(dot - wn) < 40 ? (int)(dot - wn) : 40, wn);
}

/* ---- public builder ---- */

kiln_value kiln_input(kiln_graph *g, const char *name, kiln_dtype dtype, int ndim, const int64_t *shape) {
    if (!g || g->status != KILN_OK) return -1;
    if (ndim < 0 || ndim > KILN_MAX_DIMS)
        return graph_error(g, KILN_ERR_INVALID_ARG, "input '%s': %d dims (at most %d)", name, ndim, KILN_MAX_DIMS);
    if (dtype != KILN_F32 && dtype != KILN_I32)
        return graph_error(g, KILN_ERR_INVALID_ARG, "input '%s': dtype %s (f32 or i32)", name, kiln_dtype_name(dtype));
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0 && !(i == 0 && shape[i] == KILN_BATCH))
            return graph_error(g, KILN_ERR_INVALID_ARG, "input '%s': dim %d is %lld", name, i, (long long)shape[i]);
    return kiln_graph_add_value(g, name, dtype, ndim, shape, ndim > 0 && shape[0] == KILN_BATCH, KILN_VAL_INPUT);
}

kiln_value kiln_param(kiln_graph *g, const char *name, int ndim, const int64_t *shape, int64_t fan_in) {
    if (!g || g->status != KILN_OK) return -1;
    if (!name || !name[0]) return graph_error(g, KILN_ERR_INVALID_ARG, "parameter without a name");
    if (ndim < 0 || ndim > KILN_MAX_DIMS)
        return graph_error(g, KILN_ERR_INVALID_ARG, "parameter '%s': %d dims (at most %d)", name, ndim, KILN_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0)
            return graph_error(g, KILN_ERR_INVALID_ARG, "parameter '%s': dim %d is %lld", name, i, (long long)shape[i]);
    for (int p = 0; p < g->nparams; p++)
        if (strcmp(g->vals[g->param_vals[p]].name, name) == 0)
            return graph_error(g, KILN_ERR_INVALID_ARG, "parameter '%s' declared twice", name);
    kiln_value v = kiln_graph_add_value(g, name, KILN_F32, ndim, shape, 0, KILN_VAL_PARAM);
    if (v < 0) return -1;
    kiln_value *pv = realloc(g->param_vals, (size_t)(g->nparams + 1) * sizeof *pv);
    if (!pv) return graph_error(g, KILN_ERR_NOMEM, "out of memory building the graph");
    g->param_vals = pv;
    g->vals[v].param = g->nparams;
    g->vals[v].fan_in = fan_in > 0 ? fan_in : 1;
    g->param_vals[g->nparams++] = v;
    return v;
}

kiln_value kiln_conv2d(kiln_graph *g, kiln_value x, kiln_value w, kiln_value b, int64_t stride, int64_t pad) {
    const char *op = "conv2d";
    if (!g || !valid(g, x, op, "input") || !valid(g, w, op, "weight")) return -1;
    if (b >= 0 && !valid(g, b, op, "bias")) return -1;
    char s1[96], s2[96];
    const kiln_val *X = &g->vals[x], *W = &g->vals[w];
    if (X->ndim != 4 || W->ndim != 4 || X->shape[1] != W->shape[1] || X->dtype != KILN_F32)
        return graph_error(g, KILN_ERR_SHAPE, "conv2d#%d: input %s and weight %s do not match (want [N,C,H,W] and [K,C,R,S])",
                           g->nnodes, shp(X, s1), shp(W, s2));
    if (b >= 0 && (g->vals[b].ndim != 1 || g->vals[b].shape[0] != W->shape[0]))
        return graph_error(g, KILN_ERR_SHAPE, "conv2d#%d: bias %s does not match weight %s", g->nnodes,
                           shp(&g->vals[b], s1), shp(W, s2));
    if (stride < 1 || pad < 0)
        return graph_error(g, KILN_ERR_INVALID_ARG, "conv2d#%d: stride %lld, pad %lld", g->nnodes, (long long)stride, (long long)pad);
    int64_t oh = (X->shape[2] + 2 * pad - W->shape[2]) / stride + 1;
    int64_t ow = (X->shape[3] + 2 * pad - W->shape[3]) / stride + 1;
    if (X->shape[2] + 2 * pad < W->shape[2] || X->shape[3] + 2 * pad < W->shape[3])
        return graph_error(g, KILN_ERR_SHAPE, "conv2d#%d: kernel %s larger than padded input %s", g->nnodes,
                           shp(W, s2), shp(X, s1));
    int64_t shape[4] = {X->shape[0], W->shape[0], oh, ow};
    kiln_value in[3] = {x, w, b};
    kiln_value out = emit1(g, KILN_OP_CONV2D, in, b >= 0 ? 3 : 2, KILN_F32, 4, shape, X->batched);
    if (out >= 0) {
        g->nodes[g->nnodes - 1].iattr[0] = stride;
        g->nodes[g->nnodes - 1].iattr[1] = pad;
        name_after_weight(g, w);
    }
    return out;
}

kiln_value kiln_linear(kiln_graph *g, kiln_value x, kiln_value w, kiln_value b) {
    const char *op = "linear";
    if (!g || !valid(g, x, op, "input") || !valid(g, w, op, "weight")) return -1;
    if (b >= 0 && !valid(g, b, op, "bias")) return -1;
    char s1[96], s2[96];
    const kiln_val *X = &g->vals[x], *W = &g->vals[w];
    if (X->ndim != 2 || W->ndim != 2 || X->shape[1] != W->shape[1] || X->dtype != KILN_F32)
        return graph_error(g, KILN_ERR_SHAPE, "linear#%d: input %s and weight %s do not match (want [N,I] and [O,I])",
                           g->nnodes, shp(X, s1), shp(W, s2));
    if (b >= 0 && (g->vals[b].ndim != 1 || g->vals[b].shape[0] != W->shape[0]))
        return graph_error(g, KILN_ERR_SHAPE, "linear#%d: bias %s does not match weight %s", g->nnodes,
                           shp(&g->vals[b], s1), shp(W, s2));
    int64_t shape[2] = {X->shape[0], W->shape[0]};
    kiln_value in[3] = {x, w, b};
    kiln_value out = emit1(g, KILN_OP_LINEAR, in, b >= 0 ? 3 : 2, KILN_F32, 2, shape, X->batched);
    if (out >= 0) name_after_weight(g, w);
    return out;
}

static kiln_value unary_same(kiln_graph *g, kiln_op op, kiln_value x) {
    if (!g || !valid(g, x, kiln_op_name(op), "input")) return -1;
    const kiln_val *X = &g->vals[x];
    if (X->dtype != KILN_F32)
        return graph_error(g, KILN_ERR_INVALID_ARG, "%s#%d: input '%s' is %s, not f32", kiln_op_name(op), g->nnodes,
                           X->name, kiln_dtype_name(X->dtype));
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, X->shape, sizeof shape);
    return emit1(g, op, &x, 1, KILN_F32, X->ndim, shape, X->batched);
}

kiln_value kiln_relu(kiln_graph *g, kiln_value x) { return unary_same(g, KILN_OP_RELU, x); }

kiln_value kiln_dropout(kiln_graph *g, kiln_value x, float p) {
    if (g && g->status == KILN_OK && !(p >= 0.0f && p < 1.0f))
        return graph_error(g, KILN_ERR_INVALID_ARG, "dropout#%d: p = %g (want 0 <= p < 1)", g->nnodes, (double)p);
    kiln_value out = unary_same(g, KILN_OP_DROPOUT, x);
    if (out >= 0) g->nodes[g->nnodes - 1].fattr[0] = p;
    return out;
}

kiln_value kiln_log_softmax(kiln_graph *g, kiln_value x) {
    if (g && valid(g, x, "log_softmax", "input") && g->vals[x].ndim != 2) {
        char s[96];
        return graph_error(g, KILN_ERR_SHAPE, "log_softmax#%d: input %s (want [N,C])", g->nnodes, shp(&g->vals[x], s));
    }
    return unary_same(g, KILN_OP_LOG_SOFTMAX, x);
}

kiln_value kiln_max_pool2d(kiln_graph *g, kiln_value x, int64_t kernel, int64_t stride) {
    if (!g || !valid(g, x, "max_pool2d", "input")) return -1;
    const kiln_val *X = &g->vals[x];
    char s[96];
    if (X->ndim != 4 || kernel < 1 || stride < 1 || X->shape[2] < kernel || X->shape[3] < kernel)
        return graph_error(g, KILN_ERR_SHAPE, "max_pool2d#%d: input %s, kernel %lld, stride %lld", g->nnodes, shp(X, s),
                           (long long)kernel, (long long)stride);
    int64_t shape[4] = {X->shape[0], X->shape[1], (X->shape[2] - kernel) / stride + 1, (X->shape[3] - kernel) / stride + 1};
    kiln_value out = emit1(g, KILN_OP_MAX_POOL2D, &x, 1, KILN_F32, 4, shape, X->batched);
    if (out >= 0) {
        g->nodes[g->nnodes - 1].iattr[0] = kernel;
        g->nodes[g->nnodes - 1].iattr[1] = stride;
    }
    return out;
}

kiln_value kiln_reshape(kiln_graph *g, kiln_value x, int ndim, const int64_t *shape) {
    if (!g || !valid(g, x, "reshape", "input")) return -1;
    const kiln_val *X = &g->vals[x];
    char s1[96], s2[96];
    if (ndim < 1 || ndim > KILN_MAX_DIMS)
        return graph_error(g, KILN_ERR_SHAPE, "reshape#%d: %d dims", g->nnodes, ndim);
    int batched = shape[0] == KILN_BATCH;
    if (batched != X->batched)
        return graph_error(g, KILN_ERR_SHAPE, "reshape#%d: the batch dimension must stay first (%s to %s)", g->nnodes,
                           shp(X, s1), kiln_shape_str(ndim, shape, s2, sizeof s2));
    int64_t a = 1, b = 1;
    for (int i = batched; i < X->ndim; i++) a *= X->shape[i];
    for (int i = batched; i < ndim; i++) {
        if (shape[i] <= 0) return graph_error(g, KILN_ERR_SHAPE, "reshape#%d: dim %d is %lld", g->nnodes, i, (long long)shape[i]);
        b *= shape[i];
    }
    if (a != b)
        return graph_error(g, KILN_ERR_SHAPE, "reshape#%d: %s and %s differ in size", g->nnodes, shp(X, s1),
                           kiln_shape_str(ndim, shape, s2, sizeof s2));
    kiln_value out = emit1(g, KILN_OP_RESHAPE, &x, 1, X->dtype, ndim, shape, batched);
    if (out >= 0) g->vals[out].alias_of = x;
    return out;
}

kiln_value kiln_flatten(kiln_graph *g, kiln_value x, int start_dim) {
    if (!g || !valid(g, x, "flatten", "input")) return -1;
    const kiln_val *X = &g->vals[x];
    if (start_dim < 0 || start_dim >= X->ndim)
        return graph_error(g, KILN_ERR_INVALID_ARG, "flatten#%d: start_dim %d of a %d-dim value", g->nnodes, start_dim, X->ndim);
    int64_t shape[KILN_MAX_DIMS];
    for (int i = 0; i < start_dim; i++) shape[i] = X->shape[i];
    int64_t rest = 1;
    for (int i = start_dim; i < X->ndim; i++) rest *= X->shape[i];
    if (start_dim == 0 && X->batched)
        return graph_error(g, KILN_ERR_INVALID_ARG, "flatten#%d: cannot flatten the batch dimension", g->nnodes);
    shape[start_dim] = rest;
    return kiln_reshape(g, x, start_dim + 1, shape);
}

static kiln_value loss_op(kiln_graph *g, kiln_op op, kiln_value x, kiln_value t) {
    const char *name = kiln_op_name(op);
    if (!g || !valid(g, x, name, "input") || !valid(g, t, name, "target")) return -1;
    const kiln_val *X = &g->vals[x], *T = &g->vals[t];
    char s1[96], s2[96];
    if (X->ndim != 2 || T->ndim != 1 || T->dtype != KILN_I32 || X->batched != T->batched ||
        (!X->batched && X->shape[0] != T->shape[0]))
        return graph_error(g, KILN_ERR_SHAPE, "%s#%d: input %s and target %s (want [N,C] f32 and [N] i32)", name,
                           g->nnodes, shp(X, s1), shp(T, s2));
    kiln_value in[2] = {x, t};
    return emit1(g, op, in, 2, KILN_F32, 0, NULL, 0);
}

kiln_value kiln_nll_loss(kiln_graph *g, kiln_value logp, kiln_value target) { return loss_op(g, KILN_OP_NLL_LOSS, logp, target); }
kiln_value kiln_cross_entropy(kiln_graph *g, kiln_value logits, kiln_value target) {
    return loss_op(g, KILN_OP_CROSS_ENTROPY, logits, target);
}

static kiln_value binary(kiln_graph *g, kiln_op op, kiln_value a, kiln_value b) {
    const char *name = kiln_op_name(op);
    if (!g || !valid(g, a, name, "a") || !valid(g, b, name, "b")) return -1;
    const kiln_val *A = &g->vals[a], *B = &g->vals[b];
    char s1[96], s2[96];
    int same = A->ndim == B->ndim && A->batched == B->batched && A->dtype == KILN_F32 && B->dtype == KILN_F32;
    for (int i = 0; same && i < A->ndim; i++) same = A->shape[i] == B->shape[i];
    if (!same)
        return graph_error(g, KILN_ERR_SHAPE, "%s#%d: shapes %s and %s differ (no broadcasting)", name, g->nnodes,
                           shp(A, s1), shp(B, s2));
    kiln_value in[2] = {a, b};
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, A->shape, sizeof shape);
    return emit1(g, op, in, 2, KILN_F32, A->ndim, shape, A->batched);
}

kiln_value kiln_add(kiln_graph *g, kiln_value a, kiln_value b) { return binary(g, KILN_OP_ADD, a, b); }
kiln_value kiln_mul(kiln_graph *g, kiln_value a, kiln_value b) { return binary(g, KILN_OP_MUL, a, b); }

int kiln_value_shape(const kiln_graph *g, kiln_value v, int64_t *shape) {
    if (!g || v < 0 || v >= g->nvals) return -1;
    for (int i = 0; i < g->vals[v].ndim; i++) shape[i] = g->vals[v].shape[i];
    return g->vals[v].ndim;
}

const char *kiln_value_name(const kiln_graph *g, kiln_value v) {
    return (g && v >= 0 && v < g->nvals) ? g->vals[v].name : "?";
}
