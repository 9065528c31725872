/* The layout pass (the guide's channels_last), for a backend's kernel table
 * and layout tag: activations that conv-like kernels can read and write in
 * the backend's layout stay in it, so the largest tensors of a conv chain
 * (and their gradients) are never reordered. The cpu backend's is oneDNN's
 * channel-blocked nChw<B>c (B = 16 or 8, the CPU's vector of floats: channels
 * a multiple of B).
 *
 * Values that must share a layout are put in one family (union-find): a view
 * and its root, a gradient and its value, the slots a kernel ties together
 * (batch norm's input and output), all operands of an elementwise op. A
 * family goes blocked when every value in it is a 4-d f32 activation with a
 * multiple of B channels, every node touching it has a kernel that takes the
 * blocked layout in that slot (the kernel table's blocked_in/blocked_out), and
 * some kernel can write it blocked.
 *
 * Reorders only at the edges: a family that would go blocked but for a few
 * values or slots that cannot (a ResNet trunk whose option-A shortcut slices
 * and pads it, a slice's backward writing into its gradient) is cut there
 * first: a strided view reads a plain copy of its root (`contiguous`), a slot
 * that needs plain reads a plain copy or writes a plain value that a
 * `grad_copy` then reorders into the family (adding when the slot added).
 * Each cut is one reorder per run; a family is cut only when that costs
 * fewer reorders than its convolutions would make of a plain tensor
 * (kiln_kernel.reorders_plain). */
#include <stdio.h>
#include <stdlib.h>
#include "backends/internal/backend.h"
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
static int blockable(const kiln_graph *g, const kiln_layout_spec *L, kiln_value v) {
    const kiln_val *V = &g->vals[v];
    if (V->kind != KILN_VAL_ACT || V->output || V->ndim != 4 || V->dtype != KILN_F32 || V->shape[1] % L->block) return 0;
    if (V->alias_of < 0) return 1;
    const kiln_val *R = &g->vals[kiln_val_root(g, v)];
    int same = R->ndim == 4 && V->offset == R->offset;
    for (int d = 0; same && d < 4; d++) same = R->shape[d] == V->shape[d] && R->stride[d] == V->stride[d];
    return same; /* a view that reshapes or strides needs the plain layout */
}

/* the families that share a layout */
static void make_families(const kiln_graph *g, const kiln_layout_spec *L, int *up) {
    for (int v = 0; v < g->nvals; v++) up[v] = v;
    for (int v = 0; v < g->nvals; v++) {
        if (g->vals[v].alias_of >= 0) unite(up, v, g->vals[v].alias_of);
        if (g->vals[v].grad_of >= 0) unite(up, v, g->vals[v].grad_of);
    }
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead) continue;
        const kiln_kernel *k = &L->kernels[n->op];
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

/* a 4-d f32 activation with whole blocks of B channels: the root a blocked family could hold */
static int blockable_root(const kiln_graph *g, const kiln_layout_spec *L, kiln_value v) {
    const kiln_val *V = &g->vals[v];
    return V->kind == KILN_VAL_ACT && V->ndim == 4 && V->dtype == KILN_F32 && V->shape[1] % L->block == 0;
}

/* a view that cannot be blocked whose parent can: the view reads a plain copy instead */
static int cut_view(const kiln_graph *g, const kiln_layout_spec *L, kiln_value v) {
    const kiln_val *V = &g->vals[v];
    return V->alias_of >= 0 && !blockable(g, L, v) && blockable(g, L, V->alias_of) &&
           blockable_root(g, L, kiln_val_root(g, v));
}

static int takes_blocked(const kiln_layout_spec *L, const kiln_node *n, int out, int slot) {
    const kiln_kernel *k = &L->kernels[n->op];
    return (kiln_op_get(n->op)->flags & KILN_OPF_ELEMENTWISE_LAYOUT) || ((out ? k->blocked_out : k->blocked_in) & (1u << slot));
}

typedef struct {
    int *up;
    int *bad, *cuts, *prefer, *made;
} fam_stats;

/* per family: an obstacle no cut removes, the cuts it needs, the slots that
 * reorder a plain tensor themselves, whether a kernel writes it blocked */
static void tally(const kiln_graph *g, const kiln_layout_spec *L, fam_stats *F) {
    for (int v = 0; v < g->nvals; v++) {
        int f = find(F->up, v);
        if (cut_view(g, L, v)) F->cuts[f]++;
        else if (!blockable(g, L, v) && !(g->vals[v].alias_of >= 0 && blockable_root(g, L, kiln_val_root(g, v)))) F->bad[f] = 1;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead || (kiln_op_get(n->op)->flags & KILN_OPF_VIEW)) continue;
        for (int s = 0; s < n->nin + n->nout; s++) {
            int out = s >= n->nin, slot = out ? s - n->nin : s;
            kiln_value v = out ? n->out[slot] : n->in[slot];
            if (v < 0) continue;
            int f = find(F->up, v), takes = takes_blocked(L, n, out, slot);
            if (!takes && blockable(g, L, v)) F->cuts[f]++;
            if (takes && out && !(kiln_op_get(n->op)->flags & KILN_OPF_ELEMENTWISE_LAYOUT)) F->made[f] = 1;
            if (L->kernels[n->op].reorders_plain & (out ? KILN_TIE_OUT(slot) : 1u << slot)) F->prefer[f]++;
        }
    }
}

/* a plain copy of v made by `op` from `from`, run at node index `at`; the new node's index, or -1 */
static int insert_copy(kiln_graph *g, kiln_op op, kiln_value from, kiln_value to, int at) {
    int node = kiln_graph_add_node(g, op, &from, 1, &to, 1);
    if (node < 0) return -1;
    snprintf(g->nodes[node].name, sizeof g->nodes[0].name, "%.36s:reorder", g->vals[to].name);
    return kiln_graph_move_node(g, node, at);
}

