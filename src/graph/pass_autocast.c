/* The autocast pass (mixed precision, --precision): every live node whose op
 * the table marks with bf16 operands (`bf16_in`: conv2d, linear, matmul, bmm
 * and their backward ops) gets the plan's precision. The backend's kernels
 * then read those inputs as bf16 (rounded to nearest even) and accumulate and
 * write in fp32; everything else, parameters, gradients and optimizer state
 * included, stays fp32 (the fp32 master weights are the parameters
 * themselves: each call rounds a copy). fp16 marks the same nodes (a GPU's
 * tensor cores; the trainer adds dynamic loss scaling). `auto` is left for the backend to
 * settle per node by timing both (the cpu backend, src/backends/cpu/precision.c). */
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
