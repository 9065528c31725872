/* Sync batch norm (--sync-bn) without MPI:
 *   - kernels: a batch split over two "processes" (two threads whose
 *     collective sums through a barrier; uneven shares, so the global count
 *     matters) gives what one call over the whole batch gives: y, dx, the saved
 *     statistics, the running statistics, and dw, db as the sum of the shares
 *     (data parallel sums them with the other gradients). Ref and cpu kernels,
 *     plain NCHW with few and many channels (the cpu kernel's two routes) and
 *     nChw16c and nChw8c;
 *   - a world of one: the sync kernels (collective present, nothing to call)
 *     give the plain kernels' bits;
 *   - plans: a conv -> bn -> relu -> conv -> bn -> mse graph compiled with
 *     sync_bn gives the plain plan's loss, gradients and buffers bit for bit
 *     on cpu and ref, while its collective is called (the sync kernels ran);
 *     an evaluation plan compiled with sync_bn is the plain one (folded, no
 *     collective). The mpirun test is test_sync_bn.sh. */
#include <pthread.h>
#include "kernels/internal/kernels.h"
#include "kiln/alloc.h"
#include "kiln/graph.h"
#include "kiln/nn.h"
#include "testutil.h"

/* ---- two threads as two processes ---- */
typedef struct {
    pthread_barrier_t bar;
    double *slot[2];
    int calls;
} fake_world;
typedef struct {
    fake_world *w;
    int rank;
} fake_rank;

/* both ranks' buffers summed in place: rank 0 adds once both have arrived, in a fixed order */
static int fake_allreduce(void *user, double *buf, int64_t n) {
    fake_rank *r = user;
    r->w->slot[r->rank] = buf;
    pthread_barrier_wait(&r->w->bar);
    if (r->rank == 0) {
        for (int64_t i = 0; i < n; i++) r->w->slot[0][i] = r->w->slot[1][i] = r->w->slot[0][i] + r->w->slot[1][i];
        r->w->calls++;
    }
    pthread_barrier_wait(&r->w->bar);
    return 0;
}

/* one batch norm problem: x [n, c, hw] (blocked: nChw16c or nChw8c, c a multiple of the block) and dy, in double
 * (the float kernels read float copies) */
typedef struct {
    int64_t n, c, hw;
    int blocked, cpu;
    const double *x, *dy, *w, *b, *rm0, *rv0;
} problem;

/* one rank's results over images [i0, i1) */
typedef struct {
    double *y, *dx, *dw, *db, *rm, *rv, *mean, *invstd;
} results;

static double *dalloc(int64_t n) {
    double *p = calloc((size_t)n, sizeof *p);
    if (!p) abort();
    return p;
}
static results results_new(const problem *P) {
    int64_t nx = P->n * P->c * P->hw;
    return (results){dalloc(nx), dalloc(nx), dalloc(P->c), dalloc(P->c), dalloc(P->c), dalloc(P->c), dalloc(P->c), dalloc(P->c)};
}
static void results_free(results *R) {
    free(R->y), free(R->dx), free(R->dw), free(R->db), free(R->rm), free(R->rv), free(R->mean), free(R->invstd);
}

static float *to_f(const double *d, int64_t n) {
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    if (!f) abort();
    for (int64_t i = 0; i < n; i++) f[i] = (float)d[i];
    return f;
}
static void to_d(const float *f, double *d, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = f[i];
}

