/* The two batch norm passes, each with and without it:
 *   - bias before norm: which conv2d/linear biases a following batch norm
 *     cancels (and which not: relu after, no bias, a second reader), the
 *     compile warning naming them, and kiln_graph_fix_bias removing them:
 *     training gives the same loss, outputs and gradients; the running mean
 *     differs by exactly momentum x bias, so evaluation agrees once the
 *     running mean carries the bias (and not before: the test would see it);
 *   - batch norm folded into the conv in inference plans (fold_bn): the
 *     same outputs as unfolded evaluation on a small graph (ref and cpu), on
 *     resnet20 and on mnist-cnn-bn, all with random running statistics; no
 *     batch norm step left, relu fused into the folded conv; the inference
 *     arena against training's and unfolded inference's;
 *   - relu's backward fused into the batch-norm backward before it (the
 *     mask recomputed from x), and a block's residual add and relu into its
 *     second norm: resnet20's training gradients with fusion on and off, on
 *     the cpu and the ref backend, and the cpu's against the ref's; ten norms
 *     (the stem and each block's first) take the mask, seven the add. */
#include <stdio.h>
#include "kiln/graph.h"
#include "kiln/nn.h"
#include "kernels/cpu/cpu_internal.h"
#include "testutil.h"
#include "train_once.h"

/* ---- helpers ---- */

/* warnings the logger sent, kept for the checks */
static char g_warned[4096];
static void keep_warnings(kiln_log_level level, const char *msg, void *user) {
    (void)user;
    if (level == KILN_LOG_WARN && strlen(g_warned) + strlen(msg) + 2 < sizeof g_warned) {
        strcat(g_warned, msg);
        strcat(g_warned, "\n");
    }
}

static kiln_value batch_norm(kiln_graph *g, const char *name, kiln_value x, int64_t c) {
    return kiln_nn_batch_norm2d(g, name, x, c);
}

/* random parameters and running statistics (variances in [0.5, 2]): the
 * defaults (weight 1, bias 0, mean 0, variance 1) would hide a wrong fold */
static void randomize(kiln_params *P, uint64_t seed) {
    tu_seed(seed);
    float *p = kiln_params_data(P);
    for (int64_t i = 0; i < kiln_params_total(P); i++) p[i] = (float)tu_uniform(-0.6, 0.6);
    for (int i = 0; i < kiln_params_buffer_count(P); i++) {
        if (kiln_params_buffer_dtype(P, i) != KILN_F32) continue;
        int var = strstr(kiln_params_buffer_name(P, i), "running_var") != NULL;
        float *b = kiln_params_buffer_data(P, i);
        for (int64_t j = 0; j < kiln_params_buffer_numel(P, i); j++) b[j] = (float)(var ? tu_uniform(0.5, 2) : tu_uniform(-0.5, 0.5));
    }
}

/* the values of the parameters and buffers dst has, copied by name from src (both cpu) */
static void copy_by_name(kiln_params *dst, kiln_params *src) {
    float *d = kiln_params_data(dst), *s = kiln_params_data(src);
    for (int i = 0; i < kiln_params_count(dst); i++) {
        int j = kiln_params_find(src, kiln_params_name(dst, i));
        CHECK_MSG(j >= 0, "%s missing", kiln_params_name(dst, i));
        if (j >= 0)
            memcpy(d + kiln_params_offset(dst, i), s + kiln_params_offset(src, j), (size_t)kiln_params_numel(dst, i) * 4);
    }
    for (int i = 0; i < kiln_params_buffer_count(dst); i++) {
        int j = kiln_params_buffer_find(src, kiln_params_buffer_name(dst, i));
        if (j >= 0)
            memcpy(kiln_params_buffer_data(dst, i), kiln_params_buffer_data(src, j), (size_t)kiln_params_buffer_numel(dst, i) * 8);
    }
}

/* cpu float parameters to ref double ones of the same graph */
static void to_double(kiln_params *P64, kiln_params *P32) {
    const float *p = kiln_params_data(P32);
    double *q = kiln_params_data(P64);
    for (int64_t i = 0; i < kiln_params_total(P32); i++) q[i] = p[i];
    for (int i = 0; i < kiln_params_buffer_count(P32); i++) {
        if (kiln_params_buffer_dtype(P32, i) != KILN_F32) continue;
        const float *b = kiln_params_buffer_data(P32, i);
        double *c = kiln_params_buffer_data(P64, i);
        for (int64_t j = 0; j < kiln_params_buffer_numel(P32, i); j++) c[j] = b[j];
    }
}

