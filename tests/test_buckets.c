/* Gradient buckets (src/dist/buckets.c) and the plan's hook between steps
 * (src/graph/plan_hook.c), in one process: for mnist-cnn and resnet20, with
 * and without fusion, on both step lists (the full batch and the epoch's
 * smaller last one), the hook fires once after each bucket's ready step, and
 * at that moment the bucket's gradient slice already holds its final value,
 * while one step earlier it did not yet (the ready step is the LAST writer,
 * not a later one). The run before holds another batch's gradients, so a
 * slice read too early differs. A world of one makes no buckets and no hook. */
#include <stdlib.h>
#include <string.h>
#include "dist/internal/buckets.h"
#include "dist/internal/ddp.h"
#include "graph/internal/plan_hook.h"
#include "kiln/graph.h"
#include "kiln/nn.h"
#include "testutil.h"

typedef struct {
    const kiln_buckets *B;
    const float *grad;
    float *at_ready, *before; /* the flat buffer's copy, per bucket's slice, when its ready step (or the one before) ran */
    int *fired;
} probe;

static kiln_status on_step(void *user, int list, int done) {
    probe *p = user;
    for (int i = 0; i < p->B->nb; i++) {
        const kiln_bucket *b = &p->B->b[i];
        int r = kiln_bucket_ready(p->B, list, i);
        if (r == done - 1) p->fired[i]++;
        float *to = r == done - 1 ? p->at_ready : r == done ? p->before : NULL;
        if (to) memcpy(to + b->off, p->grad + b->off, (size_t)b->n * sizeof(float));
    }
    return KILN_OK;
}

static void random_batch(const kiln_graph *g, const kiln_model *m, int64_t B, float *x, int32_t *y) {
    int64_t shape[8];
    int nd = kiln_value_shape(g, m->x, shape), per = 1;
    for (int d = 1; d < nd; d++) per *= (int)shape[d];
    tu_fill(x, B * per, -1, 1);
    for (int64_t i = 0; i < B; i++) y[i] = (int32_t)tu_int(0, m->num_classes - 1);
}

/* one list: a run on one batch, then the probed run on another */
static void check_list(kiln_plan *pl, kiln_graph *g, kiln_model *m, kiln_params *P, const kiln_buckets *B, int64_t batch,
                       const char *what) {
    int list = kiln_plan_list_of(pl, batch);
    CHECK_MSG(list >= 0, "%s: no step list for batch %lld", what, (long long)batch);
    if (list < 0) return;
    int64_t total = kiln_params_total(P);
    float *x = malloc(4 * 3 * 32 * 32 * sizeof(float));
    int32_t y[4];
    probe p = {B, kiln_params_grad(P), calloc((size_t)total, 4), calloc((size_t)total, 4), calloc((size_t)B->nb, sizeof(int))};
    random_batch(g, m, batch, x, y);
    CHECK_OK(kiln_plan_bind(pl, m->x, x));
    CHECK_OK(kiln_plan_bind(pl, m->y, y));
    CHECK_OK(kiln_plan_run(pl, batch)); /* no hook: the gradients of another batch */
    CHECK_OK(kiln_plan_set_hook(pl, on_step, &p));
    for (int i = 0; i < B->nb; i++) {
        int r = kiln_bucket_ready(B, list, i);
        CHECK_MSG(r >= 1, "%s: bucket %d has no writer (ready step %d)", what, i, r);
        if (r >= 1) CHECK_OK(kiln_plan_hook_after(pl, list, r));
        if (r >= 1) CHECK_OK(kiln_plan_hook_after(pl, list, r - 1));
    }
    random_batch(g, m, batch, x, y);
    CHECK_OK(kiln_plan_run(pl, batch));
    CHECK_OK(kiln_plan_set_hook(pl, NULL, NULL));
    int early = 0;
    for (int i = 0; i < B->nb; i++) {
        const kiln_bucket *b = &B->b[i];
        size_t bytes = (size_t)b->n * sizeof(float);
        CHECK_MSG(p.fired[i] == 1, "%s: the hook fired %d times after bucket %d's ready step", what, p.fired[i], i);
        CHECK_MSG(!memcmp(p.at_ready + b->off, p.grad + b->off, bytes),
                  "%s: bucket %d (parameters %d..%d) changed after its ready step %d", what, i, b->first, b->last,
                  kiln_bucket_ready(B, list, i));
        early += !memcmp(p.before + b->off, p.grad + b->off, bytes);
    }
    CHECK_MSG(early == 0, "%s: %d of %d buckets already final one step before their ready step", what, early, B->nb);
    free(x);
    free(p.at_ready);
    free(p.before);
    free(p.fired);
}

