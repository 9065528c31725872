/* How long this process's threads have waited for a CPU: the time they were
 * ready to run while other work held the cores. Timings taken while it grows
 * measure the machine's load, not the code (the conv autotuner uses it to
 * keep such timings out of the cache). */
#ifndef KILN_BASE_SCHED_WAIT_H
#define KILN_BASE_SCHED_WAIT_H

#include <stdint.h>

/* nanoseconds summed over the process's threads (Linux keeps them in
 * /proc/self/task/N/schedstat); -1 where the kernel does not */
int64_t kiln_sched_wait_ns(void);

#endif
