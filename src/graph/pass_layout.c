/* Layout pass (the guide's channels_last, in oneDNN's terms): a convolution
 * output whose every reader, and whose gradient's every reader and writer,
 * can work on oneDNN's blocked nChw16c layout stays in it. Between two convs
 * and into a max-pool this removes the reorders of the largest activations
 * (and of their gradients) that plain NCHW would cost every step. */
#include <stdlib.h>
#include "graph/internal/graph.h"

/* may node n touch value slot (input k, or output k when out) in blocked layout? */
static int accepts(const kiln_node *n, int k, int out) {
    switch (n->op) {
    case KILN_OP_CONV2D: return out ? k == 0 : k == 0;            /* dst; src */
    case KILN_OP_CONV2D_BWD_WEIGHT: return !out && (k == 0 || k == 1); /* src, diff_dst */
    case KILN_OP_CONV2D_BWD_DATA: return out ? k == 0 : k == 0;   /* diff_src; diff_dst */
    case KILN_OP_MAX_POOL2D: return !out && k == 0;                /* its output stays NCHW */
    case KILN_OP_MAX_POOL2D_BWD: return out ? k == 0 : k == 0;     /* dx; x */
    case KILN_OP_RELU_BWD: return 1;                               /* elementwise: y, dy, dx alike */
    case KILN_OP_RESHAPE: return 0;                                /* handled as aliases */
    default: return 0;
    }
}

int kiln_pass_layout(kiln_graph *g) {
    int nv = g->nvals;
    /* family[v]: the conv output whose layout v must share (its aliases and gradients), or -1 */
    kiln_value *family = malloc((size_t)nv * sizeof *family);
    uint8_t *ok = malloc((size_t)nv);
    if (!family || !ok) {
        free(family);
        free(ok);
        return -1;
    }
    for (int v = 0; v < nv; v++) {
        family[v] = -1;
        ok[v] = 0;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->op != KILN_OP_CONV2D || n->dead) continue;
        kiln_value y = n->out[0];
        const kiln_val *Y = &g->vals[y];
        if (Y->kind != KILN_VAL_ACT || Y->ndim != 4 || Y->shape[1] % 16 || Y->alias_of >= 0) continue;
        family[y] = y;
        ok[y] = 1;
    }
    /* aliases and gradients join their root's family (gradients of aliases too) */
    for (int pass = 0; pass < 3; pass++)
        for (int v = 0; v < nv; v++) {
            if (family[v] >= 0) continue;
            const kiln_val *V = &g->vals[v];
            if (V->alias_of >= 0 && family[V->alias_of] >= 0) family[v] = family[V->alias_of];
            else if (V->grad_of >= 0 && family[V->grad_of] >= 0) family[v] = family[V->grad_of];
        }
    /* a family stays plain if any node touches a member in a way that needs NCHW */
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->nin; k++) {
            kiln_value f = family[n->in[k]];
            if (f < 0) continue;
            if (n->op == KILN_OP_RESHAPE) {
                /* a view keeps the family only if it has the same 4-d shape (relu folded away) */
                const kiln_val *A = &g->vals[n->out[0]], *B = &g->vals[n->in[k]];
                int same = A->ndim == B->ndim;
                for (int d = 0; same && d < A->ndim; d++) same = A->shape[d] == B->shape[d];
                if (!same) ok[f] = 0;
                continue;
            }
            if (!accepts(n, k, 0)) ok[f] = 0;
        }
        for (int k = 0; k < n->nout; k++) {
            kiln_value f = family[n->out[k]];
            if (f >= 0 && n->op != KILN_OP_RESHAPE && !accepts(n, k, 1)) ok[f] = 0;
        }
    }
    int moved = 0;
    for (int v = 0; v < nv; v++)
        if (family[v] >= 0 && ok[family[v]]) {
            g->vals[v].layout = 16;
            moved++;
        }
    free(family);
    free(ok);
    return moved;
}
