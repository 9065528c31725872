/* Bias before a norm (the guide's "disable bias for convolutions directly
 * followed by a batch norm"): a conv2d or linear whose output nothing but a
 * batch norm over the same channels reads has a bias that does nothing.
 * Training normalises each channel with the batch's mean, which takes any
 * per-channel constant away again; the running mean learns the constant, so
 * in evaluation the two cancel as well. The bias costs a parameter, its
 * gradient and optimizer state, and an addition per element.
 *
 * Compiling a training plan warns about each such bias, naming it;
 * kiln_graph_fix_bias removes them from the graph before the parameters are
 * made (--fix-bias). The ops say what they are through the table's
 * KILN_OPF_CHANNEL_BIAS and KILN_OPF_CHANNEL_NORM flags. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "graph/internal/graph.h"

/* a view that keeps dims 0 and 1 where they were ([N, O] -> [N, O, 1, 1]):
 * every element stays in its channel */
static int keeps_channels(const kiln_val *from, const kiln_val *to) {
    return to->ndim >= 2 && from->ndim >= 2 && to->shape[0] == from->shape[0] && to->shape[1] == from->shape[1] &&
           to->stride[1] == from->stride[1] && to->offset == from->offset;
}

/* the norm node that alone reads v (through channel-keeping views), or -1 */
static int sole_norm_reader(const kiln_graph *g, const int *count, const int *last, kiln_value v) {
    while (count[v] == 1) {
        const kiln_node *n = &g->nodes[last[v]];
        unsigned flags = kiln_op_get(n->op)->flags;
        if (flags & KILN_OPF_CHANNEL_NORM) return n->in[0] == v ? last[v] : -1;
        if (!(flags & KILN_OPF_VIEW) || !keeps_channels(&g->vals[v], &g->vals[n->out[0]])) return -1;
        v = n->out[0];
    }
    return -1;
}

/* the bias parameter of node i that a following norm cancels, or -1; *norm gets the norm's node */
static kiln_value cancelled_bias(const kiln_graph *g, const int *count, const int *last, int i, int *norm) {
    const kiln_node *n = &g->nodes[i];
    if (n->dead || !(kiln_op_get(n->op)->flags & KILN_OPF_CHANNEL_BIAS) || n->nin < 3) return -1;
    const kiln_val *y = &g->vals[n->out[0]];
    /* the bias runs along dim 1 when the weight has y's rank (conv2d, 2-D linear); a
     * linear over [B, T, I] adds it along the last dim, which a norm over dim 1 keeps */
    if (g->vals[n->in[1]].ndim != y->ndim) return -1;
    kiln_value b = n->in[2];
    if (g->vals[b].kind != KILN_VAL_PARAM || count[b] != 1) return -1; /* a shared bias serves others too */
    *norm = sole_norm_reader(g, count, last, n->out[0]);
    return *norm >= 0 ? b : -1;
}

/* every cancelled bias: its value, its layer node and its norm node; the count, or -1 */
typedef struct {
    kiln_value bias;
    int layer, norm;
} cancelled;

static int find_cancelled(const kiln_graph *g, cancelled **out) {
    int *last = malloc((size_t)(g->nvals ? g->nvals : 1) * sizeof *last);
    int *count = last ? kiln_graph_readers(g, last) : NULL;
    cancelled *c = count ? malloc((size_t)(g->nnodes ? g->nnodes : 1) * sizeof *c) : NULL;
    int n = 0;
    for (int i = 0; c && i < g->nnodes; i++) {
        int norm = -1;
        kiln_value b = cancelled_bias(g, count, last, i, &norm);
        if (b >= 0) c[n++] = (cancelled){b, i, norm};
    }
    free(count);
    free(last);
    *out = c;
    return c ? n : -1;
}

/* parameter b leaves the graph's parameters: later ones move up one place */
static void drop_param(kiln_graph *g, kiln_value b) {
    int p = g->vals[b].param;
    memmove(&g->param_vals[p], &g->param_vals[p + 1], (size_t)(g->nparams - p - 1) * sizeof *g->param_vals);
    g->nparams--;
    for (int q = p; q < g->nparams; q++) g->vals[g->param_vals[q]].param = q;
    g->vals[b].kind = KILN_VAL_ACT; /* read and written by nothing: no storage */
    g->vals[b].param = -1;
}

/* appends ",name" to a growing malloc'd list; 0 or -1 */
static int list_add(char **list, const char *name) {
    size_t had = *list ? strlen(*list) : 0, n = strlen(name);
    char *s = realloc(*list, had + n + 2);
    if (!s) return -1;
    if (had) s[had++] = ',';
    memcpy(s + had, name, n + 1);
    *list = s;
    return 0;
}

void kiln_pass_warn_bias_before_norm(const kiln_graph *g) {
    cancelled *c;
    int n = find_cancelled(g, &c);
    for (int k = 0; k < n; k++)
        kiln_log(KILN_LOG_WARN, "%s: its bias '%s' does nothing: batch norm '%s' follows and subtracts every per-channel "
                 "constant; drop it from the model, or --fix-bias (kiln_graph_fix_bias) removes it",
                 g->nodes[c[k].layer].name, g->vals[c[k].bias].name, g->nodes[c[k].norm].name);
    free(c);
}

int kiln_pass_mark_cancelled_biases(const kiln_graph *g, uint8_t *marks) {
    cancelled *c;
    int n = find_cancelled(g, &c);
    for (int k = 0; k < n; k++) marks[c[k].bias] = 1;
    free(c);
    return n;
}

int kiln_graph_fix_bias(kiln_graph *g, char **removed) {
    if (removed) *removed = NULL;
    if (kiln_graph_status(g) != KILN_OK) return -1;
    cancelled *c;
    int n = find_cancelled(g, &c);
    if (n < 0) return kiln_graph_fail(g, KILN_ERR_NOMEM, "out of memory");
    char *names = NULL;
    for (int k = 0; k < n; k++)
        if (list_add(&names, g->vals[c[k].bias].name) || list_add(&g->fixed_biases, g->vals[c[k].bias].name)) {
            free(c);
            free(names);
            return kiln_graph_fail(g, KILN_ERR_NOMEM, "out of memory");
        }
    for (int k = 0; k < n; k++) {
        kiln_node *l = &g->nodes[c[k].layer];
        kiln_log(KILN_LOG_INFO, "%s: removed its bias '%s' (batch norm '%s' follows and cancels it)", l->name,
                 g->vals[c[k].bias].name, g->nodes[c[k].norm].name);
        l->nin = 2;
        l->in[2] = -1;
        drop_param(g, c[k].bias);
    }
    free(c);
    if (removed) *removed = names;
    else free(names);
    return n;
}
