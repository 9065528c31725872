/* Graph, autodiff, planner and passes: fast plans against the double
 * reference plan, finite differences on small graphs in double, and every
 * pass and the planner's reuse on and off giving the same numbers. */
#include "kiln/graph.h"
#include "kiln/nn.h"
#include "testutil.h"

typedef struct {
    kiln_graph *g;
    kiln_model m;
    kiln_params *P32, *P64;
} model_pair;

static void build_pair(model_pair *mp, const char *name, uint64_t seed) {
    mp->g = kiln_graph_new();
    CHECK_OK(kiln_model_build(mp->g, name, &mp->m));
    CHECK_OK(kiln_params_new(mp->g, KILN_F32, &mp->P32));
    CHECK_OK(kiln_params_new(mp->g, KILN_F64, &mp->P64));
    kiln_params_init(mp->P32, seed);
    float *p = kiln_params_data(mp->P32);
    double *q = kiln_params_data(mp->P64);
    for (int64_t i = 0; i < kiln_params_total(mp->P32); i++) q[i] = p[i];
}

static void free_pair(model_pair *mp) {
    kiln_params_free(mp->P32);
    kiln_params_free(mp->P64);
    kiln_graph_free(mp->g);
}

static void random_batch(float *x, int32_t *y, int64_t B, int64_t pixels) {
    tu_fill(x, B * pixels, -1.0, 2.5);
    for (int64_t i = 0; i < B; i++) y[i] = (int32_t)tu_int(0, 9);
}

static int g_autotune; /* 1: the fast plan times Winograd against direct and keeps the faster */

/* fast float plan vs reference double plan: loss, output and every gradient */
static void test_fast_vs_reference(const char *name, int64_t B, int dropout_off, int fuse, int reuse) {
    model_pair mp;
    build_pair(&mp, name, 7);
    float *x = kiln_alloc((size_t)B * 784 * 4);
    int32_t *y = kiln_alloc((size_t)B * 4);
    random_batch(x, y, B, 784);
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    o.max_batch = B + 3; /* run below the planned batch */
    o.also_batches[0] = B;
    o.dropout_off = dropout_off;
    o.fuse = fuse;
    o.reuse_memory = reuse;
    o.autotune = g_autotune;
    kiln_plan *fast = NULL, *ref = NULL;
    CHECK_OK(kiln_compile(mp.g, mp.P32, &mp.m.loss, 1, &o, &fast));
    o.backend = "ref";
    kiln_value outs[2] = {mp.m.loss, mp.m.out};
    CHECK_OK(kiln_compile(mp.g, mp.P64, outs, 2, &o, &ref));
    if (!fast || !ref) return;
    kiln_plan *plans[2] = {fast, ref};
    for (int i = 0; i < 2; i++) {
        kiln_plan_bind(plans[i], mp.m.x, x);
        kiln_plan_bind(plans[i], mp.m.y, y);
        kiln_plan_set_step(plans[i], 5);
        CHECK_OK(kiln_plan_run(plans[i], B));
    }
    double lf = kiln_plan_loss(fast), lr = kiln_plan_loss(ref);
    CHECK_MSG(fabs(lf - lr) <= 1e-4 * fabs(lr) + 1e-5, "%s: loss %.8f vs reference %.8f", name, lf, lr);
    const float *g32 = kiln_params_grad(mp.P32);
    const double *g64 = kiln_params_grad(mp.P64);
    for (int p = 0; p < kiln_params_count(mp.P32); p++) {
        int64_t off = kiln_params_offset(mp.P32, p), n = kiln_params_numel(mp.P32, p);
        double gmax = 0;
        for (int64_t i = 0; i < n; i++) gmax = fmax(gmax, fabs(g64[off + i]));
        /* float vs double can flip a relu or max-pool decision at a kink: allow one such term */
        double e = tu_err(g32 + off, g64 + off, n, 3e-3 * gmax + 1e-6, 1e-3);
        CHECK_MSG(e <= 1, "%s (B=%lld dropout_off=%d fuse=%d reuse=%d): gradient of %s off by %.3g", name, (long long)B,
                  dropout_off, fuse, reuse, kiln_params_name(mp.P32, p), e);
        CHECK_MSG(kiln_params_has_grad(mp.P32)[p], "%s: %s got no gradient", name, kiln_params_name(mp.P32, p));
    }
    kiln_plan_free(fast);
    kiln_plan_free(ref);
    kiln_free(x);
    kiln_free(y);
    free_pair(&mp);
}

