/* Transforms of images held raw in memory (CIFAR-10's and IDX's uint8
 * pixels): each sample is laid out as an HWC image in a per-thread buffer and
 * resampled by kiln_tf_apply (transform.c), as image folders are. */
#ifndef KILN_DATA_RAW_TRANSFORM_H
#define KILN_DATA_RAW_TRANSFORM_H

#include <pthread.h>
#include <stdint.h>
#include "data/internal/transform.h"

/* a thread's buffers: the sample as HWC, the resampler's scratch */
typedef struct kiln_raw_buf {
    uint8_t *hwc;
    kiln_tf_scratch tf;
    struct kiln_raw_buf *next;
} kiln_raw_buf;

/* buffers for any number of loader threads, one per thread that ever needed one, kept for reuse */
typedef struct kiln_raw_pool {
    pthread_mutex_t mu;
    kiln_raw_buf *free;
    size_t hwc_bytes;
} kiln_raw_pool;

void kiln_raw_pool_init(kiln_raw_pool *p, size_t hwc_bytes);
/* a buffer of hwc_bytes; NULL when out of memory */
kiln_raw_buf *kiln_raw_pool_take(kiln_raw_pool *p);
void kiln_raw_pool_give(kiln_raw_pool *p, kiln_raw_buf *b);
void kiln_raw_pool_free(kiln_raw_pool *p);

/* The sample shape [channels, h, w] the deterministic transforms give a w x h
 * image (a crop larger than the image fails here, naming `name`); *direct: the
 * transforms change nothing (no resampling needed, only the table and a flip). */
kiln_status kiln_raw_shape(const kiln_tf *t, int w, int h, const char *name, int64_t shape[3], int *direct);

#endif