/* max |a - b| / max |b| */
static double rel(const float *a, const float *b, int64_t n) {
    double num = 0, den = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= num)) num = e;
        den = fmax(den, fabs((double)b[i]));
    }
    return num / den;
}

static int count_in(const char *text, const char *word) {
    int n = 0;
    for (const char *p = strstr(text, word); p; p = strstr(p + 1, word)) n++;
    return n;
}

/* ---- bias before norm: detection ---- */

enum { CONV_BN, LINEAR_BN, CONV_RELU, CONV_NOBIAS_BN, CONV_TWO_READERS, NSHAPES };
static const char *shape_name[NSHAPES] = {"conv+bias -> bn", "linear+bias -> bn (as [N,O,1,1])", "conv+bias -> relu",
                                          "conv -> bn", "conv+bias -> bn and add"};

/* one small graph of each shape; the loss is a mean cross-entropy */
static kiln_graph *small_graph(int shape, kiln_value *x, kiln_value *y, kiln_value *loss) {
    kiln_graph *g = kiln_graph_new();
    *x = kiln_input(g, "x", KILN_F32, 4, (int64_t[]){KILN_BATCH, 3, 5, 5});
    *y = kiln_input(g, "y", KILN_I32, 1, (int64_t[]){KILN_BATCH});
    kiln_value h;
    if (shape == LINEAR_BN) {
        h = kiln_nn_linear(g, "fc", kiln_flatten(g, *x, 1), 75, 6, 1);
        h = batch_norm(g, "bn", kiln_reshape(g, h, 4, (int64_t[]){KILN_BATCH, 6, 1, 1}), 6); /* BatchNorm1d */
    } else {
        h = kiln_nn_conv2d(g, "conv", *x, 3, 6, 3, 1, 1, shape != CONV_NOBIAS_BN);
        kiln_value c = h;
        h = shape == CONV_RELU ? kiln_relu(g, h) : batch_norm(g, "bn", h, 6);
        if (shape == CONV_TWO_READERS) h = kiln_add(g, h, c);
        h = kiln_relu(g, h);
    }
    h = kiln_nn_linear(g, "head", kiln_flatten(g, h, 1), shape == LINEAR_BN ? 6 : 150, 4, 1);
    *loss = kiln_cross_entropy(g, h, *y);
    return g;
}

static void test_detection(void) {
    static const int expect[NSHAPES] = {1, 1, 0, 0, 0};
    static const char *bias[NSHAPES] = {"conv.bias", "fc.bias", NULL, NULL, NULL};
    for (int s = 0; s < NSHAPES; s++) {
        kiln_value x, y, loss;
        kiln_graph *g = small_graph(s, &x, &y, &loss);
        CHECK_OK(kiln_graph_status(g));
        /* without the fix: a training compile warns, naming the bias and its layer */
        kiln_params *P = NULL;
        CHECK_OK(kiln_params_new(g, KILN_F32, &P));
        kiln_compile_opts o = kiln_compile_defaults();
        o.training = 1;
        o.max_batch = 4;
        o.autotune = 0;
        kiln_plan *pl = NULL;
        g_warned[0] = 0;
        kiln_log_set_sink(keep_warnings, NULL);
        CHECK_OK(kiln_compile(g, P, &loss, 1, &o, &pl));
        o.training = 0; /* inference plans do not warn: folding takes the bias in anyway */
        kiln_plan *ev = NULL;
        CHECK_OK(kiln_compile(g, P, &loss, 1, &o, &ev));
        kiln_log_set_sink(NULL, NULL);
        int warned = count_in(g_warned, "does nothing");
        CHECK_MSG(warned == expect[s], "%s: %d warnings, want %d:\n%s", shape_name[s], warned, expect[s], g_warned);
        if (bias[s]) CHECK_MSG(strstr(g_warned, bias[s]) != NULL, "%s: the warning does not name %s", shape_name[s], bias[s]);
        if (bias[s]) CHECK_MSG(strstr(g_warned, s == LINEAR_BN ? "fc:" : "conv:") != NULL, "%s: no layer named", shape_name[s]);
        kiln_plan_free(pl);
        kiln_plan_free(ev);
        kiln_params_free(P);
        /* with it: exactly the cancelled bias leaves the parameters */
        int before = -1;
        CHECK_OK(kiln_params_new(g, KILN_F32, &P));
        if (P) before = kiln_params_count(P);
        kiln_params_free(P);
        char *names = NULL;
        int n = kiln_graph_fix_bias(g, &names);
        CHECK_MSG(n == expect[s], "%s: fix removed %d", shape_name[s], n);
        CHECK(bias[s] ? names && strcmp(names, bias[s]) == 0 : names == NULL);
        P = NULL;
        CHECK_OK(kiln_params_new(g, KILN_F32, &P));
        if (P) CHECK(kiln_params_count(P) == before - expect[s]);
        if (P && bias[s]) CHECK(kiln_params_find(P, bias[s]) < 0);
        CHECK(kiln_graph_fix_bias(g, NULL) == 0); /* nothing left to do */
        free(names);
        kiln_params_free(P);
        kiln_graph_free(g);
    }
}

