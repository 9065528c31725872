/* Reverse-mode autodiff: walks the forward nodes in reverse and asks each
 * op's backward rule (the op table) which backward nodes to add. The first
 * contribution to a gradient creates its value and writes it (acc = 0); later
 * contributions add into the same value (acc = 1). This is the guide's
 * grad = None rule: no gradient is ever zeroed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "graph/internal/graph.h"

struct kiln_ad {
    kiln_graph *g;
    kiln_value *grad_of; /* indexed by value id; -1: no gradient yet */
    int cap;
    uint8_t *needs;      /* forward values that depend on a parameter: dL/dv is wanted */
    int *consumers;      /* number of forward nodes reading each forward value */
    int nvals0;          /* values before autodiff */
    int fwd;             /* the forward node being differentiated */
};

static int grow(kiln_ad *c) {
    if (c->g->nvals <= c->cap) return 0;
    int cap = c->g->nvals * 2;
    kiln_value *ng = realloc(c->grad_of, (size_t)cap * sizeof *ng);
    if (!ng) return -1;
    for (int i = c->cap; i < cap; i++) ng[i] = -1;
    c->grad_of = ng;
    c->cap = cap;
    return 0;
}

int kiln_ad_needs(const kiln_ad *ad, kiln_value v) { return v >= 0 && v < ad->nvals0 && ad->needs[v]; }

const kiln_val *kiln_ad_value(const kiln_ad *ad, kiln_value v) { return &ad->g->vals[v]; }

kiln_value kiln_ad_dout(const kiln_ad *ad, int k) {
    const kiln_node *f = &ad->g->nodes[ad->fwd];
    if (k >= f->nout || f->out[k] < 0 || f->out[k] >= ad->cap) return -1;
    return ad->grad_of[f->out[k]];
}

/* the value receiving a contribution to dL/dx; sets *acc */
static kiln_value grad_target(kiln_ad *c, kiln_value x, uint8_t *acc) {
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
    g->vals[d].param = X.kind == KILN_VAL_PARAM ? X.param : -1;
    g->vals[d].grad_of = x;
    c->grad_of[x] = d;
    *acc = 0;
    return d;
}

int kiln_ad_targets(const kiln_ad *ad, const kiln_node *f, int n, kiln_value *t) {
    int any = 0;
    for (int k = 0; k < n; k++) {
        t[k] = kiln_ad_needs(ad, f->in[k]) ? f->in[k] : -1;
        any += t[k] >= 0;
    }
    return any;
}

int kiln_ad_emit(kiln_ad *ad, kiln_op op, const kiln_value *in, int nin, const kiln_value *targets, int ntargets) {
    kiln_value out[KILN_OP_MAX_OUT];
    for (int k = 0; k < KILN_OP_MAX_OUT; k++) out[k] = -1;
    uint8_t acc[KILN_OP_MAX_OUT] = {0};
    for (int k = 0; k < ntargets; k++) {
        out[k] = targets[k] >= 0 ? grad_target(ad, targets[k], &acc[k]) : -1;
        if (targets[k] >= 0 && out[k] < 0) return -1;
    }
    int id = kiln_graph_add_node(ad->g, op, in, nin, out, ntargets);
    if (id < 0) return -1;
    kiln_node *n = &ad->g->nodes[id];
    const kiln_node *f = &ad->g->nodes[ad->fwd];
    for (int k = 0; k < ntargets; k++) n->acc[k] = acc[k];
    /* "conv2:bwd_data", "relu#8:bwd": which forward node this differentiates */
    const char *opn = kiln_op_name(op);
    const char *suffix = strstr(opn, "_bwd") ? strstr(opn, "_bwd") + 1 : opn;
    char fname[sizeof n->name];
    memcpy(fname, f->name, sizeof fname);
    snprintf(n->name, sizeof n->name, "%.30s:%.16s", fname, suffix);
    n->attr = f->attr;
    n->fwd = ad->fwd;
    return id;
}

