/* Fusion passes (the guide's "fuse pointwise operations"), asking the op
 * table which ops can fold into which:
 *   - an op with `as_epilogue` (relu) whose input is read by nothing else and
 *     made by an op that takes that epilogue (conv2d, linear: a oneDNN
 *     post-op) becomes a view of the producer's output, which the producer
 *     now writes already transformed: the activation is written once instead
 *     of written, read and written again. This runs after autodiff: relu's
 *     backward reads relu's output, which is now the same memory.
 *   - relu_bwd(y, max_pool2d_bwd(x = y, dy)) becomes one max-pool backward
 *     with a relu mask: the pool's gradient lands only on window maxima, and
 *     relu passes it iff that maximum is > 0, so one pass writes the final
 *     gradient. Likewise relu_bwd(y, mse_loss_bwd(x = y, t, dl)): one pass,
 *     and y's last reader is then the loss's backward.
 *   - batch_norm2d_bwd(x, relu_bwd(y, dy)) where y is the norm's own output with
 *     the relu epilogue becomes one batch-norm backward with a relu mask that
 *     reads dy: the mask is y's sign, recomputed from x with the forward's scale
 *     and shift (the bias joins the node as input 5), so relu's backward costs no
 *     pass of its own (a read of y and dy and a write saved, and the norm reads
 *     dy in place of relu's output). Only where the backend's kernel takes it.
 *   - relu(add(batch_norm(x), r)) (a ResNet block's end) becomes the norm with
 *     an add-and-relu epilogue, r its input 6: the norm's output is never
 *     written and read again. The norm must come after r's producer in node
 *     order (it now reads r), and its output and the sum feed nothing else;
 *     relu's output, which backward reads, is now the norm's. Runs after
 *     autodiff (the norm's backward reads x, not y). */
#include <stdlib.h>
#include "graph/internal/graph.h"