/* ---- bias before norm: removing it changes nothing in training ---- */

typedef struct {
    kiln_graph *g;
    kiln_value x, y, loss, out;
    kiln_params *P;
} model;

/* conv+bias -> bn -> relu -> linear+bias -> bn1d -> relu -> linear -> loss */
static void two_biases(model *m, int fix) {
    kiln_graph *g = m->g = kiln_graph_new();
    m->x = kiln_input(g, "x", KILN_F32, 4, (int64_t[]){KILN_BATCH, 3, 6, 6});
    m->y = kiln_input(g, "y", KILN_I32, 1, (int64_t[]){KILN_BATCH});
    kiln_value h = kiln_relu(g, batch_norm(g, "bn1", kiln_nn_conv2d(g, "conv1", m->x, 3, 8, 3, 1, 1, 1), 8));
    h = kiln_nn_linear(g, "fc1", kiln_flatten(g, h, 1), 288, 5, 1);
    h = kiln_relu(g, kiln_flatten(g, batch_norm(g, "bn2", kiln_reshape(g, h, 4, (int64_t[]){KILN_BATCH, 5, 1, 1}), 5), 1));
    m->out = kiln_nn_linear(g, "fc2", h, 5, 3, 1);
    m->loss = kiln_cross_entropy(g, m->out, m->y);
    CHECK_OK(kiln_graph_status(g));
    if (fix) CHECK(kiln_graph_fix_bias(g, NULL) == 2);
    CHECK_OK(kiln_params_new(g, KILN_F32, &m->P));
}

static void free_model(model *m) {
    kiln_params_free(m->P);
    kiln_graph_free(m->g);
}

/* one forward (+ backward when training) of m on x, y; the output into out */
static double run_once(model *m, int training, const float *x, const int32_t *y, int64_t B, float *out) {
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = training;
    o.max_batch = B;
    o.autotune = 0;
    kiln_value outs[2] = {m->loss, m->out};
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_compile(m->g, m->P, outs, 2, &o, &pl));
    if (!pl) return NAN;
    kiln_plan_bind(pl, m->x, x);
    kiln_plan_bind(pl, m->y, y);
    CHECK_OK(kiln_plan_run(pl, B));
    CHECK_OK(kiln_plan_read(pl, m->out, out, B * 3));
    double l = kiln_plan_loss(pl);
    kiln_plan_free(pl);
    return l;
}

static const float *buffer(kiln_params *P, const char *name) {
    int i = kiln_params_buffer_find(P, name);
    return i >= 0 ? kiln_params_buffer_data(P, i) : NULL;
}
/* a parameter's values (grad = 0) or gradient (grad = 1) */
static const float *param(kiln_params *P, const char *name, int grad) {
    int i = kiln_params_find(P, name);
    if (i < 0) return NULL;
    return (grad ? (float *)kiln_params_grad(P) : (float *)kiln_params_data(P)) + kiln_params_offset(P, i);
}

