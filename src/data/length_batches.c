/* Length-bucketed batches of about a token budget (--batch-tokens), the
 * guide's "load-balance workload": samples of similar length together, a
 * batch of about N tokens whatever its length, so every step does about the
 * same work and pads little.
 *
 * Buckets: widths max_len, max_len/2, ... (at most KILN_MAX_LEN_BUCKETS,
 * halving down to 1); a sample goes to the narrowest one that holds it. A batch
 * of a bucket of width w holds N / w samples (at least 1), padded to w; the
 * bucket's last batch holds what is left. The buckets' members are fixed (the
 * lengths are); the plan compiled per bucket runs its full and last batch.
 *
 * Ranks: the batches form groups of `world` batches, a group's batches from
 * one bucket where the bucket has that many (so the ranks' concurrent steps are
 * of one width and about one size, and none waits for a longer one); the
 * buckets' leftovers are grouped together, the last group filled up with the
 * first batches again (as DistributedSampler pads). Rank r takes batch r of
 * each group, so every rank has the same number of batches.
 *
 * Epoch e: each bucket's members are shuffled (seed, e, bucket) and cut into
 * its batches; the groups are shuffled (seed, e). A pure function of (seed, e):
 * every rank computes it alone, no communication, and prefetching or resuming
 * an epoch gives the same batches. */
#include <stdlib.h>
#include <string.h>
#include "kiln/data.h"

typedef struct {
    int8_t bucket;
    int64_t batch; /* within the bucket */
} batch_ref;

struct kiln_length_batches {
    kiln_length_batches_info info;
    int64_t n;
    int64_t *len;         /* [n] */
    int64_t *members;     /* sample indices by bucket: bucket k's are members[first[k] .. first[k] + count[k]) */
    int64_t first[KILN_MAX_LEN_BUCKETS];
    int64_t nb[KILN_MAX_LEN_BUCKETS]; /* batches per bucket */
    batch_ref *groups;    /* [groups * world] */
    int64_t *perm;        /* scratch: the largest of the bucket and group permutations */
    int64_t *all;         /* scratch: every bucket's members in an epoch's order */
    int64_t *tokens;      /* scratch: every global batch's positions, by bucket */
    int64_t tok_first[KILN_MAX_LEN_BUCKETS];
    uint64_t seed;
};

const kiln_length_batches_info *kiln_length_batches_get_info(const kiln_length_batches *B) { return &B->info; }

static int bucket_of(const kiln_length_batches_info *I, int64_t len) {
    int k = 0;
    while (k + 1 < I->nbuckets && I->width[k + 1] >= len) k++;
    return k;
}

static void make_buckets(kiln_length_batches_info *I, int64_t max_len, int64_t batch_tokens) {
    I->nbuckets = 0;
    for (int64_t w = max_len; I->nbuckets < KILN_MAX_LEN_BUCKETS; w /= 2) {
        I->width[I->nbuckets] = w;
        I->per_batch[I->nbuckets] = batch_tokens / w > 0 ? batch_tokens / w : 1;
        I->nbuckets++;
        if (w == 1) break;
    }
}

/* the groups: full ones per bucket, then the leftovers of all buckets, the last filled up from the start */
static kiln_status make_groups(kiln_length_batches *B) {
    kiln_length_batches_info *I = &B->info;
    int64_t w = I->world, total = 0, full = 0;
    for (int k = 0; k < I->nbuckets; k++) {
        total += B->nb[k];
        full += B->nb[k] / w;
    }
    I->groups = full + ((total - full * w) + w - 1) / w;
    B->groups = malloc(sizeof *B->groups * (size_t)(I->groups * w + 1));
    if (!B->groups) return kiln_fail(KILN_ERR_NOMEM, "batch-tokens: out of memory");
    int64_t at = 0;
    for (int k = 0; k < I->nbuckets; k++)
        for (int64_t j = 0; j < B->nb[k] - B->nb[k] % w; j++) B->groups[at++] = (batch_ref){(int8_t)k, j};
    for (int k = 0; k < I->nbuckets; k++)
        for (int64_t j = B->nb[k] - B->nb[k] % w; j < B->nb[k]; j++) B->groups[at++] = (batch_ref){(int8_t)k, j};
    for (int64_t i = 0; at < I->groups * w; i++) B->groups[at++] = B->groups[i]; /* padding */
    return KILN_OK;
}

