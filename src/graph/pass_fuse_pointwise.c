/* The pointwise fusion pass (the guide's "fuse pointwise operations"): groups
 * of pointwise nodes become one fused node each, which reads the group's
 * inputs once and writes its outputs once, tile by tile, its intermediates in
 * cache-sized scratch tiles (src/backends/pointwise.c). The guide's GELU,
 * x * 0.5 * (1 + erf(x / 1.41421)) written as five nodes, becomes one kernel.
 *
 * Material: live nodes whose op is POINTWISE and has a tile function on the
 * plan's backend, with f32 operands of one element count (contiguous inputs,
 * a root output). Groups grow in graph order: a node joins the groups of the
 * nodes that wrote what it reads (and, for a gradient it adds to, the earlier
 * writer), groups merge through it, and forward and backward chains form
 * trees and DAGs alike. A merge is kept only when
 *   - the fused node can run where the group's last member ran: no node
 *     outside the group between its members uses a value a member writes (or
 *     writes one a member uses);
 *   - a member reading a value the group writes sees all of its writers (a
 *     gradient added to outside the group is only ever an output);
 *   - the program fits: 8 inputs, 8 outputs, 48 instructions, 16 tile registers.
 * A value is an output of the group when anything outside it reads it (a
 * saved activation for backward), when the plan returns it, when it is not an
 * arena activation (a parameter's gradient), or when a node outside the group
 * writes it too (the fused node then adds, as that member did). Intermediates
 * nothing else reads are never written to memory: they get no arena space.
 * Dropout keeps its key, so its mask is the same bits fused and unfused; a
 * group holding it is KILN_OP_FUSED_PLAIN (its mask follows row-major order),
 * others are layout-blind like their members. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "graph/internal/graph.h"

typedef struct {
    kiln_graph *g;
    int nn;
    uint64_t seed;
    uint8_t *cand;       /* per node: may join a group */
    int *group;          /* per node: its group (the id of the group's first node), -1 */
    int *next;           /* members of a group: a list from the group's id through next[] */
    int *root;           /* per value */
    uint8_t *outside;    /* per root: the plan returns it (a view of it) or it is not an arena activation */
    int *tstart, *tnode; /* per root: the live nodes touching it, in order (CSR) */
    uint8_t *twrites;
    int *stamp, tick;    /* membership of the set being tried */
} fz;

static int candidate(const kiln_graph *g, int i, const uint8_t *tileable) {
    const kiln_node *n = &g->nodes[i];
    if (n->dead || n->epilogue || !(kiln_op_get(n->op)->flags & KILN_OPF_POINTWISE) || !tileable[n->op]) return 0;
    if (n->nout != 1 || n->out[0] < 0 || n->nin > 3) return 0;
    const kiln_val *Y = &g->vals[n->out[0]];
    if (Y->dtype != KILN_F32 || Y->alias_of >= 0) return 0;
    for (int k = 0; k < n->nin; k++) { /* an input is all of its root's storage, row-major */
        const kiln_val *X = n->in[k] >= 0 ? &g->vals[n->in[k]] : NULL;
        const kiln_val *R = X ? &g->vals[kiln_val_root(g, n->in[k])] : NULL;
        if (!X || X->dtype != KILN_F32 || !kiln_val_contiguous(X) || X->offset != 0 || X->batched != Y->batched ||
            R->batched != Y->batched || kiln_val_numel(X, 1) != kiln_val_numel(Y, 1) || kiln_val_numel(R, 1) != kiln_val_numel(Y, 1))
            return 0;
    }
    return 1;
}

static int executes(const kiln_graph *g, int i) {
    return !g->nodes[i].dead && !(kiln_op_get(g->nodes[i].op)->flags & KILN_OPF_VIEW);
}

/* which live nodes read or write each root, in graph order (counted, then filled) */
static int index_touches(fz *z) {
    kiln_graph *g = z->g;
    int total = 0;
    for (int i = 0; i < z->nn; i++)
        if (executes(g, i)) total += g->nodes[i].nin + g->nodes[i].nout;
    z->tstart = calloc((size_t)g->nvals + 1, sizeof(int));
    z->tnode = malloc((size_t)(total + 1) * sizeof(int));
    z->twrites = malloc((size_t)total + 1);
    int *fill = calloc((size_t)g->nvals + 1, sizeof(int));
    if (!z->tstart || !z->tnode || !z->twrites || !fill) {
        free(fill);
        return -1;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < z->nn; i++) {
            const kiln_node *n = &g->nodes[i];
            for (int s = 0; executes(g, i) && s < n->nin + n->nout; s++) {
                kiln_value v = s < n->nin ? n->in[s] : n->out[s - n->nin];
                if (v < 0) continue;
                int r = z->root[v];
                if (pass == 0) {
                    z->tstart[r + 1]++;
                    continue;
                }
                int at = z->tstart[r] + fill[r]++;
                z->tnode[at] = i;
                z->twrites[at] = s >= n->nin;
            }
        }
        for (int v = 0; pass == 0 && v < g->nvals; v++) z->tstart[v + 1] += z->tstart[v];
    }
    free(fill);
    return 0;
}

