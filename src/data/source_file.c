/* A shard's bytes from a local file: opened distrustfully (a FIFO or device is
 * refused, never waited on), memory-mapped read-only once and shared by every
 * worker, so a record is a pointer into the map and the page cache holds the
 * only copy. `read` is a bounds-checked copy for callers that want one. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "base/internal/file.h"
#include "data/internal/source.h"

typedef struct {
    kiln_source s;
    char *path;
} file_source;

static kiln_status file_read(kiln_source *s, int64_t off, int64_t len, void *dst) {
    if (off < 0 || len < 0 || off > s->size || len > s->size - off)
        return kiln_fail(KILN_ERR_FORMAT, "%s: bytes %lld..%lld are beyond its end (%lld bytes): truncated?", s->name,
                         (long long)off, (long long)(off + len), (long long)s->size);
    if (len) memcpy(dst, s->map + off, (size_t)len);
    return KILN_OK;
}

/* the pages of the ranges are read ahead by the kernel (a hint; errors do not matter) */
static void file_will_need(kiln_source *s, int n, const int64_t *off, const int64_t *len) {
    long page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < n; i++) {
        if (off[i] < 0 || len[i] <= 0 || off[i] >= s->size) continue;
        int64_t a = off[i] / page * page, b = off[i] + len[i] < s->size ? off[i] + len[i] : s->size;
        madvise((void *)(s->map + a), (size_t)(b - a), MADV_WILLNEED);
    }
}

static void file_close(kiln_source *s) {
    file_source *f = (file_source *)s;
    if (s->map && s->size) munmap((void *)s->map, (size_t)s->size);
    free(f->path);
    free(f);
}

static const kiln_source_ops file_ops = {file_read, file_will_need, file_close};

kiln_status kiln_source_open_file(const char *path, kiln_source **out) {
    *out = NULL;
    int64_t size = 0;
    int fd = kiln_open_read(path, &size); /* sets the message */
    if (fd < 0) return KILN_ERR_IO;
    file_source *f = calloc(1, sizeof *f);
    char *p = strdup(path);
    if (!f || !p) {
        close(fd);
        free(f);
        free(p);
        return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", path);
    }
    void *map = size ? mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0) : NULL;
    close(fd);
    if (map == MAP_FAILED) {
        free(f);
        free(p);
        return kiln_fail(KILN_ERR_IO, "%s: cannot map %lld bytes", path, (long long)size);
    }
    f->path = p;
    f->s = (kiln_source){&file_ops, p, size, map};
    *out = &f->s;
    return KILN_OK;
}

int kiln_source_is_url(const char *name) {
    return name && (strncmp(name, "http://", 7) == 0 || strncmp(name, "https://", 8) == 0);
}