/* the planner's reuse and the fusion pass change memory and kernels, never numbers */
static void test_passes_do_not_change_results(void) {
    model_pair mp;
    build_pair(&mp, "mnist-cnn", 11);
    int64_t B = 6;
    float *x = kiln_alloc((size_t)B * 784 * 4);
    int32_t *y = kiln_alloc((size_t)B * 4);
    random_batch(x, y, B, 784);
    int64_t total = kiln_params_total(mp.P32);
    enum { NV = 8 };
    float *grads[NV];
    double losses[NV];
    size_t arena[NV];
    for (int variant = 0; variant < NV; variant++) {
        kiln_compile_opts o = kiln_compile_defaults();
        o.training = 1;
        o.max_batch = B;
        o.reuse_memory = variant & 1;
        o.fuse = (variant >> 1) & 1;
        o.layout = (variant >> 2) & 1;
        o.autotune = 0;
        kiln_plan *pl = NULL;
        CHECK_OK(kiln_compile(mp.g, mp.P32, &mp.m.loss, 1, &o, &pl));
        grads[variant] = malloc((size_t)total * 4);
        if (!pl) return;
        kiln_plan_bind(pl, mp.m.x, x);
        kiln_plan_bind(pl, mp.m.y, y);
        kiln_plan_set_step(pl, 3);
        CHECK_OK(kiln_plan_run(pl, B));
        losses[variant] = kiln_plan_loss(pl);
        arena[variant] = kiln_plan_arena_bytes(pl);
        memcpy(grads[variant], kiln_params_grad(mp.P32), (size_t)total * 4);
        kiln_plan_free(pl);
    }
    CHECK_MSG(arena[1] < arena[0], "reuse should shrink the arena: %zu vs %zu", arena[1], arena[0]);
    CHECK_MSG(arena[3] < arena[1], "fusion should shrink the arena: %zu vs %zu", arena[3], arena[1]);
    for (int v = 1; v < NV; v++) {
        CHECK_MSG(fabs(losses[v] - losses[0]) <= 1e-6 * fabs(losses[0]), "variant %d loss %.9f vs %.9f", v, losses[v], losses[0]);
        CHECK_MSG(tu_err_ff(grads[v], grads[0], total, 1e-6, 1e-4) <= 1, "variant %d gradients differ", v);
    }
    for (int v = 0; v < NV; v++) free(grads[v]);
    kiln_free(x);
    kiln_free(y);
    free_pair(&mp);
}

/* finite differences in double through the whole reference plan */
static void gradcheck(const char *what, kiln_graph *g, kiln_value loss, kiln_value x, kiln_value y, int64_t B,
                      int64_t xnumel, int nclass) {
    kiln_params *P;
    CHECK_OK(kiln_params_new(g, KILN_F64, &P));
    if (!P) return;
    double *p = kiln_params_data(P);
    for (int64_t i = 0; i < kiln_params_total(P); i++) p[i] = tu_uniform(-0.5, 0.5);
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    o.backend = "ref";
    o.max_batch = B;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_compile(g, P, &loss, 1, &o, &pl));
    if (!pl) return;
    float *xs = malloc((size_t)(B * xnumel) * 4);
    int32_t *ys = malloc((size_t)B * 4);
    tu_fill(xs, B * xnumel, -1, 1);
    for (int64_t i = 0; i < B; i++) ys[i] = (int32_t)tu_int(0, nclass - 1);
    kiln_plan_bind(pl, x, xs);
    kiln_plan_bind(pl, y, ys);
    CHECK_OK(kiln_plan_run(pl, B));
    int64_t total = kiln_params_total(P);
    double *an = malloc((size_t)total * 8);
    memcpy(an, kiln_params_grad(P), (size_t)total * 8);
    double worst = 0;
    for (int k = 0; k < kiln_params_count(P); k++) {
        int64_t off = kiln_params_offset(P, k), n = kiln_params_numel(P, k);
        for (int t = 0; t < 6; t++) {
            int64_t i = off + tu_int(0, n - 1);
            double keep = p[i], h = 1e-6;
            p[i] = keep + h;
            kiln_plan_run(pl, B);
            double lp = kiln_plan_loss(pl);
            p[i] = keep - h;
            kiln_plan_run(pl, B);
            double lm = kiln_plan_loss(pl);
            p[i] = keep;
            double num = (lp - lm) / (2 * h);
            double e = fabs(num - an[i]) / (1e-6 + 1e-4 * fabs(num) + 1e-4 * fabs(an[i]));
            if (e > worst) worst = e;
            CHECK_MSG(e <= 1, "%s: d loss / d %s[%lld]: autodiff %.10g, finite difference %.10g", what,
                      kiln_params_name(P, k), (long long)(i - off), an[i], num);
        }
    }
    free(an);
    free(xs);
    free(ys);
    kiln_plan_free(pl);
    kiln_params_free(P);
}