int kiln_pass_fuse_epilogues(kiln_graph *g, int nfwd) {
    int *readers = calloc((size_t)g->nvals, sizeof(int));
    if (!readers) return -1;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) readers[g->nodes[i].in[k]]++;
    int fused = 0;
    for (int i = 0; i < nfwd; i++) {
        kiln_node *r = &g->nodes[i];
        unsigned epi = kiln_op_get(r->op)->as_epilogue;
        if (!epi || epi == KILN_EPI_RELU_BWD_MASK || r->dead) continue;
        kiln_value x = r->in[0];
        if (readers[x] != 1 || g->vals[x].kind != KILN_VAL_ACT || g->vals[x].alias_of >= 0) continue;
        for (int j = i - 1; j >= 0; j--) {
            kiln_node *p = &g->nodes[j];
            if (p->nout < 1 || p->out[0] != x) continue;
            if ((kiln_op_get(p->op)->epilogues & epi) && !p->epilogue) {
                p->epilogue = (int)epi;
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

int kiln_pass_fuse_pool_relu_bwd(kiln_graph *g) {
    int *readers = kiln_graph_readers(g, NULL), *producer = kiln_graph_producers(g, NULL);
    if (!readers || !producer) {
        free(readers);
        free(producer);
        return -1;
    }
    int fused = 0;
    for (int i = 0; i < g->nnodes; i++) {
        kiln_node *r = &g->nodes[i];
        if (kiln_op_get(r->op)->as_epilogue != KILN_EPI_RELU_BWD_MASK || r->dead || r->acc[0]) continue;
        kiln_value d = r->in[1];
        int pi = producer[d];
        if (pi < 0 || readers[d] != 1) continue;
        kiln_node *m = &g->nodes[pi];
        if (!(kiln_op_get(m->op)->epilogues & KILN_EPI_RELU_BWD_MASK) || m->acc[0] || m->epilogue) continue;
        /* the mask is relu's output: the tensor the max-pool read */
        if (kiln_val_root(g, m->in[0]) != kiln_val_root(g, r->in[0])) continue;
        m->out[0] = r->out[0];
        m->epilogue = KILN_EPI_RELU_BWD_MASK;
        r->dead = 1;
        fused++;
    }
    free(readers);
    free(producer);
    return fused;
}

int kiln_pass_fuse_norm_relu_bwd(kiln_graph *g) {
    int *readers = kiln_graph_readers(g, NULL), *writers = malloc((size_t)(g->nvals ? g->nvals : 1) * sizeof(int));
    int *producer = writers ? kiln_graph_producers(g, writers) : NULL;
    int fused = -1;
    if (!readers || !writers || !producer) goto out;
    fused = 0;
    for (int i = 0; i < g->nnodes; i++) {
        kiln_node *m = &g->nodes[i];
        if (m->op != KILN_OP_BATCH_NORM2D_BWD || m->dead || m->epilogue || m->nin != 5 || m->fwd < 0) continue;
        const kiln_node *f = &g->nodes[m->fwd];
        kiln_value d = m->in[1];
        int ri = producer[d];
        if (f->op != KILN_OP_BATCH_NORM2D || f->epilogue != KILN_EPI_RELU || ri < 0 || readers[d] != 1 || writers[d] != 1)
            continue;
        kiln_node *r = &g->nodes[ri];
        /* relu's backward writing d alone, its mask the norm's own (relu-fused) output */
        if (r->op != KILN_OP_RELU_BWD || r->acc[0] || kiln_val_root(g, r->in[0]) != kiln_val_root(g, f->out[0])) continue;
        m->in[1] = r->in[1];
        m->in[5] = f->in[2]; /* the bias: the forward's shift */
        m->nin = 6;
        m->epilogue = KILN_EPI_RELU_BWD_MASK;
        r->dead = 1;
        fused++;
    }
out:
    free(readers);
    free(writers);
    free(producer);
    return fused;
}

/* node i's output 0 is an activation root that only `reader` reads and no one returns */
static int private_out(const kiln_graph *g, const int *readers, const kiln_node *n) {
    kiln_value v = n->nout > 0 ? n->out[0] : -1;
    return v >= 0 && readers[v] == 1 && g->vals[v].kind == KILN_VAL_ACT && g->vals[v].alias_of < 0 && !g->vals[v].output;
}

int kiln_pass_fuse_norm_add_relu(kiln_graph *g) {
    int *reader = malloc((size_t)(g->nvals ? g->nvals : 1) * sizeof(int)); /* each value's last reader */
    int *readers = reader ? kiln_graph_readers(g, reader) : NULL, *producer = kiln_graph_producers(g, NULL);
    int fused = -1;
    if (!readers || !producer || !reader) goto out;
    fused = 0;
    for (int i = 0; i < g->nnodes; i++) {
        kiln_node *a = &g->nodes[i];
        if (a->op != KILN_OP_ADD || a->dead || a->nin != 2 || !private_out(g, readers, a)) continue;
        kiln_node *r = &g->nodes[reader[a->out[0]]];
        if (r->op != KILN_OP_RELU || r->dead || r->in[0] != a->out[0]) continue;
        for (int k = 0; k < 2; k++) { /* the operand a norm makes, its residual made before it */
            int fi = producer[a->in[k]], ri = producer[a->in[1 - k]];
            if (fi < 0 || ri >= fi) continue;
            kiln_node *f = &g->nodes[fi];
            if (f->op != KILN_OP_BATCH_NORM2D || f->dead || f->epilogue || f->nin != 6 || !private_out(g, readers, f)) continue;
            if (kiln_val_numel(&g->vals[a->in[1 - k]], 1) != kiln_val_numel(&g->vals[f->out[0]], 1)) continue;
            f->in[6] = a->in[1 - k];
            f->nin = 7;
            f->out[0] = r->out[0];
            f->epilogue = KILN_EPI_ADD_RELU;
            a->dead = r->dead = 1;
            a->nin = r->nin = 0;
            fused++;
            break;
        }
    }
out:
    free(readers);
    free(producer);
    free(reader);
    return fused;
}