/* the fused node runs at members[nm-1]: no outside node before it may depend on a member or be depended on */
static int placeable(fz *z, const int *members, int nm) {
    int last = members[nm - 1];
    for (int a = 0; a < nm; a++) {
        const kiln_node *n = &z->g->nodes[members[a]];
        for (int s = 0; s < n->nin + n->nout; s++) {
            kiln_value v = s < n->nin ? n->in[s] : n->out[s - n->nin];
            if (v < 0) continue;
            int r = z->root[v], w = s >= n->nin;
            for (int t = z->tstart[r]; t < z->tstart[r + 1]; t++) {
                int m = z->tnode[t];
                if (m <= members[a] || m >= last || z->stamp[m] == z->tick) continue;
                if (w || z->twrites[t]) return 0;
            }
        }
    }
    return 1;
}

/* what the group writes: per root, the first member writing it and whether any outside node writes it */
typedef struct {
    int reg, first, last_read, last_use, out, acc;
} slot;

/* Builds the program of the member set into P (and the fused node's inputs, outputs, output acc flags);
 * -1 when it does not fit or the set cannot be one kernel */
static int build(fz *z, const int *members, int nm, kiln_fused_prog *P, kiln_value *ins, kiln_value *outs, uint8_t *oacc,
                 slot *sl) {
    kiln_graph *g = z->g;
    if (nm > KILN_FUSED_MAX_INSTR || !placeable(z, members, nm)) return -1;
    memset(P, 0, sizeof *P);
    /* internal roots: written by a member; sl[] is indexed by root and reset on the way out */
    int nint = 0, roots[KILN_FUSED_MAX_INSTR];
    for (int a = 0; a < nm; a++) {
        int r = z->root[g->nodes[members[a]].out[0]];
        if (sl[r].first < 0) {
            sl[r] = (slot){.reg = -1, .first = a, .last_read = -1};
            roots[nint++] = r;
        }
        sl[r].last_use = a;
    }
    int ok = 1;
    for (int a = 0; a < nm && ok; a++) {
        const kiln_node *n = &g->nodes[members[a]];
        for (int k = 0; k < n->nin && ok; k++) {
            int r = z->root[n->in[k]];
            if (sl[r].first >= 0) {
                sl[r].last_read = sl[r].last_use = a;
                continue;
            }
            int seen = 0;
            for (int j = 0; j < P->nin && !seen; j++) seen = ins[j] == n->in[k];
            if (!seen && P->nin == KILN_OP_MAX_IN) ok = 0;
            else if (!seen) ins[P->nin++] = n->in[k];
        }
    }
    for (int j = 0; j < nint && ok; j++) { /* outputs: read or written outside, returned, or not an activation */
        int r = roots[j], outer_w = 0, outer_r = 0;
        for (int t = z->tstart[r]; t < z->tstart[r + 1]; t++) {
            if (z->stamp[z->tnode[t]] == z->tick) continue;
            if (z->twrites[t]) outer_w = 1;
            else outer_r = 1;
        }
        if (outer_w && sl[r].last_read >= 0) ok = 0; /* a member would read a partial sum */
        sl[r].acc = g->nodes[members[sl[r].first]].acc[0];
        sl[r].out = outer_w || outer_r || z->outside[r];
        if (sl[r].out && P->nout == KILN_OP_MAX_OUT) ok = 0;
        else if (sl[r].out) {
            oacc[P->nout] = (uint8_t)sl[r].acc;
            outs[P->nout++] = r;
        }
    }
    /* registers: inputs, then one per output, then scratch reused as values die */
    P->nregs = P->nin + P->nout;
    for (int k = 0; k < P->nout; k++) sl[outs[k]].reg = P->nin + k, P->out_reg[k] = (uint8_t)(P->nin + k);
    uint8_t busy[KILN_FUSED_MAX_REGS] = {0};
    for (int a = 0; a < nm && ok; a++) {
        const kiln_node *n = &g->nodes[members[a]];
        kiln_pw_instr *I = &P->ins[P->ninstr++];
        int r = z->root[n->out[0]];
        if (sl[r].reg < 0) { /* a scratch register for an intermediate, before the sources free theirs */
            int free_reg = -1;
            for (int q = P->nin + P->nout; q < KILN_FUSED_MAX_REGS && free_reg < 0; q++)
                if (!busy[q]) free_reg = q;
            if (free_reg < 0) {
                ok = 0;
                break;
            }
            busy[free_reg] = 1;
            sl[r].reg = free_reg;
            if (free_reg + 1 > P->nregs) P->nregs = free_reg + 1;
        }
        I->op = (int)n->op;
        I->attr = n->attr;
        I->dst = (uint8_t)sl[r].reg;
        I->acc = (uint8_t)(sl[r].first != a && n->acc[0]); /* the group's own earlier write: add to it */
        if (kiln_op_get(n->op)->flags & KILN_OPF_RANDOM) I->key = kiln_node_rng_key(g, members[a], z->seed);
        I->nsrc = (uint8_t)n->nin;
        for (int k = 0; k < n->nin; k++) {
            int q = z->root[n->in[k]], reg = -1;
            if (sl[q].first >= 0) reg = sl[q].reg;
            else
                for (int j = 0; j < P->nin && reg < 0; j++) reg = ins[j] == n->in[k] ? j : -1;
            I->src[k] = (uint8_t)reg;
        }
        for (int k = 0; k <= n->nin; k++) { /* intermediates used for the last time free their register */
            int q = z->root[k < n->nin ? n->in[k] : n->out[0]];
            if (sl[q].first >= 0 && !sl[q].out && sl[q].last_use == a) busy[sl[q].reg] = 0;
        }
    }
    for (int j = 0; j < nint; j++) sl[roots[j]].first = -1;
    return ok ? 0 : -1;
}

