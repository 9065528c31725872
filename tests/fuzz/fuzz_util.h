/* Helpers shared by the fuzz targets. kiln's readers take paths, so a fuzz
 * input becomes a file: an anonymous memory file (memfd_create) reopened by
 * its /proc/self/fd path, rewritten for every input. Nothing lands on disk
 * and nothing is left behind, even when a run is killed. */
#ifndef KILN_FUZZ_UTIL_H
#define KILN_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "kiln/status.h"

typedef struct {
    int fd;
    char path[64];
} fuzz_file;

/* the memory file `f` (created on first use) now holds exactly data[0..n) */
static inline const char *fuzz_file_put(fuzz_file *f, const char *name, const void *data, size_t n) {
    if (!f->path[0]) {
        f->fd = memfd_create(name, MFD_CLOEXEC);
        if (f->fd < 0) {
            perror("memfd_create");
            abort();
        }
        snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
    }
    if (ftruncate(f->fd, 0) != 0) abort();
    const char *p = data;
    size_t done = 0;
    while (done < n) {
        ssize_t w = pwrite(f->fd, p + done, n - done, (off_t)done);
        if (w <= 0) abort();
        done += (size_t)w;
    }
    return f->path;
}

/* every failure must leave a message that names something; reading it all
 * lets ASan see a message built from freed memory */
static inline void fuzz_check_error(kiln_status st) {
    if (st == KILN_OK) return;
    const char *m = kiln_last_error();
    if (!m || !m[0]) {
        fprintf(stderr, "fuzz: a failure (status %d) without a message\n", (int)st);
        abort();
    }
    volatile size_t n = strlen(m);
    (void)n;
}

/* quiet library, no autotune cache on disk */
static inline void fuzz_quiet(void) {
    kiln_log_set_level(KILN_LOG_OFF);
    setenv("KILN_CACHE_DIR", "", 1);
}

/* An input that feeds two files: byte 0 is flags, bytes 1..4 the first part's
 * length (little-endian, cut to what is there), then the two parts. 0 when
 * the input is too short to say. */
static inline int fuzz_two_parts(const uint8_t **data, size_t *size, int *flags, size_t *first) {
    if (*size < 5) return 0;
    const uint8_t *d = *data;
    *flags = d[0];
    *first = (size_t)d[1] | (size_t)d[2] << 8 | (size_t)d[3] << 16 | (size_t)d[4] << 24;
    *data += 5;
    *size -= 5;
    if (*first > *size) *first = *size;
    return 1;
}

#endif
