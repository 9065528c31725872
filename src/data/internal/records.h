/* Datasets of images, whatever holds them: an image folder (a file per sample)
 * and shards (a record per sample) are both `kiln_records`, handing out each
 * sample's bytes and label; imageset.c makes them one kind of kiln_dataset:
 * decoding, the transforms into the batch slot, the sample shape probed at
 * open, the per-thread decoders and the --cache. Private to src/data. */
#ifndef KILN_DATA_RECORDS_H
#define KILN_DATA_RECORDS_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include "data/internal/image.h"
#include "kiln/data.h"

#define KILN_RECORD_NAME (PATH_MAX + 64)

typedef struct kiln_record {
    const uint8_t *data;
    size_t n;
} kiln_record;

typedef struct kiln_records kiln_records;
struct kiln_records {
    int64_t len;
    int num_classes;
    char **classes;  /* the class names, by label */
    int32_t *labels; /* [len] */
    int decoded;     /* records hold decoded pixels (shard.h's layout), not image files */
    /* sample i's bytes (mapped, or read into ctx's buffer), valid until ctx's next
     * read; `name` (KILN_RECORD_NAME bytes) gets the file or record, for messages */
    kiln_status (*read)(const kiln_records *r, int64_t i, kiln_image_ctx *ctx, char *name, kiln_record *out);
    /* optional: these samples are read soon */
    void (*will_need)(const kiln_records *r, const int64_t *index, int64_t n);
    /* folds what identifies the data (names, sizes, modification times) into *h, for the cache's key */
    kiln_status (*fingerprint)(const kiln_records *r, uint64_t *h);
    void (*destroy)(kiln_records *r); /* frees everything, r included */
};

/* A dataset over r (taken over: destroyed with the dataset, or at once on
 * failure); `name` as "DIR train". Probes the sample shape from the first
 * sample of each class under the deterministic transforms. With dc->cache, the
 * samples' deterministic part is kept in a cache shard (cache.h). */
kiln_status kiln_imageset_open(kiln_records *r, const char *name, int train, const kiln_data_config *dc, kiln_dataset **out);

/* FNV-1a, 64 bits, folding n bytes into h (start from KILN_HASH_SEED) */
#define KILN_HASH_SEED 0xcbf29ce484222325ull
uint64_t kiln_hash(uint64_t h, const void *p, size_t n);

#endif
