/* Activation checkpointing (the guide's "checkpoint to recompute
 * intermediates", torch.utils.checkpoint): forward values that backward nodes
 * read (saved activations) are not kept from forward to backward but computed
 * again just before backward needs them. It runs after autodiff and fusion,
 * on the graph the plan will run:
 *   - a group is one block scope ("block") or one node of an op named in the
 *     spec (the op table's KILN_OPF_RECOMPUTE ops: cheap for their memory);
 *   - its recomputed values are the outputs of its nodes that backward nodes
 *     read, and that no forward node after the group reads (a block's outputs
 *     are its checkpoints: the next block starts from them), with the group's
 *     values those depend on;
 *   - each node making one is cloned (op, attributes, epilogue; the inputs
 *     the clones' own outputs where recomputed, else the originals) in
 *     forward order just before the group's first backward reader, and every
 *     backward reader reads the clone: the original dies after its last
 *     forward reader and the planner reuses its memory;
 *   - a recomputation draws its RNG key from the node it repeats
 *     (recompute_of), so dropout masks, and every result, are bit-identical;
 *   - nodes that update state (a training batch norm's running statistics)
 *     are never cloned, and a group whose clones would keep alive more than
 *     they free (a dropout whose input nothing else keeps) is left alone.
 * Groups are taken last first, so an earlier group's clones can serve a later
 * group's clones. With a schedule (kiln_pass_checkpoint_ex), "block" groups
 * are segments of consecutive block scopes (checkpoint_schedule.c): the
 * blocks inside a segment lose their outputs to the recomputation, and the
 * segment's clones (a region of their own, carrying their blocks) are split
 * into sub-segments that are recomputed again from the clones, so one
 * recomputation sweep need not keep every output of its segment. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "graph/internal/graph.h"

#define FAR INT32_MAX

typedef struct {
    kiln_graph *g;
    int nfwd;
    int blocks;                /* "block" named */
    uint8_t ops[KILN_OP_COUNT];/* op kinds named */
    int lo, hi;                /* the forward region: the forward nodes, or one segment's clones */
    int top;                   /* the region is the forward (op-named groups live there only) */
    const int *seg;            /* per block: its segment in this region (its first block) */
    const kiln_ckpt_sched *sched;
    int nvals;                 /* values before this group's clones */
    int *first_bwd;            /* per value: the first backward node reading it, or FAR */
    int *last;                 /* per value: the last node reading it, or -1 */
    uint8_t *outside;          /* per value: read by a forward node outside the group */
    uint8_t *need;             /* per value: recomputed */
    kiln_value *map;           /* per value: its recomputation, or -1 */
} ckpt;

/* "layernorm" names layer_norm: underscores do not count */
static int same_name(const char *a, size_t n, const char *op) {
    size_t i = 0;
    for (; *op; op++) {
        if (*op == '_') continue;
        while (i < n && a[i] == '_') i++;
        if (i == n || a[i] != *op) return 0;
        i++;
    }
    while (i < n && a[i] == '_') i++;
    return i == n;
}

static kiln_status list_names(char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    for (int op = 0; op < KILN_OP_COUNT && o < len; op++)
        if (kiln_op_get((kiln_op)op)->flags & KILN_OPF_RECOMPUTE)
            o += (size_t)snprintf(buf + o, len - o, "%s%s", o ? ", " : "", kiln_op_name((kiln_op)op));
    return KILN_OK;
}

static kiln_status parse(const char *spec, int *blocks, uint8_t *ops) {
    *blocks = 0;
    memset(ops, 0, KILN_OP_COUNT);
    if (!spec || !*spec || strcmp(spec, "none") == 0) return KILN_OK;
    for (const char *p = spec; *p;) {
        size_t n = strcspn(p, ",");
        int found = n == 5 && strncmp(p, "block", 5) == 0;
        *blocks |= found;
        for (int op = 0; !found && op < KILN_OP_COUNT; op++)
            if ((kiln_op_get((kiln_op)op)->flags & KILN_OPF_RECOMPUTE) && same_name(p, n, kiln_op_name((kiln_op)op)))
                ops[op] = found = 1;
        if (!found) {
            char names[512];
            list_names(names, sizeof names);
            return kiln_fail(KILN_ERR_INVALID_ARG, "'%.*s' is not none, block or an op cheap to recompute (%s)",
                             (int)(n < 64 ? n : 64), p, names);
        }
        p += n + (p[n] == ',');
    }
    return KILN_OK;
}

kiln_status kiln_checkpoint_check(const char *spec) {
    int blocks;
    uint8_t ops[KILN_OP_COUNT];
    return parse(spec, &blocks, ops);
}

int kiln_node_key_id(const kiln_graph *g, int node) {
    const kiln_node *n = &g->nodes[node];
    return n->recompute_of >= 0 ? n->recompute_of : n->fwd >= 0 ? n->fwd : node;
}

