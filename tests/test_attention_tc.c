/* Causal attention on the CUDA backend's tensor cores (src/backends/cuda/flash_tc.cu), its kernels run by
 * simt on the host (tests/simt/, src/backends/cuda/internal/simt_wmma.h):
 *   - a plan compiled with --precision bf16 (or fp16) takes them for heads a multiple of 16 (its attention
 *     steps say so), and its output and every gradient match the double reference within the kernels' own
 *     roundings: q, k, v and the loss's weights (backward's dy) are drawn exact in bf16 (so in fp16 too), so
 *     what is left is the probabilities and dS rounded before their products (relative 2^-9 each in bf16,
 *     2^-12 in fp16: fp16's tolerances are below what bf16 gives, so they show fp16 operands ran);
 *   - the same plan in fp32 runs flash.cu's fp32 tiles, within the op harness's tolerances, and its output
 *     differs from the bf16 one: the tensor-core kernels ran;
 *   - shapes: T of 1, across the 64-row tiles and not a multiple of them; heads of 16 to 128; q, k, v apart,
 *     as strided column slices of one [B, T, 3C] value (the GPT's), and one value for all three (their
 *     gradients one buffer, the kernels adding); q's gradient also taking another term (added to).
 *   - a 1-layer gpt in bf16 (AdamW, clipping) twice: the same bits (simt shuffles its launches differently
 *     each run, so an order-dependent kernel shows), and its losses within 1e-2 of fp32's (release build).
 * On a GPU the same checks run on the cuda backend itself (KILN_TEST_CUDA_ONLY=1: those alone).
 * The tolerances catch each of these, planted one at a time in flash_tc.cu while it was written: the
 * output row not rescaled when the running max grows, the diagonal tile's mask one key wide, the
 * log-sum-exp left in log2 units, dk not scaled by 1/sqrt(d), and the __syncthreads before dq's output
 * rows reuse the score tiles taken out (simt's warps at their own paces). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backends/internal/backend.h"
#include "graph/internal/plan.h"
#include "kiln/graph.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "simt/simt_backend.h"
#include "testutil.h"

#define TOL_Y_FP16 5e-4
#define TOL_G_FP16 8e-4

typedef struct {
    int64_t b, t, heads, d;
    int form; /* 0: q, k, v apart (q also in a second loss term); 1: slices of one qkv; 2: one value */
} shape;

typedef struct {
    kiln_graph *g;
    kiln_value y, loss, c[2];
    int nc;
    int64_t ny; /* elements of y, of each c */
} net;

static kiln_value param(kiln_graph *g, const char *name, int64_t b, int64_t t, int64_t c) {
    return kiln_param(g, name, 3, (int64_t[]){b, t, c}, 1);
}

/* L = sum(y * c0) [+ sum(q * c1)] */
static net build(const shape *s) {
    net n = {.g = kiln_graph_new()};
    int64_t c = s->heads * s->d;
    n.ny = s->b * s->t * c;
    kiln_value q, k, v;
    if (s->form == 1) {
        kiln_value qkv = param(n.g, "qkv", s->b, s->t, 3 * c);
        q = kiln_slice(n.g, qkv, 2, 0, c), k = kiln_slice(n.g, qkv, 2, c, 2 * c), v = kiln_slice(n.g, qkv, 2, 2 * c, 3 * c);
    } else if (s->form == 2) {
        q = k = v = param(n.g, "x", s->b, s->t, c);
    } else {
        q = param(n.g, "q", s->b, s->t, c), k = param(n.g, "k", s->b, s->t, c), v = param(n.g, "v", s->b, s->t, c);
    }
    n.y = kiln_causal_attention(n.g, q, k, v, (int)s->heads);
    kiln_value outs[2] = {n.y, q};
    n.nc = s->form == 0 ? 2 : 1;
    for (int i = 0; i < n.nc; i++) { /* y and q: [b, t, c] */
        n.c[i] = kiln_input(n.g, i ? "c1" : "c0", KILN_F32, 3, (int64_t[]){s->b, s->t, c});
        kiln_value term = kiln_sum(n.g, kiln_mul(n.g, outs[i], n.c[i]));
        n.loss = i ? kiln_add(n.g, n.loss, term) : term;
    }
    return n;
}

