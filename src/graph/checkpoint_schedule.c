/* Where block checkpointing keeps checkpoints (Griewank's binomial
 * checkpointing, "revolve", on a chain of units: the block scopes in forward
 * order). A chain of n units whose input is kept and whose last output's
 * backward has begun is reversed with s free slots for intermediate outputs
 * by recomputing from its input up to unit m, keeping that output, reversing
 * the units after it with s - 1 slots, then the first m with s slots again:
 *     T(1, s) = 0,  T(n, s) = min over m of  m + T(n - m, s - 1) + T(m, s)
 * counted in unit forwards. At the top the forward pass itself makes the
 * first sweep, so its advances cost nothing:
 *     Top(1, s) = 0,  Top(n, s) = min over m of  Top(n - m, s - 1) + T(m, s).
 * Unrolled, one level is a list of segments, the first m units with s slots,
 * the next m' with s - 1, ..., the last one unit: each segment but the last
 * is recomputed (at the top, from the forward's checkpoints; below, from the
 * sweep that recomputed the enclosing segment) and split the same way.
 * Few slots mean little memory and many recomputations: the caller plans a
 * few slot counts and keeps the smallest arena its time budget allows. */
#include <limits.h>
#include <stdlib.h>
#include "graph/internal/graph.h"

#define INF (INT_MAX / 4)

struct kiln_ckpt_sched {
    int n;          /* units */
    int *cost[2];   /* [top][n * (n + 1) + s]: recomputed unit forwards, INF when impossible */
    int *split[2];  /* the first segment's length */
};

static int at(const kiln_ckpt_sched *k, int n, int s) { return n * (k->n + 1) + s; }

static void fill(kiln_ckpt_sched *k, int top, int n, int s) {
    int best = INF, bm = 1;
    for (int m = 1; n > 1 && s > 0 && m < n; m++) {
        if (!top && m > 1 && s < 2) continue; /* stepping past the first unit holds two values at once */
        int rest = k->cost[top][at(k, n - m, s - 1)], first = k->cost[0][at(k, m, s)];
        if (rest >= INF || first >= INF) continue;
        int c = (top ? 0 : m) + rest + first;
        if (c < best) best = c, bm = m;
    }
    k->cost[top][at(k, n, s)] = n == 1 ? 0 : best;
    k->split[top][at(k, n, s)] = n == 1 ? 1 : bm;
}

kiln_ckpt_sched *kiln_ckpt_sched_new(int units) {
    kiln_ckpt_sched *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->n = units > 0 ? units : 1;
    size_t cells = (size_t)(k->n + 1) * (size_t)(k->n + 1);
    for (int t = 0; t < 2; t++) {
        k->cost[t] = malloc(cells * sizeof(int));
        k->split[t] = malloc(cells * sizeof(int));
        if (!k->cost[t] || !k->split[t]) {
            kiln_ckpt_sched_free(k);
            return NULL;
        }
    }
    /* T before Top (Top reads T), smaller n first (both read smaller chains) */
    for (int t = 0; t < 2; t++)
        for (int n = 1; n <= k->n; n++)
            for (int s = 0; s <= k->n; s++) fill(k, t, n, s);
    return k;
}

void kiln_ckpt_sched_free(kiln_ckpt_sched *k) {
    if (!k) return;
    for (int t = 0; t < 2; t++) {
        free(k->cost[t]);
        free(k->split[t]);
    }
    free(k);
}

static int clamp(const kiln_ckpt_sched *k, int s) { return s < 0 ? 0 : s > k->n ? k->n : s; }

int kiln_ckpt_sched_cost(const kiln_ckpt_sched *k, int top, int n, int s) {
    if (n < 1 || n > k->n) return -1;
    int c = k->cost[top != 0][at(k, n, clamp(k, s))];
    return c >= INF ? -1 : c;
}

int kiln_ckpt_sched_split(const kiln_ckpt_sched *k, int top, int n, int s) {
    return n < 1 || n > k->n ? 1 : k->split[top != 0][at(k, n, clamp(k, s))];
}
