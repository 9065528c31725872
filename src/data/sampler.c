/* Samplers: which dataset indices an epoch visits, in which order. Every one
 * is a pure function of (settings, epoch), so the loader may compute an epoch
 * early (prefetch across the epoch boundary) or again (resume) and get the
 * same batches. */
#include <stdlib.h>
#include "base/internal/rng.h"
#include "kiln/data.h"

void kiln_shuffle_indices(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch) {
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    /* "shuf" keeps this stream apart from other users of (seed, epoch) */
    uint64_t key = kiln_rng_key(seed ^ 0x73687566ull, (uint64_t)epoch, 0x5045524dull);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)kiln_rng_bounded(key, (uint64_t)i, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static int world_of(const kiln_loader_config *c) { return c->world > 1 ? c->world : 1; }

/* DistributedSampler's num_samples: floor with drop_last, else ceil (padded) */
static int64_t builtin_len(const kiln_sampler *s, int64_t n) {
    const kiln_loader_config *c = s->ctx;
    int64_t w = world_of(c);
    if (w == 1) return n;
    return c->drop_last ? n / w : (n + w - 1) / w;
}

/* the whole epoch's order (permuted or not), then this rank's share: index
 * rank, rank + world, ... of it, wrapping to its start for the padding */
static kiln_status builtin_order(const kiln_sampler *s, int64_t n, int64_t epoch, int64_t *out) {
    const kiln_loader_config *c = s->ctx;
    int64_t w = world_of(c), m = builtin_len(s, n);
    if (w == 1) {
        if (c->shuffle) kiln_shuffle_indices(out, n, c->seed, epoch);
        else
            for (int64_t i = 0; i < n; i++) out[i] = i;
        return KILN_OK;
    }
    /* out has room for m, not n: draw the permutation position by position */
    for (int64_t k = 0; k < m; k++) {
        int64_t pos = (c->rank + k * w) % n; /* padding repeats the start, as PyTorch's */
        out[k] = pos;
    }
    if (!c->shuffle) return KILN_OK;
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)n);
    if (!perm) return kiln_fail(KILN_ERR_NOMEM, "sampler: out of memory for a permutation of %lld", (long long)n);
    kiln_shuffle_indices(perm, n, c->seed, epoch);
    for (int64_t k = 0; k < m; k++) out[k] = perm[out[k]];
    free(perm);
    return KILN_OK;
}

kiln_sampler kiln_sampler_of(const kiln_loader_config *cfg) {
    kiln_sampler s = {builtin_len, builtin_order, (void *)cfg};
    return s;
}
