/* Reverse-mode autodiff: appends backward nodes to the graph, walking the
 * forward nodes in reverse. The first contribution to a gradient creates its
 * value and writes it (acc = 0); later contributions add into the same value
 * (acc = 1). This is the guide's grad = None rule: no gradient is ever zeroed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "graph/internal/graph.h"

typedef struct {
    kiln_graph *g;
    kiln_value *grad_of; /* indexed by value id; -1: no gradient yet */
    int cap;
    int *consumers;      /* number of forward nodes reading each value */
} ad_ctx;

static int grow(ad_ctx *c) {
    if (c->g->nvals <= c->cap) return 0;
    int cap = c->g->nvals * 2;
    kiln_value *ng = realloc(c->grad_of, (size_t)cap * sizeof *ng);
    if (!ng) return -1;
    for (int i = c->cap; i < cap; i++) ng[i] = -1;
    c->grad_of = ng;
    c->cap = cap;
    return 0;
}

/* needs[v]: v depends on a parameter, so dL/dv is wanted */
static void mark_needs(const kiln_graph *g, uint8_t *needs, int nfwd) {
    for (int v = 0; v < g->nvals; v++) needs[v] = g->vals[v].kind == KILN_VAL_PARAM;
    for (int i = 0; i < nfwd; i++) {
        const kiln_node *n = &g->nodes[i];
        int any = 0;
        for (int k = 0; k < n->nin; k++) any |= needs[n->in[k]];
        for (int k = 0; k < n->nout; k++) needs[n->out[k]] = (uint8_t)any;
    }
}

/* the value receiving a contribution to dL/dx; sets *acc */
static kiln_value grad_target(ad_ctx *c, kiln_value x, int *acc) {
    if (grow(c)) return -1;
    if (c->grad_of[x] >= 0) {
        *acc = 1;
        return c->grad_of[x];
    }
    kiln_graph *g = c->g;
    const kiln_val X = g->vals[x];
    char name[64];
    snprintf(name, sizeof name, "d(%.58s)", X.name);
    kiln_value d = kiln_graph_add_value(g, name, KILN_F32, X.ndim, X.shape, X.batched,
                                        X.kind == KILN_VAL_PARAM ? KILN_VAL_PARAM_GRAD : KILN_VAL_ACT);
    if (d < 0 || grow(c)) return -1;
    g->vals[d].param = X.param;
    g->vals[d].grad_of = x;
    c->grad_of[x] = d;
    *acc = 0;
    return d;
}

static int emit(ad_ctx *c, kiln_op op_kind, int fwd, const kiln_value *in, int nin, const kiln_value *targets,
                int ntargets) {
    kiln_value out[KILN_NODE_MAX_OUT];
    int acc[KILN_NODE_MAX_OUT];
    for (int k = 0; k < ntargets; k++) {
        out[k] = grad_target(c, targets[k], &acc[k]);
        if (out[k] < 0) return -1;
    }
    int id = kiln_graph_add_node(c->g, op_kind, in, nin, out, ntargets);
    if (id < 0) return -1;
    kiln_node *n = &c->g->nodes[id];
    const kiln_node *f = &c->g->nodes[fwd];
    for (int k = 0; k < ntargets; k++) n->acc[k] = acc[k];
    /* "conv2:bwd_data", "relu#8:bwd": which forward node this differentiates */
    const char *op = kiln_op_name(op_kind);
    const char *suffix = strstr(op, "_bwd") ? strstr(op, "_bwd") + 1 : op;
    char fname[sizeof n->name];
    memcpy(fname, f->name, sizeof fname);
    snprintf(n->name, sizeof n->name, "%.30s:%.16s", fname, suffix);
    memcpy(n->iattr, f->iattr, sizeof n->iattr);
    memcpy(n->fattr, f->fattr, sizeof n->fattr);
    n->fwd = fwd;
    return id;
}