static void test_fix_keeps_training(void) {
    model a, b; /* a keeps its biases, b has them removed */
    two_biases(&a, 0);
    two_biases(&b, 1);
    if (!a.P || !b.P) return;
    CHECK(kiln_params_count(a.P) == kiln_params_count(b.P) + 2);
    randomize(a.P, 5);
    copy_by_name(b.P, a.P);
    int64_t B = 6;
    float x[6 * 108], oa[18], ob[18];
    int32_t y[6];
    tu_fill(x, B * 108, -1, 2);
    for (int i = 0; i < B; i++) y[i] = (int32_t)tu_int(0, 2);
    /* training mode: the batch's mean takes the bias away */
    double la = run_once(&a, 1, x, y, B, oa), lb = run_once(&b, 1, x, y, B, ob);
    CHECK_MSG(fabs(la - lb) <= 1e-5 * fabs(la), "training loss %.9g with the biases, %.9g without", la, lb);
    CHECK_MSG(rel(ob, oa, B * 3) <= 1e-5, "training outputs differ by %.3g", rel(ob, oa, B * 3));
    for (int i = 0; i < kiln_params_count(b.P); i++) {
        const char *name = kiln_params_name(b.P, i);
        const float *ga = param(a.P, name, 1), *gb = param(b.P, name, 1);
        int64_t n = kiln_params_numel(b.P, i);
        CHECK_MSG(ga && rel(gb, ga, n) <= 1e-4, "gradient of %s differs by %.3g", name, ga ? rel(gb, ga, n) : -1.0);
    }
    /* the running variance is the same; the running mean differs by momentum x bias */
    const char *layers[2][2] = {{"bn1", "conv1.bias"}, {"bn2", "fc1.bias"}};
    for (int l = 0; l < 2; l++) {
        char rm[64], rv[64];
        snprintf(rm, sizeof rm, "%s.running_mean", layers[l][0]);
        snprintf(rv, sizeof rv, "%s.running_var", layers[l][0]);
        const float *ma = buffer(a.P, rm), *mb = buffer(b.P, rm), *va = buffer(a.P, rv), *vb = buffer(b.P, rv);
        const float *bias = param(a.P, layers[l][1], 0);
        int64_t c = kiln_params_buffer_numel(a.P, kiln_params_buffer_find(a.P, rm));
        CHECK(rel(vb, va, c) <= 1e-5);
        double worst = 0;
        for (int64_t k = 0; k < c; k++) worst = fmax(worst, fabs((double)ma[k] - mb[k] - 0.1 * bias[k]));
        CHECK_MSG(worst <= 1e-5, "%s: running mean difference off momentum x bias by %.3g", rm, worst);
    }
    /* evaluation with these statistics does not cancel the bias ... */
    la = run_once(&a, 0, x, y, B, oa);
    lb = run_once(&b, 0, x, y, B, ob);
    CHECK_MSG(rel(ob, oa, B * 3) > 1e-3, "evaluation should see the bias the running mean lacks (%.3g)", rel(ob, oa, B * 3));
    /* ... until the running mean holds it, as it does after training without the bias */
    for (int l = 0; l < 2; l++) {
        char rm[64];
        snprintf(rm, sizeof rm, "%s.running_mean", layers[l][0]);
        float *mb = (float *)buffer(b.P, rm);
        const float *ma = buffer(a.P, rm), *bias = param(a.P, layers[l][1], 0);
        for (int64_t k = 0; k < kiln_params_buffer_numel(b.P, kiln_params_buffer_find(b.P, rm)); k++) mb[k] = ma[k] - bias[k];
    }
    lb = run_once(&b, 0, x, y, B, ob);
    CHECK_MSG(rel(ob, oa, B * 3) <= 1e-5, "evaluation outputs differ by %.3g", rel(ob, oa, B * 3));
    CHECK_MSG(fabs(la - lb) <= 1e-5 * fabs(la), "evaluation loss %.9g vs %.9g", la, lb);
    free_model(&a);
    free_model(&b);
}

/* ---- batch norm folding ---- */

typedef struct {
    size_t arena;
    char desc[16384];
} plan_info;

static int fuse_residual = 1; /* the residual fusion pass in infer's plans */

