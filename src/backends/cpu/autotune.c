/* The cpu backend's autotuner: the CPU analogue of cudnn.benchmark. When a plan makes
 * its convolution objects, every direction of every conv is either looked up
 * (a decision from this process, the on-disk cache, or a resumed checkpoint)
 * or timed on its real shape with each algorithm oneDNN offers, keeping the
 * fastest (the timing itself is in src/kernels/dnnl/conv2d.c). This file keeps
 * the decisions across runs: it reads the on-disk cache before the first
 * tuning of the process and writes it back, atomically, when something new
 * was decided. A missing or unreadable cache only costs re-timing. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "backends/cpu/internal/cpu.h"
#include "base/internal/file.h"
#include "kernels/internal/dnnl_ops.h"

#define EXPORT_MAX 65536

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int loaded;
static char saved[EXPORT_MAX];

static void load_once(void) {
    if (loaded) return;
    loaded = 1;
    const char *path = kiln_autotune_cache_path();
    if (!path[0]) return;
    /* never waits on a FIFO in the cache's place; anything but a regular file is ignored */
    int fd = access(path, F_OK) == 0 ? kiln_open_read(path, NULL) : -1;
    if (fd < 0) {
        if (access(path, F_OK) == 0) kiln_log(KILN_LOG_WARN, "ignoring the autotune cache: %s", kiln_last_error());
        return;
    }
    static char text[EXPORT_MAX];
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    text[n > 0 ? n : 0] = 0;
    /* decisions already made in this process (e.g. from a resumed checkpoint) win */
    if (kiln_autotune_import(text, path, 0) != KILN_OK)
        kiln_log(KILN_LOG_WARN, "ignoring the autotune cache: %s (delete it to re-tune)", kiln_last_error());
    kiln_autotune_export(saved, sizeof saved);
}

void kiln_cpu_autotune_begin(void) {
    pthread_mutex_lock(&lock);
    load_once();
    pthread_mutex_unlock(&lock);
}

/* mkdir -p for the cache folder */
static int make_dirs(char *dir) {
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(dir, 0755) && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(dir, 0755) && errno != EEXIST ? -1 : 0;
}

void kiln_cpu_autotune_end(void) {
    pthread_mutex_lock(&lock);
    static char now[EXPORT_MAX];
    size_t n = kiln_autotune_export(now, sizeof now);
    const char *path = kiln_autotune_cache_path();
    if (n >= sizeof now || strcmp(now, saved) == 0 || !path[0]) {
        pthread_mutex_unlock(&lock);
        return;
    }
    char dir[1024], tmp[1100];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = (!slash || make_dirs(dir) == 0) ? fopen(tmp, "w") : NULL;
    int ok = f && fwrite(now, 1, n, f) == n;
    if (f) ok = fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) == 0) memcpy(saved, now, n + 1);
    else {
        unlink(tmp);
        kiln_log(KILN_LOG_DEBUG, "could not write the autotune cache %s", path);
    }
    pthread_mutex_unlock(&lock);
}

void kiln_cpu_autotune_reset(void) {
    pthread_mutex_lock(&lock);
    kiln_autotune_forget();
    loaded = 0;
    saved[0] = 0;
    pthread_mutex_unlock(&lock);
}
