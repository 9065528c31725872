/* The half-storage pass (--precision bf16 or fp16 on a backend whose kernels
 * read and write 16-bit tensors): an activation read only where it would be
 * rounded to the plan's 16-bit format anyway is stored in that format by its
 * writer. Each reader is a matmul-class node the autocast pass marked with the
 * plan's precision, reading the value in a slot its kernel takes as 16 bits
 * (for nothing else but what reads it as rounded: the cuda backend's
 * backward-weight sums dy for a bias gradient as the product reads it, so
 * that dy qualifies). The writer rounds
 * to nearest even, as the reader's own rounding would: the same numbers, half
 * the bytes written and read, and no conversion before the product. In GPT-2:
 * the layer norms' and GELU's outputs, the logits' gradient (3.3 GB at batch
 * 16 in fp32), GELU's input gradient and those of the c_proj outputs.
 *
 * A value its writer rounds to the plan's format itself (the backend's
 * round_out: cuDNN's 16-bit convolutions, and the norms, adds and relus after them: a fused group's own)
 * holds 16-bit numbers already: it qualifies when every reader, of any
 * precision, has a 16-bit slot for it (reading it widened, exactly). In a
 * ResNet: each convolution's output, which only its batch norm reads, forward
 * and backward; a batch norm's output (relu fused) that a convolution and
 * relu's backward read; a residual block's output (the fused add and relu), which the next block's
 * convolutions, its add and relu's backward read.
 *
 * A value qualifies when it is an arena activation (not an input, parameter,
 * gradient buffer or plan output), one live node writes all of it (not
 * accumulated, not through a view), and at least one node reads it. Its views
 * share the mark. PyTorch's autocast stores more in 16 bits (every matmul's
 * output, the gradients a residual adds to); that changes the numbers and is left for later. */
#include <stdlib.h>
#include "graph/internal/graph.h"

/* slots of a kiln_kernel-style mask: input k is bit k, output k bit 8 + k (KILN_TIE_OUT) */
#define IN_BIT(k) (1u << (k))
#define OUT_BIT(k) (1u << (8 + (k)))

static int is_view(const kiln_node *n) { return (kiln_op_get(n->op)->flags & KILN_OPF_VIEW) != 0; }

/* rounded[r] = 1 for every root a node of the plan's precision writes rounded to its format (round_out), holding
 * 16-bit numbers (no bias added after) */
static void rounded_by_writer(const kiln_graph *g, int precision, const unsigned *round_out, uint8_t *rounded) {
    for (int i = 0; round_out && i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead || is_view(n) || n->precision != precision) continue;
        unsigned m = kiln_node_holds_16(n, round_out[n->op]);
        for (int k = 0; k < n->nout; k++)
            if (n->out[k] >= 0 && m >> k & 1) rounded[kiln_val_root(g, n->out[k])] = 1;
    }
}

/* ok[r] = 0 for every root some node reads or writes in a way 16-bit storage would change */
static void rule_out(const kiln_graph *g, int precision, const kiln_half_slots_fn *half, const uint8_t *rounded, uint8_t *ok,
                     int *writers, int *readers) {
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead || is_view(n)) continue; /* a view reads and writes no memory */
        unsigned mask = half[n->op] ? half[n->op](n->nin, n->nout) : 0;
        for (int k = 0; k < n->nout; k++) {
            if (n->out[k] < 0) continue;
            kiln_value r = kiln_val_root(g, n->out[k]);
            writers[r]++;
            if (!(mask & OUT_BIT(k)) || n->acc[k] || n->out[k] != r) ok[r] = 0;
        }
        /* a reader rounds it itself (an operand of a node of the precision: not an op that only follows autocast,
         * such as the cuda backend's batch norm), or reads 16-bit numbers as they are */
        unsigned rounds = n->precision == precision ? kiln_op_get(n->op)->bf16_in : 0;
        for (int k = 0; k < n->nin; k++) {
            if (n->in[k] < 0) continue;
            kiln_value r = kiln_val_root(g, n->in[k]);
            readers[r]++;
            if (!(mask & IN_BIT(k)) || (!(rounds >> k & 1) && !rounded[r])) ok[r] = 0;
        }
    }
}

int kiln_pass_half_store(kiln_graph *g, int precision, const kiln_half_slots_fn *half, const unsigned *round_out) {
    if ((precision != KILN_PRECISION_BF16 && precision != KILN_PRECISION_FP16) || !half) return 0;
    int nv = g->nvals, marked = 0;
    uint8_t *ok = malloc((size_t)nv + 1), *rounded = calloc((size_t)nv + 1, 1);
    int *writers = calloc((size_t)nv + 1, sizeof *writers), *readers = calloc((size_t)nv + 1, sizeof *readers);
    if (!ok || !rounded || !writers || !readers) {
        free(ok), free(rounded), free(writers), free(readers);
        return kiln_graph_fail(g, KILN_ERR_NOMEM, "half storage: out of memory");
    }
    for (int v = 0; v < nv; v++) {
        const kiln_val *V = &g->vals[v];
        ok[v] = V->kind == KILN_VAL_ACT && V->dtype == KILN_F32 && !V->output && !V->layout;
    }
    for (int v = 0; v < nv; v++) /* a plan output's root holds it */
        if (g->vals[v].output) ok[kiln_val_root(g, v)] = 0;
    rounded_by_writer(g, precision, round_out, rounded);
    rule_out(g, precision, half, rounded, ok, writers, readers);
    for (int v = 0; v < nv; v++) {
        kiln_value r = kiln_val_root(g, v);
        if (!ok[r] || writers[r] != 1 || readers[r] == 0) continue;
        g->vals[v].half = precision == KILN_PRECISION_FP16 ? 2 : 1;
        marked += v == r;
    }
    free(ok), free(rounded), free(writers), free(readers);
    return marked;
}
