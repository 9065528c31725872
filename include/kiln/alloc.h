/* kiln/alloc.h — the aligned caching allocator (src/base/alloc.c).
 *
 *     float *p = kiln_alloc(n * sizeof(float));   // 64-byte aligned, from the cache
 *     ...
 *     kiln_free(p);                               // back to the cache
 *
 * kiln_alloc_get_stats reports what the allocator holds: `current` bytes
 * handed out, their `peak`, and `reserved` bytes obtained from the OS (current
 * plus cached free blocks). Part of the base layer: it needs nothing else.
 */
#ifndef KILN_ALLOC_H
#define KILN_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_ALIGN 64

/* Aligned caching allocator: blocks are 64-byte aligned and recycled by size class. */
void *kiln_alloc(size_t bytes);
void *kiln_calloc(size_t bytes);
void kiln_free(void *p);
typedef struct kiln_alloc_stats {
    size_t current;   /* bytes handed out now */
    size_t peak;      /* largest `current` seen */
    size_t reserved;  /* bytes held from the OS: handed out + cached */
    uint64_t allocs;  /* kiln_alloc calls */
    uint64_t cache_hits;
} kiln_alloc_stats;
void kiln_alloc_get_stats(kiln_alloc_stats *out);
void kiln_alloc_release_cached(void); /* give cached free blocks back to the OS */

#ifdef __cplusplus
}
#endif
#endif