static void check_model(const char *model, int fuse, double bucket_mb, int min_buckets) {
    char what[64];
    snprintf(what, sizeof what, "%s%s", model, fuse ? "" : " --no-fuse");
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_model_build(g, model, &m));
    CHECK_OK(kiln_params_new_on(g, "cpu", &P));
    if (!P) goto out;
    kiln_params_init(P, 7);
    kiln_compile_opts co = kiln_compile_defaults();
    co.training = 1;
    co.max_batch = 4;
    co.also_batches[0] = 3;
    co.autotune = 0;
    co.fuse = fuse;
    co.backend = "cpu";
    CHECK_OK(kiln_compile(g, P, &m.loss, 1, &co, &pl));
    if (!pl) goto out;
    kiln_buckets B;
    CHECK_OK(kiln_buckets_make(P, pl, bucket_mb, &B));
    CHECK_MSG(B.nb >= min_buckets, "%s: %d buckets of %g MiB, want >= %d", what, B.nb, bucket_mb, min_buckets);
    /* the buckets tile the buffer from its end, the last parameters first */
    int64_t end = kiln_params_total(P);
    for (int i = 0; i < B.nb; i++) {
        CHECK_MSG(B.b[i].off + B.b[i].n == end && B.b[i].n > 0, "%s: bucket %d is not the slice before bucket %d", what, i, i - 1);
        end = B.b[i].off;
    }
    CHECK_MSG(end == 0 && B.b[B.nb - 1].first == 0, "%s: the buckets leave the buffer's start out", what);
    check_list(pl, g, &m, P, &B, 4, what);
    check_list(pl, g, &m, P, &B, 3, what);
    kiln_buckets_free(&B);
out:
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
}

/* a world of one: kiln_ddp makes no buckets and leaves the plan without a hook */
static void check_world_of_one(void) {
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    kiln_ddp *d = NULL;
    CHECK_OK(kiln_model_build(g, "mnist-cnn", &m));
    CHECK_OK(kiln_params_new_on(g, "cpu", &P));
    kiln_compile_opts co = kiln_compile_defaults();
    co.training = 1;
    co.max_batch = 2;
    co.autotune = 0;
    if (P) CHECK_OK(kiln_compile(g, P, &m.loss, 1, &co, &pl));
    kiln_ddp_opts o = kiln_ddp_defaults();
    o.bucket_mb = 0.01;
    if (pl) CHECK_OK(kiln_ddp_open(NULL, P, &o, &d));
    if (d) {
        CHECK_OK(kiln_ddp_attach(d, pl));
        CHECK_MSG(kiln_ddp_stats_of(d).buckets == 0, "a world of one made %d buckets", kiln_ddp_stats_of(d).buckets);
        CHECK_OK(kiln_ddp_reduce(d));
    }
    kiln_ddp_free(d);
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
}

int main(void) {
    tu_seed(11);
    for (int fuse = 1; fuse >= 0; fuse--) {
        check_model("mnist-cnn", fuse, 0.01, 3);
        check_model("resnet20", fuse, 0.05, 8);
    }
    kiln_buckets B;
    CHECK(kiln_buckets_make(NULL, NULL, 0, &B) == KILN_ERR_INVALID_ARG); /* --bucket-mb 0 */
    check_world_of_one();
    return tu_finish("test_buckets");
}