/* the group of region node i: its segment (blocks chosen), else itself when its op is named, else -1 */
static int group_of(const ckpt *c, int i) {
    const kiln_node *n = &c->g->nodes[i];
    if (n->dead || i < c->lo || i >= c->hi) return -1;
    if (c->blocks && n->block >= 0) return c->seg[n->block];
    return c->top && c->ops[n->op] ? c->g->nblocks + i : -1;
}

/* a clone must compute exactly what its original did and change nothing else */
static int cloneable(const kiln_graph *g, const kiln_node *n) {
    if (n->dead || (kiln_op_get(n->op)->flags & KILN_OPF_STEP_ONLY)) return 0;
    for (int k = 0; k < n->nin; k++)
        if (g->vals[n->in[k]].kind == KILN_VAL_BUFFER) return 0; /* it updates running statistics */
    return 1;
}

/* in a segment's clones, a sub-segment's outputs are those whose originals forward nodes of other
 * blocks read: the next unit's clone may not exist (its output is the segment's checkpoint) */
static void recomputed_outside(ckpt *c, int gid) {
    const kiln_graph *g = c->g;
    for (int j = 0; j < c->nfwd; j++) {
        const kiln_node *n = &g->nodes[j];
        if (n->dead || (n->block >= 0 && c->seg[n->block] == gid)) continue;
        for (int k = 0; k < n->nin; k++) c->need[n->in[k]] = 1; /* scratch here: cleared below */
    }
    for (int i = c->lo; i < c->hi; i++) {
        const kiln_node *n = &g->nodes[i];
        if (group_of(c, i) != gid || n->recompute_of < 0) continue;
        const kiln_node *o = &g->nodes[n->recompute_of];
        for (int k = 0; k < n->nout && k < o->nout; k++)
            if (n->out[k] >= 0 && o->out[k] >= 0 && c->need[o->out[k]]) c->outside[n->out[k]] = 1;
    }
    memset(c->need, 0, (size_t)c->nvals);
}

static void scan_readers(ckpt *c, int gid) {
    const kiln_graph *g = c->g;
    for (int v = 0; v < c->nvals; v++) {
        c->first_bwd[v] = FAR;
        c->last[v] = -1;
        c->outside[v] = 0;
        c->need[v] = 0;
        c->map[v] = -1;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead) continue;
        int bwd = i >= c->hi, out = !bwd && group_of(c, i) != gid;
        for (int k = 0; k < n->nin; k++) {
            kiln_value v = n->in[k];
            if (bwd && c->first_bwd[v] == FAR) c->first_bwd[v] = i;
            c->outside[v] |= (uint8_t)out;
            c->last[kiln_val_root(g, v)] = i;
        }
    }
    if (!c->top) recomputed_outside(c, gid);
}

/* an output of group node n the group may recompute */
static int eligible(const ckpt *c, int gid, kiln_value v) {
    const kiln_val *V = &c->g->vals[v];
    return v >= 0 && V->kind == KILN_VAL_ACT && !V->output && !(gid < c->g->nblocks && c->outside[v]);
}

/* marks what to recompute, last node first (so a clone's group inputs are marked before their
 * producers are seen); returns the first backward reader of a recomputed value, or FAR */
static int mark(ckpt *c, int gid, uint8_t *clone) {
    kiln_graph *g = c->g;
    int at = FAR;
    for (int i = c->hi - 1; i >= c->lo; i--) {
        const kiln_node *n = &g->nodes[i];
        clone[i] = 0;
        if (group_of(c, i) != gid || !cloneable(g, n)) continue;
        for (int k = 0; k < n->nout; k++) {
            kiln_value v = n->out[k];
            if (!eligible(c, gid, v) || (!c->need[v] && c->first_bwd[v] == FAR)) continue;
            c->need[v] = 1;
            clone[i] = 1;
            if (c->first_bwd[v] < at) at = c->first_bwd[v];
        }
        for (int k = 0; clone[i] && k < n->nin; k++) c->need[n->in[k]] = 1; /* only group values count below */
    }
    return at;
}

static size_t bytes_of(const kiln_graph *g, kiln_value v) {
    return (size_t)kiln_val_numel(&g->vals[v], 64) * kiln_dtype_size(g->vals[v].dtype);
}

/* what the clones free (recomputed roots) against what they keep alive longer: originals they
 * read whose last reader would otherwise come before the clones */
