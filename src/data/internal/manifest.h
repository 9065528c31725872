/* The manifest of a folder of shards, OUT/index.json (jansson):
 *
 *   {"format": "kiln-shards", "version": 1, "records": "encoded"|"decoded",
 *    "classes": ["name", ...],
 *    "splits": {"train": {"count": N, "shards": [{"file": "train-00000.kshard", "count": n}, ...]},
 *               "test": {...}}}
 *
 * Shard files are plain names inside OUT (no '/', not starting with '.'), so a
 * manifest never points elsewhere. Private to src/data. */
#ifndef KILN_DATA_MANIFEST_H
#define KILN_DATA_MANIFEST_H

#include <stdint.h>
#include "kiln/status.h"

#define KILN_MANIFEST_NAME "index.json"
#define KILN_MANIFEST_MAX_BYTES ((int64_t)1 << 26)
#define KILN_MANIFEST_MAX_CLASSES 100000
#define KILN_MANIFEST_MAX_SHARDS 1000000

typedef struct kiln_manifest_split {
    int present;
    int64_t count;      /* the sum of the shards' counts */
    int nshards;
    char **files;
    int64_t *counts;
} kiln_manifest_split;

typedef struct kiln_manifest {
    int decoded;        /* records are pixels (KILN_SHARD_DECODED), not files */
    int num_classes;
    char **classes;
    kiln_manifest_split split[2]; /* [0] test, [1] train */
} kiln_manifest;

/* Parses and checks a manifest's text; `name` is for messages. */
kiln_status kiln_manifest_parse(const char *text, size_t n, const char *name, kiln_manifest *m);
void kiln_manifest_free(kiln_manifest *m);
/* Adds a shard to a split (for writers). */
kiln_status kiln_manifest_add(kiln_manifest *m, int train, const char *file, int64_t count);
/* Writes dir/index.json atomically (a temporary, then a rename). */
kiln_status kiln_manifest_write(const char *dir, const kiln_manifest *m);

#endif
