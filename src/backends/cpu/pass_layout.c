/* The cpu backend's layout pass (the guide's channels_last, in oneDNN's
 * terms): activations that conv-like kernels can read and write in oneDNN's
 * channel-blocked nChw16c layout stay in it, so the largest tensors of a conv
 * chain (and their gradients) are never reordered.
 *
 * Values that must share a layout are put in one family (union-find): a view
 * and its root, a gradient and its value, the slots a kernel ties together
 * (batch norm's input and output), all operands of an elementwise op. A
 * family goes blocked when every value in it is a 4-d f32 activation with a
 * multiple of 16 channels, every node touching it has a kernel that takes the
 * blocked layout in that slot (the kernel table's blocked_in/blocked_out), and
 * some kernel can write it blocked. */
#include <stdlib.h>
#include "backends/cpu/internal/cpu.h"
#include "graph/internal/graph.h"

static int find(int *up, int v) {
    while (up[v] != v) v = up[v] = up[up[v]];
    return v;
}

static void unite(int *up, int a, int b) {
    a = find(up, a);
    b = find(up, b);
    if (a != b) up[a < b ? b : a] = a < b ? a : b;
}

/* a value that could live blocked on its own: a 4-d f32 activation root-shaped */
static int blockable(const kiln_graph *g, kiln_value v) {
    const kiln_val *V = &g->vals[v];
    if (V->kind != KILN_VAL_ACT || V->ndim != 4 || V->dtype != KILN_F32 || V->shape[1] % 16) return 0;
    if (V->alias_of < 0) return 1;
    const kiln_val *R = &g->vals[kiln_val_root(g, v)];
    int same = R->ndim == 4 && V->offset == R->offset;
    for (int d = 0; same && d < 4; d++) same = R->shape[d] == V->shape[d] && R->stride[d] == V->stride[d];
    return same; /* a view that reshapes or strides needs the plain layout */
}

/* the families that share a layout */
static void make_families(const kiln_graph *g, int *up) {
    for (int v = 0; v < g->nvals; v++) up[v] = v;
    for (int v = 0; v < g->nvals; v++) {
        if (g->vals[v].alias_of >= 0) unite(up, v, g->vals[v].alias_of);
        if (g->vals[v].grad_of >= 0) unite(up, v, g->vals[v].grad_of);
    }
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead) continue;
        const kiln_kernel *k = &kiln_cpu_kernels[n->op];
        int all = (kiln_op_get(n->op)->flags & KILN_OPF_ELEMENTWISE_LAYOUT) != 0, first = -1;
        for (int s = 0; s < n->nin + n->nout; s++) {
            int out = s >= n->nin, slot = out ? s - n->nin : s;
            kiln_value v = out ? n->out[slot] : n->in[slot];
            if (v < 0 || !(all || (k->tied & (out ? KILN_TIE_OUT(slot) : 1u << slot)))) continue;
            if (first < 0) first = v;
            else unite(up, first, v);
        }
    }
}

int kiln_cpu_pass_layout(kiln_graph *g) {
    int nv = g->nvals;
    int *up = malloc((size_t)nv * sizeof *up);
    uint8_t *ok = malloc((size_t)nv), *made = calloc((size_t)nv, 1);
    if (!up || !ok || !made) {
        free(up);
        free(ok);
        free(made);
        return -1;
    }
    make_families(g, up);
    for (int v = 0; v < nv; v++) ok[v] = 1;
    for (int v = 0; v < nv; v++)
        if (!blockable(g, v)) ok[find(up, v)] = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        const kiln_op_def *d = kiln_op_get(n->op);
        if (n->dead || (d->flags & KILN_OPF_VIEW)) continue;
        const kiln_kernel *k = &kiln_cpu_kernels[n->op];
        int all = (d->flags & KILN_OPF_ELEMENTWISE_LAYOUT) != 0;
        for (int s = 0; s < n->nin + n->nout; s++) {
            int out = s >= n->nin, slot = out ? s - n->nin : s;
            kiln_value v = out ? n->out[slot] : n->in[slot];
            if (v < 0) continue;
            int takes = all || ((out ? k->blocked_out : k->blocked_in) & (1u << slot));
            if (!takes) ok[find(up, v)] = 0;
            else if (out && !all) made[find(up, v)] = 1; /* a kernel writes it blocked */
        }
    }
    int moved = 0;
    for (int v = 0; v < nv; v++) {
        int f = find(up, v);
        if (ok[f] && made[f]) {
            g->vals[v].layout = KILN_CPU_BLOCKED;
            moved++;
        }
    }
    free(up);
    free(ok);
    free(made);
    return moved;
}
