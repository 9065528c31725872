/* --bind: each rank's threads on its own cpus. Affinity is set on the calling
 * thread and inside one OpenMP region on every thread of the team (a thread's
 * mask is its own), before the run starts its loader: threads created later
 * inherit the creating thread's mask. Which cpus: the ranks of a host exchange
 * their allowed masks first. When they are equal (nothing bound them), each
 * takes its slice (core) or a node (numa); when they differ, the launcher
 * (mpirun --bind-to, srun --cpu-bind) already gave each its own, and kiln keeps
 * that rather than slice a slice. */
#include "dist/internal/bind.h"
#include <errno.h>
#include <numa.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char host[240];
    cpu_set_t allowed;
} rank_cpus;

int kiln_bind_valid(const char *mode) {
    return mode && (strcmp(mode, "none") == 0 || strcmp(mode, "core") == 0 || strcmp(mode, "numa") == 0);
}

/* "0-3,8,10-11" */
static void cpus_text(const cpu_set_t *s, char *out, size_t len) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < CPU_SETSIZE && o < len; i++) {
        if (!CPU_ISSET(i, s)) continue;
        int j = i;
        while (j + 1 < CPU_SETSIZE && CPU_ISSET(j + 1, s)) j++;
        if (j > i) o += (size_t)snprintf(out + o, len - o, "%s%d-%d", o ? "," : "", i, j);
        else o += (size_t)snprintf(out + o, len - o, "%s%d", o ? "," : "", i);
        i = j;
    }
}

/* the i-th of k even slices of a set's cpus in ascending order; ranks share a cpu when there are fewer cpus than ranks */
static void slice(const cpu_set_t *all, int i, int k, cpu_set_t *out) {
    int n = CPU_COUNT(all), lo = n * i / k, hi = n * (i + 1) / k, at = 0;
    if (hi == lo) hi = lo + 1;
    CPU_ZERO(out);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, all) && at++ >= lo && at <= hi) CPU_SET(c, out);
}

/* a NUMA node's cpus that this process may use (m: scratch) */
static int node_cpus(int node, const cpu_set_t *allowed, struct bitmask *m, cpu_set_t *out) {
    CPU_ZERO(out);
    if (numa_node_to_cpus(node, m) != 0) return 0;
    for (int c = 0; c < CPU_SETSIZE && c < (int)m->size; c++)
        if (numa_bitmask_isbitset(m, (unsigned)c) && CPU_ISSET(c, allowed)) CPU_SET(c, out);
    return CPU_COUNT(out);
}

/* the node local rank i of k takes, among the nodes with allowed cpus (spread
 * evenly), and its allowed cpus in out; -1 on a host of one such node */
static int numa_pick(const cpu_set_t *allowed, int i, int k, cpu_set_t *out) {
    if (numa_available() < 0 || numa_num_configured_nodes() < 2) return -1;
    struct bitmask *m = numa_allocate_cpumask();
    int nodes[CPU_SETSIZE], n = 0;
    for (int node = 0; m && node <= numa_max_node() && n < CPU_SETSIZE; node++)
        if (node_cpus(node, allowed, m, out) > 0) nodes[n++] = node;
    int node = n < 2 ? -1 : nodes[(int64_t)i * n / k];
    if (node >= 0) node_cpus(node, allowed, m, out);
    if (m) numa_free_cpumask(m);
    return node;
}

/* this thread and every thread of the OpenMP team; node >= 0: its memory preferred too */
static kiln_status apply(const cpu_set_t *set, int node, const char *mode) {
    int bad = sched_setaffinity(0, sizeof *set, set) != 0 ? errno : 0;
#pragma omp parallel
    {
        if (sched_setaffinity(0, sizeof *set, set) != 0) {
#pragma omp atomic write
            bad = errno;
        }
        if (node >= 0) numa_set_preferred(node);
    }
    if (node >= 0) numa_set_preferred(node);
    return bad ? kiln_fail(KILN_ERR_INVALID_ARG, "--bind %s: sched_setaffinity failed: %s", mode, strerror(bad)) : KILN_OK;
}

kiln_status kiln_bind_threads(kiln_comm *c, const char *mode, char *what, size_t len) {
    what[0] = 0;
    if (!mode || strcmp(mode, "none") == 0) return KILN_OK;
    if (!kiln_bind_valid(mode)) return kiln_fail(KILN_ERR_INVALID_ARG, "--bind %s: use none, core or numa", mode);
    int world = kiln_comm_size(c), rank = kiln_comm_rank(c);
    rank_cpus mine = {0}, *all = calloc((size_t)world, sizeof *all);
    if (!all) return kiln_fail(KILN_ERR_NOMEM, "--bind: out of memory");
    snprintf(mine.host, sizeof mine.host, "%s", kiln_comm_host(c));
    if (sched_getaffinity(0, sizeof mine.allowed, &mine.allowed) != 0) {
        free(all);
        return kiln_fail(KILN_ERR_INVALID_ARG, "--bind %s: sched_getaffinity failed: %s", mode, strerror(errno));
    }
    kiln_status st = kiln_comm_allgather(c, &mine, all, sizeof mine, "the --bind exchange");
    int i = 0, k = 0, same = 1;
    for (int r = 0; st == KILN_OK && r < world; r++) {
        if (strcmp(all[r].host, mine.host) != 0) continue;
        i += r < rank;
        k++;
        same &= CPU_EQUAL(&all[r].allowed, &mine.allowed);
    }
    free(all);
    if (st != KILN_OK) return st;
    char cpus[128];
    cpu_set_t set;
    if (!same) {
        cpus_text(&mine.allowed, cpus, sizeof cpus);
        snprintf(what, len, "cpus %s as the launcher bound it (--bind %s keeps that)", cpus, mode);
        return KILN_OK;
    }
    int node = strcmp(mode, "numa") == 0 ? numa_pick(&mine.allowed, i, k, &set) : -1;
    if (node < 0) slice(&mine.allowed, i, k, &set);
    cpus_text(&set, cpus, sizeof cpus);
    if (node >= 0) snprintf(what, len, "bound to NUMA node %d, cpus %s (--bind numa, local rank %d of %d)", node, cpus, i, k);
    else if (strcmp(mode, "numa") == 0)
        snprintf(what, len, "bound to cpus %s (--bind numa on a host of one NUMA node: as core, local rank %d of %d)", cpus, i, k);
    else snprintf(what, len, "bound to cpus %s (--bind core, local rank %d of %d)", cpus, i, k);
    return apply(&set, node, mode);
}
