/* Fusion pass: relu after conv2d or linear becomes a oneDNN post-op, so the
 * activation is written once instead of written, read and written again (the
 * guide's "fuse pointwise operations"). Runs after autodiff: relu's backward
 * reads relu's output, which is now the same memory as the fused output. */
#include <stdlib.h>
#include "graph/internal/graph.h"

int kiln_pass_fuse_relu(kiln_graph *g, int nfwd) {
    int *readers = calloc((size_t)g->nvals, sizeof(int));
    if (!readers) return -1;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) readers[g->nodes[i].in[k]]++;
    int fused = 0;
    for (int i = 0; i < nfwd; i++) {
        kiln_node *r = &g->nodes[i];
        if (r->op != KILN_OP_RELU) continue;
        kiln_value x = r->in[0];
        if (readers[x] != 1 || g->vals[x].kind != KILN_VAL_ACT || g->vals[x].alias_of >= 0) continue;
        for (int j = i - 1; j >= 0; j--) {
            kiln_node *p = &g->nodes[j];
            if (p->nout < 1 || p->out[0] != x) continue;
            if ((p->op == KILN_OP_CONV2D || p->op == KILN_OP_LINEAR) && !p->fuse_relu) {
                p->fuse_relu = 1;
                r->op = KILN_OP_RESHAPE; /* now a view of the fused output */
                g->vals[r->out[0]].alias_of = x;
                fused++;
            }
            break;
        }
    }
    free(readers);
    return fused;
}
