/* What kiln pack's writers share (pack.c: image folders, pack_shard.c:
 * shards): a split of the data to pack, IDX data or an image folder, as
 * images ready to write (pack_source.c). Private to src/data. */
#ifndef KILN_DATA_PACK_H
#define KILN_DATA_PACK_H

#include <stdint.h>
#include "data/internal/records.h"
#include "data/internal/transform.h"

typedef struct kiln_pack_src {
    kiln_dataset *ds;       /* IDX data, or NULL */
    const uint8_t *pixels;  /* its images [len, rows, cols] and labels */
    const uint8_t *labels8;
    int rows, cols;
    kiln_records *r;        /* an image folder's split, or NULL */
    kiln_tf tf;             /* the resampler, for size */
    int64_t len;            /* 0: the split is absent (DIR/<class>/... has no test split) */
    int size, channels;     /* size > 0: every image resized to size x size */
    int side;               /* buffers of side * side * 4 bytes hold any image made */
    int num_classes;
    char **classes;         /* NULL for IDX data: the classes are "0".."9" */
} kiln_pack_src;

/* 1 when `from` is an image folder (not fashion-mnist, mnist or an IDX folder) */
int kiln_pack_is_folder(const char *from);
/* one split of `from`; channels 0: 1 for IDX data, 3 for an image folder. Anything
 * but IDX data or an image folder is an error naming `from`. */
kiln_status kiln_pack_src_open(const char *from, int train, int size, int channels, kiln_pack_src *p);
void kiln_pack_src_close(kiln_pack_src *p);
int32_t kiln_pack_src_label(const kiln_pack_src *p, int64_t i);
/* class k's name into buf (16 bytes at least for IDX data) */
const char *kiln_pack_src_class(const kiln_pack_src *p, int k, char *buf, size_t len);

/* A thread's scratch for making images. */
typedef struct kiln_pack_thread {
    kiln_image_ctx *ctx;
    kiln_tf_scratch scratch;
    uint8_t *buf;
    char name[KILN_RECORD_NAME];
} kiln_pack_thread;
kiln_status kiln_pack_thread_init(kiln_pack_thread *t, const kiln_pack_src *p);
void kiln_pack_thread_free(kiln_pack_thread *t);
/* one(ctx, i, t) for every i in [a, b), on every core, each thread with its own
 * kiln_pack_thread; the first error wins (its message is kept) */
typedef kiln_status (*kiln_pack_fn)(void *ctx, int64_t i, kiln_pack_thread *t);
kiln_status kiln_pack_each(const kiln_pack_src *p, int64_t a, int64_t b, kiln_pack_fn one, void *ctx);
/* image i with the source's channels, resized to size x size when size > 0
 * (grey IDX images copied to every channel for 3, as PIL's convert('RGB')) */
kiln_status kiln_pack_src_image(const kiln_pack_src *p, int64_t i, kiln_pack_thread *t, kiln_image *out);

#endif