/* a float with bf16's 8 significant bits (round to nearest even): exact where the kernels round */
static float bf16_exact(double v) {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

/* max |a - b| over max |b| */
static double rel_err(const float *a, const double *b, int64_t n) { return tu_scaled_err(a, b, n, 1e-30); }

typedef struct {
    float *y, *grad; /* host copies */
    int low_steps;   /* attention steps the plan lists in the run's lower precision */
} result;

static kiln_status run(net *n, kiln_params *P, const char *backend, int precision, float *const *c, result *r) {
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1, o.max_batch = 1, o.backend = backend, o.autotune = 0, o.precision = precision;
    kiln_value outs[2] = {n->loss, n->y};
    kiln_plan *pl = NULL;
    kiln_status st = kiln_compile(n->g, P, outs, 2, &o, &pl);
    if (st != KILN_OK) return st;
    for (int i = 0; i < n->nc; i++) kiln_plan_bind(pl, n->c[i], c[i]);
    st = kiln_plan_run(pl, 1);
    int64_t ny = n->ny;
    r->y = malloc((size_t)ny * 4), r->grad = malloc((size_t)kiln_params_total(P) * 8);
    if (st == KILN_OK) st = kiln_plan_read(pl, n->y, r->y, ny);
    if (st == KILN_OK && strcmp(backend, "ref") != 0) st = kiln_params_grad_read(P, r->grad);
    char text[8192];
    kiln_plan_describe(pl, text, sizeof text);
    char mark[8]; /* lines of the listing naming the op and the precision */
    snprintf(mark, sizeof mark, " %s", kiln_precision_name(precision == KILN_PRECISION_FP32 ? KILN_PRECISION_BF16 : precision));
    r->low_steps = 0;
    for (const char *l = text; *l;) {
        const char *end = strchr(l, '\n'), *op = strstr(l, "causal_attention"), *b = strstr(l, mark);
        if (!end) end = l + strlen(l);
        r->low_steps += op && op < end && b && b < end;
        l = *end ? end + 1 : end;
    }
    kiln_plan_free(pl);
    return st;
}

/* the lower precision's tolerances, outputs and gradients over the largest value: the probabilities and dS
 * rounded to 8 significant bits (bf16) or 11 (fp16) */
static void check_shape(const shape *s, const char *backend, int precision, float **other_y) {
    char what[160];
    snprintf(what, sizeof what, "%s %s %s: b %lld t %lld heads %lld d %lld form %d", backend, getenv("KILN_CUDA_FLASH"),
             kiln_precision_name(precision),
             (long long)s->b, (long long)s->t, (long long)s->heads, (long long)s->d, s->form);
    double tol_y = precision == KILN_PRECISION_FP16 ? TOL_Y_FP16 : 3e-3, tol_g = precision == KILN_PRECISION_FP16 ? TOL_G_FP16 : 5e-3;
    net n = build(s);
    CHECK_OK(kiln_graph_status(n.g));
    kiln_params *P64 = NULL, *P32 = NULL;
    CHECK_OK(kiln_params_new_on(n.g, "ref", &P64));
    CHECK_OK(kiln_params_new_on(n.g, backend, &P32));
    int64_t total = kiln_params_total(P32), ny = n.ny;
    float *p32 = malloc((size_t)total * 4), *c[2];
    double *p64 = kiln_params_data(P64);
    for (int64_t i = 0; i < total; i++) p64[i] = p32[i] = bf16_exact(tu_uniform(-2, 2));
    CHECK_OK(kiln_params_write(P32, p32));
    for (int i = 0; i < n.nc; i++) {
        c[i] = malloc((size_t)ny * 4);
        for (int64_t j = 0; j < ny; j++) c[i][j] = bf16_exact(tu_uniform(-1, 1));
    }
    result ref = {0}, tc = {0}, fp = {0};
    CHECK_OK(run(&n, P64, "ref", KILN_PRECISION_FP32, c, &ref));
    double *g64 = kiln_params_grad(P64), *y64 = malloc((size_t)ny * 8);
    for (int64_t i = 0; i < ny; i++) y64[i] = ref.y[i]; /* the ref's plan reads out floats */
    CHECK_OK(run(&n, P32, backend, precision, c, &tc));
    CHECK_MSG(tc.low_steps == 2, "%s: %d attention steps in its precision (2: forward and backward)", what, tc.low_steps);
    double ey = rel_err(tc.y, y64, ny), eg = rel_err(tc.grad, g64, total);
    CHECK_MSG(ey <= tol_y, "%s: tensor cores' output off by %.3g (tolerance %.3g)", what, ey, tol_y);
    CHECK_MSG(eg <= tol_g, "%s: tensor cores' gradients off by %.3g (tolerance %.3g)", what, eg, tol_g);
    CHECK_OK(run(&n, P32, backend, KILN_PRECISION_FP32, c, &fp));
    CHECK_MSG(fp.low_steps == 0, "%s: fp32 plan has %d lower-precision attention steps", what, fp.low_steps);
    double fy = rel_err(fp.y, y64, ny), fg = rel_err(fp.grad, g64, total), moved = 0;
    CHECK_MSG(fy <= 2e-4 && fg <= 5e-4, "%s: fp32 tiles off by %.3g (output), %.3g (gradients)", what, fy, fg);
    for (int64_t i = 0; i < ny; i++) moved = fmax(moved, fabs((double)tc.y[i] - fp.y[i]));
    CHECK_MSG(s->t == 1 || moved > 0, "%s: bf16 and fp32 plans gave the same bits: the tensor cores did not run", what);
    /* the other kernels' output for this shape: kept by the first run, compared by the second (not the same bits:
     * KILN_CUDA_FLASH chose other kernels) */
    if (other_y && !*other_y) {
        *other_y = tc.y, tc.y = NULL;
    } else if (other_y) {
        CHECK_MSG(s->t == 1 || memcmp(*other_y, tc.y, (size_t)ny * 4) != 0, "%s: the same bits as the other kernels'", what);
        free(*other_y), *other_y = NULL;
    }
    if (getenv("KILN_TEST_VERBOSE"))
        printf("test_attention_tc: %s: output %.3g, gradients %.3g (fp32 tiles %.3g, %.3g)\n", what, ey, eg, fy, fg);
    free(ref.y), free(ref.grad), free(tc.y), free(tc.grad), free(fp.y), free(fp.grad), free(y64), free(p32);
    for (int i = 0; i < n.nc; i++) free(c[i]);
    kiln_params_free(P64);
    kiln_params_free(P32);
    kiln_graph_free(n.g);
}

static const char *gpt_checkpoint; /* gpt_run's checkpoint_activations (NULL: none) */
static int gpt_dim = 64;            /* gpt_run's width (2 heads): 48 gives heads of 24, which the fp32 kernels take */
static size_t gpt_ws, gpt_plain;    /* the last gpt_run's kernel workspace, and its arena without checkpointing */
/* the steps of check_half_store writing 16 bits: 8 whose outputs only matmuls read, and the 5 products whose
 * outputs they write rounded (c_attn's for the attention, c_fc's for GELU, the two c_proj's for the residual adds,
 * the logits for cross-entropy); recomputing the layer norms and GELU, 4 more (ln_1, ln_2, GELU, ln_f) write their
 * copies in 16 bits */
#define HALF_GPT 13
#define HALF_RECOMPUTED (HALF_GPT + 4)

/* A 1-layer gpt (heads of 32, block 70: its attention crosses the 64-row tiles; vocab 300),
 * `steps` AdamW steps clipped at 1 on a backend: the parameters after, and each step's loss */
static float *gpt_run(const char *backend, int precision, int steps, double *losses, int64_t *nparams, int *half_steps) {
    enum { B = 2, T = 70, V = 300 };
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_model_opts mo = {0};
    mo.gpt = (kiln_gpt_config){1, 2, gpt_dim, T, V, 0};
    kiln_params *P = NULL;
    kiln_optim *o = NULL;
    kiln_plan *pl = NULL;
    float *out = NULL, x[B * T];
    int32_t y[B * T];
    CHECK_OK(kiln_model_build_ex(g, "gpt", &mo, &m));
    CHECK_OK(kiln_params_new_on(g, backend, &P));
    if (P) {
        kiln_params_init(P, 7);
        kiln_optim_config oc = kiln_optim_defaults(KILN_OPT_ADAMW);
        CHECK_OK(kiln_optim_new(&oc, P, &o));
        kiln_optim_set_clip(o, 1.0);
        kiln_compile_opts co = kiln_compile_defaults();
        co.training = 1, co.max_batch = B, co.backend = backend, co.autotune = 0, co.precision = precision;
        co.checkpoint_activations = gpt_checkpoint;
        CHECK_OK(kiln_compile(g, P, &m.loss, 1, &co, &pl));
    }
    gpt_ws = pl ? pl->ws_bytes : 0;
    gpt_plain = pl ? kiln_plan_arena_bytes_plain(pl) : 0;
    *half_steps = 0; /* steps writing a tensor the half-storage pass stores in 16 bits */
    for (int i = 0; pl && i < kiln_plan_step_count(pl); i++) {
        kiln_step_info si;
        if (kiln_plan_step_info(pl, i, &si) == KILN_OK && si.nout > 0) *half_steps += strstr(si.out[0].layout, "16") != NULL;
    }
    for (int st = 0; pl && st < steps; st++) {
        tu_seed(100 + (uint64_t)st); /* the same batch for step st on every run */
        for (int i = 0; i < B * T; i++) x[i] = (float)tu_int(0, V - 1), y[i] = (int32_t)tu_int(0, V - 1);
        kiln_plan_bind(pl, m.x, x);
        kiln_plan_bind(pl, m.y, y);
        CHECK_OK(kiln_plan_run(pl, B));
        losses[st] = kiln_plan_loss(pl);
        CHECK_OK(kiln_optim_step(o));
    }
    if (pl && (out = malloc((size_t)kiln_params_total(P) * 4))) CHECK_OK(kiln_params_read(P, out));
    *nparams = P ? kiln_params_total(P) : 0;
    kiln_plan_free(pl);
    kiln_optim_free(o);
    kiln_params_free(P);
    kiln_graph_free(g);
    return out;
}

/* the gpt in bf16 twice gives the same bits (simt shuffles its launches differently each time: an
 * order-dependent kernel would differ), and trains as fp32 does within bf16's rounding */
static void check_gpt(const char *backend) {
    enum { STEPS = 2 };
    double la[STEPS], lb[STEPS], lf[STEPS];
    int64_t n = 0;
    int halves;
    float *a = gpt_run(backend, KILN_PRECISION_BF16, STEPS, la, &n, &halves);
    float *b = gpt_run(backend, KILN_PRECISION_BF16, STEPS, lb, &n, &halves);
    float *f = gpt_run(backend, KILN_PRECISION_FP32, STEPS, lf, &n, &halves);
    CHECK_MSG(a && b && memcmp(la, lb, sizeof la) == 0, "%s: two bf16 gpt runs, losses %.9g and %.9g", backend, la[STEPS - 1],
              lb[STEPS - 1]);
    CHECK_MSG(a && b && n && memcmp(a, b, (size_t)n * 4) == 0, "%s: two bf16 gpt runs gave different parameters", backend);
    double worst = 0;
    for (int s = 0; s < STEPS; s++) worst = fmax(worst, fabs(la[s] - lf[s]) / lf[s]);
    CHECK_MSG(f && worst <= 1e-2, "%s: the bf16 gpt's loss off fp32's by %.3g", backend, worst);
    if (getenv("KILN_TEST_VERBOSE")) printf("test_attention_tc: %s: gpt bf16 against fp32, losses within %.2e\n", backend, worst);
    free(a), free(b), free(f);
}

/* sets (or, value NULL, unsets) an environment variable; returns its value before, for env_restore */
static char *env_swap(const char *name, const char *value) {
    const char *was = getenv(name);
    char *old = was ? strdup(was) : NULL;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
    return old;
}
static void env_restore(const char *name, char *old) {
    if (old) setenv(name, old, 1);
    else unsetenv(name);
    free(old);
}

/* KILN_CUDA_STORE=half (the half-storage pass): the tensors that only matmuls read, stored in bf16, change no
 * number, so the gpt trains to the same bits as with each product's operands
 * rounded by the product (KILN_CUDA_GEMM=half's copies on a GPU, the same rounding; simt's stand-ins round
 * in the cpu's kernels). Eight steps write 16 bits: ln_1, ln_2, GELU and ln_f forward, cross-entropy's and GELU's
 * backward, and the gradient copies into the two c_proj outputs' gradients. The products' outputs, which they
 * write rounded to 16 bits anyway, are stored so where GELU, an add or cross-entropy reads them: 4 more */
static void check_half_store(const char *backend, int precision, const char *ckpt, int want) {
    enum { STEPS = 2 };
    double lp[STEPS], lh[STEPS];
    int64_t n = 0;
    int hp = -1, hh = -1;
    char *gemm = env_swap("KILN_CUDA_GEMM", "half"), *store = env_swap("KILN_CUDA_STORE", NULL);
    gpt_checkpoint = ckpt;
    float *p = gpt_run(backend, precision, STEPS, lp, &n, &hp);
    size_t ws_plain = gpt_ws, arena_plain = gpt_plain;
    setenv("KILN_CUDA_STORE", "half", 1);
    float *h = gpt_run(backend, precision, STEPS, lh, &n, &hh);
    gpt_checkpoint = NULL;
    env_restore("KILN_CUDA_STORE", store);
    env_restore("KILN_CUDA_GEMM", gemm);
    char pn[64];
    snprintf(pn, sizeof pn, "%s%s%s, heads of %d", kiln_precision_name(precision), ckpt ? ", recomputing " : "", ckpt ? ckpt : "",
             gpt_dim / 2);
    CHECK_MSG(hp == 0 && hh == want, "%s %s: steps writing 16-bit tensors: %d without half storage, %d with (%d)", backend, pn, hp,
              hh, want);
    CHECK_MSG(p && h && memcmp(lp, lh, sizeof lp) == 0, "%s %s: half storage changed the gpt's losses: %.9g, %.9g", backend, pn,
              lp[STEPS - 1], lh[STEPS - 1]);
    CHECK_MSG(p && h && n && memcmp(p, h, (size_t)n * 4) == 0, "%s %s: half storage changed the gpt's parameters", backend, pn);
    /* the largest workspace is the tied embedding's backward 16-bit copies; the logits' gradient, stored in 16 bits,
     * needs none (heads of 24: the fp32 attention's widened q, k and v take more) */
    CHECK_MSG(gpt_ws < ws_plain || gpt_dim != 64, "%s %s: kernel workspace %zu bytes with half storage, %zu without", backend, pn, gpt_ws, ws_plain);
    /* checkpointing weighs its schedules with 16-bit values at 2 bytes: the arena it reports for the plan without
     * it is smaller too */
    CHECK_MSG(!ckpt || gpt_plain < arena_plain, "%s %s: the arena without checkpointing, %zu bytes with half storage, %zu without",
              backend, pn, gpt_plain, arena_plain);
    free(p), free(h);
}

/* An MLP classifier whose linears have biases, one forward and backward: layer_norm -> linear -> GELU ->
 * linear -> cross-entropy. Half storage takes the layer norm's and GELU's outputs, both linears' outputs (written
 * rounded, bias included: GELU and cross-entropy read them widened) and the gradients of both linears' outputs, which the backward-weight steps also sum for their bias gradients: from dy as the product
 * reads it, rounded, so the gradients are the same bits with and without */
static int mlp_run(const char *backend, int precision, float *grads, int64_t *n) {
    enum { B = 24, I = 12, H = 40, C = 10 };
    kiln_graph *g = kiln_graph_new();
    kiln_value x = kiln_input(g, "x", KILN_F32, 2, (int64_t[]){KILN_BATCH, I}), y = kiln_input(g, "y", KILN_I32, 1, (int64_t[]){KILN_BATCH});
    kiln_value h = kiln_gelu(g, kiln_nn_linear(g, "fc1", kiln_nn_layer_norm(g, "ln", x, I), I, H, 1), 1);
    kiln_value loss = kiln_cross_entropy(g, kiln_nn_linear(g, "fc2", h, H, C, 1), y);
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    int halves = -1;
    CHECK_OK(kiln_params_new_on(g, backend, &P));
    if (P) {
        kiln_params_init(P, 3);
        kiln_compile_opts co = kiln_compile_defaults();
        co.training = 1, co.max_batch = B, co.backend = backend, co.autotune = 0, co.precision = precision;
        CHECK_OK(kiln_compile(g, P, &loss, 1, &co, &pl));
    }
    float xs[B * I];
    int32_t ys[B];
    tu_seed(41);
    for (int i = 0; i < B * I; i++) xs[i] = (float)tu_uniform(-2, 2);
    for (int i = 0; i < B; i++) ys[i] = (int32_t)tu_int(0, C - 1);
    if (pl) {
        kiln_plan_bind(pl, x, xs);
        kiln_plan_bind(pl, y, ys);
        CHECK_OK(kiln_plan_run(pl, B));
        CHECK_OK(kiln_params_grad_read(P, grads));
        *n = kiln_params_total(P);
        halves = 0;
        for (int i = 0; i < kiln_plan_step_count(pl); i++) {
            kiln_step_info si;
            if (kiln_plan_step_info(pl, i, &si) == KILN_OK && si.nout > 0) halves += strstr(si.out[0].layout, "16") != NULL;
        }
    }
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
    return halves;
}
static void check_half_store_bias(const char *backend, int precision) {
    static float plain[2048], half[2048];
    int64_t n = 0;
    char *gemm = env_swap("KILN_CUDA_GEMM", "half"), *store = env_swap("KILN_CUDA_STORE", NULL);
    int hp = mlp_run(backend, precision, plain, &n);
    setenv("KILN_CUDA_STORE", "half", 1);
    int hh = mlp_run(backend, precision, half, &n);
    env_restore("KILN_CUDA_STORE", store);
    env_restore("KILN_CUDA_GEMM", gemm);
    const char *pn = kiln_precision_name(precision);
    /* and the two linears' outputs, written rounded: GELU and cross-entropy read them in 16 bits */
    CHECK_MSG(hp == 0 && hh == 6, "%s %s: the mlp's steps writing 16 bits: %d without half storage, %d with (6)", backend, pn, hp, hh);
    CHECK_MSG(n > 0 && n <= 2048 && memcmp(plain, half, (size_t)n * 4) == 0, "%s %s: half storage changed the mlp's gradients",
              backend, pn);
}

int main(void) {
    tu_seed(20261130);
    CHECK_OK(kiln_test_simt_register());
    static const shape shapes[] = {
        {1, 1, 1, 16, 0},   {2, 70, 2, 32, 1}, {1, 64, 1, 64, 2},
        {1, 130, 3, 48, 0}, {1, 100, 1, 128, 1},
    };
    enum { NS = sizeof shapes / sizeof *shapes };
    int gpu_only = getenv("KILN_TEST_CUDA_ONLY") != NULL; /* compute-sanitizer's runs (scripts/gpu_session.sh) */
    /* under the sanitizers fp16 takes two shapes (its kernels are bf16's code, another type), and the gpt's runs
     * (25 s there) are left out: the shapes cover the kernels */
    int san = getenv("KILN_SANITIZE") != NULL;
    const kiln_backend *cu = kiln_backend_get("cuda");
    char why[192] = "the CUDA backend was not built";
    int gpu = cu && kiln_backend_available(cu, why, sizeof why);
    float *other[2][NS] = {{0}}; /* [backend][shape]: bf16 outputs of the first kernels */
    /* flash_tc.cu's kernels (wmma), then flash_mma.cu's (mma.sync, the tiles in registers) */
    static const char *const flash[] = {"wmma", "mma"};
    for (int fl = 0; fl < 2; fl++) {
        setenv("KILN_CUDA_FLASH", flash[fl], 1);
        /* bf16, then fp16 operands */
        for (int k = 0; k < 2; k++)
            for (int i = 0; !gpu_only && i < NS && !(k && san && i >= 2); i++)
                check_shape(&shapes[i], "simt", k ? KILN_PRECISION_FP16 : KILN_PRECISION_BF16, k ? NULL : &other[0][i]);
        if (!gpu_only && !san) check_gpt("simt");
        /* the attention reads c_attn's 16-bit output as it is, in both kernel families */
        for (int k = 0; k < 2 && !gpu_only; k++) { /* bf16, then fp16 */
            if (!san && (fl == 1 || !k)) check_half_store("simt", k ? KILN_PRECISION_FP16 : KILN_PRECISION_BF16, NULL, HALF_GPT);
            if (fl == 1) check_half_store_bias("simt", k ? KILN_PRECISION_FP16 : KILN_PRECISION_BF16);
        }
        /* heads of 24, which the tensor cores do not take: the fp32 kernels on q, k and v widened from 16 bits */
        if (fl == 1 && !gpu_only && !san) {
            gpt_dim = 48;
            check_half_store("simt", KILN_PRECISION_BF16, NULL, HALF_GPT);
            gpt_dim = 64;
        }
        /* with the layer norms and GELU recomputed in backward: the recomputations write 16 bits too */
        if (fl == 1 && !gpu_only && !san) check_half_store("simt", KILN_PRECISION_BF16, "gelu,layernorm", HALF_RECOMPUTED);
        for (int k = 0; gpu && k < 2; k++)
            for (int i = 0; i < NS; i++)
                check_shape(&shapes[i], "cuda", k ? KILN_PRECISION_FP16 : KILN_PRECISION_BF16, k ? NULL : &other[1][i]);
        if (gpu) check_gpt("cuda");
        for (int k = 0; k < 2 && fl == 1 && gpu; k++)
            check_half_store("cuda", k ? KILN_PRECISION_FP16 : KILN_PRECISION_BF16, NULL, HALF_GPT),
                check_half_store_bias("cuda", k ? KILN_PRECISION_FP16 : KILN_PRECISION_BF16);
    }
    unsetenv("KILN_CUDA_FLASH");
    if (!gpu) printf("test_attention_tc: the GPU's run skipped: %s\n", why);
    return tu_finish("test_attention_tc");
}
