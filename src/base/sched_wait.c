/* The run-queue wait of this process's threads, from the second field of
 * /proc/self/task/N/schedstat (time runnable but not running). No library
 * reads it; a thread that exits between two reads takes its share with it,
 * so callers treat a decrease as no wait. */
#include <dirent.h>
#include <stdio.h>
#include "base/internal/sched_wait.h"

int64_t kiln_sched_wait_ns(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int64_t sum = 0;
    int any = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%.20s/schedstat", e->d_name);
        FILE *f = fopen(path, "r");
        unsigned long long run, wait;
        if (f && fscanf(f, "%llu %llu", &run, &wait) == 2) {
            sum += (int64_t)wait;
            any = 1;
        }
        if (f) fclose(f);
    }
    closedir(d);
    return any ? sum : -1;
}