/* forward (training) and backward over images [i0, i1), written at the same place of R */
static int run_share(const problem *P, int64_t i0, int64_t i1, const kiln_collective *co, results *R) {
    int64_t per = P->c * P->hw, n = i1 - i0, c = P->c, hw = P->hw, nx = n * per;
    const double *x = P->x + i0 * per, *dy = P->dy + i0 * per;
    double *y = R->y + i0 * per, *dx = R->dx + i0 * per;
    memcpy(R->rm, P->rm0, (size_t)c * sizeof(double));
    memcpy(R->rv, P->rv0, (size_t)c * sizeof(double));
    if (!P->cpu) {
        if (kiln_ref_batch_norm_fwd(n, c, hw, x, P->w, P->b, R->rm, R->rv, 0.1, 1e-5, 1, y, R->mean, R->invstd, co)) return -1;
        return kiln_ref_batch_norm_bwd(n, c, hw, x, dy, P->w, R->mean, R->invstd, dx, R->dw, R->db, 0, 0, 0, co);
    }
    float *fx = to_f(x, nx), *fdy = to_f(dy, nx), *fw = to_f(P->w, c), *fb = to_f(P->b, c), *frm = to_f(R->rm, c);
    float *frv = to_f(R->rv, c), *fy = malloc((size_t)nx * 4), *fdx = malloc((size_t)nx * 4), *fm = malloc((size_t)c * 4);
    float *fi = malloc((size_t)c * 4), *fdw = malloc((size_t)c * 4), *fdb = malloc((size_t)c * 4);
    void *scratch = malloc(kiln_cpu_batch_norm_scratch(n, c, P->blocked));
    if (!fy || !fdx || !fm || !fi || !fdw || !fdb || !scratch) abort();
    int r = kiln_cpu_batch_norm_fwd(n, c, hw, P->blocked, fx, fw, fb, frm, frv, 0.1f, 1e-5f, 1, 0, fy, fm, fi, co, scratch);
    if (!r) r = kiln_cpu_batch_norm_bwd(n, c, hw, P->blocked, fx, fdy, fw, fm, fi, fdx, fdw, fdb, 0, 0, 0, co, scratch);
    to_d(fy, y, nx), to_d(fdx, dx, nx), to_d(frm, R->rm, c), to_d(frv, R->rv, c), to_d(fm, R->mean, c);
    to_d(fi, R->invstd, c), to_d(fdw, R->dw, c), to_d(fdb, R->db, c);
    free(fx), free(fdy), free(fw), free(fb), free(frm), free(frv), free(fy), free(fdx), free(fm), free(fi), free(fdw);
    free(fdb), free(scratch);
    return r;
}

typedef struct {
    const problem *P;
    int64_t i0, i1;
    fake_rank me;
    results *R;
    int status;
} share_job;

static void *share_thread(void *arg) {
    share_job *J = arg;
    kiln_collective co = {fake_allreduce, &J->me};
    J->status = run_share(J->P, J->i0, J->i1, &co, J->R);
    return NULL;
}

/* max |a - b| over max |b| */
static double rel_err(const double *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]);
        if (!(e <= num)) num = e;
        den = fmax(den, fabs(b[i]));
    }
    return den > 0 ? num / den : num;
}

#define CLOSE(what, a, b, n, tol)                                                                                      \
    do {                                                                                                               \
        double e_ = rel_err((a), (b), (n));                                                                            \
        CHECK_MSG(e_ <= (tol), "%s c=%lld blocked=%d %s: %s off by %.3g", P->cpu ? "cpu" : "ref", (long long)P->c,     \
                  P->blocked, label, what, e_);                                                                        \
    } while (0)

/* two ranks (images [0, split) and [split, n)) against one call over all n */
static void check_two_ranks(const problem *P, int64_t split) {
    const char *label = "2 ranks";
    double tol = P->cpu ? 2e-5 : 1e-12;
    int64_t nx = P->n * P->c * P->hw;
    results one = results_new(P), R[2] = {results_new(P), results_new(P)};
    CHECK(run_share(P, 0, P->n, NULL, &one) == 0);
    fake_world W = {.calls = 0};
    pthread_barrier_init(&W.bar, NULL, 2);
    share_job J[2] = {{P, 0, split, {&W, 0}, &R[0], -9}, {P, split, P->n, {&W, 1}, &R[1], -9}};
    pthread_t t[2];
    for (int k = 0; k < 2; k++) pthread_create(&t[k], NULL, share_thread, &J[k]);
    for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
    pthread_barrier_destroy(&W.bar);
    CHECK(J[0].status == 0 && J[1].status == 0);
    CHECK_MSG(W.calls > 0, "the collective was never called");
    int64_t at = split * P->c * P->hw; /* rank 1's images were written after rank 0's */
    memcpy(R[0].y + at, R[1].y + at, (size_t)(nx - at) * sizeof(double));
    memcpy(R[0].dx + at, R[1].dx + at, (size_t)(nx - at) * sizeof(double));
    CLOSE("y", R[0].y, one.y, nx, tol);
    CLOSE("dx", R[0].dx, one.dx, nx, tol);
    for (int k = 0; k < 2; k++) {
        CLOSE("saved mean", R[k].mean, one.mean, P->c, tol);
        CLOSE("saved invstd", R[k].invstd, one.invstd, P->c, tol);
        CLOSE("running mean", R[k].rm, one.rm, P->c, tol);
        CLOSE("running var", R[k].rv, one.rv, P->c, tol);
    }
    for (int64_t ch = 0; ch < P->c; ch++) R[0].dw[ch] += R[1].dw[ch], R[0].db[ch] += R[1].db[ch];
    CLOSE("dw (summed)", R[0].dw, one.dw, P->c, tol);
    CLOSE("db (summed)", R[0].db, one.db, P->c, tol);
    results_free(&one), results_free(&R[0]), results_free(&R[1]);
}

