/* The on-disk memory of a backend's autotune decisions (the cpu's oneDNN
 * algorithms, the GPU's cuDNN algorithms): read before the first tuning of
 * the process, written back atomically when something new was decided. A
 * missing or unreadable file only costs re-timing; a FIFO or folder in its
 * place is ignored without waiting on it; a corrupt one is ignored with a
 * warning naming it and rewritten. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "backends/internal/backend.h"
#include "base/internal/file.h"

const char *kiln_cache_path(const char *name, char *buf, size_t len) {
    const char *dir = getenv("KILN_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (dir && !dir[0]) return ""; /* KILN_CACHE_DIR= : no cache (tests) */
    if (dir) snprintf(buf, len, "%s/%s", dir, name);
    else if (xdg && xdg[0]) snprintf(buf, len, "%s/kiln/%s", xdg, name);
    else if (home && home[0]) snprintf(buf, len, "%s/.cache/kiln/%s", home, name);
    else return "";
    return buf;
}

void kiln_decision_file_load(kiln_decision_file *f) {
    pthread_mutex_lock(&f->lock);
    char path[1024];
    const char *p = f->loaded ? "" : kiln_cache_path(f->name, path, sizeof path);
    f->loaded = 1;
    int fd = p[0] && access(p, F_OK) == 0 ? kiln_open_read(p, NULL) : -1;
    if (fd < 0 && p[0] && access(p, F_OK) == 0) kiln_log(KILN_LOG_WARN, "ignoring the autotune cache: %s", kiln_last_error());
    if (fd >= 0) {
        static char text[KILN_DECISIONS_MAX];
        ssize_t n = read(fd, text, sizeof text - 1);
        close(fd);
        text[n > 0 ? n : 0] = 0;
        /* decisions already made in this process (e.g. from a resumed checkpoint) win; a corrupt file
         * adds nothing (the importer checks every line first) and is rewritten at the next save */
        if (n >= (ssize_t)sizeof text - 1)
            kiln_log(KILN_LOG_WARN, "ignoring the autotune cache %s: over %d bytes; it is rewritten", p, KILN_DECISIONS_MAX - 1);
        else if (f->import_keep(text, p) != KILN_OK)
            kiln_log(KILN_LOG_WARN, "ignoring the autotune cache: %s; it is rewritten", kiln_last_error());
        else f->export_all(f->saved, sizeof f->saved);
        f->stale = f->saved[0] == 0;
    }
    pthread_mutex_unlock(&f->lock);
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

void kiln_decision_file_save(kiln_decision_file *f) {
    pthread_mutex_lock(&f->lock);
    static char now[KILN_DECISIONS_MAX];
    char path[1024], dir[1024], tmp[1100];
    size_t n = f->export_all(now, sizeof now);
    const char *p = kiln_cache_path(f->name, path, sizeof path);
    if (n >= sizeof now || (!f->stale && strcmp(now, f->saved) == 0) || !p[0]) {
        pthread_mutex_unlock(&f->lock);
        return;
    }
    snprintf(dir, sizeof dir, "%s", p);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());
    FILE *out = (!slash || make_dirs(dir) == 0) ? fopen(tmp, "w") : NULL;
    int ok = out && fwrite(now, 1, n, out) == n;
    if (out) ok = fclose(out) == 0 && ok;
    if (ok && rename(tmp, p) == 0) {
        memcpy(f->saved, now, n + 1);
        f->stale = 0;
    }
    else {
        unlink(tmp);
        kiln_log(KILN_LOG_DEBUG, "could not write the autotune cache %s", p);
    }
    pthread_mutex_unlock(&f->lock);
}

void kiln_decision_file_reset(kiln_decision_file *f) {
    pthread_mutex_lock(&f->lock);
    f->loaded = 0;
    f->stale = 0;
    f->saved[0] = 0;
    pthread_mutex_unlock(&f->lock);
}
