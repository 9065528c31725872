/* --cache DIR: each sample's deterministic part (decoded, and resized when the
 * transforms resize deterministically) kept as a decoded shard
 * DIR/<split>-<key>.kshard, so later epochs skip decoding. The key is a hash of
 * the data's identity and the deterministic transform settings: a cache of
 * other data or settings is another file, never used by mistake. The first
 * epoch puts every sample (in any order, from any thread) into an unlinked
 * spill file; the put that completes it writes the shard atomically and
 * switches to it. Only a complete, valid file is used; a corrupt one is named
 * in a warning and rebuilt. Private to src/data. */
#ifndef KILN_DATA_CACHE_H
#define KILN_DATA_CACHE_H

#include <stdint.h>
#include "data/internal/image.h"

typedef struct kiln_cache kiln_cache;
/* `labels` (len of them) must outlive the cache. An unwritable DIR is an error naming it. */
kiln_status kiln_cache_open(const char *dir, const char *split, uint64_t key, int64_t len, const int32_t *labels,
                            kiln_cache **out);
/* 1 when the cache is complete: *im then holds sample i's stored pixels (read-only) and *name the cache file */
int kiln_cache_ready(const kiln_cache *c);
kiln_status kiln_cache_get(const kiln_cache *c, int64_t i, kiln_image *im, const char **name);
/* Keeps sample i's pixels (the first put of i counts). A write that fails
 * logs one warning and the run goes on without the cache. */
void kiln_cache_put(kiln_cache *c, int64_t i, const kiln_image *im);
/* Keeps that sample i is corrupt (its FORMAT error's message): later epochs
 * fail it again with the same message (--bad-samples skip then skips it),
 * and the cache still completes. */
void kiln_cache_put_failure(kiln_cache *c, int64_t i, const char *message);
void kiln_cache_free(kiln_cache *c);

#endif