/* an inference plan of outputs outs (fold on or off) on x (and labels y when given);
 * the last output into out, the arena and the step listing into info */
static void infer(kiln_graph *g, kiln_params *P, const kiln_value *outs, int nouts, kiln_value xv, kiln_value yv,
                  const float *x, const int32_t *y, int64_t B, int fold, const char *backend, int64_t n, double *out,
                  plan_info *info) {
    kiln_compile_opts o = kiln_compile_defaults();
    o.max_batch = B;
    o.autotune = 0;
    o.fold_bn = fold;
    o.fuse_residual = fuse_residual;
    o.backend = backend;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_compile(g, P, outs, nouts, &o, &pl));
    if (!pl) return;
    kiln_plan_bind(pl, xv, x);
    if (yv >= 0) kiln_plan_bind(pl, yv, y);
    CHECK_OK(kiln_plan_run(pl, B));
    const void *v = kiln_plan_value(pl, outs[nouts - 1]);
    int ref = strcmp(kiln_plan_backend(pl), "ref") == 0;
    for (int64_t i = 0; v && i < n; i++) out[i] = ref ? ((const double *)v)[i] : ((const float *)v)[i];
    if (info) {
        info->arena = kiln_plan_arena_bytes(pl);
        kiln_plan_describe(pl, info->desc, sizeof info->desc);
    }
    kiln_plan_free(pl);
}

/* conv+bias -> bn -> relu -> conv -> bn -> (+ the first relu) -> relu -> 2x2
 * average pool: 16 channels (the blocked layout), a residual reader after the
 * second norm; the pool writes its output plain */
static void test_fold_small(void) {
    kiln_graph *g = kiln_graph_new();
    kiln_value x = kiln_input(g, "x", KILN_F32, 4, (int64_t[]){KILN_BATCH, 3, 7, 7});
    kiln_value h = kiln_relu(g, batch_norm(g, "bn1", kiln_nn_conv2d(g, "conv1", x, 3, 16, 3, 1, 1, 1), 16));
    kiln_value r = batch_norm(g, "bn2", kiln_nn_conv2d(g, "conv2", h, 16, 16, 3, 1, 1, 0), 16);
    kiln_value out = kiln_adaptive_avg_pool2d(g, kiln_relu(g, kiln_add(g, r, h)), 2, 2);
    kiln_params *P32 = NULL, *P64 = NULL;
    CHECK_OK(kiln_params_new(g, KILN_F32, &P32));
    CHECK_OK(kiln_params_new(g, KILN_F64, &P64));
    if (!P32 || !P64) return;
    randomize(P32, 9);
    to_double(P64, P32);
    int64_t B = 3, n = B * 16 * 4;
    float xs[3 * 147];
    tu_fill(xs, B * 147, -1, 1.5);
    double *off = malloc((size_t)n * 8), *on = malloc((size_t)n * 8), *ref_off = malloc((size_t)n * 8), *ref_on = malloc((size_t)n * 8);
    plan_info *i_off = malloc(sizeof *i_off), *i_on = malloc(sizeof *i_on);
    infer(g, P32, &out, 1, x, -1, xs, NULL, B, 0, NULL, n, off, i_off);
    infer(g, P32, &out, 1, x, -1, xs, NULL, B, 1, NULL, n, on, i_on);
    infer(g, P64, &out, 1, x, -1, xs, NULL, B, 0, "ref", n, ref_off, NULL);
    infer(g, P64, &out, 1, x, -1, xs, NULL, B, 1, "ref", n, ref_on, NULL);
    CHECK_MSG(tu_rel_max(ref_on, ref_off, n) <= 1e-12, "ref: folded vs unfolded off by %.3g", tu_rel_max(ref_on, ref_off, n));
    CHECK_MSG(tu_rel_max(on, ref_off, n) <= 1e-5, "cpu folded vs ref off by %.3g", tu_rel_max(on, ref_off, n));
    CHECK_MSG(tu_rel_max(off, ref_off, n) <= 1e-5, "cpu unfolded vs ref off by %.3g", tu_rel_max(off, ref_off, n));
    CHECK_MSG(count_in(i_on->desc, "batch_norm2d") == 0 && count_in(i_on->desc, "bn_fold") == 2,
              "folded plan:\n%s", i_on->desc);
    CHECK_MSG(count_in(i_off->desc, "batch_norm2d") == 2 && count_in(i_off->desc, "bn_fold") == 0,
              "unfolded plan:\n%s", i_off->desc);
    CHECK_MSG(count_in(i_on->desc, "+relu") == 2 && count_in(i_on->desc, "conv2d_add") == 1,
              "conv1's relu, conv2's add and the relu after it are not fused into the folded convs:\n%s", i_on->desc);
    CHECK_MSG(count_in(i_on->desc, "blocked") >= 2, "the folded convs left the blocked layout:\n%s", i_on->desc);
    free(off), free(on), free(ref_off), free(ref_on), free(i_off), free(i_on);
    kiln_params_free(P32);
    kiln_params_free(P64);
    kiln_graph_free(g);
}