/* the members of groups a and b, in graph order */
static int gather(fz *z, int a, int b, int *members) {
    int nm = 0;
    for (int i = a; i >= 0; i = z->next[i]) members[nm++] = i;
    for (int i = b; b != a && i >= 0; i = z->next[i]) members[nm++] = i;
    for (int i = 1; i < nm; i++)
        for (int j = i; j > 0 && members[j - 1] > members[j]; j--) {
            int t = members[j];
            members[j] = members[j - 1];
            members[j - 1] = t;
        }
    return nm;
}

/* joins groups a and b when the union can be one kernel */
static void try_merge(fz *z, int a, int b, slot *sl) {
    if (a == b) return;
    int members[2 * KILN_FUSED_MAX_INSTR + 2], nm = 0, size = 0;
    for (int i = a; i >= 0 && size <= KILN_FUSED_MAX_INSTR; i = z->next[i]) size++;
    for (int i = b; i >= 0 && size <= KILN_FUSED_MAX_INSTR; i = z->next[i]) size++;
    if (size > KILN_FUSED_MAX_INSTR) return;
    nm = gather(z, a, b, members);
    z->tick++;
    for (int k = 0; k < nm; k++) z->stamp[members[k]] = z->tick;
    kiln_fused_prog P;
    kiln_value ins[KILN_OP_MAX_IN], outs[KILN_OP_MAX_OUT];
    uint8_t oacc[KILN_OP_MAX_OUT];
    if (build(z, members, nm, &P, ins, outs, oacc, sl) < 0) return;
    int keep = a < b ? a : b, gone = a < b ? b : a;
    for (int k = 0; k < nm; k++) {
        z->group[members[k]] = keep;
        z->next[members[k]] = k + 1 < nm ? members[k + 1] : -1;
    }
    (void)gone;
}

/* the groups of the nodes that wrote what node i reads, or that wrote before it what it adds to */
static void grow(fz *z, int i, slot *sl) {
    const kiln_node *n = &z->g->nodes[i];
    for (int s = 0; s < n->nin + 1; s++) {
        kiln_value v = s < n->nin ? n->in[s] : n->out[0];
        if (s == n->nin && !n->acc[0]) break;
        int r = z->root[v];
        for (int t = z->tstart[r]; t < z->tstart[r + 1] && z->tnode[t] < i; t++) {
            int m = z->tnode[t];
            if (z->twrites[t] && z->group[m] >= 0) try_merge(z, z->group[m], z->group[i], sl);
        }
    }
}

/* An output may take the storage of an input that dies at the fused node (the planner decides) when the
 * program reads all of that input before its first write of the output: what a chain of single ops gets
 * by writing into the buffer its input just freed. Not for outputs that add to what they hold. */
