/* Where the bytes of a packed shard come from: a local file (memory-mapped,
 * shared by every worker) or a URL (libcurl's ranged GETs over a pool of
 * kept-alive connections). The shard reader (shard.c) sees only this
 * interface, so local and remote data are read by the same code. Private to
 * src/data. */
#ifndef KILN_DATA_SOURCE_H
#define KILN_DATA_SOURCE_H

#include <stdint.h>
#include "kiln/status.h"

typedef struct kiln_source kiln_source;
typedef struct kiln_source_ops {
    /* len bytes at off into dst; thread-safe; a short object, a failed
     * request or an I/O error is an error naming the file or URL */
    kiln_status (*read)(kiln_source *s, int64_t off, int64_t len, void *dst);
    /* a hint that these ranges are read soon (a remote source starts fetching
     * them, several requests in flight); may be NULL; never fails */
    void (*will_need)(kiln_source *s, int n, const int64_t *off, const int64_t *len);
    void (*close)(kiln_source *s);
} kiln_source_ops;

struct kiln_source {
    const kiln_source_ops *ops;
    const char *name;    /* path or URL, for messages */
    int64_t size;        /* bytes in the object */
    const uint8_t *map;  /* the whole object when memory-mapped (local files), else NULL */
};

/* A local file, memory-mapped read-only (a regular file; a FIFO or a device is refused). */
kiln_status kiln_source_open_file(const char *path, kiln_source **out);
/* 1 when `name` is an http:// or https:// URL */
int kiln_source_is_url(const char *name);
/* A URL (http.c). Every source opened under one client shares its connection pool. */
typedef struct kiln_http_client kiln_http_client;
kiln_status kiln_http_client_new(kiln_http_client **out);
void kiln_http_client_free(kiln_http_client *c);
kiln_status kiln_source_open_url(kiln_http_client *c, const char *url, kiln_source **out);

static inline kiln_status kiln_source_read(kiln_source *s, int64_t off, int64_t len, void *dst) {
    return s->ops->read(s, off, len, dst);
}
static inline void kiln_source_close(kiln_source *s) {
    if (s) s->ops->close(s);
}

#endif