/* a world of one: the sync route with nothing to call gives the plain route's bits */
static void check_world_one(const problem *P) {
    const char *label = "world of one";
    int64_t nx = P->n * P->c * P->hw;
    results plain = results_new(P), sync = results_new(P);
    kiln_collective none = {NULL, NULL};
    CHECK(run_share(P, 0, P->n, NULL, &plain) == 0);
    CHECK(run_share(P, 0, P->n, &none, &sync) == 0);
    CLOSE("y", sync.y, plain.y, nx, 0);
    CLOSE("dx", sync.dx, plain.dx, nx, 0);
    CLOSE("running var", sync.rv, plain.rv, P->c, 0);
    CLOSE("dw", sync.dw, plain.dw, P->c, 0);
    results_free(&plain), results_free(&sync);
}

static void test_kernels(void) {
    static const struct { int64_t n, c, hw, split; int blocked; } shapes[] = {
        {5, 3, 7, 3, 0},    /* few channels: the cpu's chunked route */
        {6, 40, 5, 2, 0},   /* many: its per-channel route */
        {7, 32, 6, 4, 16},  /* nChw16c, two blocks */
        {7, 24, 5, 4, 8},   /* nChw8c, three blocks, an odd number of pixels */
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t n = shapes[s].n, c = shapes[s].c, nx = n * c * shapes[s].hw;
        double *x = dalloc(nx), *dy = dalloc(nx), *w = dalloc(c), *b = dalloc(c), *rm = dalloc(c), *rv = dalloc(c);
        tu_fill_d(x, nx, -1.0, 2.5);
        tu_fill_d(dy, nx, -1, 1);
        tu_fill_d(w, c, 0.5, 1.5);
        tu_fill_d(b, c, -0.5, 0.5);
        tu_fill_d(rm, c, -0.2, 0.2);
        tu_fill_d(rv, c, 0.5, 1.5);
        for (int cpu = 0; cpu <= 1; cpu++) {
            problem P = {n, c, shapes[s].hw, shapes[s].blocked, cpu, x, dy, w, b, rm, rv};
            if (P.blocked && !cpu) continue; /* the reference kernel is NCHW only */
            check_two_ranks(&P, shapes[s].split);
            check_world_one(&P);
        }
        free(x), free(dy), free(w), free(b), free(rm), free(rv);
    }
}

/* ---- plans ---- */
static int calls;
static int count_calls(void *user, double *buf, int64_t n) {
    (void)user, (void)buf, (void)n;
    calls++;
    return 0;
}

typedef struct {
    kiln_graph *g;
    kiln_value x, t, loss;
} net;

static net build(void) {
    net m = {kiln_graph_new(), 0, 0, 0};
    m.x = kiln_input(m.g, "x", KILN_F32, 4, (int64_t[]){KILN_BATCH, 3, 6, 6});
    m.t = kiln_input(m.g, "t", KILN_F32, 4, (int64_t[]){KILN_BATCH, 5, 6, 6});
    kiln_value h = kiln_relu(m.g, kiln_nn_batch_norm2d(m.g, "bn1", kiln_nn_conv2d(m.g, "conv1", m.x, 3, 16, 3, 1, 1, 0), 16));
    h = kiln_nn_batch_norm2d(m.g, "bn2", kiln_nn_conv2d(m.g, "conv2", h, 16, 5, 3, 1, 1, 0), 5);
    m.loss = kiln_mse_loss(m.g, h, m.t);
    return m;
}

