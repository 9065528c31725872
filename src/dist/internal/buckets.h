/* Gradient buckets: contiguous slices of the flat gradient buffer, in reverse
 * parameter order (backward writes the last layers' gradients first), each
 * about bucket_mb large; and, per step list of the plan, the step after which
 * backward has written the whole bucket (its parameters' last writers), so
 * its all-reduce can start there. No copies: a bucket is an offset and a
 * length. docs/distributed.md. */
#ifndef KILN_DIST_BUCKETS_H
#define KILN_DIST_BUCKETS_H

#include "kiln/graph.h"

typedef struct {
    int64_t off, n;          /* elements of the flat gradient buffer */
    int first, last;         /* its parameters, first <= p <= last */
} kiln_bucket;

typedef struct {
    kiln_bucket *b;          /* b[0] holds the last parameters: the first ready */
    int nb;
    int nlists;
    int *ready;              /* ready[list * nb + i]: bucket i is written once this step has run (-1: before the run) */
} kiln_buckets;

/* the buckets of P's gradients for the plan's backward; bucket_mb > 0 */
kiln_status kiln_buckets_make(kiln_params *P, const kiln_plan *plan, double bucket_mb, kiln_buckets *out);
void kiln_buckets_free(kiln_buckets *B);
static inline int kiln_bucket_ready(const kiln_buckets *B, int list, int i) { return B->ready[list * B->nb + i]; }

#endif
