/* --batch-tokens' schedule (src/data/length_batches.c): a pure function of
 * (seed, epoch); each batch of one bucket, its samples no longer than its
 * width and about batch_tokens / width of them; every sample visited once per
 * epoch on one rank; across ranks the same number of batches, the same
 * permutation of groups, every sample visited, about the same tokens each;
 * epochs reshuffle; and the loader serves the batches at their widths. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kiln/data.h"
#include "testutil.h"

#define N 1000
#define MAXLEN 64
#define BT 256

static int64_t g_len[N];

typedef struct {
    kiln_length_batches *B;
    kiln_length_epoch e;
    int64_t groups;
} sched;

static void sched_open(sched *s, int rank, int world, uint64_t seed) {
    memset(s, 0, sizeof *s);
    CHECK_OK(kiln_length_batches_new(g_len, N, MAXLEN, BT, rank, world, seed, &s->B));
    if (!s->B) return;
    const kiln_length_batches_info *I = kiln_length_batches_get_info(s->B);
    int64_t g = s->groups = I->groups;
    s->e.index = calloc((size_t)I->samples + 1, 8);
    s->e.start = calloc((size_t)g + 1, 8);
    s->e.width = calloc((size_t)g + 1, 8);
    s->e.bucket = calloc((size_t)g + 1, 8);
    s->e.tokens = calloc((size_t)g + 1, 8);
    s->e.group_tokens = calloc((size_t)g + 1, 8);
}

static void sched_close(sched *s) {
    kiln_length_batches_free(s->B);
    free(s->e.index), free(s->e.start), free(s->e.width), free(s->e.bucket), free(s->e.tokens), free(s->e.group_tokens);
}

/* one rank's epoch: each batch of one bucket, widths hold their samples, tokens right; visits counted */
static void check_epoch(sched *s, int64_t epoch, int *visits, int64_t *tokens) {
    const kiln_length_batches_info *I = kiln_length_batches_get_info(s->B);
    CHECK_OK(kiln_length_batches_epoch(s->B, epoch, &s->e));
    int bad = 0;
    *tokens = 0;
    for (int64_t b = 0; b < s->groups; b++) {
        int64_t k = s->e.bucket[b], m = s->e.start[b + 1] - s->e.start[b], t = 0;
        bad += s->e.width[b] != I->width[k] || m < 1 || m > I->per_batch[k];
        for (int64_t i = s->e.start[b]; i < s->e.start[b + 1]; i++) {
            int64_t x = s->e.index[i];
            bad += g_len[x] > s->e.width[b] || (k + 1 < I->nbuckets && g_len[x] <= I->width[k + 1]); /* narrowest bucket */
            visits[x]++;
            t += g_len[x];
        }
        bad += t != s->e.tokens[b] || s->e.group_tokens[b] < t;
        *tokens += t;
    }
    CHECK_MSG(bad == 0 && s->e.start[s->groups] == I->samples, "epoch %lld: %d bad batches", (long long)epoch, bad);
}

static void test_one_rank(void) {
    sched a, b;
    sched_open(&a, 0, 1, 7);
    sched_open(&b, 0, 1, 7);
    if (!a.B || !b.B) return;
    const kiln_length_batches_info *I = kiln_length_batches_get_info(a.B);
    CHECK(I->nbuckets == 4 && I->width[0] == 64 && I->width[3] == 8 && I->per_batch[0] == 4 && I->per_batch[3] == 32);
    int visits[N] = {0};
    int64_t tok;
    check_epoch(&a, 3, visits, &tok);
    int once = 1;
    for (int i = 0; i < N; i++) once &= visits[i] == 1;
    CHECK_MSG(once, "one rank: every sample once per epoch");
    /* the same (seed, epoch) from another instance gives the same batches; another epoch others */
    int64_t first[N];
    memcpy(first, a.e.index, sizeof first);
    check_epoch(&b, 3, (int[N]){0}, &tok);
    CHECK(memcmp(first, b.e.index, sizeof first) == 0);
    check_epoch(&b, 4, (int[N]){0}, &tok);
    CHECK_MSG(memcmp(first, b.e.index, sizeof first) != 0, "epoch 4 reshuffles");
    /* full batches hold about batch_tokens: at least half of it, never more than the width allows */
    int64_t full = 0, near = 0;
    for (int64_t g = 0; g < a.groups; g++)
        if (a.e.start[g + 1] - a.e.start[g] == I->per_batch[a.e.bucket[g]]) {
            full++;
            near += a.e.tokens[g] * 2 > BT && a.e.tokens[g] <= BT;
        }
    CHECK_MSG(near == full && full >= a.groups - I->nbuckets, "%lld of %lld full batches hold 129..256 tokens", (long long)near,
              (long long)full);
    sched_close(&a);
    sched_close(&b);
}