/* one training run of batch 6 with sync_bn off or on: the loss, the gradients and
 * the buffers (as bytes) into out; returns the bytes written */
static size_t train_once(const char *backend, int sync, const float *x, const float *t, unsigned char *out) {
    net m = build();
    kiln_params *P = NULL;
    size_t len = 0;
    CHECK_OK(kiln_params_new_on(m.g, backend, &P));
    if (!P) goto done;
    kiln_params_init(P, 7);
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1, o.max_batch = 6, o.autotune = 0, o.sync_bn = sync;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_compile(m.g, P, &m.loss, 1, &o, &pl));
    if (!pl) goto done;
    kiln_plan_set_collective(pl, count_calls, NULL);
    CHECK_OK(kiln_plan_bind(pl, m.x, x));
    CHECK_OK(kiln_plan_bind(pl, m.t, t));
    for (int r = 0; r < 2; r++) CHECK_OK(kiln_plan_run(pl, 6)); /* twice: the running statistics move on */
    size_t elem = strcmp(backend, "ref") ? 4 : 8;
    memcpy(out, kiln_plan_value(pl, m.loss), elem), len = elem;
    CHECK_OK(kiln_params_grad_read(P, out + len));
    len += (size_t)kiln_params_total(P) * elem;
    for (int i = 0; i < kiln_params_buffer_count(P); i++) {
        size_t b = (size_t)kiln_params_buffer_numel(P, i) * (kiln_params_buffer_dtype(P, i) == KILN_I64 ? 8 : elem);
        memcpy(out + len, kiln_params_buffer_data(P, i), b), len += b;
    }
    kiln_plan_free(pl);
done:
    kiln_params_free(P);
    kiln_graph_free(m.g);
    return len;
}

static void test_plans(void) {
    float x[6 * 3 * 36], t[6 * 5 * 36];
    tu_fill(x, 6 * 3 * 36, -1, 2);
    tu_fill(t, 6 * 5 * 36, -1, 1);
    static unsigned char plain[1 << 16], sync[1 << 16];
    const char *backends[2] = {"cpu", "ref"};
    for (int k = 0; k < 2; k++) {
        calls = 0;
        size_t a = train_once(backends[k], 0, x, t, plain);
        CHECK_MSG(calls == 0, "%s: a plain plan called the collective %d times", backends[k], calls);
        size_t b = train_once(backends[k], 1, x, t, sync);
        CHECK_MSG(calls > 0, "%s: the sync plan never called its collective", backends[k]);
        CHECK_MSG(a > 0 && a == b && memcmp(plain, sync, a) == 0, "%s: sync_bn in a world of one differs from plain",
                  backends[k]);
    }
}

/* evaluation plans ignore sync_bn: folded as before, no collective */
static void test_eval_plan(void) {
    net m = build();
    kiln_params *P = NULL;
    CHECK_OK(kiln_params_new(m.g, KILN_F32, &P));
    if (!P) return;
    kiln_params_init(P, 3);
    kiln_compile_opts o = kiln_compile_defaults();
    o.max_batch = 2, o.autotune = 0, o.sync_bn = 1;
    kiln_plan *pl = NULL;
    kiln_value out = m.loss;
    CHECK_OK(kiln_compile(m.g, P, &out, 1, &o, &pl));
    if (pl) {
        char desc[4096];
        kiln_plan_describe(pl, desc, sizeof desc);
        CHECK_MSG(strstr(desc, "bn_fold") && !strstr(desc, "batch_norm2d"), "not folded:\n%s", desc);
        float x[2 * 3 * 36], t[2 * 5 * 36];
        tu_fill(x, 2 * 3 * 36, -1, 1);
        tu_fill(t, 2 * 5 * 36, -1, 1);
        calls = 0;
        kiln_plan_set_collective(pl, count_calls, NULL);
        CHECK_OK(kiln_plan_bind(pl, m.x, x));
        CHECK_OK(kiln_plan_bind(pl, m.t, t));
        CHECK_OK(kiln_plan_run(pl, 2));
        CHECK(calls == 0);
    }
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(m.g);
}

int main(void) {
    tu_seed(10);
    test_kernels();
    test_plans();
    test_eval_plan();
    return tu_finish("test_sync_bn");
}
