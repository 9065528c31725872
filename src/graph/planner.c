/* Liveness-based arena planner (ggml's and llm.c's idea): one arena holds all
 * activations and gradients of a step; a value's space is reused once its last
 * reader has run. Planned once for the largest batch, so no step allocates. */
#include <stdlib.h>
#include <string.h>
#include "graph/internal/graph.h"

typedef struct { size_t off, size; } block;

typedef struct {
    block *free;
    int nfree, cap;
    size_t end;
} arena_state;

static int add_free(arena_state *a, size_t off, size_t size) {
    /* keep sorted by offset and coalesce neighbours */
    int i = 0;
    while (i < a->nfree && a->free[i].off < off) i++;
    if (a->nfree == a->cap) {
        int cap = a->cap ? a->cap * 2 : 16;
        block *nb = realloc(a->free, (size_t)cap * sizeof *nb);
        if (!nb) return -1;
        a->free = nb;
        a->cap = cap;
    }
    memmove(&a->free[i + 1], &a->free[i], (size_t)(a->nfree - i) * sizeof(block));
    a->free[i] = (block){off, size};
    a->nfree++;
    if (i + 1 < a->nfree && a->free[i].off + a->free[i].size == a->free[i + 1].off) {
        a->free[i].size += a->free[i + 1].size;
        memmove(&a->free[i + 1], &a->free[i + 2], (size_t)(a->nfree - i - 2) * sizeof(block));
        a->nfree--;
    }
    if (i > 0 && a->free[i - 1].off + a->free[i - 1].size == a->free[i].off) {
        a->free[i - 1].size += a->free[i].size;
        memmove(&a->free[i], &a->free[i + 1], (size_t)(a->nfree - i - 1) * sizeof(block));
        a->nfree--;
    }
    /* a free block at the end shrinks the arena instead */
    if (a->nfree && a->free[a->nfree - 1].off + a->free[a->nfree - 1].size == a->end) {
        a->end = a->free[a->nfree - 1].off;
        a->nfree--;
    }
    return 0;
}

static size_t take(arena_state *a, size_t size, size_t *high) {
    int best = -1;
    for (int i = 0; i < a->nfree; i++)
        if (a->free[i].size >= size && (best < 0 || a->free[i].size < a->free[best].size)) best = i;
    if (best >= 0) {
        size_t off = a->free[best].off;
        a->free[best].off += size;
        a->free[best].size -= size;
        if (a->free[best].size == 0) {
            memmove(&a->free[best], &a->free[best + 1], (size_t)(a->nfree - best - 1) * sizeof(block));
            a->nfree--;
        }
        return off;
    }
    size_t off = a->end;
    a->end += size;
    if (a->end > *high) *high = a->end;
    return off;
}

/* rounded to a cache line; float values take the backend's float size, or 2 bytes where stored in 16 bits */
static size_t value_bytes(const kiln_val *v, int64_t max_batch, size_t elem) {
    size_t es = v->half ? 2 : v->dtype == KILN_F32 ? elem : kiln_dtype_size(v->dtype);
    size_t bytes = ((size_t)kiln_val_numel(v, max_batch) * es + 63) & ~(size_t)63;
    return bytes ? bytes : 64;
}

/* the arena root of an input of node n that output value v may take over: the node allows it
 * (reuse_in), the input dies at this step (last read), is an arena activation and was not given away */
static kiln_value dying_input(const kiln_graph *g, const kiln_node *n, kiln_value v, int s, const int *last,
                              const int64_t *offset, const uint8_t *given) {
    for (int k = 0; k < n->nout; k++) {
        if (n->out[k] < 0 || kiln_val_root(g, n->out[k]) != v || !n->reuse_in[k]) continue;
        kiln_value u = kiln_val_root(g, n->in[n->reuse_in[k] - 1]);
        if (u != v && g->vals[u].kind == KILN_VAL_ACT && offset[u] >= 0 && last[u] == s && !given[u]) return u;
    }
    return -1;
}

kiln_status kiln_plan_memory(const kiln_graph *g, const int *order, int norder, int64_t max_batch, size_t elem,
                             int reuse, const uint8_t *keep, int64_t *offset, size_t *arena_bytes, size_t *no_reuse_bytes) {
    int nv = g->nvals;
    int *first = malloc((size_t)nv * sizeof(int)), *last = malloc((size_t)nv * sizeof(int));
    uint8_t *given = calloc((size_t)nv + 1, 1); /* an input whose storage an output took */
    arena_state a = {0};
    if (!first || !last || !given) goto oom;
    for (int v = 0; v < nv; v++) {
        first[v] = -1;
        last[v] = -1;
        offset[v] = -1;
    }
    for (int s = 0; s < norder; s++) {
        const kiln_node *n = &g->nodes[order[s]];
        for (int k = 0; k < n->nout; k++) {
            if (n->out[k] < 0) continue; /* an optional output not produced */
            kiln_value r = kiln_val_root(g, n->out[k]);
            if (first[r] < 0) first[r] = s;
            last[r] = s;
        }
        for (int k = 0; k < n->nin; k++) {
            kiln_value r = kiln_val_root(g, n->in[k]);
            last[r] = s;
        }
    }
    for (int v = 0; v < nv; v++)
        if (keep[v]) last[kiln_val_root(g, v)] = norder;

    size_t total = 0, high = 0;
    for (int s = 0; s <= norder; s++) {
        /* allocate what node s defines first (in the storage of an input dying here, where the node allows) ... */
        for (int v = 0; s < norder && v < nv; v++) {
            if (first[v] != s || g->vals[v].kind != KILN_VAL_ACT || g->vals[v].alias_of >= 0) continue;
            size_t bytes = value_bytes(&g->vals[v], max_batch, elem);
            total += bytes;
            kiln_value u = reuse ? dying_input(g, &g->nodes[order[s]], v, s, last, offset, given) : -1;
            if (u >= 0 && value_bytes(&g->vals[u], max_batch, elem) == bytes) {
                offset[v] = offset[u];
                given[u] = 1;
                continue;
            }
            offset[v] = reuse ? (int64_t)take(&a, bytes, &high) : (int64_t)(total - bytes);
        }
        /* ... then free what node s read last */
        for (int v = 0; reuse && v < nv; v++) {
            if (last[v] != s || offset[v] < 0 || given[v]) continue;
            size_t bytes = value_bytes(&g->vals[v], max_batch, elem);
            if (add_free(&a, (size_t)offset[v], bytes)) goto oom;
        }
    }
    *arena_bytes = reuse ? high : total;
    *no_reuse_bytes = total;
    free(first);
    free(last);
    free(given);
    free(a.free);
    return KILN_OK;
oom:
    free(first);
    free(last);
    free(given);
    free(a.free);
    return kiln_fail(KILN_ERR_NOMEM, "planner: out of memory");
}
