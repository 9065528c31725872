/* He et al.'s option-A shortcut (resnet20's downsampling blocks) as the
 * builder writes it,
 *     v = x[:, :, ::s, ::s]       two slice views, dims 2 and 3 (either order)
 *     c = contiguous(v)           the copy pad's packed input needs
 *     y = pad(c, dim 1, before, after)
 * becomes one node y = subsample_pad(x): one pass writes y, where the chain
 * made a strided copy and then a padded copy, and backward one pass writes
 * dx, where it made pad's slice copy and the slices' zero-filled scatters.
 * The op reads and writes either layout, so the cpu layout pass keeps a
 * blocked ResNet blocked through it (the chain's slices needed plain
 * tensors: two reorders each way per shortcut). Runs before autodiff, so the
 * backward is the op's own; only where the backend has both kernels (cuda
 * runs the chain). The chain's other nodes die; results are the same bits. */
#include <stdlib.h>
#include "graph/internal/graph.h"

/* node i's slice covers all of its dim from 0 with step s (dim 2 or 3) */
static int whole_slice(const kiln_graph *g, const kiln_node *n, int *dim, int64_t *s) {
    const kiln_slice_attrs *a = &n->attr.slice;
    const kiln_val *X = &g->vals[n->in[0]];
    if (n->op != KILN_OP_SLICE || n->dead || X->ndim != 4 || (a->dim != 2 && a->dim != 3)) return 0;
    if (a->start != 0 || a->end != X->shape[a->dim]) return 0;
    *dim = a->dim;
    *s = a->step;
    return 1;
}

/* x can be read as packed NCHW: a root, or a view with a root's strides */
static int packed(const kiln_val *X) {
    if (X->ndim != 4 || X->dtype != KILN_F32) return 0;
    if (X->alias_of < 0) return 1;
    return X->offset == 0 && X->stride[3] == 1 && X->stride[2] == X->shape[3] && X->stride[1] == X->shape[2] * X->shape[3];
}

/* the pad node i's chain, rewritten when it is one; 1 when it was */
static int rewrite(kiln_graph *g, const int *readers, const int *producer, int i) {
    kiln_node *p = &g->nodes[i];
    if (p->op != KILN_OP_PAD || p->dead || p->attr.pad.dim != 1) return 0;
    kiln_value v1 = p->in[0];
    int ci = producer[v1];
    if (ci < 0 || readers[v1] != 1 || g->nodes[ci].op != KILN_OP_CONTIGUOUS || g->nodes[ci].dead) return 0;
    kiln_value v2 = g->nodes[ci].in[0];
    int s2 = producer[v2], d2, d1;
    int64_t st2, st1;
    if (s2 < 0 || readers[v2] != 1 || !whole_slice(g, &g->nodes[s2], &d2, &st2)) return 0;
    kiln_value v3 = g->nodes[s2].in[0];
    int s1 = producer[v3];
    if (s1 < 0 || readers[v3] != 1 || !whole_slice(g, &g->nodes[s1], &d1, &st1)) return 0;
    kiln_value x = g->nodes[s1].in[0];
    if (d1 == d2 || st1 != st2 || !packed(&g->vals[x])) return 0;
    kiln_attrs a = {.subsample = {st1, p->attr.pad.before, p->attr.pad.after}};
    p->op = KILN_OP_SUBSAMPLE_PAD;
    p->attr = a;
    p->in[0] = x;
    int dead[3] = {ci, s2, s1};
    for (int k = 0; k < 3; k++) {
        g->nodes[dead[k]].dead = 1;
        g->nodes[dead[k]].nin = 0; /* reads nothing: readers counted later see only the live chain */
    }
    /* the slices' views, unused now, stop being views of x: a strided view in x's
     * family would make the layout pass keep x plain */
    g->vals[v2].alias_of = g->vals[v3].alias_of = -1;
    return 1;
}

int kiln_pass_subsample_pad(kiln_graph *g) {
    int *readers = kiln_graph_readers(g, NULL), *producer = kiln_graph_producers(g, NULL);
    if (!readers || !producer) {
        free(readers);
        free(producer);
        return kiln_graph_fail(g, KILN_ERR_NOMEM, "out of memory");
    }
    int done = 0;
    for (int i = 0; i < g->nnodes; i++) done += rewrite(g, readers, producer, i);
    free(readers);
    free(producer);
    return done;
}
