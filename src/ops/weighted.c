/* The backward rule shared by the weighted layers y = f(x, w) (+ b), conv2d
 * and linear: a backward-data node for dL/dx when x needs it, and one
 * backward-weight node writing dL/dw and dL/db together; and their cost.
 * weight_first (linear, matmul) emits backward-weights first where x and y
 * have one shape, so dy's last reader is backward-data and a backend may
 * write dx over it (the cpu: src/backends/cpu/pass_in_place.c); elsewhere
 * data first, the order whose placement the planner was measured on (the
 * other order moved mnist-cnn's arena from 25.6 to 27.8 MiB, by fit alone). */
#include "graph/internal/graph.h"

static int same_shape(const kiln_val *a, const kiln_val *b) {
    int same = a->ndim == b->ndim && a->batched == b->batched;
    for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
    return same;
}

static int emit_data(kiln_ad *ad, kiln_op op, kiln_value dy, kiln_value x, kiln_value w) {
    kiln_value in[2] = {dy, w};
    return kiln_ad_needs(ad, x) ? kiln_ad_emit(ad, op, in, 2, &x, 1) : 0;
}

static int emit_weight(kiln_ad *ad, kiln_op op, kiln_value dy, kiln_value x, kiln_value w, kiln_value b) {
    kiln_value in[2] = {x, dy}, t[2] = {w, b};
    if (!kiln_ad_needs(ad, w) && !(b >= 0 && kiln_ad_needs(ad, b))) return 0;
    return kiln_ad_emit(ad, op, in, 2, t, b >= 0 ? 2 : 1);
}

int kiln_ops_weighted_backward(kiln_ad *ad, const kiln_node *f, kiln_op bwd_data, kiln_op bwd_weight, int weight_first) {
    kiln_value dy = kiln_ad_dout(ad, 0), x = f->in[0], w = f->in[1], b = f->nin > 2 ? f->in[2] : -1;
    if (weight_first && same_shape(kiln_ad_value(ad, x), kiln_ad_value(ad, f->out[0])))
        return emit_weight(ad, bwd_weight, dy, x, w, b) < 0 || emit_data(ad, bwd_data, dy, x, w) < 0 ? -1 : 0;
    return emit_data(ad, bwd_data, dy, x, w) < 0 || emit_weight(ad, bwd_weight, dy, x, w, b) < 0 ? -1 : 0;
}

/* y's every element is the dot product of one filter (w's numel / w.shape[0]
 * multiply-adds, whatever the groups); backward-data and backward-weights do
 * the same products in another order */
double kiln_ops_weighted_flops(const kiln_graph *g, const kiln_node *n, int64_t batch) {
    const kiln_node *f = n->fwd >= 0 ? &g->nodes[n->fwd] : n;
    const kiln_val *y = &g->vals[f->out[0]], *w = &g->vals[f->in[1]];
    return 2.0 * (double)kiln_val_numel(y, batch) * (double)(kiln_val_numel(w, batch) / w->shape[0]);
}
