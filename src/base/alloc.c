/* Aligned caching allocator. Blocks are rounded up to a size class (powers of
 * two, with three intermediate steps each, so waste stays under 25 %) and
 * recycled through per-class free lists, so a training loop that frees and
 * allocates the same sizes never goes back to the OS. A 64-byte header in
 * front of every block keeps its class and keeps the payload 64-byte aligned. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "kiln/alloc.h"

#define HEADER 64
#define NCLASS 256

typedef struct block {
    struct block *next;
    size_t cls_bytes;
    int cls;
} block;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static block *g_free[NCLASS];
static kiln_alloc_stats g_stats;

static int size_class(size_t n, size_t *cls_bytes) {
    if (n < 64) n = 64;
    int e = 63 - __builtin_clzll((unsigned long long)n); /* 2^e <= n */
    size_t base = (size_t)1 << e;
    size_t step = base >> 2;
    size_t q = (n - base + step - 1) / step; /* 0..4 */
    size_t bytes = base + q * step;
    int cls = e * 4 + (int)q;
    *cls_bytes = bytes;
    return cls < NCLASS ? cls : -1;
}

void *kiln_alloc(size_t bytes) {
    size_t cb;
    int cls = size_class(bytes, &cb);
    if (cls < 0 || cb > ((size_t)1 << 46)) return NULL;
    pthread_mutex_lock(&g_lock);
    g_stats.allocs++;
    block *b = g_free[cls];
    if (b) {
        g_free[cls] = b->next;
        g_stats.cache_hits++;
    }
    pthread_mutex_unlock(&g_lock);
    if (!b) {
        void *raw = NULL;
        if (posix_memalign(&raw, KILN_ALIGN, HEADER + cb) != 0) return NULL;
        b = raw;
        b->cls = cls;
        b->cls_bytes = cb;
        pthread_mutex_lock(&g_lock);
        g_stats.reserved += cb;
        pthread_mutex_unlock(&g_lock);
    }
    pthread_mutex_lock(&g_lock);
    g_stats.current += cb;
    if (g_stats.current > g_stats.peak) g_stats.peak = g_stats.current;
    pthread_mutex_unlock(&g_lock);
    return (char *)b + HEADER;
}

void *kiln_calloc(size_t bytes) {
    void *p = kiln_alloc(bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void kiln_free(void *p) {
    if (!p) return;
    block *b = (block *)((char *)p - HEADER);
    pthread_mutex_lock(&g_lock);
    g_stats.current -= b->cls_bytes;
    b->next = g_free[b->cls];
    g_free[b->cls] = b;
    pthread_mutex_unlock(&g_lock);
}

void kiln_alloc_get_stats(kiln_alloc_stats *out) {
    pthread_mutex_lock(&g_lock);
    *out = g_stats;
    pthread_mutex_unlock(&g_lock);
}

void kiln_alloc_release_cached(void) {
    pthread_mutex_lock(&g_lock);
    for (int c = 0; c < NCLASS; c++) {
        block *b = g_free[c];
        while (b) {
            block *next = b->next;
            g_stats.reserved -= b->cls_bytes;
            free(b);
            b = next;
        }
        g_free[c] = NULL;
    }
    pthread_mutex_unlock(&g_lock);
}