kiln_status kiln_length_batches_new(const int64_t *len, int64_t n, int64_t max_len, int64_t batch_tokens, int rank,
                                    int world, uint64_t seed, kiln_length_batches **out) {
    *out = NULL;
    if (n < 1 || max_len < 1 || batch_tokens < 1 || world < 1 || rank < 0 || rank >= world)
        return kiln_fail(KILN_ERR_INVALID_ARG, "batch-tokens: %lld samples, length up to %lld, %lld tokens a batch, rank %d "
                         "of %d (want positive sizes)", (long long)n, (long long)max_len, (long long)batch_tokens, rank, world);
    for (int64_t i = 0; i < n; i++)
        if (len[i] < 1 || len[i] > max_len)
            return kiln_fail(KILN_ERR_INVALID_ARG, "batch-tokens: sample %lld has length %lld (want 1..%lld)", (long long)i,
                             (long long)len[i], (long long)max_len);
    kiln_length_batches *B = calloc(1, sizeof *B);
    if (!B) return kiln_fail(KILN_ERR_NOMEM, "batch-tokens: out of memory");
    kiln_length_batches_info *I = &B->info;
    I->rank = rank;
    I->world = world;
    B->n = n;
    B->seed = seed;
    make_buckets(I, max_len, batch_tokens);
    B->len = malloc(sizeof *B->len * (size_t)n);
    B->members = malloc(sizeof *B->members * (size_t)n);
    kiln_status st = B->len && B->members ? KILN_OK : kiln_fail(KILN_ERR_NOMEM, "batch-tokens: out of memory");
    if (st == KILN_OK) {
        memcpy(B->len, len, sizeof *len * (size_t)n);
        for (int64_t i = 0; i < n; i++) I->count[bucket_of(I, len[i])]++;
        int64_t at = 0, batches = 0;
        for (int k = 0; k < I->nbuckets; k++) {
            B->first[k] = at;
            at += I->count[k];
            B->nb[k] = (I->count[k] + I->per_batch[k] - 1) / I->per_batch[k];
            I->last[k] = I->count[k] - (B->nb[k] > 0 ? (B->nb[k] - 1) * I->per_batch[k] : 0);
            B->tok_first[k] = batches;
            batches += B->nb[k];
        }
        int64_t fill[KILN_MAX_LEN_BUCKETS];
        memcpy(fill, B->first, sizeof fill);
        for (int64_t i = 0; i < n; i++) B->members[fill[bucket_of(I, len[i])]++] = i;
        st = make_groups(B);
        int64_t scratch = n > I->groups ? n : I->groups;
        B->perm = st == KILN_OK ? malloc(sizeof *B->perm * (size_t)(scratch + 1)) : NULL;
        B->all = st == KILN_OK ? malloc(sizeof *B->all * (size_t)(n + 1)) : NULL;
        B->tokens = st == KILN_OK ? malloc(sizeof *B->tokens * (size_t)(batches + 1)) : NULL;
        if (st == KILN_OK && (!B->perm || !B->all || !B->tokens)) st = kiln_fail(KILN_ERR_NOMEM, "batch-tokens: out of memory");
    }
    if (st == KILN_OK) {
        /* this rank's samples per epoch and largest batch: the same every epoch (only the order changes) */
        for (int64_t g = 0; g < I->groups; g++) {
            batch_ref r = B->groups[g * world + rank];
            int64_t m = r.batch + 1 == B->nb[r.bucket] ? I->last[r.bucket] : I->per_batch[r.bucket];
            I->samples += m;
            if (m * I->width[r.bucket] > I->max_numel) I->max_numel = m * I->width[r.bucket];
        }
        *out = B;
        return KILN_OK;
    }
    kiln_length_batches_free(B);
    return st;
}

void kiln_length_batches_free(kiln_length_batches *B) {
    if (!B) return;
    free(B->len);
    free(B->members);
    free(B->groups);
    free(B->perm);
    free(B->all);
    free(B->tokens);
    free(B);
}

/* bucket k's members in epoch e's order, into dst */
static void bucket_order(kiln_length_batches *B, int k, int64_t epoch, int64_t *dst) {
    int64_t c = B->info.count[k];
    kiln_shuffle_indices(B->perm, c, B->seed ^ (0x6275636bull /* "buck" */ + (uint64_t)k * 0x9E3779B97F4A7C15ull), epoch);
    for (int64_t i = 0; i < c; i++) dst[i] = B->members[B->first[k] + B->perm[i]];
}

kiln_status kiln_length_batches_epoch(kiln_length_batches *B, int64_t epoch, kiln_length_epoch *e) {
    const kiln_length_batches_info *I = &B->info;
    int64_t *all = B->all;
    for (int k = 0; k < I->nbuckets; k++) {
        bucket_order(B, k, epoch, all + B->first[k]);
        for (int64_t j = 0; j < B->nb[k]; j++) { /* every batch's positions, for the ranks' weights */
            int64_t s = 0, from = j * I->per_batch[k], to = from + I->per_batch[k] < I->count[k] ? from + I->per_batch[k] : I->count[k];
            for (int64_t i = from; i < to; i++) s += B->len[all[B->first[k] + i]];
            B->tokens[B->tok_first[k] + j] = s;
        }
    }
    kiln_shuffle_indices(B->perm, I->groups, B->seed ^ 0x67726f75ull /* "grou" */, epoch);
    int64_t at = 0;
    e->start[0] = 0;
    for (int64_t s = 0; s < I->groups; s++) {
        const batch_ref *grp = B->groups + B->perm[s] * I->world;
        batch_ref r = grp[I->rank];
        int64_t from = r.batch * I->per_batch[r.bucket], m = r.batch + 1 == B->nb[r.bucket] ? I->last[r.bucket] : I->per_batch[r.bucket];
        memcpy(e->index + at, all + B->first[r.bucket] + from, sizeof *all * (size_t)m);
        at += m;
        e->start[s + 1] = at;
        e->width[s] = I->width[r.bucket];
        e->bucket[s] = r.bucket;
        e->tokens[s] = B->tokens[B->tok_first[r.bucket] + r.batch];
        e->group_tokens[s] = 0;
        for (int q = 0; q < I->world; q++) e->group_tokens[s] += B->tokens[B->tok_first[grp[q].bucket] + grp[q].batch];
    }
    return KILN_OK;
}