static int worth_it(const ckpt *c, const uint8_t *clone, int at) {
    const kiln_graph *g = c->g;
    size_t freed = 0, kept = 0;
    uint8_t *seen = calloc((size_t)c->nvals, 1);
    if (!seen) return 0;
    for (int i = c->lo; i < c->hi; i++) {
        const kiln_node *n = &g->nodes[i];
        if (!clone[i]) continue;
        for (int k = 0; k < n->nout; k++)
            if (n->out[k] >= 0 && c->need[n->out[k]] && g->vals[n->out[k]].alias_of < 0) freed += bytes_of(g, n->out[k]);
        for (int k = 0; k < n->nin; k++) {
            kiln_value r = kiln_val_root(g, n->in[k]);
            if (c->need[n->in[k]] && c->map[n->in[k]] == -2) continue; /* recomputed too */
            if (seen[r] || g->vals[r].kind != KILN_VAL_ACT || c->last[r] >= at) continue;
            seen[r] = 1;
            kept += bytes_of(g, r);
        }
    }
    free(seen);
    return freed > kept;
}

/* clone node i at position `at`: recomputed inputs read their clones */
static int add_clone(ckpt *c, int i, int at) {
    kiln_graph *g = c->g;
    kiln_node n = g->nodes[i];
    for (int k = 0; k < n.nin; k++)
        if (n.in[k] < c->nvals && c->need[n.in[k]] && c->map[n.in[k]] >= 0) n.in[k] = c->map[n.in[k]];
    for (int k = 0; k < n.nout; k++) {
        kiln_value o = n.out[k];
        if (o < 0) continue;
        kiln_val V = g->vals[o];
        kiln_value v = kiln_graph_add_value(g, NULL, V.dtype, 0, NULL, 0, V.kind);
        if (v < 0) return -1;
        snprintf(V.name, sizeof V.name, "%.52s:recompute", g->vals[o].name);
        V.output = 0;
        V.layout = 0;
        if (V.alias_of >= 0 && V.alias_of < c->nvals && c->map[V.alias_of] >= 0) V.alias_of = c->map[V.alias_of];
        g->vals[v] = V;
        n.out[k] = c->map[o] = v;
    }
    int id = kiln_graph_add_node(g, n.op, n.in, n.nin, n.out, n.nout);
    if (id < 0) return -1;
    kiln_node *m = &g->nodes[id];
    m->attr = n.attr;
    m->epilogue = n.epilogue;
    m->recompute_of = n.recompute_of >= 0 ? n.recompute_of : i; /* a recomputation's recomputation repeats the original */
    m->block = n.block; /* the segment's clones are split again by block */
    snprintf(m->name, sizeof m->name, "%.37s:recompute", n.name);
    return kiln_graph_move_node(g, id, at);
}

/* every backward node from `from` on reads the recomputations (a view keeps viewing what it reads) */
static void redirect(ckpt *c, int from) {
    kiln_graph *g = c->g;
    for (int i = from; i < g->nnodes; i++) {
        kiln_node *n = &g->nodes[i];
        for (int k = 0; k < n->nin; k++) {
            kiln_value v = n->in[k];
            if (v >= c->nvals || !c->need[v] || c->map[v] < 0) continue;
            n->in[k] = c->map[v];
            if (k == 0 && (kiln_op_get(n->op)->flags & KILN_OPF_VIEW) && n->out[0] >= 0) g->vals[n->out[0]].alias_of = n->in[0];
        }
    }
}

/* one group: the number of clones added (placed from *at on), or -1 */
static int checkpoint_group(ckpt *c, int gid, int *at_out) {
    kiln_graph *g = c->g;
    uint8_t *clone = calloc((size_t)c->hi + 1, 1);
    if (!clone) return -1;
    scan_readers(c, gid);
    int at = mark(c, gid, clone), made = 0;
    /* group values the clones read are recomputed too; others are read as they are */
    for (int i = c->lo; at != FAR && i < c->hi; i++) {
        if (group_of(c, i) != gid) continue;
        const kiln_node *n = &g->nodes[i];
        for (int k = 0; k < n->nout; k++)
            if (n->out[k] >= 0 && c->need[n->out[k]]) c->map[n->out[k]] = clone[i] && eligible(c, gid, n->out[k]) ? -2 : -1;
    }
    for (int v = 0; at != FAR && v < c->nvals; v++)
        if (c->map[v] != -2) c->need[v] = 0;
    if (at != FAR && worth_it(c, clone, at)) {
        for (int v = 0; v < c->nvals; v++) c->map[v] = -1;
        for (int i = c->lo; made >= 0 && i < c->hi; i++)
            if (clone[i] && add_clone(c, i, at + made++) < 0) made = -1;
        if (made > 0) redirect(c, at + made);
    }
    free(clone);
    *at_out = at;
    return made;
}