static kiln_value plain_twin(kiln_graph *g, kiln_value v) {
    char name[64];
    snprintf(name, sizeof name, "%.56s:plain", g->vals[v].name);
    kiln_val V = g->vals[v];
    return kiln_graph_add_value(g, name, V.dtype, V.ndim, V.shape, V.batched, KILN_VAL_ACT);
}

/* the first node reading view v or a view of it */
static int first_reader(const kiln_graph *g, kiln_value v) {
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++)
            for (kiln_value u = g->nodes[i].in[k]; u >= 0; u = g->vals[u].alias_of)
                if (u == v) return i;
    return -1;
}

/* the chosen families once their views are cut: those that still hold a
 * value of a chosen family (in[v]) and nothing that cannot be blocked (a
 * view's gradient goes with the view to the plain side) */
static void rechoose(const kiln_graph *g, const kiln_layout_spec *L, int nv, const uint8_t *in, int *up, uint8_t *ch) {
    make_families(g, L, up);
    for (int v = 0; v < nv; v++) ch[v] = 0;
    for (int v = 0; v < nv; v++)
        if (in[v]) ch[find(up, v)] = 1;
    for (int v = 0; v < nv; v++)
        if (!blockable(g, L, v)) ch[find(up, v)] = 0;
}

/* the cuts of the chosen families (ch[family]); 0 or -1 */
static int cut(kiln_graph *g, const kiln_layout_spec *L, int *up, uint8_t *ch) {
    int nv = g->nvals;
    uint8_t *in = malloc((size_t)nv);
    if (!in) return -1;
    for (int v = 0; v < nv; v++) in[v] = ch[find(up, v)];
    for (kiln_value v = 0; v < nv; v++) { /* views: re-rooted on a plain copy made before their first reader */
        if (!in[v] || !cut_view(g, L, v)) continue;
        int at = first_reader(g, v);
        kiln_value root = kiln_val_root(g, v), copy = at < 0 ? 0 : plain_twin(g, root);
        if (at < 0) continue;
        if (copy < 0 || insert_copy(g, KILN_OP_CONTIGUOUS, root, copy, at) < 0) {
            free(in);
            return -1;
        }
        g->vals[v].alias_of = copy;
    }
    rechoose(g, L, nv, in, up, ch);
    free(in);
    for (int i = 0; i < g->nnodes; i++) {
        kiln_node *n = &g->nodes[i];
        if (n->dead || (kiln_op_get(n->op)->flags & KILN_OPF_VIEW)) continue;
        for (int s = 0; s < n->nin + n->nout; s++) {
            int out = s >= n->nin, slot = out ? s - n->nin : s;
            kiln_value v = out ? n->out[slot] : n->in[slot];
            if (v < 0 || v >= nv || !ch[find(up, v)] || takes_blocked(L, n, out, slot) || !blockable(g, L, v)) continue;
            kiln_value t = plain_twin(g, v);
            if (t < 0) return -1;
            if (out) { /* the node writes a plain value; a grad_copy reorders it in, adding if the node added */
                int acc = n->acc[slot], c;
                n->out[slot] = t;
                n->acc[slot] = 0;
                if ((c = insert_copy(g, KILN_OP_GRAD_COPY, t, v, i + 1)) < 0) return -1;
                g->nodes[c].acc[0] = (uint8_t)acc;
            } else { /* the node reads a plain copy made just before it */
                n->in[slot] = t;
                if (insert_copy(g, KILN_OP_CONTIGUOUS, v, t, i) < 0) return -1;
                i++;
            }
            n = &g->nodes[i];
        }
    }
    return 0;
}

/* families worth cutting: no other obstacle, written blocked, fewer cuts than the reorders saved */
static int plan_cuts(kiln_graph *g, const kiln_layout_spec *L) {
    int nv = g->nvals;
    /* up and ch have room for the copies the view cuts add (one per view at most) */
    int *mem = calloc((size_t)nv * 6, sizeof *mem);
    uint8_t *ch = calloc((size_t)nv * 2, 1);
    if (!mem || !ch) {
        free(mem);
        free(ch);
        return -1;
    }
    fam_stats F = {mem, mem + 2 * nv, mem + 3 * nv, mem + 4 * nv, mem + 5 * nv};
    make_families(g, L, F.up);
    tally(g, L, &F);
    int any = 0;
    for (int f = 0; f < nv; f++) any |= ch[f] = !F.bad[f] && F.made[f] && F.cuts[f] > 0 && F.cuts[f] < F.prefer[f];
    int rc = any ? cut(g, L, F.up, ch) : 0;
    free(mem);
    free(ch);
    return rc;
}

int kiln_pass_layout(kiln_graph *g, const kiln_layout_spec *L) {
    if (plan_cuts(g, L) < 0) return -1;
    int nv = g->nvals;
    int *up = malloc((size_t)nv * sizeof *up);
    uint8_t *ok = malloc((size_t)nv), *made = calloc((size_t)nv, 1);
    if (!up || !ok || !made) {
        free(up);
        free(ok);
        free(made);
        return -1;
    }
    make_families(g, L, up);
    for (int v = 0; v < nv; v++) ok[v] = 1;
    for (int v = 0; v < nv; v++)
        if (!blockable(g, L, v)) ok[find(up, v)] = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        const kiln_op_def *d = kiln_op_get(n->op);
        if (n->dead || (d->flags & KILN_OPF_VIEW)) continue;
        const kiln_kernel *k = &L->kernels[n->op];
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
            g->vals[v].layout = L->tag;
            moved++;
        }
    }
    free(up);
    free(ok);
    free(made);
    return moved;
}
