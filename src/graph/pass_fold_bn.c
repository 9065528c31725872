/* Batch norm folded into the convolution before it, in inference plans (as
 * PyTorch's fuse_conv_bn_eval does by hand). A conv2d whose output only a
 * batch norm in evaluation reads,
 *     y = conv(x, w, b);  z = bn(y; gamma, beta, running_mean, running_var)
 * becomes
 *     w', b' = bn_fold(w, gamma, beta, running_mean, running_var, b)
 *     z = conv(x, w', b')
 * bn_fold is a step of its own that runs every run: during training the
 * parameters and statistics change between evaluations, so nothing folded
 * can be kept. It costs one pass over the weights; the batch norm's pass over
 * the activations, and the activation it wrote, are gone. w' and b' live in
 * the plan's arena only until the conv has read them.
 *
 * The conv stays an ordinary conv2d node (now with a bias), so the fusion
 * pass folds a following relu into it as before, and the layout pass and the
 * autotuner see a normal convolution. The fold node takes the conv's place
 * in the node order and the conv the norm's, so no node moves. */
#include <stdio.h>
#include <stdlib.h>
#include "graph/internal/graph.h"

/* value v has no reader and is not a plan output */
static int unused(const int *count, const uint8_t *keep, kiln_value v) { return v < 0 || (!count[v] && !keep[v]); }

/* the evaluation norm node that alone reads node i's output (and can be folded into it), or -1 */
static int foldable_norm(const kiln_graph *g, const int *count, const int *last, const uint8_t *keep, int i) {
    const kiln_node *n = &g->nodes[i];
    const kiln_op_def *d = kiln_op_get(n->op);
    if (n->dead || n->epilogue || !(d->flags & KILN_OPF_CHANNEL_BIAS) || n->nout != 1) return -1;
    kiln_value y = n->out[0];
    if (g->vals[y].kind != KILN_VAL_ACT || g->vals[y].alias_of >= 0 || count[y] != 1 || keep[y]) return -1;
    int j = last[y];
    const kiln_node *m = &g->nodes[j];
    if (!(kiln_op_get(m->op)->flags & KILN_OPF_CHANNEL_NORM) || m->attr.bn.training || m->in[0] != y) return -1;
    for (int k = 1; k < m->nout; k++) /* the statistics training would save */
        if (!unused(count, keep, m->out[k])) return -1;
    return j;
}

/* node i (the layer) and node j (its norm) become fold and layer; 0 or -1 */
static int fold(kiln_graph *g, int i, int j) {
    kiln_node layer = g->nodes[i], norm = g->nodes[j];
    int has_bias = layer.nin > 2;
    kiln_value in[6] = {layer.in[1], norm.in[1], norm.in[2], norm.in[3], norm.in[4], has_bias ? layer.in[2] : -1};
    kiln_attrs a = {.bn = norm.attr.bn};
    int f = kiln_graph_apply(g, KILN_OP_BN_FOLD, in, has_bias ? 6 : 5, &a);
    if (f < 0) return -1;
    kiln_node fn = g->nodes[f];
    g->nnodes--; /* the fold node moves to the layer's place */
    snprintf(fn.name, sizeof fn.name, "%.40s:fold", norm.name);
    snprintf(g->vals[fn.out[0]].name, sizeof g->vals[0].name, "%.40s:folded_weight", layer.name);
    snprintf(g->vals[fn.out[1]].name, sizeof g->vals[0].name, "%.40s:folded_bias", layer.name);
    g->nodes[i] = fn;
    layer.nin = 3;
    layer.in[1] = fn.out[0];
    layer.in[2] = fn.out[1];
    layer.out[0] = norm.out[0];
    g->nodes[j] = layer;
    return 0;
}

int kiln_pass_fold_bn(kiln_graph *g, const kiln_value *outputs, int noutputs) {
    int *last = malloc((size_t)(g->nvals ? g->nvals : 1) * sizeof *last);
    uint8_t *keep = calloc((size_t)(g->nvals ? g->nvals : 1), 1);
    int *count = last && keep ? kiln_graph_readers(g, last) : NULL;
    int folded = 0, n = g->nnodes;
    for (int k = 0; count && k < noutputs; k++) keep[outputs[k]] = 1;
    for (int i = 0; count && i < n && folded >= 0; i++) {
        int j = foldable_norm(g, count, last, keep, i);
        if (j >= 0) folded = fold(g, i, j) ? -1 : folded + 1;
    }
    if (!count) folded = kiln_graph_fail(g, KILN_ERR_NOMEM, "out of memory");
    free(count);
    free(last);
    free(keep);
    return folded;
}
