/* --bind none|core|numa: pins a rank's threads (the OpenMP team, and the
 * threads it starts later: loader workers inherit the mask) to its share of
 * its host's cpus, so ranks sharing a host do not trade cores and caches. */
#ifndef KILN_DIST_BIND_H
#define KILN_DIST_BIND_H

#include <stddef.h>
#include "dist/internal/comm.h"

/* 1 when mode is none, core or numa */
int kiln_bind_valid(const char *mode);

/* Collective (every rank calls it with the same mode): core pins this rank to
 * its local rank's slice of the cpus the host's ranks were allowed; numa pins
 * it to one NUMA node's cpus (ranks spread over the nodes) and prefers that
 * node's memory, or does what core does on a host of one node. Ranks the
 * launcher already bound (their masks differ) keep the launcher's binding.
 * what: the outcome for the log ("cpus 0-3 (core)"; "" for none). */
kiln_status kiln_bind_threads(kiln_comm *c, const char *mode, char *what, size_t len);

#endif
