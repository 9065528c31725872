/* The autocast pass (mixed precision, --precision): every live node whose op
 * the table marks with bf16 operands (`bf16_in`: conv2d, linear, matmul, bmm
 * and their backward ops) gets the plan's precision. The backend's kernels
 * then read those inputs as bf16 (rounded to nearest even) and accumulate and
 * write in fp32; everything else, parameters, gradients and optimizer state
 * included, stays fp32 (the fp32 master weights are the parameters
 * themselves: each call rounds a copy). fp16 marks the same nodes (a GPU's
 * tensor cores; the trainer adds dynamic loss scaling). `auto` is left for the backend to
 * settle per node by timing both (the cpu backend, src/backends/cpu/precision.c).
 *
 * A backend may have some other ops follow (kiln_pass_autocast_follow): PyTorch's autocast runs an op on
 * neither of its lists in its input's dtype, so batch norm after a bf16 convolution writes bf16. Where the
 * backend's kernel writes so (kiln_kernel.round_out), such a node takes the plan's precision from the writer of
 * its input: its output is then rounded as the convolution's is, and the reference reproduces it. */
#include <stdlib.h>
#include <string.h>
#include "graph/internal/graph.h"

static const char *const names[] = {"fp32", "bf16", "auto", "fp16"};

int kiln_precision_parse(const char *s, kiln_precision *out) {
    for (int i = 0; s && i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (kiln_precision)i;
            return 0;
        }
    return -1;
}

const char *kiln_precision_name(int p) { return p >= 0 && p < 4 ? names[p] : "?"; }

int kiln_pass_autocast(kiln_graph *g, int precision) {
    if (precision == KILN_PRECISION_FP32) return 0;
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) {
        kiln_node *nd = &g->nodes[i];
        if (nd->dead || !kiln_op_get(nd->op)->bf16_in) continue;
        nd->precision = precision;
        n++;
    }
    return n;
}

int kiln_pass_autocast_follow(kiln_graph *g, int precision, const uint8_t *follows) {
    if (precision == KILN_PRECISION_FP32 || !follows) return 0;
    int *writer = kiln_graph_producers(g, NULL);
    if (!writer) return kiln_graph_fail(g, KILN_ERR_NOMEM, "autocast: out of memory");
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) {
        kiln_node *nd = &g->nodes[i];
        if (nd->dead || !follows[nd->op] || nd->precision != KILN_PRECISION_FP32 || nd->nin < 1 || nd->in[0] < 0) continue;
        int w = writer[kiln_val_root(g, nd->in[0])];
        if (w < 0 || g->nodes[w].precision != precision) continue;
        nd->precision = precision;
        n++;
    }
    free(writer);
    return n;
}