/* the residual fusion pass with and without: conv -> bn -> relu (h) -> conv -> bn, + r, relu,
 * where r is h (the second conv's own input: the fused conv copies it into its output first)
 * or relu(h + h) (dying at the add: the fused conv writes into its storage; test_fold_model
 * checks that the arena shrinks on resnet20) */
static void test_fuse_residual(void) {
    for (int own = 0; own < 2; own++) {
        kiln_graph *g = kiln_graph_new();
        kiln_value x = kiln_input(g, "x", KILN_F32, 4, (int64_t[]){KILN_BATCH, 3, 7, 7});
        kiln_value h = kiln_relu(g, batch_norm(g, "bn1", kiln_nn_conv2d(g, "conv1", x, 3, 16, 3, 1, 1, 1), 16));
        kiln_value z = batch_norm(g, "bn2", kiln_nn_conv2d(g, "conv2", h, 16, 16, 3, 1, 1, 0), 16);
        kiln_value r = own ? h : kiln_relu(g, kiln_add(g, h, h));
        kiln_value out = kiln_adaptive_avg_pool2d(g, kiln_relu(g, kiln_add(g, z, r)), 2, 2);
        kiln_params *P32 = NULL, *P64 = NULL;
        CHECK_OK(kiln_params_new(g, KILN_F32, &P32));
        CHECK_OK(kiln_params_new(g, KILN_F64, &P64));
        if (!P32 || !P64) return;
        randomize(P32, 21 + own);
        to_double(P64, P32);
        int64_t B = 3, n = B * 16 * 4;
        float xs[3 * 147];
        tu_fill(xs, B * 147, -1, 1.5);
        double *off = malloc((size_t)n * 8), *on = malloc((size_t)n * 8), *ref = malloc((size_t)n * 8);
        plan_info *i_off = malloc(sizeof *i_off), *i_on = malloc(sizeof *i_on);
        fuse_residual = 0;
        infer(g, P32, &out, 1, x, -1, xs, NULL, B, 1, NULL, n, off, i_off);
        fuse_residual = 1;
        infer(g, P32, &out, 1, x, -1, xs, NULL, B, 1, NULL, n, on, i_on);
        infer(g, P64, &out, 1, x, -1, xs, NULL, B, 1, "ref", n, ref, NULL);
        CHECK_MSG(tu_rel_max(on, ref, n) <= 1e-5, "residual fused (own input %d) vs ref off by %.3g", own, tu_rel_max(on, ref, n));
        CHECK_MSG(tu_rel_max(off, ref, n) <= 1e-5, "residual unfused (own input %d) vs ref off by %.3g", own, tu_rel_max(off, ref, n));
        CHECK_MSG(count_in(i_on->desc, "conv2d_add") == 1 && count_in(i_off->desc, "conv2d_add") == 0,
                  "own input %d: fused plan:\n%s\nunfused plan:\n%s", own, i_on->desc, i_off->desc);
        free(off), free(on), free(ref), free(i_off), free(i_on);
        kiln_params_free(P32);
        kiln_params_free(P64);
        kiln_graph_free(g);
    }
}