kiln_value kiln_ad_view(kiln_ad *ad, kiln_op op, kiln_value v, const kiln_attrs *attr) {
    int id = kiln_graph_apply(ad->g, op, &v, 1, attr);
    if (id < 0 || grow(ad)) return -1;
    ad->g->nodes[id].fwd = ad->fwd;
    return ad->g->nodes[id].out[0];
}

int kiln_ad_flow(kiln_ad *ad, kiln_value dview, kiln_value x) {
    kiln_graph *g = ad->g;
    if (grow(ad)) return -1;
    if (ad->grad_of[x] < 0 && ad->consumers[x] == 1 && g->vals[x].kind == KILN_VAL_ACT &&
        kiln_val_contiguous(&g->vals[dview])) {
        /* the only consumer: dL/dx is a view of dL/dy, no copy */
        kiln_val *D = &g->vals[dview];
        char name[64];
        snprintf(name, sizeof name, "d(%.58s)", g->vals[x].name);
        memcpy(D->name, name, sizeof name);
        D->grad_of = x;
        ad->grad_of[x] = dview;
        return 0;
    }
    return kiln_ad_emit(ad, KILN_OP_GRAD_COPY, &dview, 1, &x, 1) < 0 ? -1 : 0;
}

static void ad_free(kiln_ad *c) {
    free(c->needs);
    free(c->consumers);
    free(c->grad_of);
}

kiln_status kiln_autodiff(kiln_graph *g, kiln_value loss) {
    if (loss < 0 || loss >= g->nvals || g->vals[loss].ndim != 0)
        return kiln_fail(KILN_ERR_INVALID_ARG, "autodiff: the loss must be a scalar value (got '%s')",
                         loss >= 0 && loss < g->nvals ? g->vals[loss].name : "none");
    const int nfwd = g->nnodes;
    kiln_ad c = {.g = g, .nvals0 = g->nvals};
    c.needs = calloc((size_t)g->nvals + 1, 1);
    c.consumers = calloc((size_t)g->nvals + 1, sizeof(int));
    if (!c.needs || !c.consumers || grow(&c)) goto oom;
    for (int v = 0; v < g->nvals; v++) c.needs[v] = g->vals[v].kind == KILN_VAL_PARAM;
    for (int i = 0; i < nfwd; i++) {
        const kiln_node *n = &g->nodes[i];
        int any = 0;
        for (int k = 0; k < n->nin; k++) {
            any |= c.needs[n->in[k]];
            c.consumers[n->in[k]]++;
        }
        for (int k = 0; k < n->nout; k++) c.needs[n->out[k]] = (uint8_t)any;
    }
    if (!c.needs[loss]) {
        ad_free(&c);
        return kiln_fail(KILN_ERR_INVALID_ARG, "autodiff: the loss '%s' does not depend on any parameter", g->vals[loss].name);
    }
    /* seed: dL/dL = 1 (or the loss scale of a micro-batch) */
    kiln_value d = kiln_graph_add_value(g, "d(loss)", KILN_F32, 0, NULL, 0, KILN_VAL_ACT);
    if (d < 0 || grow(&c)) goto oom;
    if (kiln_graph_add_node(g, KILN_OP_ONES, NULL, 0, &d, 1) < 0) goto oom;
    c.grad_of[loss] = d;

    for (int i = nfwd - 1; i >= 0; i--) {
        kiln_value y = g->nodes[i].out[0];
        const kiln_op_def *def = kiln_op_get(g->nodes[i].op);
        if (y >= c.cap || c.grad_of[y] < 0 || !def->backward) continue; /* nothing flows back through this node */
        c.fwd = i;
        const kiln_node f = g->nodes[i];
        if (def->backward(&c, &f) < 0) goto oom;
    }
    ad_free(&c);
    return g->status != KILN_OK ? kiln_graph_status(g) : KILN_OK;
oom:
    ad_free(&c);
    if (g->status != KILN_OK) return kiln_graph_status(g);
    return kiln_fail(KILN_ERR_NOMEM, "autodiff: out of memory");
}
