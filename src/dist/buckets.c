/* Gradient buckets and the step after which each is written. See
 * dist/internal/buckets.h. */
#include "dist/internal/buckets.h"
#include <stdlib.h>
#include "graph/internal/plan_hook.h"

/* the bucket of parameters first..last: its slice up to the next parameter's start
 * (or the buffer's end), so padding between them goes along */
static void slice(kiln_params *P, kiln_bucket *b, int first, int last) {
    int np = kiln_params_count(P);
    b->first = first;
    b->last = last;
    b->off = kiln_params_offset(P, first);
    int64_t end = last + 1 < np ? kiln_params_offset(P, last + 1) : kiln_params_total(P);
    b->n = end - b->off;
}

/* The last buckets, written at backward's very end, cannot hide behind it: the
 * first parameters go in buckets of at most 4 KiB (one eager MPI message), then
 * 64 KiB, so that little is left to reduce once backward ends and the bucket
 * before them is ready some steps earlier. Returns how many parameters they hold. */
static int tail(kiln_params *P, double cap, double elem, kiln_bucket *t, int *nt) {
    static const double tiers[] = {4096, 65536};
    int p = 0, np = kiln_params_count(P);
    *nt = 0;
    for (int i = 0; i < 2 && tiers[i] < cap && p < np - 1; i++) {
        int first = p;
        double bytes = 0;
        while (p < np - 1 && (bytes == 0 || bytes + (double)kiln_params_numel(P, p) * elem <= tiers[i]))
            bytes += (double)kiln_params_numel(P, p++) * elem;
        slice(P, &t[(*nt)++], first, p - 1);
    }
    return p;
}

/* parameters from the last down, a bucket closed once it holds bucket_mb (or a quarter of all)
 * (so one larger parameter makes a bucket of its own size); the first at most
 * 1 MiB, as PyTorch DDP's first_bucket_bytes_cap: the last layers' gradients,
 * ready first, start reducing early even in a model smaller than a bucket;
 * then the tail's small buckets */
static kiln_status split(kiln_params *P, double bucket_mb, kiln_buckets *B) {
    int np = kiln_params_count(P);
    double elem = kiln_params_dtype(P) == KILN_F64 ? 8 : 4;
    /* at most a quarter of the gradients too: a model smaller than a few buckets still overlaps */
    double cap = bucket_mb * 1048576.0, quarter = (double)kiln_params_total(P) * elem / 4;
    if (quarter > 0 && quarter < cap) cap = quarter;
    B->b = calloc((size_t)(np ? np : 1), sizeof *B->b);
    if (!B->b) return kiln_fail(KILN_ERR_NOMEM, "buckets: out of memory");
    kiln_bucket t[2];
    int nt = 0, lo = np > 0 ? tail(P, cap, elem, t, &nt) : 0;
    for (int p = np - 1; p >= lo;) {
        double limit = B->nb == 0 && cap > 1048576.0 ? 1048576.0 : cap, bytes = 0;
        int last = p;
        while (p >= lo && (bytes == 0 || bytes + (double)kiln_params_numel(P, p) * elem <= limit))
            bytes += (double)kiln_params_numel(P, p--) * elem;
        slice(P, &B->b[B->nb++], p + 1, last);
    }
    while (nt > 0) B->b[B->nb++] = t[--nt];
    return KILN_OK;
}

/* each bucket's ready step in each list: the latest last writer of its parameters */
static kiln_status ready_steps(kiln_params *P, const kiln_plan *plan, kiln_buckets *B) {
    B->nlists = kiln_plan_list_count(plan);
    int np = kiln_params_count(P);
    B->ready = malloc((size_t)(B->nlists * B->nb + 1) * sizeof *B->ready);
    int *last = malloc((size_t)(np ? np : 1) * sizeof *last);
    kiln_status st = B->ready && last ? KILN_OK : kiln_fail(KILN_ERR_NOMEM, "buckets: out of memory");
    for (int l = 0; st == KILN_OK && l < B->nlists; l++) {
        st = kiln_plan_grad_writers(plan, l, last);
        for (int i = 0; st == KILN_OK && i < B->nb; i++) {
            int r = -1;
            for (int p = B->b[i].first; p <= B->b[i].last; p++) r = last[p] > r ? last[p] : r;
            B->ready[l * B->nb + i] = r;
        }
    }
    free(last);
    return st;
}

kiln_status kiln_buckets_make(kiln_params *P, const kiln_plan *plan, double bucket_mb, kiln_buckets *out) {
    *out = (kiln_buckets){0};
    if (!(bucket_mb > 0)) return kiln_fail(KILN_ERR_INVALID_ARG, "--bucket-mb is %g; use a size > 0 (MiB)", bucket_mb);
    kiln_status st = split(P, bucket_mb, out);
    if (st == KILN_OK) st = ready_steps(P, plan, out);
    if (st != KILN_OK) kiln_buckets_free(out);
    return st;
}

void kiln_buckets_free(kiln_buckets *B) {
    free(B->b);
    free(B->ready);
    *B = (kiln_buckets){0};
}