/* a zoo model: folded evaluation equals unfolded evaluation, and its arena is below training's */
static void test_fold_model(const char *name, int64_t B, int64_t bns) {
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL;
    CHECK_OK(kiln_model_build(g, name, &m));
    CHECK_OK(kiln_params_new(g, KILN_F32, &P));
    if (!P) return;
    randomize(P, 13);
    int64_t shape[KILN_MAX_DIMS], pixels = 1;
    int nd = kiln_value_shape(g, m.x, shape);
    for (int d = 1; d < nd; d++) pixels *= shape[d];
    float *x = kiln_alloc((size_t)(B * pixels) * 4);
    int32_t *y = kiln_alloc((size_t)B * 4);
    tu_fill(x, B * pixels, -1, 2);
    for (int64_t i = 0; i < B; i++) y[i] = (int32_t)tu_int(0, m.num_classes - 1);
    int64_t n = B * m.num_classes;
    double *off = malloc((size_t)n * 8), *on = malloc((size_t)n * 8);
    plan_info *i_off = malloc(sizeof *i_off), *i_on = malloc(sizeof *i_on);
    kiln_value outs[2] = {m.loss, m.out};
    infer(g, P, outs, 2, m.x, m.y, x, y, B, 0, NULL, n, off, i_off);
    infer(g, P, outs, 2, m.x, m.y, x, y, B, 1, NULL, n, on, i_on);
    CHECK_MSG(tu_rel_max(on, off, n) <= 2e-5, "%s: folded vs unfolded evaluation off by %.3g", name, tu_rel_max(on, off, n));
    CHECK_MSG(count_in(i_on->desc, "bn_fold") == bns && count_in(i_on->desc, "batch_norm2d") == 0,
              "%s: %d folds, %d norms left", name, count_in(i_on->desc, "bn_fold"), count_in(i_on->desc, "batch_norm2d"));
    if (!strcmp(name, "resnet20")) { /* 9 blocks: each conv2 takes its shortcut's sum, and the shortcut's storage */
        plan_info *i_nores = malloc(sizeof *i_nores);
        double *nores = malloc((size_t)n * 8);
        fuse_residual = 0;
        infer(g, P, outs, 2, m.x, m.y, x, y, B, 1, NULL, n, nores, i_nores);
        fuse_residual = 1;
        CHECK_MSG(tu_rel_max(on, nores, n) <= 2e-5, "%s: residual fused vs not off by %.3g", name, tu_rel_max(on, nores, n));
        CHECK_MSG(count_in(i_on->desc, "conv2d_add") == 9 && count_in(i_nores->desc, "conv2d_add") == 0,
                  "%s: %d conv2d_add", name, count_in(i_on->desc, "conv2d_add"));
        CHECK_MSG(i_on->arena < i_nores->arena, "%s: arena with the residual fusion %zu, without %zu", name, i_on->arena,
                  i_nores->arena);
        free(nores), free(i_nores);
    }
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    o.max_batch = B;
    o.plan_only = 1;
    kiln_plan *tp = NULL;
    CHECK_OK(kiln_compile(g, P, &m.loss, 1, &o, &tp));
    size_t train = tp ? kiln_plan_arena_bytes(tp) : 0;
    /* the folded weights take arena space of their own, so a small batch may need a little more than unfolded */
    CHECK_MSG(i_on->arena < train, "%s: arena folded %zu, training %zu", name, i_on->arena, train);
    printf("%s, batch %lld: arena training %.2f MiB, inference %.2f MiB unfolded, %.2f MiB folded; outputs differ by %.2g\n",
           name, (long long)B, train / 1048576.0, i_off->arena / 1048576.0, i_on->arena / 1048576.0, tu_rel_max(on, off, n));
    kiln_plan_free(tp);
    free(off), free(on), free(i_off), free(i_on);
    kiln_free(x);
    kiln_free(y);
    kiln_params_free(P);
    kiln_graph_free(g);
}

/* ---- relu's backward in the norm's: gradients the same with and without ---- */

/* one training step of model m (fuse on or off) on x, y; every parameter gradient
 * into grad (as double) and the steps whose epilogue is the relu mask counted */
