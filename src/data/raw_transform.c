/* The buffers and sample shape shared by the in-memory datasets whose samples
 * go through the image transforms (cifar.c, idx.c). */
#include <stdlib.h>
#include "data/internal/raw_transform.h"

void kiln_raw_pool_init(kiln_raw_pool *p, size_t hwc_bytes) {
    pthread_mutex_init(&p->mu, NULL);
    p->free = NULL;
    p->hwc_bytes = hwc_bytes;
}

kiln_raw_buf *kiln_raw_pool_take(kiln_raw_pool *p) {
    pthread_mutex_lock(&p->mu);
    kiln_raw_buf *b = p->free;
    if (b) p->free = b->next;
    pthread_mutex_unlock(&p->mu);
    if (b) return b;
    b = calloc(1, sizeof *b);
    if (b && !(b->hwc = malloc(p->hwc_bytes ? p->hwc_bytes : 1))) {
        free(b);
        b = NULL;
    }
    return b;
}

void kiln_raw_pool_give(kiln_raw_pool *p, kiln_raw_buf *b) {
    pthread_mutex_lock(&p->mu);
    b->next = p->free;
    p->free = b;
    pthread_mutex_unlock(&p->mu);
}

void kiln_raw_pool_free(kiln_raw_pool *p) {
    while (p->free) {
        kiln_raw_buf *b = p->free;
        p->free = b->next;
        kiln_tf_scratch_free(&b->tf);
        free(b->hwc);
        free(b);
    }
    pthread_mutex_destroy(&p->mu);
}

kiln_status kiln_raw_shape(const kiln_tf *t, int w, int h, const char *name, int64_t shape[3], int *direct) {
    kiln_tf fixed = *t;
    fixed.random = fixed.hflip = 0;
    kiln_tf_box b;
    kiln_status st = kiln_tf_plan(&fixed, w, h, 0, name, &b);
    if (st != KILN_OK) return st;
    if (t->random) b.x.out = b.y.out = t->rrc;
    shape[0] = t->channels;
    shape[1] = b.y.out;
    shape[2] = b.x.out;
    /* an identity box (no resize, no crop, or ones that change nothing) needs no resampling */
    *direct = !t->random && b.x.out == w && b.y.out == h && b.x.s == 1 && b.y.s == 1 && !b.x.off && !b.y.off;
    return KILN_OK;
}