/* the per-value arrays for the graph as it is now (earlier groups' clones made values) */
static int size_arrays(ckpt *c) {
    c->nvals = c->g->nvals;
    size_t n = (size_t)c->nvals + 1;
    int *fb = realloc(c->first_bwd, n * sizeof(int)), *last = fb ? realloc(c->last, n * sizeof(int)) : NULL;
    if (fb) c->first_bwd = fb;
    if (last) c->last = last;
    uint8_t *out = last ? realloc(c->outside, n) : NULL;
    if (out) c->outside = out;
    uint8_t *need = out ? realloc(c->need, n) : NULL;
    if (need) c->need = need;
    kiln_value *map = need ? realloc(c->map, n * sizeof(kiln_value)) : NULL;
    if (map) c->map = map;
    return map != NULL;
}

/* one level of the schedule: units [first, first + n) split into segments (top: the forward's,
 * else a recomputation's), seg[] naming each block's segment; slots[u] for a segment starting at u */
static void split_level(const ckpt *c, int top, int first, int n, int s, int *seg, int *slots) {
    for (int a = first, left = n; left > 0; s--) {
        int m = left == 1 ? 1 : kiln_ckpt_sched_split(c->sched, top, left, s);
        for (int u = a; u < a + m; u++) seg[u] = a;
        slots[a] = s;
        a += m;
        left -= m;
    }
}

/* the groups of region [lo, hi), last first; a block segment's clones are split again.
 * units: the blocks [first, first + n) of this region; keep_last: its last segment is not
 * recomputed. The clones made, or -1 */
static int checkpoint_region(ckpt *c, int lo, int hi, int top, int first, int n, int slots, int keep_last) {
    kiln_graph *g = c->g;
    int nb = g->nblocks, total = 0;
    int *seg = malloc(((size_t)nb + 1) * sizeof(int)), *segslots = malloc(((size_t)nb + 1) * sizeof(int));
    uint8_t *done = calloc((size_t)nb + (size_t)hi + 1, 1);
    if (!seg || !segslots || !done) total = -1;
    for (int u = 0; total >= 0 && u < nb; u++) seg[u] = -1; /* blocks outside this region's units */
    if (total >= 0 && c->blocks && n > 0) split_level(c, top, first, n, slots, seg, segslots);
    int last_seg = n > 0 && total >= 0 ? seg[first + n - 1] : -1;
    for (int i = hi - 1; total >= 0 && i >= lo; i--) {
        c->lo = lo, c->hi = hi, c->top = top, c->seg = seg;
        int gid = group_of(c, i);
        if (gid < 0 || done[gid]) continue;
        done[gid] = 1;
        int block = gid < nb, at = FAR;
        if (block && gid == last_seg && (keep_last || !top)) continue; /* kept from the sweep that made it */
        int made = size_arrays(c) ? checkpoint_group(c, gid, &at) : -1;
        total = made < 0 ? -1 : total + made;
        int len = 0;
        for (int u = gid; block && u < first + n && seg[u] == gid; u++) len++;
        if (made > 0 && len > 1) {
            int sub = checkpoint_region(c, at, at + made, 0, gid, len, segslots[gid], 0);
            total = sub < 0 ? -1 : total + sub;
        }
    }
    free(seg);
    free(segslots);
    free(done);
    return total;
}

int kiln_checkpoint_blocks(const char *spec) {
    int blocks = 0;
    uint8_t ops[KILN_OP_COUNT];
    return parse(spec, &blocks, ops) == KILN_OK && blocks;
}

int kiln_pass_checkpoint_ex(kiln_graph *g, int nfwd, const char *spec, const kiln_ckpt_choice *choice) {
    ckpt c = {.g = g, .nfwd = nfwd};
    if (parse(spec, &c.blocks, c.ops) != KILN_OK)
        return kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "checkpoint_activations: %s", kiln_last_error());
    int nb = g->nblocks;
    kiln_ckpt_choice plain = {.slots = nb, .keep_last = 0};
    if (!choice) choice = &plain;
    kiln_ckpt_sched *k = kiln_ckpt_sched_new(nb);
    c.sched = k;
    int slots = choice->slots < 1 ? 1 : choice->slots;
    int total = !k ? -1 : kiln_ckpt_sched_cost(k, 1, nb, slots) < 0 && nb > 0
                              ? kiln_graph_fail(g, KILN_ERR_INVALID_ARG, "checkpoint_activations: %d blocks cannot be "
                                                "checkpointed with %d slots", nb, slots)
                              : checkpoint_region(&c, 0, nfwd, 1, 0, nb, slots, choice->keep_last);
    kiln_ckpt_sched_free(k);
    free(c.first_bwd);
    free(c.last);
    free(c.outside);
    free(c.need);
    free(c.map);
    if (total < 0 && kiln_graph_status(g) == KILN_OK)
        return kiln_graph_fail(g, KILN_ERR_NOMEM, "checkpoint-activations: out of memory");
    return total < 0 ? -1 : total;
}

int kiln_pass_checkpoint(kiln_graph *g, int nfwd, const char *spec) { return kiln_pass_checkpoint_ex(g, nfwd, spec, NULL); }