static void test_gradcheck_graphs(void) {
    /* conv -> relu -> pool -> dropout -> flatten -> linear -> log_softmax -> nll, plus add and mul
     * and a parameter used twice, so gradients accumulate (grad = None rule, acc = 1) */
    kiln_graph *g = kiln_graph_new();
    int64_t xs[4] = {KILN_BATCH, 2, 6, 6}, ys[1] = {KILN_BATCH};
    kiln_value x = kiln_input(g, "x", KILN_F32, 4, xs), y = kiln_input(g, "y", KILN_I32, 1, ys);
    kiln_value w = kiln_param(g, "c.weight", 4, (int64_t[]){3, 2, 3, 3}, 18);
    kiln_value b = kiln_param(g, "c.bias", 1, (int64_t[]){3}, 18);
    kiln_value h = kiln_conv2d(g, x, w, b, 1, 1);             /* [B,3,6,6] */
    kiln_value h2 = kiln_conv2d(g, x, w, -1, 1, 1);           /* same weight again */
    h = kiln_add(g, kiln_relu(g, h), kiln_mul(g, h2, h2));
    h = kiln_dropout(g, kiln_max_pool2d(g, h, 2, 2), 0.3f);   /* [B,3,3,3] */
    h = kiln_flatten(g, h, 1);
    kiln_value fw = kiln_param(g, "fc.weight", 2, (int64_t[]){4, 27}, 27);
    kiln_value fb = kiln_param(g, "fc.bias", 1, (int64_t[]){4}, 27);
    kiln_value logits = kiln_linear(g, h, fw, fb);
    kiln_value loss = kiln_nll_loss(g, kiln_log_softmax(g, logits), y);
    CHECK_OK(kiln_graph_status(g));
    gradcheck("conv graph", g, loss, x, y, 3, 72, 4);
    kiln_graph_free(g);

    g = kiln_graph_new();
    int64_t xs2[2] = {KILN_BATCH, 5};
    x = kiln_input(g, "x", KILN_F32, 2, xs2);
    y = kiln_input(g, "y", KILN_I32, 1, ys);
    w = kiln_param(g, "a.weight", 2, (int64_t[]){5, 5}, 5);
    kiln_value z = kiln_linear(g, x, w, -1);
    z = kiln_linear(g, kiln_relu(g, z), w, -1); /* w read twice */
    loss = kiln_cross_entropy(g, z, y);
    gradcheck("linear graph", g, loss, x, y, 4, 5, 5);
    kiln_graph_free(g);
}

/* two micro-batches of 4 accumulated with loss scale 1/2 give the gradient of one batch of 8 */
static void test_accumulate(void) {
    model_pair mp;
    build_pair(&mp, "mnist-cnn", 5);
    int64_t B = 8, total = kiln_params_total(mp.P32);
    float *x = kiln_alloc((size_t)B * 784 * 4);
    int32_t *y = kiln_alloc((size_t)B * 4);
    random_batch(x, y, B, 784);
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    o.max_batch = B;
    o.dropout_off = 1;
    o.autotune = 0;
    o.also_batches[0] = B / 2; /* the micro-batches */
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_compile(mp.g, mp.P32, &mp.m.loss, 1, &o, &pl));
    if (!pl) return;
    kiln_plan_bind(pl, mp.m.x, x);
    kiln_plan_bind(pl, mp.m.y, y);
    CHECK_OK(kiln_plan_run(pl, B));
    float *whole = malloc((size_t)total * 4);
    memcpy(whole, kiln_params_grad(mp.P32), (size_t)total * 4);
    for (int half = 0; half < 2; half++) {
        kiln_plan_set_accumulate(pl, half > 0, 0.5);
        kiln_plan_bind(pl, mp.m.x, x + half * 4 * 784);
        kiln_plan_bind(pl, mp.m.y, y + half * 4);
        CHECK_OK(kiln_plan_run(pl, 4));
    }
    double gmax = 0;
    for (int64_t i = 0; i < total; i++) gmax = fmax(gmax, fabs(whole[i]));
    double e = tu_err_ff(kiln_params_grad(mp.P32), whole, total, 1e-4 * gmax, 1e-4);
    CHECK_MSG(e <= 1, "accumulated gradients differ from the whole batch's by %.3g", e);
    /* and without accumulate the second micro-batch alone is left (the grad = None rule) */
    kiln_plan_set_accumulate(pl, 0, 1.0);
    CHECK_OK(kiln_plan_run(pl, 4));
    CHECK(tu_err_ff(kiln_params_grad(mp.P32), whole, total, 1e-4 * gmax, 1e-4) > 1);
    free(whole);
    kiln_plan_free(pl);
    kiln_free(x);
    kiln_free(y);
    free_pair(&mp);
}