kiln_status kiln_autodiff(kiln_graph *g, kiln_value loss) {
    if (loss < 0 || loss >= g->nvals || g->vals[loss].ndim != 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "autodiff: the loss must be a scalar value (got '%s')",
                         loss >= 0 && loss < g->nvals ? g->vals[loss].name : "none");
    const int nfwd = g->nnodes;
    ad_ctx c = {g, NULL, 0, NULL};
    uint8_t *needs = calloc((size_t)g->nvals + 1, 1);
    c.consumers = calloc((size_t)g->nvals + 1, sizeof(int));
    if (!needs || !c.consumers || grow(&c)) goto oom;
    mark_needs(g, needs, nfwd);
    if (!needs[loss]) {
        free(needs);
        free(c.consumers);
        free(c.grad_of);
        return kiln_fail(KILN_ERR_INVALID_ARG, "autodiff: the loss '%s' does not depend on any parameter", g->vals[loss].name);
    }
    for (int i = 0; i < nfwd; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) c.consumers[g->nodes[i].in[k]]++;

    /* seed: dL/dL = 1 */
    {
        kiln_value d = kiln_graph_add_value(g, "d(loss)", KILN_F32, 0, NULL, 0, KILN_VAL_ACT);
        if (d < 0 || grow(&c)) goto oom;
        if (kiln_graph_add_node(g, KILN_OP_ONES, NULL, 0, &d, 1) < 0) goto oom;
        c.grad_of[loss] = d;
    }

    for (int i = nfwd - 1; i >= 0; i--) {
        const kiln_node f = g->nodes[i];
        kiln_value y = f.out[0];
        if (y >= c.cap || c.grad_of[y] < 0) continue; /* nothing flows back through this node */
        kiln_value dy = c.grad_of[y];
        kiln_value x = f.in[0];
        int nx = f.nin > 0 && needs[x];
        int r = 0;
        switch (f.op) {
        case KILN_OP_CONV2D:
        case KILN_OP_LINEAR: {
            int conv = f.op == KILN_OP_CONV2D;
            kiln_value w = f.in[1], b = f.nin > 2 ? f.in[2] : -1;
            if (nx) {
                kiln_value in[2] = {dy, w};
                r = emit(&c, conv ? KILN_OP_CONV2D_BWD_DATA : KILN_OP_LINEAR_BWD_DATA, i, in, 2, &x, 1);
            }
            if (r >= 0 && (needs[w] || (b >= 0 && needs[b]))) {
                kiln_value in[2] = {x, dy}, t[2] = {w, b};
                r = emit(&c, conv ? KILN_OP_CONV2D_BWD_WEIGHT : KILN_OP_LINEAR_BWD_WEIGHT, i, in, 2, t, b >= 0 ? 2 : 1);
            }
            break;
        }
        case KILN_OP_RELU:
        case KILN_OP_LOG_SOFTMAX:
            if (nx) {
                kiln_value in[2] = {y, dy};
                r = emit(&c, f.op == KILN_OP_RELU ? KILN_OP_RELU_BWD : KILN_OP_LOG_SOFTMAX_BWD, i, in, 2, &x, 1);
            }
            break;
        case KILN_OP_MAX_POOL2D:
            if (nx) {
                kiln_value in[2] = {x, dy};
                r = emit(&c, KILN_OP_MAX_POOL2D_BWD, i, in, 2, &x, 1);
            }
            break;
        case KILN_OP_DROPOUT:
            if (nx) r = emit(&c, KILN_OP_DROPOUT_BWD, i, &dy, 1, &x, 1);
            break;
        case KILN_OP_RESHAPE:
            if (!nx) break;
            if (grow(&c)) goto oom;
            if (c.grad_of[x] < 0 && c.consumers[x] == 1 && g->vals[x].kind == KILN_VAL_ACT) {
                /* the only consumer: dL/dx is a view of dL/dy, no copy */
                int64_t shape[KILN_MAX_DIMS];
                memcpy(shape, g->vals[x].shape, sizeof shape);
                char name[64];
                snprintf(name, sizeof name, "d(%.58s)", g->vals[x].name);
                kiln_value d = kiln_graph_add_value(g, name, KILN_F32, g->vals[x].ndim, shape, g->vals[x].batched, KILN_VAL_ACT);
                if (d < 0 || grow(&c)) goto oom;
                g->vals[d].alias_of = dy;
                g->vals[d].grad_of = x;
                int id = kiln_graph_add_node(g, KILN_OP_RESHAPE, &dy, 1, &d, 1);
                if (id < 0) goto oom;
                g->nodes[id].fwd = i;
                c.grad_of[x] = d;
            } else {
                r = emit(&c, KILN_OP_GRAD_COPY, i, &dy, 1, &x, 1);
            }
            break;
        case KILN_OP_NLL_LOSS:
            if (nx) {
                kiln_value in[2] = {f.in[1], dy};
                r = emit(&c, KILN_OP_NLL_LOSS_BWD, i, in, 2, &x, 1);
            }
            break;
        case KILN_OP_CROSS_ENTROPY:
            if (nx) {
                kiln_value in[3] = {x, f.in[1], dy};
                r = emit(&c, KILN_OP_CROSS_ENTROPY_BWD, i, in, 3, &x, 1);
            }
            break;
        case KILN_OP_ADD:
            if (nx) r = emit(&c, KILN_OP_GRAD_COPY, i, &dy, 1, &x, 1);
            if (r >= 0 && needs[f.in[1]]) r = emit(&c, KILN_OP_GRAD_COPY, i, &dy, 1, &f.in[1], 1);
            break;
        case KILN_OP_MUL:
            if (nx) {
                kiln_value in[2] = {dy, f.in[1]};
                r = emit(&c, KILN_OP_MUL_BWD, i, in, 2, &x, 1);
            }
            if (r >= 0 && needs[f.in[1]]) {
                kiln_value in[2] = {dy, f.in[0]};
                r = emit(&c, KILN_OP_MUL_BWD, i, in, 2, &f.in[1], 1);
            }
            break;
        default:
            break;
        }
        if (r < 0) goto oom;
    }
    free(needs);
    free(c.consumers);
    free(c.grad_of);
    return g->status != KILN_OK ? kiln_graph_status(g) : KILN_OK;
oom:
    free(needs);
    free(c.consumers);
    free(c.grad_of);
    if (g->status != KILN_OK) return kiln_graph_status(g);
    return kiln_fail(KILN_ERR_NOMEM, "autodiff: out of memory");
}