static int train_grads(kiln_graph *g, kiln_params *P, const kiln_model *m, const char *backend, int fuse, int64_t B,
                       const float *x, const int32_t *y, double *grad, int *add_relu) {
    kiln_plan *pl = tu_train_once(g, P, m, backend, fuse, B, x, y, grad);
    if (!pl) return -1;
    int masks = 0;
    for (int i = 0; i < kiln_plan_step_count(pl); i++) {
        kiln_step_info si;
        if (kiln_plan_step_info(pl, i, &si) != KILN_OK) continue;
        masks += strcmp(si.epilogue, "relu_bwd_mask") == 0;
        *add_relu += strcmp(si.epilogue, "add_relu") == 0;
    }
    kiln_plan_free(pl);
    return masks;
}

static void test_relu_bwd_in_norm(void) {
    const int64_t B = 4;
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL, *P64 = NULL;
    CHECK_OK(kiln_model_build(g, "resnet20", &m));
    CHECK_OK(kiln_params_new(g, KILN_F32, &P));
    CHECK_OK(kiln_params_new(g, KILN_F64, &P64));
    if (!P || !P64) return;
    randomize(P, 21);
    to_double(P64, P);
    float *x = kiln_alloc((size_t)(B * 3 * 32 * 32) * 4);
    int32_t *y = kiln_alloc((size_t)B * 4);
    tu_fill(x, B * 3 * 32 * 32, -1, 2);
    for (int64_t i = 0; i < B; i++) y[i] = (int32_t)tu_int(0, m.num_classes - 1);
    int64_t n = kiln_params_total(P);
    double *g_on = malloc((size_t)n * 8), *g_off = malloc((size_t)n * 8), *r_on = malloc((size_t)n * 8),
           *r_off = malloc((size_t)n * 8);
    int adds[4] = {0};
    int masks_on = train_grads(g, P, &m, "cpu", 1, B, x, y, g_on, &adds[0]);
    int masks_off = train_grads(g, P, &m, "cpu", 0, B, x, y, g_off, &adds[1]);
    int ref_on = train_grads(g, P64, &m, "ref", 1, B, x, y, r_on, &adds[2]);
    int ref_off = train_grads(g, P64, &m, "ref", 0, B, x, y, r_off, &adds[3]);
    CHECK_MSG(masks_on == 10 && masks_off == 0 && ref_on == 10 && ref_off == 0,
              "relu masks in norm backward: cpu %d fused, %d unfused; ref %d, %d (want 10, 0)", masks_on, masks_off, ref_on,
              ref_off);
    /* the blocks' residual add and relu in their second norm: all 9 (option A's shortcut is built first) */
    CHECK_MSG(adds[0] == 9 && adds[1] == 0 && adds[2] == 9 && adds[3] == 0,
              "add-relu epilogues: cpu %d fused, %d unfused; ref %d, %d (want 9, 0)", adds[0], adds[1], adds[2], adds[3]);
    /* the same gradients fused and unfused: one pass computes exactly the masked dy that relu_bwd wrote */
    CHECK_MSG(tu_rel_max(g_on, g_off, n) <= 1e-6, "cpu: gradients fused vs unfused off by %.3g", tu_rel_max(g_on, g_off, n));
    CHECK_MSG(tu_rel_max(r_on, r_off, n) <= 1e-12, "ref: gradients fused vs unfused off by %.3g", tu_rel_max(r_on, r_off, n));
    CHECK_MSG(tu_rel_max(g_on, r_on, n) <= 1e-4, "fused: cpu vs ref gradients off by %.3g", tu_rel_max(g_on, r_on, n));
    printf("resnet20 relu_bwd in batch norm backward: gradients fused vs unfused differ by %.2g (cpu), %.2g (ref); "
           "cpu vs ref %.2g\n", tu_rel_max(g_on, g_off, n), tu_rel_max(r_on, r_off, n), tu_rel_max(g_on, r_on, n));
    free(g_on), free(g_off), free(r_on), free(r_off);
    kiln_free(x);
    kiln_free(y);
    kiln_params_free(P);
    kiln_params_free(P64);
    kiln_graph_free(g);
}

int main(void) {
    test_detection();
    test_fix_keeps_training();
    test_fold_small();
    test_fuse_residual();
    test_fold_model("resnet20", 4, 19);
    test_fold_model("mnist-cnn-bn", 4, 2);
    test_relu_bwd_in_norm();
    return tu_finish("test_norm_passes");
}