static void test_ranks(int world) {
    sched s[4];
    int visits[N] = {0};
    int64_t tok[4], sum = 0;
    for (int r = 0; r < world; r++) sched_open(&s[r], r, world, 11);
    for (int r = 0; r < world; r++) {
        if (!s[r].B) return;
        check_epoch(&s[r], 2, visits, &tok[r]);
        sum += tok[r];
        CHECK_MSG(s[r].groups == s[0].groups, "rank %d has %lld batches, rank 0 %lld", r, (long long)s[r].groups,
                  (long long)s[0].groups);
    }
    int all = 1, extra = 0;
    for (int i = 0; i < N; i++) {
        all &= visits[i] >= 1;
        extra += visits[i] - 1;
    }
    const kiln_length_batches_info *I = kiln_length_batches_get_info(s[0].B);
    CHECK_MSG(all && extra <= (world - 1) * 32, "%d ranks: every sample visited (%d extra visits of padding)", world, extra);
    /* step b: the ranks agree on the group's tokens, and within a group of one bucket the widths agree */
    int agree = 1, same_width = 0;
    for (int64_t b = 0; b < s[0].groups; b++) {
        int64_t gt = 0, w = 1;
        for (int r = 0; r < world; r++) {
            agree &= s[r].e.group_tokens[b] == s[0].e.group_tokens[b];
            gt += s[r].e.tokens[b];
            w &= s[r].e.width[b] == s[0].e.width[b];
        }
        agree &= gt == s[0].e.group_tokens[b];
        same_width += (int)w;
    }
    CHECK_MSG(agree, "%d ranks: the group tokens agree", world);
    CHECK_MSG(same_width >= s[0].groups - I->nbuckets, "%d ranks: %d of %lld steps of one width", world, same_width,
              (long long)s[0].groups);
    for (int r = 0; r < world; r++)
        CHECK_MSG(llabs(tok[r] * world - sum) <= (int64_t)world * I->nbuckets * BT, "rank %d: %lld tokens, mean %lld", r,
                  (long long)tok[r], (long long)(sum / world));
    for (int r = 0; r < world; r++) sched_close(&s[r]);
}

static void test_errors(void) {
    kiln_length_batches *B = NULL;
    int64_t bad[2] = {3, 65};
    CHECK(kiln_length_batches_new(bad, 2, MAXLEN, BT, 0, 1, 1, &B) == KILN_ERR_INVALID_ARG && !B);
    CHECK(kiln_length_batches_new(g_len, N, MAXLEN, BT, 2, 2, 1, &B) == KILN_ERR_INVALID_ARG && !B);
}

/* the loader with the schedule as its batch sampler over token documents:
 * each batch [n, width] holds its documents' tokens then -1 labels, and the
 * same batches come for 0 and 2 workers */
typedef struct {
    kiln_length_batches *B;
    kiln_length_epoch lep;
} loader_ctx;

static kiln_status ctx_order(const kiln_batch_sampler *s, int64_t epoch, int64_t *index, int64_t *start, int64_t *width) {
    loader_ctx *c = s->ctx;
    kiln_length_epoch e = c->lep;
    e.index = index, e.start = start, e.width = width;
    return kiln_length_batches_epoch(c->B, epoch, &e);
}