static void test_builder_errors(void) {
    kiln_graph *g = kiln_graph_new();
    int64_t xs[4] = {KILN_BATCH, 3, 8, 8};
    kiln_value x = kiln_input(g, "x", KILN_F32, 4, xs);
    kiln_value w = kiln_param(g, "bad.weight", 4, (int64_t[]){4, 2, 3, 3}, 18); /* 2 channels, input has 3 */
    kiln_value h = kiln_conv2d(g, x, w, -1, 1, 0);
    CHECK(h < 0);
    CHECK(kiln_relu(g, h) < 0); /* sticky: later calls fail too */
    CHECK(kiln_graph_status(g) == KILN_ERR_SHAPE);
    CHECK_MSG(strstr(kiln_last_error(), "conv2d#0") && strstr(kiln_last_error(), "[4, 2, 3, 3]"), "message: %s",
              kiln_last_error());
    kiln_graph_free(g);

    kiln_model m;
    g = kiln_graph_new();
    CHECK(kiln_model_build(g, "resnet-9000", &m) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_last_error(), "resnet-9000") != NULL);
    kiln_graph_free(g);
}

/* A plan output the layout pass could block (a 16-channel relu nothing else reads)
 * stays plain: kiln_plan_read gives the same rows with the layout pass on and off */
static void test_output_stays_plain(void) {
    enum { B = 2, N = B * 16 * 6 * 6 };
    kiln_graph *g = kiln_graph_new();
    kiln_value x = kiln_input(g, "x", KILN_F32, 4, (int64_t[]){KILN_BATCH, 3, 6, 6});
    kiln_value w = kiln_param(g, "c.weight", 4, (int64_t[]){16, 3, 3, 3}, 27);
    kiln_value y = kiln_relu(g, kiln_conv2d(g, x, w, -1, 1, 1));
    kiln_params *P = NULL;
    CHECK_OK(kiln_params_new(g, KILN_F32, &P));
    if (!P) return;
    kiln_params_init(P, 5);
    float xs[B * 3 * 36], out[2][N];
    for (int i = 0; i < B * 3 * 36; i++) xs[i] = (float)tu_uniform(-1, 1);
    for (int layout = 0; layout < 2; layout++) {
        kiln_compile_opts o = kiln_compile_defaults();
        o.max_batch = B;
        o.layout = layout;
        o.autotune = 0;
        kiln_plan *pl = NULL;
        CHECK_OK(kiln_compile(g, P, &y, 1, &o, &pl));
        if (!pl) break;
        kiln_plan_bind(pl, x, xs);
        CHECK_OK(kiln_plan_run(pl, B));
        CHECK_OK(kiln_plan_read(pl, y, out[layout], N));
        kiln_plan_free(pl);
    }
    int bad = 0, nonzero = 0;
    for (int i = 0; i < N; i++) bad += fabsf(out[0][i] - out[1][i]) > 1e-5f, nonzero += out[0][i] != 0;
    CHECK_MSG(bad == 0 && nonzero > N / 4, "a 16-channel output with the layout pass: %d of %d values differ (%d nonzero)", bad, N,
              nonzero);
    kiln_params_free(P);
    kiln_graph_free(g);
}

int main(void) {
    tu_seed(42);
    test_builder_errors();
    test_fast_vs_reference("mnist-cnn", 5, 1, 1, 1);
    test_fast_vs_reference("mnist-cnn", 4, 0, 1, 1);
    test_fast_vs_reference("mnist-cnn", 3, 0, 0, 0);
    test_fast_vs_reference("mlp", 7, 0, 1, 1);
    g_autotune = 1; /* whatever algorithm wins the timing must give the same numbers */
    test_fast_vs_reference("mnist-cnn", 6, 0, 1, 1);
    g_autotune = 0;
    test_passes_do_not_change_results();
    test_accumulate();
    test_gradcheck_graphs();
    test_output_stays_plain();
    return tu_finish("test_graph");
}