static void allow_reuse(const kiln_fused_prog *P, const uint8_t *oacc, uint8_t *reuse_in) {
    int last_read[KILN_OP_MAX_IN], taken[KILN_OP_MAX_IN] = {0};
    for (int j = 0; j < P->nin; j++) last_read[j] = -1;
    for (int i = 0; i < P->ninstr; i++)
        for (int k = 0; k < P->ins[i].nsrc; k++)
            if (P->ins[i].src[k] < P->nin) last_read[P->ins[i].src[k]] = i;
    memset(reuse_in, 0, KILN_OP_MAX_OUT);
    for (int k = 0; k < P->nout; k++) {
        int first_write = P->ninstr;
        for (int i = P->ninstr - 1; i >= 0; i--)
            if (P->ins[i].dst == P->out_reg[k]) first_write = i;
        for (int j = 0; j < P->nin && !oacc[k] && !reuse_in[k]; j++)
            if (!taken[j] && last_read[j] < first_write) reuse_in[k] = (uint8_t)(j + 1), taken[j] = 1;
    }
}

static int rewrite(fz *z, int head, slot *sl) {
    kiln_graph *g = z->g;
    int members[KILN_FUSED_MAX_INSTR + 1], nm = gather(z, head, head, members);
    if (nm < 2) return 0;
    z->tick++;
    for (int k = 0; k < nm; k++) z->stamp[members[k]] = z->tick;
    kiln_fused_prog *P = kiln_graph_add_prog(g);
    kiln_value ins[KILN_OP_MAX_IN], outs[KILN_OP_MAX_OUT];
    uint8_t oacc[KILN_OP_MAX_OUT];
    if (!P) return -1;
    if (build(z, members, nm, P, ins, outs, oacc, sl) < 0) return 0; /* unreachable: the merge built it */
    int random = 0;
    size_t o = 0;
    for (int k = 0; k < nm; k++) {
        const kiln_node *m = &g->nodes[members[k]];
        random |= (kiln_op_get(m->op)->flags & KILN_OPF_RANDOM) != 0;
        if (o < sizeof P->holds) o += (size_t)snprintf(P->holds + o, sizeof P->holds - o, "%s%s", k ? "," : "", m->name);
    }
    kiln_node *f = &g->nodes[members[nm - 1]];
    char first[sizeof f->name];
    memcpy(first, g->nodes[members[0]].name, sizeof first);
    f->op = random ? KILN_OP_FUSED_PLAIN : KILN_OP_FUSED;
    f->nin = P->nin;
    f->nout = P->nout;
    memcpy(f->in, ins, sizeof ins);
    memcpy(f->out, outs, sizeof outs);
    memcpy(f->acc, oacc, sizeof oacc);
    memset(&f->attr, 0, sizeof f->attr);
    f->attr.fused = P;
    allow_reuse(P, oacc, f->reuse_in);
    f->fwd = -1;
    f->recompute_of = -1; /* a step of its own (a recomputed member is fused with its backward readers) */
    snprintf(f->name, sizeof f->name, "fused:%.40s", first);
    for (int k = 0; k < nm - 1; k++) g->nodes[members[k]].dead = 1;
    return 1;
}

static void fz_free(fz *z) {
    free(z->cand), free(z->group), free(z->next), free(z->root), free(z->outside);
    free(z->tstart), free(z->tnode), free(z->twrites), free(z->stamp);
}

int kiln_pass_fuse_pointwise(kiln_graph *g, const uint8_t *tileable, uint64_t seed) {
    fz z = {.g = g, .nn = g->nnodes, .seed = seed};
    size_t nn = (size_t)(g->nnodes + 1), nv = (size_t)(g->nvals + 1);
    z.cand = calloc(nn, 1), z.group = malloc(nn * sizeof(int)), z.next = malloc(nn * sizeof(int));
    z.stamp = calloc(nn, sizeof(int)), z.root = malloc(nv * sizeof(int)), z.outside = calloc(nv, 1);
    slot *sl = malloc(nv * sizeof *sl);
    int fused = 0;
    if (!z.cand || !z.group || !z.next || !z.stamp || !z.root || !z.outside || !sl) goto oom;
    for (int v = 0; v < g->nvals; v++) {
        z.root[v] = kiln_val_root(g, v);
        sl[v].first = -1;
    }
    for (int v = 0; v < g->nvals; v++)
        if (g->vals[v].output || g->vals[v].kind != KILN_VAL_ACT) z.outside[z.root[v]] = 1;
    if (index_touches(&z) < 0) goto oom;
    for (int i = 0; i < g->nnodes; i++) {
        z.cand[i] = (uint8_t)candidate(g, i, tileable);
        z.group[i] = z.cand[i] ? i : -1;
        z.next[i] = -1;
        if (z.cand[i]) grow(&z, i, sl);
    }
    for (int i = 0; i < g->nnodes; i++) {
        if (z.group[i] != i) continue;
        int r = rewrite(&z, i, sl);
        if (r < 0) goto oom;
        fused += r;
    }
    fz_free(&z);
    free(sl);
    return fused;
oom:
    fz_free(&z);
    free(sl);
    return kiln_graph_fail(g, KILN_ERR_NOMEM, "fusion: out of memory");
}