static uint64_t loader_epochs(kiln_dataset *ds, int workers, int *bad) {
    int64_t n = ds->len, *len = malloc(sizeof *len * (size_t)n);
    for (int64_t i = 0; i < n; i++) len[i] = ds->sample_len(ds, i);
    loader_ctx c = {0};
    uint64_t h = 1469598103934665603ull;
    CHECK_OK(kiln_length_batches_new(len, n, 16, 64, 0, 1, 5, &c.B));
    if (!c.B) return 0;
    const kiln_length_batches_info *I = kiln_length_batches_get_info(c.B);
    c.lep.bucket = calloc((size_t)I->groups + 1, 8), c.lep.tokens = calloc((size_t)I->groups + 1, 8);
    c.lep.group_tokens = calloc((size_t)I->groups + 1, 8);
    kiln_batch_sampler bs = {I->groups, I->samples, I->max_numel, ctx_order, &c};
    kiln_loader_config lc = kiln_loader_defaults();
    lc.workers = workers, lc.batches = &bs, lc.seed = 3;
    kiln_loader *L = NULL;
    CHECK_OK(kiln_loader_new(ds, &lc, &L));
    for (int e = 0; e < 2 && L; e++) {
        kiln_loader_start_epoch(L, e, 0);
        kiln_batch b;
        int64_t seen = 0;
        while (kiln_loader_next(L, &b) == 1) {
            seen++;
            *bad += b.width < 1 || b.width > 16;
            for (int64_t i = 0; i < b.n * b.width; i++) {
                int pad = b.y[i] == -1;
                *bad += pad && b.x[i] != 0; /* padding: x 0 */
                *bad += i % b.width + 1 < b.width && !pad && b.y[i + 1] != -1 && b.x[i + 1] != (float)b.y[i];
                h = (h ^ (uint32_t)b.y[i]) * 1099511628211ull;
                h = (h ^ (uint32_t)b.x[i]) * 1099511628211ull;
            }
            kiln_loader_release(L, &b);
        }
        *bad += seen != I->groups;
    }
    kiln_loader_free(L);
    kiln_length_batches_free(c.B);
    free(c.lep.bucket), free(c.lep.tokens), free(c.lep.group_tokens), free(len);
    return h;
}

static void test_loader(void) {
    char dir[] = "/tmp/kiln_test_length_batches.XXXXXX", text[64], out[64], data[80];
    if (!mkdtemp(dir)) return;
    snprintf(text, sizeof text, "%s/t.txt", dir);
    snprintf(out, sizeof out, "%s/t.tokens", dir);
    FILE *f = fopen(text, "w");
    for (int d = 0; f && d < 300; d++) { /* documents of 1 to 40 bytes */
        for (int64_t k = tu_int(1, 40); k > 0; k--) fputc((int)tu_int('a', 'z'), f);
        fputs("\n%\n", f);
    }
    if (f) fclose(f);
    const char *files[1] = {text};
    kiln_tokenize_result r;
    CHECK_OK(kiln_tokenize_docs(files, 1, out, 0, "%", &r));
    kiln_data_config dc = kiln_data_defaults();
    dc.block = 16, dc.documents = 1;
    kiln_dataset *ds = NULL;
    snprintf(data, sizeof data, "tokens:%s", out);
    CHECK_OK(kiln_dataset_open_config(data, 1, &dc, &ds));
    if (ds) {
        int b0 = 0, b2 = 0;
        uint64_t h0 = loader_epochs(ds, 0, &b0), h2 = loader_epochs(ds, 2, &b2);
        CHECK_MSG(b0 == 0 && b2 == 0 && h0 == h2, "loader: %d and %d bad, hashes %llx %llx", b0, b2, (unsigned long long)h0,
                  (unsigned long long)h2);
    }
    kiln_dataset_free(ds);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(void) {
    /* lengths skewed short, as documents are: many short, a few at the block */
    for (int i = 0; i < N; i++) {
        int64_t r = tu_int(1, 100);
        g_len[i] = r <= 60 ? tu_int(1, 16) : r <= 90 ? tu_int(17, 40) : tu_int(41, MAXLEN);
    }
    test_one_rank();
    test_ranks(2);
    test_ranks(3);
    test_errors();
    test_loader();
    return tu_finish("test_length_batches");
}
