/* Per-kernel timing of a plan's runs: the --profile report and the
 * end-of-run "what holds this run back" line. */
#include <stdio.h>
#include <stdlib.h>
#include "graph/internal/plan.h"

void kiln_plan_set_profile(kiln_plan *pl, int on) {
    free(pl->node_time);
    pl->node_time = on ? calloc((size_t)pl->norder, sizeof(double)) : NULL;
    pl->profiled_runs = 0;
}

void kiln_plan_profile_report(const kiln_plan *pl, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    if (!pl->node_time || !pl->profiled_runs) return;
    double total = 0;
    for (int s = 0; s < pl->norder; s++) total += pl->node_time[s];
    o += (size_t)snprintf(buf, len, "per-step time by kernel over %lld runs (%.2f ms/step):\n", (long long)pl->profiled_runs,
                          1e3 * total / (double)pl->profiled_runs);
    for (int s = 0; s < pl->norder && o < len; s++) {
        const kiln_node *n = &pl->g->nodes[pl->order[s]];
        o += (size_t)snprintf(buf + o, len - o, "  %-22s %7.3f ms  %5.1f%%%s\n", n->name,
                              1e3 * pl->node_time[s] / (double)pl->profiled_runs, 100 * pl->node_time[s] / total,
                              n->fuse_relu ? "  (+relu)" : n->relu_mask ? "  (+relu:bwd)" : "");
    }
}

int kiln_plan_profile_top(const kiln_plan *pl, int k, const char **names, double *ms) {
    if (!pl->node_time || !pl->profiled_runs) return 0;
    int n = 0;
    for (int s = 0; s < pl->norder; s++) {
        double t = 1e3 * pl->node_time[s] / (double)pl->profiled_runs;
        int at = n < k ? n++ : k; /* insertion into a sorted top-k */
        while (at > 0 && ms[at - 1] < t) {
            if (at < k) {
                ms[at] = ms[at - 1];
                names[at] = names[at - 1];
            }
            at--;
        }
        if (at < k) {
            ms[at] = t;
            names[at] = pl->g->nodes[pl->order[s]].name;
        }
    }
    return n;
}
