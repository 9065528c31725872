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
 * neither of its lists in its input's dtype, so batch norm after a bf16 convolution writes bf16, and so do the
 * residual add after two such norms and the relu after it. Where the backend's kernel writes so
 * (kiln_kernel.round_out), such a node takes the plan's precision when its sources hold 16-bit numbers (their
 * writers round them, and add no fp32 bias after: kiln_node_holds_16): its output is then rounded as the
 * convolution's is, and the reference reproduces it. Relu and max-pool of 16-bit numbers are exact: marked only.
 * In a fused group this is decided member by member (kiln_pw_instr.round), so fusing changes no number. */
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

unsigned kiln_node_round_out(const kiln_node *n, unsigned table) {
    if (n->dead || n->precision == KILN_PRECISION_FP32) return 0;
    if (n->op == KILN_OP_FUSED || n->op == KILN_OP_FUSED_PLAIN) return n->attr.fused ? n->attr.fused->out_round : 0;
    return table & 0xffu;
}

unsigned kiln_node_holds_16(const kiln_node *n, unsigned table) {
    unsigned m = kiln_node_round_out(n, table);
    int bias_after = (kiln_op_get(n->op)->flags & KILN_OPF_CHANNEL_BIAS) && n->nin > 2 && n->in[2] >= 0;
    if (bias_after && !(table & KILN_ROUND_BIAS_IN)) m &= ~1u;
    return m;
}

/* the sources a follower needs rounded: input 0 (KILN_FOLLOW_IN0: batch norm beside its fp32 parameters, relu,
 * max-pool), or every one (KILN_FOLLOW_ALL: an add, fp32 where either operand is, as PyTorch promotes) */
static int sources_rounded(uint8_t follow, int nsrc, const uint8_t *src_rounded) {
    if (!follow || nsrc < 1) return 0;
    int ok = src_rounded[0];
    for (int k = 1; follow == KILN_FOLLOW_ALL && k < nsrc; k++) ok = ok && src_rounded[k];
    return ok;
}

/* a fused node's members that follow, in program order (registers carry whether they hold 16-bit numbers); the
 * outputs so written are the node's rounded ones; 1 when any member follows */
static int follow_prog(const kiln_graph *g, const kiln_node *nd, int precision, const uint8_t *follows,
                       const uint8_t *rounded) {
    kiln_fused_prog *P = (kiln_fused_prog *)nd->attr.fused;
    uint8_t reg[KILN_FUSED_MAX_REGS] = {0};
    int any = 0;
    for (int k = 0; k < P->nin && k < KILN_FUSED_MAX_REGS; k++) reg[k] = nd->in[k] >= 0 && rounded[kiln_val_root(g, nd->in[k])];
    for (int j = 0; j < P->ninstr; j++) {
        kiln_pw_instr *I = &P->ins[j];
        uint8_t src[3] = {0};
        for (int k = 0; k < I->nsrc && k < 3; k++) src[k] = reg[I->src[k]];
        I->round = !I->acc && sources_rounded(follows[I->op], I->nsrc, src) ? (uint8_t)precision : 0;
        reg[I->dst] = I->round != 0;
        any |= I->round != 0;
    }
    P->out_round = 0;
    for (int k = 0; k < P->nout; k++) P->out_round |= (uint8_t)(reg[P->out_reg[k]] << k);
    return any;
}

/* a plain node follows where the table says and its sources hold 16-bit numbers */
static int follows_node(const kiln_graph *g, const kiln_node *nd, const uint8_t *follows, const uint8_t *rounded) {
    uint8_t src[KILN_OP_MAX_IN] = {0};
    for (int k = 0; k < nd->nin && k < KILN_OP_MAX_IN; k++) src[k] = nd->in[k] >= 0 && rounded[kiln_val_root(g, nd->in[k])];
    return sources_rounded(follows[nd->op], nd->nin, src);
}

int kiln_pass_autocast_follow(kiln_graph *g, int precision, const uint8_t *follows, const unsigned *round_out) {
    if (precision == KILN_PRECISION_FP32 || !follows) return 0;
    uint8_t *rounded = calloc((size_t)g->nvals + 1, 1); /* per root: written rounded by a node before */
    if (!rounded) return kiln_graph_fail(g, KILN_ERR_NOMEM, "autocast: out of memory");
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) { /* in order, so a chain follows */
        kiln_node *nd = &g->nodes[i];
        if (nd->dead) continue;
        int fused = nd->op == KILN_OP_FUSED || nd->op == KILN_OP_FUSED_PLAIN;
        if (nd->precision == KILN_PRECISION_FP32 &&
            (fused ? nd->attr.fused && follow_prog(g, nd, precision, follows, rounded) : follows_node(g, nd, follows, rounded))) {
            nd->precision = precision;
            n++;
        }
        unsigned m = kiln_node_holds_16(nd, round_out ? round_out[nd->op] : 0);
        for (int k = 0; k < nd->nout; k++)
            if (nd->out[k] >= 0 && m >> k & 1) rounded[kiln_val_root(g, nd->out[k])] = 1;
    }
    free(rounded);
    return n;
}
