/* The residual add folded into the convolution before it, in inference
 * plans (a ResNet block's conv2 -> add(shortcut), after batch norm folding):
 *     y = conv2d(x, w, b);  z = add(y, r)     becomes     z = conv2d_add(x, w, b, r)
 * which the cpu backend runs as one oneDNN convolution with a sum post-op:
 * the output starts as r and the convolution adds into it, so the sum's pass
 * over three tensors (read y and r, write z) is gone. The output may take r's
 * storage when r dies there (reuse_in), else the kernel copies r first.
 *
 * The fused node takes the add's place in the node order, not the conv's: r
 * (the shortcut branch) may be computed after the conv, and everything the
 * conv reads is ready by the add. A relu after the add then folds into the
 * fused node as its epilogue (pass_fuse.c runs next), after the sum, as
 * relu(conv + r). Only plain conv2d with a bias (every folded conv has one)
 * and an output that nothing else reads; a backend without the kernel keeps
 * the two nodes. */
#include <stdlib.h>
#include "graph/internal/graph.h"

/* node i's conv2d input of the add node (0 or 1), whose output only the add reads; -1 */
static int conv_operand(const kiln_graph *g, const int *count, const uint8_t *keep, const int *producer, int i) {
    const kiln_node *a = &g->nodes[i];
    if (a->op != KILN_OP_ADD || a->dead || a->nin != 2 || a->nout != 1 || a->acc[0]) return -1;
    for (int k = 0; k < 2; k++) {
        kiln_value y = a->in[k], r = a->in[1 - k];
        if (y == r || producer[y] < 0 || count[y] != 1 || keep[y]) continue;
        const kiln_node *c = &g->nodes[producer[y]];
        if (c->op != KILN_OP_CONV2D || c->dead || c->epilogue || c->nin != 3 || c->out[0] != y) continue;
        const kiln_val *Y = &g->vals[y], *R = &g->vals[r];
        if (Y->kind != KILN_VAL_ACT || Y->alias_of >= 0 || R->dtype != KILN_F32 || R->ndim != Y->ndim) continue;
        if (R->alias_of >= 0 && (R->offset || R->stride[0])) continue; /* a strided view: not one block to add */
        int same = R->batched == Y->batched;
        for (int d = 0; d < Y->ndim && same; d++) same = R->shape[d] == Y->shape[d];
        if (same) return k;
    }
    return -1;
}

/* the conv moves into the add's slot as conv2d_add; its own slot is left dead and empty */
static void fuse(kiln_graph *g, int i, int k, int c) {
    kiln_node add = g->nodes[i], conv = g->nodes[c];
    conv.op = KILN_OP_CONV2D_ADD;
    conv.in[3] = add.in[1 - k];
    conv.nin = 4;
    conv.out[0] = add.out[0];
    /* the output may take the residual's storage, unless the convolution also reads it (conv(x) + x) */
    kiln_value root = kiln_val_root(g, conv.in[3]);
    conv.reuse_in[0] = root != kiln_val_root(g, conv.in[0]) ? 4 : 0;
    g->nodes[i] = conv;
    kiln_node *old = &g->nodes[c];
    old->dead = 1;
    old->nin = old->nout = 0;
}

int kiln_pass_fuse_residual(kiln_graph *g, const kiln_value *outputs, int noutputs) {
    uint8_t *keep = calloc((size_t)(g->nvals ? g->nvals : 1), 1);
    int *count = kiln_graph_readers(g, NULL), *producer = kiln_graph_producers(g, NULL);
    int fused = 0;
    if (count && producer && keep) {
        for (int k = 0; k < noutputs; k++) keep[outputs[k]] = 1;
        for (int i = 0; i < g->nnodes; i++) {
            int k = conv_operand(g, count, keep, producer, i);
            if (k < 0) continue;
            fuse(g, i, k, producer[g->nodes[i].in[k]]);
            fused++;
        }
    } else {
        fused = kiln_graph_fail(g, KILN_ERR_NOMEM, "out of memory");
    }
    free(count);
    free(producer);
    free(keep);
    return fused;
}
