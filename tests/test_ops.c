/* The op harness (ggml's test-backend-ops idea, with kiln's own double
 * reference as the oracle): every forward op of the table, on random shapes
 * and attributes, builds a small graph whose float inputs are parameters, and
 * a loss L = sum_k sum(y_k * c_k) over its outputs with random c_k. Then
 *   - every f32 backend registered (cpu, and simt: the CUDA backend's own
 *     kernels run on the host, tests/simt/; cuda itself on a GPU) must match the ref
 *     backend: outputs, every gradient,
 *     the buffers a training step updates (batch norm's running statistics),
 *     with fusion and the blocked layout on and off;
 *   - the ref backend's gradients must match central finite differences of L;
 *   - a second variant adds sum(p * d_p) for every parameter p, so every
 *     backward kernel also runs its accumulate (acc = 1) path.
 * Inference cases (ops only inference plans have: bn_fold) compile without
 * backward, with random running statistics, and compare outputs only; the
 * fast backend with its passes (fusion, layout, batch norm folding) on
 * against the ref backend with them on, and off against on.
 * Adding an op is one entry in `cases` below (with its builder); the harness
 * fails when a forward op of the table has no case.
 * Mixed precision: every case holding a matmul-class op (the table's bf16_in)
 * runs again with --precision bf16 on every fast backend, the ref rounding
 * the same operands to bf16 (src/backends/ref/reduced.c), with looser
 * tolerances (bf16_tol); a backend that ignored the mark is shown to fail them. */
#include "backends/cpu/internal/cpu.h"
#include "backends/internal/backend.h"
#include "backends/ref/internal/ref.h"
#include "simt/simt_backend.h"
#include "graph/internal/graph.h"
#include "kiln/graph.h"
#include "testutil.h"

enum { FILL_UNIFORM, FILL_AWAY, FILL_DISTINCT, FILL_MASK = 3, INFERENCE = 4 /* a case's flag: see below */ };

typedef struct {
    kiln_graph *g;
    int nout;
    kiln_value out[4];   /* outputs entering the loss */
    int nint;
    kiln_value ints[2];  /* integer inputs (class targets, token ids): i32, or f32 holding integers */
    int classes[2];
    int ints_f32[2];
    int pad[2];          /* targets: about a third -1 (padding a masked loss ignores) */
    int inference;       /* compiled without backward; fuse also switches batch norm folding */
} hcase;

typedef int (*build_fn)(hcase *h, int draw);

/* the plans' precision (kiln_precision) and the tolerances' scale for it */
static int precision_all = KILN_PRECISION_FP32, precision_fast = KILN_PRECISION_FP32;
static double tol = 1;

static kiln_value param(hcase *h, const char *name, int ndim, const int64_t *shape) {
    return kiln_param(h->g, name, ndim, shape, 1);
}
#define P(h, name, ...) param((h), (name), (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})
#define R(lo, hi) tu_int((lo), (hi))

static int out1(hcase *h, kiln_value y) {
    h->out[h->nout++] = y;
    return y < 0 ? -1 : 0;
}

/* integer class targets of shape [n] or [n, m] (m > 0: one per token) */
static kiln_value targets2(hcase *h, int64_t n, int64_t m, int classes) {
    kiln_value t = kiln_input(h->g, h->nint ? "t1" : "t0", KILN_I32, m ? 2 : 1, (int64_t[]){n, m});
    h->classes[h->nint] = classes;
    h->ints[h->nint++] = t;
    return t;
}

static kiln_value targets(hcase *h, int64_t n, int classes) { return targets2(h, n, 0, classes); }
/* token ids in [0, classes): i32, or f32 holding integers (as the token loader gives them) */
static kiln_value ids(hcase *h, int f32, int ndim, const int64_t *shape, int classes) {
    kiln_value t = kiln_input(h->g, h->nint ? "t1" : "t0", f32 ? KILN_F32 : KILN_I32, ndim, shape);
    h->classes[h->nint] = classes;
    h->ints_f32[h->nint] = f32;
    h->ints[h->nint++] = t;
    return t;
}

/* ---- one builder per forward op (or chain) ---- */

static int b_conv2d(hcase *h, int d) {
    int64_t n = R(1, 2), c = R(1, 4), k = R(1, 4), r = R(1, 3), s = R(1, 3);
    kiln_value x = P(h, "x", n, c, R(4, 7), R(4, 7)), w = P(h, "w", k, c, r, s);
    kiln_value b = d % 2 ? P(h, "b", k) : -1;
    return out1(h, kiln_conv2d(h->g, x, w, b, R(1, 2), R(0, 1)));
}

/* groups (draw 2: depthwise) and dilation */
static int b_conv2d_grouped(hcase *h, int d) {
    int64_t g = d == 2 ? R(2, 4) : R(1, 3), cg = d == 2 ? 1 : R(1, 2), kg = d == 2 ? 1 : R(1, 2), dil = R(1, 2);
    int64_t r = R(1, 3), s = R(1, 3);
    kiln_value x = P(h, "x", R(1, 2), g * cg, R(5, 8), R(5, 8)), w = P(h, "w", g * kg, cg, r, s);
    kiln_value b = d % 2 ? P(h, "b", g * kg) : -1;
    return out1(h, kiln_conv2d_ex(h->g, x, w, b, R(1, 2), R(0, 2), dil, g));
}

static int b_linear(hcase *h, int d) {
    int64_t n = R(1, 5), in = R(1, 7), o = R(1, 6);
    kiln_value x = P(h, "x", n, in), w = P(h, "w", o, in), b = d % 2 ? -1 : P(h, "b", o);
    return out1(h, kiln_linear(h->g, x, w, b));
}

/* draw 0: 2-D, others [n, t, in] (a transformer's [B, T, C]) */
static int b_linear_3d(hcase *h, int d) {
    int64_t n = R(1, 3), t = R(1, 4), in = R(1, 7), o = R(1, 6);
    kiln_value x = d == 0 ? P(h, "x", n, in) : P(h, "x", n, t, in), w = P(h, "w", o, in);
    return out1(h, kiln_linear(h->g, x, w, d == 1 ? -1 : P(h, "b", o)));
}

/* HF Conv1D: w [in, out]; draw 0 on [n, in], others on [n, t, in] */
static int b_matmul(hcase *h, int d) {
    int64_t n = R(1, 3), t = R(1, 4), in = R(1, 7), o = R(1, 6);
    kiln_value x = d == 0 ? P(h, "x", n, in) : P(h, "x", n, t, in), w = P(h, "w", in, o);
    return out1(h, kiln_matmul(h->g, x, w, d == 1 ? -1 : P(h, "b", o)));
}

/* logits [n, t, V] and targets [n, t]: the GPT's loss; V past 16 crosses the cpu kernel's 16 lanes and their tail */
static int b_cross_entropy_3d(hcase *h, int d) {
    (void)d;
    int64_t n = R(1, 3), t = R(1, 4), c = R(2, 40);
    return out1(h, kiln_cross_entropy(h->g, P(h, "x", n, t, c), targets2(h, n, t, (int)c)));
}

/* the same with padded positions (-1 targets) left out of the mean */
static int b_cross_entropy_masked(hcase *h, int d) {
    (void)d;
    int64_t n = R(1, 3), t = R(2, 6), c = R(2, 9);
    kiln_value y = targets2(h, n, t, (int)c);
    h->pad[h->nint - 1] = 1;
    return out1(h, kiln_cross_entropy_masked(h->g, P(h, "x", n, t, c), y));
}

static int b_log_softmax_3d(hcase *h, int d) {
    (void)d;
    return out1(h, kiln_log_softmax(h->g, P(h, "x", R(1, 3), R(1, 4), R(2, 9))));
}

static int b_relu(hcase *h, int d) {
    (void)d;
    return out1(h, kiln_relu(h->g, P(h, "x", R(1, 4), R(1, 40))));
}

/* draw 0: no padding; 1: drawn; 2: a 3x3 window padded by 1 (the ResNet stem's) */
static int b_max_pool2d(hcase *h, int d) {
    int64_t k = d == 2 ? 3 : R(1, 3), st = R(1, 3), pad = d == 0 ? 0 : d == 2 ? 1 : R(0, k / 2);
    return out1(h, kiln_max_pool2d_ex(h->g, P(h, "x", R(1, 2), R(1, 3), R(k, 7), R(k, 7)), k, st, pad));
}

static int b_avg_pool2d(hcase *h, int d) {
    int64_t k = R(1, 4), st = R(1, 3), pad = R(0, k / 2);
    kiln_value x = P(h, "x", R(1, 2), R(1, 3), R(k, 8), R(k, 8));
    return out1(h, kiln_avg_pool2d(h->g, x, k, st, pad, d != 1));
}

/* draw 0: global; others: bins that overlap and do not divide the input */
static int b_adaptive_avg_pool2d(hcase *h, int d) {
    kiln_value x = P(h, "x", R(1, 2), R(1, 3), R(1, 9), R(1, 9));
    return out1(h, d == 0 ? kiln_adaptive_avg_pool2d(h->g, x, 1, 1) : kiln_adaptive_avg_pool2d(h->g, x, R(1, 5), R(1, 5)));
}

/* x[:, a:b:step] and then along another dim */
static int b_slice_step(hcase *h, int d) {
    int64_t s2 = R(2, 7), s3 = R(2, 7), st = R(2, 3);
    kiln_value x = P(h, "x", R(1, 2), R(1, 3), s2, s3);
    x = kiln_slice_step(h->g, x, 2, d == 2 ? 1 : 0, s2, st);
    return out1(h, kiln_slice_step(h->g, x, 3, 0, s3, d == 0 ? 1 : st));
}

static int b_pad(hcase *h, int d) {
    kiln_value x = P(h, "x", R(1, 2), R(1, 3), R(1, 4), R(1, 4));
    return out1(h, kiln_pad(h->g, x, 1 + d % 3, R(0, 3), R(0, 3)));
}

/* ResNet-20's stage change with 16 -> 32 channels: conv stride 2 beside the
 * option-A shortcut (x[:, :, ::2, ::2], channels zero-padded 8 + 8), added,
 * then the global average pool, so the blocked layout meets the new ops */
static int b_resnet_shortcut(hcase *h, int d) {
    (void)d;
    kiln_value x = P(h, "x", R(1, 2), 16, 6, 6);
    kiln_value y = kiln_conv2d(h->g, x, P(h, "c.weight", 32, 16, 3, 3), -1, 2, 1);
    kiln_value sc = kiln_slice_step(h->g, kiln_slice_step(h->g, x, 2, 0, 6, 2), 3, 0, 6, 2);
    y = kiln_relu(h->g, kiln_add(h->g, y, kiln_pad(h->g, sc, 1, 8, 8)));
    return out1(h, kiln_adaptive_avg_pool2d(h->g, y, 1, 1));
}

/* subsample_pad itself (the shortcut pass makes it from the chain above): random
 * strides, channels and sizes that the stride does not divide; on odd draws after
 * a 16-channel conv and into 32 channels (the blocked layout on both sides) */
static int b_subsample_pad(hcase *h, int d) {
    int blocked = d % 2;
    kiln_value x = P(h, "x", R(1, 2), blocked ? 3 : R(1, 4), R(2, 7), R(2, 7));
    if (blocked) x = kiln_conv2d(h->g, x, P(h, "c.weight", 16, 3, 3, 3), -1, 1, 1);
    int64_t before = blocked ? 8 : R(0, 2);
    kiln_attrs a = {.subsample = {blocked ? 2 : R(1, 3), before, blocked ? 8 : R(0, 2)}};
    int n = x < 0 ? -1 : kiln_graph_apply(h->g, KILN_OP_SUBSAMPLE_PAD, &x, 1, &a);
    return out1(h, n < 0 ? -1 : h->g->nodes[n].out[0]);
}

/* the same shortcut on an activation: with the layout pass on, its family goes
 * blocked and is cut at the slice (a plain copy) and at the pad (reordered back) */
static int b_resnet_shortcut_act(hcase *h, int d) {
    (void)d;
    kiln_value x = P(h, "x", R(1, 2), 3, 6, 6);
    x = kiln_relu(h->g, kiln_conv2d(h->g, x, P(h, "c0.weight", 16, 3, 3, 3), -1, 1, 1));
    kiln_value y = kiln_conv2d(h->g, x, P(h, "c.weight", 32, 16, 3, 3), -1, 2, 1);
    kiln_value sc = kiln_slice_step(h->g, kiln_slice_step(h->g, x, 2, 0, 6, 2), 3, 0, 6, 2);
    y = kiln_relu(h->g, kiln_add(h->g, y, kiln_pad(h->g, sc, 1, 8, 8)));
    y = kiln_conv2d(h->g, y, P(h, "c2.weight", 32, 32, 3, 3), -1, 1, 1);
    return out1(h, kiln_adaptive_avg_pool2d(h->g, y, 1, 1));
}

static int b_dropout(hcase *h, int d) {
    (void)d;
    return out1(h, kiln_dropout(h->g, P(h, "x", R(1, 3), R(1, 300)), 0.3f));
}

static int b_affine(hcase *h, int d) {
    (void)d;
    return out1(h, kiln_affine(h->g, P(h, "x", R(1, 3), R(1, 40)), (float)tu_uniform(-2, 2), (float)tu_uniform(-1, 1)));
}

static int b_erf(hcase *h, int d) {
    (void)d; /* wide enough to reach both of the fast kernel's formulas (|x| below and above 1) */
    return out1(h, kiln_erf(h->g, kiln_scale(h->g, P(h, "x", R(1, 3), R(1, 60)), 2.0f)));
}

static int b_tanh(hcase *h, int d) {
    (void)d;
    return out1(h, kiln_tanh(h->g, kiln_scale(h->g, P(h, "x", R(1, 3), R(1, 60)), 2.0f)));
}

/* the guide's GELU as five nodes, x * 0.5 * (1 + erf(x / 1.41421)): one fused kernel each way */
static int b_gelu_chain(hcase *h, int d) {
    (void)d;
    kiln_graph *g = h->g;
    kiln_value x = P(h, "x", R(1, 3), R(1, 70));
    kiln_value e = kiln_add_scalar(g, kiln_erf(g, kiln_scale(g, x, 1.0f / 1.41421f)), 1.0f);
    return out1(h, kiln_mul(g, kiln_scale(g, x, 0.5f), e));
}

/* a residual block's pointwise tail: dropout, tanh, a residual add, relu, a product with a second branch */
static int b_pointwise_tail(hcase *h, int d) {
    kiln_graph *g = h->g;
    int64_t n = R(1, 3), m = R(64, 200);
    kiln_value x = P(h, "x", n, m), r = P(h, "r", n, m), b = P(h, "b", n, m);
    kiln_value y = kiln_add(g, kiln_tanh(g, kiln_dropout(g, x, 0.25f)), r);
    y = d % 2 ? kiln_relu(g, y) : kiln_affine(g, y, 1.5f, -0.25f);
    return out1(h, kiln_mul(g, y, kiln_erf(g, b)));
}

static int b_log_softmax(hcase *h, int d) {
    (void)d;
    return out1(h, kiln_log_softmax(h->g, P(h, "x", R(1, 5), R(2, 9))));
}

static int b_nll_loss(hcase *h, int d) {
    (void)d;
    int64_t n = R(1, 6), c = R(2, 7);
    kiln_value lp = kiln_log_softmax(h->g, P(h, "x", n, c));
    return out1(h, kiln_nll_loss(h->g, lp, targets(h, n, (int)c)));
}

static int b_cross_entropy(hcase *h, int d) {
    (void)d;
    int64_t n = R(1, 6), c = R(2, 7);
    return out1(h, kiln_cross_entropy(h->g, P(h, "x", n, c), targets(h, n, (int)c)));
}

/* rows longer than a CUDA block (256 threads): each thread's share of a row holds several columns, so the
 * kernels' one-pass log-sum-exp rescales its running sum as the max grows */
static int b_cross_entropy_wide(hcase *h, int d) {
    (void)d;
    int64_t n = R(1, 3), c = R(700, 1400);
    return out1(h, kiln_cross_entropy(h->g, P(h, "x", n, c), targets(h, n, (int)c)));
}
static int b_log_softmax_wide(hcase *h, int d) {
    (void)d;
    return out1(h, kiln_log_softmax(h->g, P(h, "x", R(1, 3), R(700, 1400))));
}

static int b_mse_loss(hcase *h, int d) {
    int64_t n = R(1, 5), c = R(1, 6);
    kiln_value x = d ? kiln_relu(h->g, P(h, "x", n, c)) : P(h, "x", n, c); /* a computed input too */
    return out1(h, kiln_mse_loss(h->g, x, P(h, "t", n, c)));
}

static int b_add(hcase *h, int d) {
    (void)d;
    int64_t n = R(1, 4), m = R(1, 30);
    return out1(h, kiln_add(h->g, P(h, "a", n, m), P(h, "b", n, m)));
}

static int b_mul(hcase *h, int d) {
    (void)d;
    int64_t n = R(1, 4), m = R(1, 30);
    return out1(h, kiln_mul(h->g, P(h, "a", n, m), P(h, "b", n, m)));
}

static int b_sum(hcase *h, int d) {
    (void)d;
    return out1(h, kiln_sum(h->g, P(h, "x", R(1, 4), R(1, 50))));
}

static int b_reshape(hcase *h, int d) {
    (void)d;
    int64_t a = R(1, 3), b = R(1, 4), c = R(1, 5);
    return out1(h, kiln_reshape(h->g, P(h, "x", a, b, c), 2, (int64_t[]){a * b, c}));
}

/* a strided view reaching mul gets a contiguous copy inserted by the builder */
static int b_transpose(hcase *h, int d) {
    int d0 = d % 3, d1 = (d + 1 + d % 2) % 3;
    return out1(h, kiln_transpose(h->g, P(h, "x", R(1, 3), R(2, 4), R(2, 5)), d0, d1));
}

static int b_slice(hcase *h, int d) {
    int64_t s1 = R(2, 6), start = R(0, s1 - 1), end = R(start + 1, s1);
    kiln_value x = P(h, "x", R(1, 3), s1, R(1, 4));
    return out1(h, kiln_slice(h->g, d % 2 ? kiln_transpose(h->g, x, 0, 2) : x, 1, start, end)); /* odd: a strided view's slice */
}

static int b_contiguous(hcase *h, int d) {
    (void)d;
    return out1(h, kiln_contiguous(h->g, kiln_transpose(h->g, P(h, "x", R(2, 3), R(2, 4), R(1, 3)), 1, 2)));
}

static kiln_value bn(hcase *h, const char *name, kiln_value x, int64_t c) {
    char n[5][32];
    const char *suf[5] = {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"};
    for (int i = 0; i < 5; i++) snprintf(n[i], sizeof n[i], "%s.%s", name, suf[i]);
    kiln_value w = param(h, n[0], 1, (int64_t[]){c}), b = param(h, n[1], 1, (int64_t[]){c});
    kiln_value rm = kiln_buffer(h->g, n[2], KILN_F32, 1, (int64_t[]){c}, 0.0);
    kiln_value rv = kiln_buffer(h->g, n[3], KILN_F32, 1, (int64_t[]){c}, 1.0);
    kiln_value nb = kiln_buffer(h->g, n[4], KILN_I64, 0, NULL, 0.0);
    return kiln_batch_norm2d(h->g, x, w, b, rm, rv, nb, 0.1f, 1e-5f);
}

static int b_batch_norm2d(hcase *h, int d) {
    if (d == 2) { /* over 4096 elements a channel: the CUDA kernels split a channel into chunks (rows.cu), the last short */
        int64_t c = R(1, 3);
        return out1(h, bn(h, "bn", P(h, "x", R(1, 2), c, R(60, 80), R(61, 79)), c));
    }
    int64_t c = R(1, 12); /* fewer than 8 channels: images summed in chunks; more: one channel per thread */
    return out1(h, bn(h, "bn", P(h, "x", R(1, 3), c, R(1, 7), R(2, 9)), c));
}

/* batch norm on 128 blocked channels (8 blocks of 16: each block's images summed whole) */
static int b_conv_bn_wide(hcase *h, int d) {
    (void)d;
    kiln_value x = P(h, "x", R(1, 3), 2, 3, R(2, 4));
    kiln_value y = kiln_conv2d(h->g, x, P(h, "c1.weight", 128, 2, 1, 1), -1, 1, 0);
    y = bn(h, "bn", y, 128); /* no relu: among 128 channels' values one lands within a finite difference of its kink */
    return out1(h, kiln_conv2d(h->g, y, P(h, "c2.weight", 16, 128, 1, 1), P(h, "c2.bias", 16), 1, 0));
}

/* conv -> relu -> max-pool with 16 channels: relu folded into conv, relu's
 * backward into the pool's, conv output kept in the blocked layout */
static int b_conv_relu_pool(hcase *h, int d) {
    kiln_value x = P(h, "x", R(1, 2), R(1, 3), 6, 6), w = P(h, "c.weight", 16, x >= 0 ? h->g->vals[x].shape[1] : 1, 3, 3);
    kiln_value y = kiln_relu(h->g, kiln_conv2d(h->g, x, w, P(h, "c.bias", 16), 1, d % 2));
    return out1(h, kiln_max_pool2d(h->g, y, 2, 2));
}

/* a network's first convolution: its image an input, no gradient, so its backward-weight runs with no
 * backward-data before it (the cuda backend's must make its own dy copy: conv.c's dy_kept), after conv2's
 * backward steps (whose dy copy, of another shape, is in the workspace); the image holds integers in [0, 7) */
static int b_conv_first(hcase *h, int d) {
    int64_t n = R(1, 2), c = R(1, 3), hw = R(5, 7);
    kiln_value x = ids(h, 1, 4, (int64_t[]){n, c, hw, hw}, 7);
    kiln_value y = kiln_relu(h->g, kiln_conv2d(h->g, x, P(h, "c1.weight", 8, c, 3, 3), d % 2 ? P(h, "c1.bias", 8) : -1, 1, 1));
    return out1(h, kiln_conv2d(h->g, y, P(h, "c2.weight", 4, 8, 3, 3), -1, 2, 1));
}

/* conv -> batch norm -> relu -> conv with 16 channels: batch norm on the blocked layout */
static int b_conv_bn_conv(hcase *h, int d) {
    (void)d;
    kiln_value x = P(h, "x", R(2, 3), 2, 5, 5);
    kiln_value y = kiln_conv2d(h->g, x, P(h, "c1.weight", 16, 2, 3, 3), -1, 1, 1);
    y = kiln_relu(h->g, bn(h, "bn", y, 16));
    return out1(h, kiln_conv2d(h->g, y, P(h, "c2.weight", 16, 16, 3, 3), P(h, "c2.bias", 16), 1, 0));
}

/* a ResNet block's end: conv -> batch norm -> + x -> relu with 16 channels; the
 * fusion pass makes the add and relu the norm's epilogue (x its input 6) */
static int b_conv_bn_add_relu(hcase *h, int d) {
    (void)d;
    kiln_value x = P(h, "x", R(2, 3), 16, R(3, 5), R(3, 5));
    kiln_value y = bn(h, "bn", kiln_conv2d(h->g, x, P(h, "c.weight", 16, 16, 3, 3), -1, 1, 1), 16);
    return out1(h, kiln_relu(h->g, kiln_add(h->g, y, x)));
}

/* conv (with a bias on odd draws) -> batch norm -> relu -> conv, 16 channels:
 * an inference case, where the norm folds into the first conv (bn_fold), relu
 * fuses into it and the middle stays blocked */
static int b_conv_bn_eval(hcase *h, int d) {
    kiln_value x = P(h, "x", R(1, 2), R(1, 3), R(3, 6), R(3, 6));
    int64_t c = x >= 0 ? h->g->vals[x].shape[1] : 1;
    kiln_value y = kiln_conv2d(h->g, x, P(h, "c1.weight", 16, c, 3, 3), d % 2 ? P(h, "c1.bias", 16) : -1, 1, 1);
    y = kiln_relu(h->g, bn(h, "bn", y, 16));
    return out1(h, kiln_conv2d(h->g, y, P(h, "c2.weight", 8, 16, 3, 3), -1, 1, 0));
}

/* a ResNet block's tail in evaluation: conv -> bn -> relu -> conv -> bn, + a residual, relu.
 * The second conv folds its norm and then the add (conv2d_add, relu as its epilogue); the
 * residual: draw 0 an activation dying at the add (the conv writes into its storage), 1 the
 * conv's own input (copied first: the conv still reads it), 2 a parameter (copied first) */
static int b_conv_add_eval(hcase *h, int d) {
    kiln_value x = P(h, "x", R(1, 2), 16, R(3, 6), R(3, 6));
    kiln_value y = kiln_conv2d(h->g, x, P(h, "c1.weight", 16, 16, 3, 3), d % 2 ? P(h, "c1.bias", 16) : -1, 1, 1);
    y = kiln_relu(h->g, bn(h, "bn1", y, 16));
    kiln_value z = bn(h, "bn2", kiln_conv2d(h->g, y, P(h, "c2.weight", 16, 16, 3, 3), -1, 1, 1), 16);
    kiln_value r = d % 3 == 0 ? kiln_relu(h->g, kiln_mul(h->g, x, x)) : d % 3 == 1 ? y : x;
    return out1(h, kiln_relu(h->g, kiln_add(h->g, z, r)));
}

/* resnet18's stem on 16 channels: conv, batch norm, relu, 3x3 stride-2 max-pool padded by 1 (blocked layout) */
static int b_stem_pool(hcase *h, int d) {
    (void)d;
    kiln_value x = P(h, "x", R(1, 2), 3, 8, 8);
    kiln_value y = kiln_relu(h->g, bn(h, "bn", kiln_conv2d(h->g, x, P(h, "c.weight", 16, 3, 3, 3), -1, 2, 1), 16));
    return out1(h, kiln_max_pool2d_ex(h->g, y, 3, 2, 1));
}

/* a ResNet's 16-bit chain on 16 channels (the cuda backend's autocast followers): conv -> bn -> relu -> max-pool m,
 * y = relu(bn(conv(m)) + m) (an identity block), relu(bn(conv(y)) + bn(conv 1x1 (y))) (a downsampling one): in a
 * 16-bit plan every add there adds two 16-bit values and rounds the sum, fused or not */
static int b_block_chain(hcase *h, int d) {
    (void)d;
    kiln_graph *g = h->g;
    kiln_value x = P(h, "x", R(1, 2), 3, R(6, 8), R(6, 8));
    kiln_value m = kiln_relu(g, bn(h, "bn0", kiln_conv2d(g, x, P(h, "c0.weight", 16, 3, 3, 3), -1, 1, 1), 16));
    m = kiln_max_pool2d_ex(g, m, 3, 2, 1);
    kiln_value y = bn(h, "bn1", kiln_conv2d(g, m, P(h, "c1.weight", 16, 16, 3, 3), -1, 1, 1), 16);
    y = kiln_relu(g, kiln_add(g, y, m));
    kiln_value a = bn(h, "bn2", kiln_conv2d(g, y, P(h, "c2.weight", 16, 16, 3, 3), -1, 1, 1), 16);
    kiln_value b = bn(h, "bn3", kiln_conv2d(g, y, P(h, "c3.weight", 16, 16, 1, 1), -1, 1, 0), 16);
    return out1(h, kiln_relu(g, kiln_add(g, a, b)));
}

/* draw 0: a [n, M, K] @ b [n, K, N]; 1: 4-d with b a transposed view; 2: plain matrices */
static int b_bmm(hcase *h, int d) {
    int64_t n0 = R(1, 3), n1 = R(1, 3), m = R(1, 6), k = R(1, 7), n = R(1, 6);
    if (d == 0) return out1(h, kiln_bmm(h->g, P(h, "a", n0, m, k), P(h, "b", n0, k, n)));
    if (d == 2) return out1(h, kiln_bmm(h->g, P(h, "a", m, k), P(h, "b", k, n)));
    kiln_value bt = P(h, "bt", n0, n1, n, k);
    return out1(h, kiln_bmm(h->g, P(h, "a", n0, n1, m, k), kiln_transpose(h->g, bt, 2, 3)));
}

/* draw 0: q, k, v apart; 1: the column slices of one [B,T,3C] (strided, read in place);
 * 2: q = k = v one value (one gradient buffer). T crosses the kernel's 32-row tiles
 * and D is rarely a multiple of the 16-float vector */
static int b_causal_attention(hcase *h, int d) {
    int64_t b = R(1, 2), t = R(1, 70), heads = R(1, 3), c = heads * R(1, 20);
    if (d == 0) return out1(h, kiln_causal_attention(h->g, P(h, "q", b, t, c), P(h, "k", b, t, c), P(h, "v", b, t, c), (int)heads));
    if (d == 2) {
        kiln_value x = P(h, "x", b, t, c);
        return out1(h, kiln_causal_attention(h->g, x, x, x, (int)heads));
    }
    kiln_value qkv = P(h, "qkv", b, t, 3 * c);
    kiln_value q = kiln_slice(h->g, qkv, 2, 0, c), k = kiln_slice(h->g, qkv, 2, c, 2 * c);
    return out1(h, kiln_causal_attention(h->g, q, k, kiln_slice(h->g, qkv, 2, 2 * c, 3 * c), (int)heads));
}

/* ids [n] or [n, t] (draw 1: f32) into V rows; few rows, so ids repeat and the scatter-add adds */
static int b_embedding(hcase *h, int d) {
    int64_t V = R(2, 9), shape[2] = {R(1, 3), d == 0 ? R(100, 300) : R(1, 6)}; /* draw 0: tokens over several of the cuda backward's 256-token tiles */
    kiln_value idx = ids(h, d == 1, d == 2 ? 1 : 2, shape, (int)V);
    return out1(h, kiln_embedding(h->g, idx, P(h, "wte.weight", V, R(1, 20))));
}

/* 2 to 4 dims; draw 0 has more rows than the backward's 16 chunks of dw, db */
static int b_layer_norm(hcase *h, int d) {
    int64_t C = R(2, 40);
    kiln_value x = d == 0 ? P(h, "x", R(2, 3), R(9, 20), C) : d == 1 ? P(h, "x", R(1, 5), C) : P(h, "x", 2, R(1, 3), 2, C);
    return out1(h, kiln_layer_norm(h->g, x, P(h, "ln.weight", C), P(h, "ln.bias", C), 1e-5f));
}

/* draw 1: the tanh form */
static int b_gelu(hcase *h, int d) {
    kiln_value x = d == 2 ? P(h, "x", R(1, 3), R(1, 4), R(1, 30)) : P(h, "x", R(1, 3), R(1, 300));
    return out1(h, kiln_gelu(h->g, x, d == 1));
}

static int b_softmax(hcase *h, int d) {
    kiln_value x = d == 1 ? P(h, "x", R(1, 5), R(1, 40)) : P(h, "x", R(1, 3), R(1, 5), R(1, 40));
    return out1(h, kiln_softmax(h->g, x));
}

/* b is a's trailing dims: [T, C] + [B, T, C], [C] + [B, T, C], and [H, W] + [N, C, H, W] given first */
static int b_add_bcast(hcase *h, int d) {
    int64_t t = R(1, 5), c = R(1, 9);
    if (d == 2) return out1(h, kiln_add(h->g, P(h, "b", t, c), P(h, "a", R(1, 2), 2, t, c)));
    kiln_value a = P(h, "a", R(1, 3), t, c);
    return out1(h, kiln_add(h->g, a, d == 1 ? P(h, "b", c) : P(h, "b", t, c)));
}

/* GPT-2's input and the ops of its blocks in a row: token and position embeddings
 * added, layer norm, tanh GELU, softmax */
static int b_gpt_chain(hcase *h, int d) {
    int64_t V = R(2, 7), T = R(1, 4), C = R(2, 12);
    kiln_value x = kiln_embedding(h->g, ids(h, d % 2, 2, (int64_t[]){R(1, 2), T}, (int)V), P(h, "wte.weight", V, C));
    x = kiln_add(h->g, x, P(h, "wpe.weight", T, C));
    x = kiln_layer_norm(h->g, x, P(h, "ln.weight", C), P(h, "ln.bias", C), 1e-5f);
    return out1(h, kiln_softmax(h->g, kiln_gelu(h->g, x, 1)));
}

static const struct {
    const char *ops; /* the forward ops it covers, space-separated */
    build_fn build;
    int fill;            /* FILL_*, | INFERENCE for an inference case */
} cases[] = {
    {"conv2d", b_conv2d, FILL_UNIFORM},
    {"conv2d", b_conv2d_grouped, FILL_UNIFORM},
    {"linear", b_linear, FILL_UNIFORM},
    {"linear", b_linear_3d, FILL_UNIFORM},
    {"matmul", b_matmul, FILL_UNIFORM},
    {"relu", b_relu, FILL_AWAY},
    {"max_pool2d", b_max_pool2d, FILL_DISTINCT},
    {"avg_pool2d", b_avg_pool2d, FILL_UNIFORM},
    {"adaptive_avg_pool2d", b_adaptive_avg_pool2d, FILL_UNIFORM},
    {"slice", b_slice_step, FILL_UNIFORM},
    {"pad", b_pad, FILL_UNIFORM},
    {"conv2d slice pad add relu adaptive_avg_pool2d", b_resnet_shortcut, FILL_UNIFORM},
    {"conv2d slice pad add relu adaptive_avg_pool2d", b_resnet_shortcut_act, FILL_UNIFORM},
    {"conv2d subsample_pad", b_subsample_pad, FILL_UNIFORM},
    {"conv2d batch_norm2d add relu", b_conv_bn_add_relu, FILL_UNIFORM},
    {"dropout", b_dropout, FILL_UNIFORM},
    {"log_softmax", b_log_softmax, FILL_UNIFORM},
    {"nll_loss", b_nll_loss, FILL_UNIFORM},
    {"cross_entropy", b_cross_entropy, FILL_UNIFORM},
    {"cross_entropy", b_cross_entropy_3d, FILL_UNIFORM},
    {"cross_entropy", b_cross_entropy_masked, FILL_UNIFORM},
    {"mse_loss", b_mse_loss, FILL_AWAY},
    {"log_softmax", b_log_softmax_3d, FILL_UNIFORM},
    {"add", b_add, FILL_UNIFORM},
    {"affine", b_affine, FILL_UNIFORM},
    {"affine erf", b_erf, FILL_UNIFORM},
    {"affine tanh", b_tanh, FILL_UNIFORM},
    {"affine erf mul", b_gelu_chain, FILL_UNIFORM},
    {"dropout tanh add relu affine mul erf", b_pointwise_tail, FILL_AWAY},
    {"mul", b_mul, FILL_UNIFORM},
    {"sum", b_sum, FILL_UNIFORM},
    {"reshape", b_reshape, FILL_UNIFORM},
    {"transpose", b_transpose, FILL_UNIFORM},
    {"slice", b_slice, FILL_UNIFORM},
    {"contiguous", b_contiguous, FILL_UNIFORM},
    {"batch_norm2d", b_batch_norm2d, FILL_UNIFORM},
    {"conv2d relu max_pool2d", b_conv_relu_pool, FILL_UNIFORM},
    {"conv2d relu", b_conv_first, FILL_UNIFORM},
    {"conv2d batch_norm2d relu", b_conv_bn_conv, FILL_UNIFORM},
    {"conv2d batch_norm2d", b_conv_bn_wide, FILL_UNIFORM},
    {"conv2d batch_norm2d relu max_pool2d", b_stem_pool, FILL_UNIFORM},
    {"conv2d batch_norm2d relu max_pool2d add", b_block_chain, FILL_UNIFORM},
    {"conv2d batch_norm2d bn_fold relu", b_conv_bn_eval, FILL_UNIFORM | INFERENCE},
    {"conv2d batch_norm2d bn_fold conv2d_add add relu", b_conv_add_eval, FILL_UNIFORM | INFERENCE},
    {"bmm transpose", b_bmm, FILL_UNIFORM},
    {"causal_attention slice", b_causal_attention, FILL_UNIFORM},
    {"embedding", b_embedding, FILL_UNIFORM},
    {"layer_norm", b_layer_norm, FILL_UNIFORM},
    {"gelu", b_gelu, FILL_UNIFORM},
    {"softmax", b_softmax, FILL_UNIFORM},
    {"add_bcast", b_add_bcast, FILL_UNIFORM},
    {"embedding add_bcast layer_norm gelu softmax", b_gpt_chain, FILL_UNIFORM},
    {"cross_entropy", b_cross_entropy_wide, FILL_UNIFORM},
    {"log_softmax", b_log_softmax_wide, FILL_UNIFORM},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* ---- the harness ---- */

/* the views of the f32 and f64 buffers sit at different offsets (each view is
 * padded to a cache line): fill view by view */
static void fill_params(kiln_params *P64, kiln_params *P32, int mode) {
    double *p = kiln_params_data(P64);
    float *q = calloc((size_t)kiln_params_total(P32) + 1, sizeof *q); /* written to P32's backend at the end */
    int64_t total = 0, at = 0;
    for (int k = 0; k < kiln_params_count(P64); k++) total += kiln_params_numel(P64, k);
    int64_t *perm = malloc((size_t)total * sizeof *perm);
    for (int64_t i = 0; i < total; i++) perm[i] = i;
    for (int64_t i = total - 1; i > 0; i--) { /* distinct values: a shuffled ramp, no ties in max-pool */
        int64_t j = tu_int(0, i), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int k = 0; k < kiln_params_count(P64); k++)
        for (int64_t j = 0; j < kiln_params_numel(P64, k); j++, at++) {
            double v = tu_uniform(-1.5, 1.5);
            if (mode == FILL_AWAY) v = (tu_u64() & 1 ? 1 : -1) * tu_uniform(0.1, 1.5);
            if (mode == FILL_DISTINCT) v = 3.0 * ((double)perm[at] + 0.5) / (double)total - 1.5;
            float f = (float)v; /* both backends start from the same (float) values */
            q[kiln_params_offset(P32, k) + j] = f;
            p[kiln_params_offset(P64, k) + j] = f;
        }
    CHECK_OK(kiln_params_write(P32, q));
    free(q);
    free(perm);
}

/* random running statistics (variances in [0.5, 2]) in both backends: the
 * initial 0 and 1 would let a wrong fold of the mean or variance pass */
static void fill_statistics(kiln_params *P64, kiln_params *P32) {
    for (int i = 0; i < kiln_params_buffer_count(P64); i++) {
        if (kiln_params_buffer_dtype(P32, i) != KILN_F32) continue;
        int64_t n = kiln_params_buffer_numel(P32, i);
        int var = strstr(kiln_params_buffer_name(P32, i), "running_var") != NULL;
        float *b = malloc((size_t)n * 4);
        double *d = kiln_params_buffer_data(P64, i);
        for (int64_t j = 0; j < n; j++) d[j] = b[j] = (float)(var ? tu_uniform(0.5, 2) : tu_uniform(-1, 1));
        CHECK_OK(kiln_params_buffer_write(P32, i, b));
        free(b);
    }
}

typedef struct {
    kiln_plan *pl;
    float **c;           /* the random weights of each loss term */
    int32_t **t;
} bound;

/* the fast backend of the case: the ref reproduces its 16-bit outputs (kiln_compile_opts.round_outputs_as) */
static const char *fast_backend;

static kiln_status compile_run(hcase *h, kiln_params *P, kiln_value loss, const char *backend, int fuse, int layout,
                               bound *b, int nc, kiln_value *cvals) {
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = !h->inference;
    o.max_batch = 1;
    o.backend = backend;
    o.fuse = fuse;
    o.fold_bn = fuse;
    o.layout = layout;
    o.autotune = 0;
    o.precision = strcmp(backend, "ref") ? precision_fast : precision_all;
    if (!strcmp(backend, "ref")) o.round_outputs_as = fast_backend;
    kiln_value outs[5] = {loss};
    for (int k = 0; k < h->nout; k++) outs[1 + k] = h->out[k];
    kiln_status st = kiln_compile(h->g, P, outs, 1 + h->nout, &o, &b->pl);
    if (st != KILN_OK) return st;
    for (int k = 0; k < nc; k++) kiln_plan_bind(b->pl, cvals[k], b->c[k]);
    for (int k = 0; k < h->nint; k++) kiln_plan_bind(b->pl, h->ints[k], b->t[k]);
    kiln_plan_set_step(b->pl, 3);
    return kiln_plan_run(b->pl, 1);
}

/* max |a - b| over max |b| (absolute below 1e-3) */
static double rel_err(const float *a, const double *b, int64_t n) { return tu_scaled_err(a, b, n, 1e-3); }

/* A backend that writes a sum rounded to 16 bits (kiln_step.round_out: the cuda backend's convolutions) and the
 * ref rounding the same sum computed in double round to neighbouring values where the two sums straddle a rounding
 * boundary: rare, one ulp. So in a 16-bit run, elements off by more than the tolerance but by 0.4 to 2 ulps of the
 * format at their magnitude (one ulp of the sum, a bias added after) are left out of the error, if they are few (at
 * most 1 in 256, or one); a missing rounding moves most elements by up to half an ulp and still fails
 * (test_round_out_discriminates). */
static int64_t flips_forgiven;
static double ulp16(double v) {
    int e;
    frexp(fabs(v), &e); /* |v| in [2^(e-1), 2^e) */
    return ldexp(1.0, e - 1 - (precision_fast == KILN_PRECISION_FP16 ? 10 : 7));
}
static double err_16(const float *a, const double *b, int64_t n, double limit, int64_t *flips) {
    double e = rel_err(a, b, n);
    *flips = 0;
    if (e <= limit || precision_fast == KILN_PRECISION_FP32) return e;
    double den = 1e-3, num = 0;
    for (int64_t i = 0; i < n; i++) den = fmax(den, fabs(b[i]));
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        double u = ulp16(fmax(fabs(a[i]), fabs(b[i])));
        if (d > limit * den && d >= 0.4 * u && d <= 2 * u) (*flips)++;
        else num = fmax(num, d);
    }
    if (*flips > (n / 256 > 1 ? n / 256 : 1)) return e;
    return num / den;
}
static double err_forgiving(const float *a, const double *b, int64_t n, double limit) {
    int64_t flips;
    double e = err_16(a, b, n, limit, &flips);
    if (e <= limit) flips_forgiven += flips;
    return e;
}

static double loss_at(kiln_plan *pl) {
    kiln_plan_run(pl, 1);
    return kiln_plan_loss(pl);
}

/* central differences of L on the ref plan against its analytic gradients */
static void finite_differences(const char *what, kiln_plan *ref, kiln_params *P64, const double *an) {
    double *p = kiln_params_data(P64);
    for (int k = 0; k < kiln_params_count(P64); k++) {
        int64_t off = kiln_params_offset(P64, k), n = kiln_params_numel(P64, k);
        for (int t = 0; t < 8 && t < n; t++) {
            int64_t i = off + (n <= 8 ? t : tu_int(0, n - 1));
            double keep = p[i], num = 0, e = 0;
            /* a relu's kink within h of the point spoils the difference: then a 100x smaller h must agree */
            for (double h = 1e-6; h >= 1e-8; h /= 100) {
                p[i] = keep + h;
                double lp = loss_at(ref);
                p[i] = keep - h;
                double lm = loss_at(ref);
                p[i] = keep;
                num = (lp - lm) / (2 * h);
                if ((e = fabs(num - an[i]) / (1e-5 + 1e-4 * fabs(an[i]))) <= 1) break;
            }
            CHECK_MSG(e <= 1, "%s: dL/d%s[%lld]: autodiff %.10g, finite difference %.10g", what, kiln_params_name(P64, k),
                      (long long)(i - off), an[i], num);
        }
    }
}

static void compare_backends(const char *what, hcase *h, bound *ref, bound *fast, kiln_params *P64, kiln_params *P32) {
    double lr = kiln_plan_loss(ref->pl), lc = kiln_plan_loss(fast->pl);
    CHECK_MSG(fabs(lc - lr) <= tol * 2e-4 * fmax(1, fabs(lr)), "%s: loss %.8g, ref %.8g", what, lc, lr);
    for (int k = 0; k < h->nout; k++) {
        int64_t n = kiln_val_numel(&h->g->vals[h->out[k]], 1);
        float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
        double *bd = malloc((size_t)n * 8);
        CHECK_OK(kiln_plan_read(fast->pl, h->out[k], a, n));
        CHECK_OK(kiln_plan_read(ref->pl, h->out[k], b, n));
        for (int64_t i = 0; i < n; i++) bd[i] = b[i];
        double e = err_forgiving(a, bd, n, tol * 2e-4);
        CHECK_MSG(e <= tol * 2e-4, "%s: output %d off by %.3g", what, k, e);
        free(a), free(b), free(bd);
    }
    float *g32 = malloc((size_t)kiln_params_total(P32) * sizeof *g32 + 4); /* the fast backend's memory may be a device's */
    CHECK_OK(kiln_params_grad_read(P32, g32));
    const double *g64 = kiln_params_grad(P64);
    for (int p = 0; p < kiln_params_count(P32); p++) {
        int64_t n = kiln_params_numel(P32, p);
        double e = err_forgiving(g32 + kiln_params_offset(P32, p), g64 + kiln_params_offset(P64, p), n, tol * 5e-4);
        CHECK_MSG(e <= tol * 5e-4, "%s: gradient of %s off by %.3g", what, kiln_params_name(P32, p), e);
    }
    for (int i = 0; i < kiln_params_buffer_count(P32); i++) {
        int64_t n = kiln_params_buffer_numel(P32, i);
        float *b32 = malloc((size_t)n * 8 + 8);
        CHECK_OK(kiln_params_buffer_read(P32, i, b32));
        if (kiln_params_buffer_dtype(P32, i) == KILN_I64) {
            CHECK(*(int64_t *)b32 == *(int64_t *)kiln_params_buffer_data(P64, i));
        } else {
            double e = rel_err(b32, kiln_params_buffer_data(P64, i), n);
            CHECK_MSG(e <= tol * 2e-4, "%s: buffer %s off by %.3g", what, kiln_params_buffer_name(P32, i), e);
        }
        free(b32);
    }
    free(g32);
}

/* builds the case, adds the loss, runs ref and a fast backend (two pass settings), checks */
static void run_case(const char *backend, int ci, int draw, int acc_variant) {
    char what[96];
    fast_backend = backend;
    snprintf(what, sizeof what, "%s on %s (draw %d%s%s)", cases[ci].ops, backend, draw, acc_variant ? ", accumulating" : "",
             precision_all != KILN_PRECISION_FP32 ? precision_all == KILN_PRECISION_FP16 ? ", fp16" : ", bf16" : "");
    /* each run draws from its own stream (case, draw, variant, precision), so adding a case changes no other's draws */
    tu_seed(20261123u + (uint64_t)ci * 1000u + (uint64_t)draw * 10u + (uint64_t)acc_variant +
            (precision_all == KILN_PRECISION_BF16 ? 500u : precision_all == KILN_PRECISION_FP16 ? 700u : 0u));
    hcase h = {.g = kiln_graph_new(), .inference = (cases[ci].fill & INFERENCE) != 0};
    CHECK_MSG(cases[ci].build(&h, draw) == 0 && kiln_graph_status(h.g) == KILN_OK, "%s: build failed: %s", what, kiln_last_error());
    if (kiln_graph_status(h.g) != KILN_OK) {
        kiln_graph_free(h.g);
        return;
    }
    /* L = sum_k sum(y_k * c_k) [+ sum_p sum(p * d_p)] */
    int nparam = h.g->nparams, nc = h.nout + (acc_variant ? nparam : 0);
    kiln_value cvals[16], loss = -1;
    for (int k = 0; k < nc; k++) {
        kiln_value y = k < h.nout ? h.out[k] : h.g->param_vals[k - h.nout];
        const kiln_val *Y = &h.g->vals[y];
        char name[16];
        snprintf(name, sizeof name, "c%d", k);
        cvals[k] = kiln_input(h.g, name, KILN_F32, Y->ndim, Y->shape);
        kiln_value term = kiln_sum(h.g, kiln_mul(h.g, y, cvals[k]));
        loss = loss < 0 ? term : kiln_add(h.g, loss, term);
    }
    /* the cpu's layout pass blocks by its CPU's vector (16 or 8 floats): every other run takes the other block,
     * so both are checked on any CPU */
    int native = kiln_cpu_layout_block();
    kiln_cpu_force_layout_block((draw + acc_variant) % 2 ? 24 - native : 0);
    kiln_params *P64 = NULL, *P32 = NULL;
    CHECK_OK(kiln_graph_status(h.g));
    CHECK_OK(kiln_params_new_on(h.g, "ref", &P64));
    CHECK_OK(kiln_params_new_on(h.g, backend, &P32));
    bound ref = {0}, fast[2] = {{0}};
    float *cdata[16];
    int32_t *tdata[2];
    for (int k = 0; k < nc; k++) {
        int64_t n = kiln_val_numel(&h.g->vals[cvals[k]], 1);
        cdata[k] = kiln_alloc((size_t)n * 4);
        tu_fill(cdata[k], n, -1, 1);
    }
    for (int k = 0; k < h.nint; k++) {
        int64_t n = kiln_val_numel(&h.g->vals[h.ints[k]], 1);
        tdata[k] = kiln_alloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++) {
            int32_t v = h.pad[k] && tu_int(0, 2) == 0 ? -1 : (int32_t)tu_int(0, h.classes[k] - 1);
            if (h.ints_f32[k]) ((float *)tdata[k])[i] = (float)v;
            else tdata[k][i] = v;
        }
    }
    ref.c = fast[0].c = fast[1].c = cdata;
    ref.t = fast[0].t = fast[1].t = tdata;
    if (P64 && P32) {
        for (int v = 0; v < 2; v++) {
            kiln_params_init(P64, 1); /* buffers to their initial values */
            kiln_params_init(P32, 1);
            fill_params(P64, P32, cases[ci].fill & FILL_MASK);
            if (h.inference) fill_statistics(P64, P32);
            kiln_plan_free(ref.pl);
            ref.pl = NULL;
            /* bf16 rounds what each node reads: the ref folds (fuses) as the cpu's plan does, so both round the same;
             * the cuda backend folds no batch norm into a convolution, so the ref folds none beside it in inference,
             * and fuses beside its fused plan in training (its fused groups round member by member, as the cuda's) */
            int ref_fuse = precision_all != KILN_PRECISION_FP32 ? v == 0 && (!strcmp(backend, "cpu") || !h.inference) : 1;
            CHECK_OK(compile_run(&h, P64, loss, "ref", ref_fuse, 1, &ref, nc, cvals));
            kiln_status st = compile_run(&h, P32, loss, backend, v == 0, v == 0, &fast[v], nc, cvals);
            /* a device backend may lack an op (the cuda backend's table is partial): said, not failed; the cpu has all */
            if ((st == KILN_ERR_BACKEND || st == KILN_ERR_INVALID_ARG) && strcmp(backend, "cpu") != 0 &&
                (strstr(kiln_last_error(), "has no kernel") || strstr(kiln_last_error(), "backend has no"))) {
                if (v == 0 && draw == 0 && !acc_variant) printf("test_ops: %s skipped: %s\n", what, kiln_last_error());
                break;
            }
            CHECK_OK(st);
            char w2[192];
            char lay[16];
            if (strcmp(backend, "cpu")) snprintf(lay, sizeof lay, "%s", getenv("KILN_CUDA_LAYOUT") ? "nhwc" : "plain");
            else snprintf(lay, sizeof lay, "nChw%dc", kiln_cpu_layout_block());
            snprintf(w2, sizeof w2, "%s, fuse+layout (%s) %s", what, lay, v == 0 ? "on" : "off");
            if (ref.pl && fast[v].pl) compare_backends(w2, &h, &ref, &fast[v], P64, P32);
        }
        /* inference plans have no gradients; bf16 operands make L a step function at a fine scale */
        if (ref.pl && !h.inference && precision_all == KILN_PRECISION_FP32) {
            int64_t total = kiln_params_total(P64);
            double *an = malloc((size_t)total * 8);
            memcpy(an, kiln_params_grad(P64), (size_t)total * 8);
            finite_differences(what, ref.pl, P64, an);
            free(an);
        }
    }
    kiln_plan_free(ref.pl);
    kiln_plan_free(fast[0].pl);
    kiln_plan_free(fast[1].pl);
    for (int k = 0; k < nc; k++) kiln_free(cdata[k]);
    for (int k = 0; k < h.nint; k++) kiln_free(tdata[k]);
    kiln_params_free(P64);
    kiln_params_free(P32);
    kiln_graph_free(h.g);
    kiln_cpu_force_layout_block(0);
}

/* 1 when the case's graph holds a matmul-class node (an op of the table with bf16 operands) */
static int has_bf16_op(int ci) {
    hcase h = {.g = kiln_graph_new()};
    int any = 0;
    if (cases[ci].build(&h, 0) == 0)
        for (int i = 0; i < h.g->nnodes; i++) any |= kiln_op_get(h.g->nodes[i].op)->bf16_in != 0;
    kiln_graph_free(h.g);
    return any;
}

/* The bf16 tolerance can fail: a linear layer's outputs on the cpu in bf16 match the ref's bf16 within it,
 * while the cpu in fp32 is further from the ref's bf16 than it (and the rounding is nearest-even). */
#define BF16_TOL 8.0

/* g's parameters on the ref and on backend, filled alike */
static void params_pair(kiln_graph *g, const char *backend, kiln_params **P64, kiln_params **P32) {
    CHECK_OK(kiln_graph_status(g));
    CHECK_OK(kiln_params_new_on(g, "ref", P64));
    CHECK_OK(kiln_params_new_on(g, backend, P32));
    fill_params(*P64, *P32, FILL_UNIFORM);
}

static void test_bf16_discriminates(const char *backend) {
    CHECK(kiln_ref_round_bf16(1.0 + 1.0 / 256) == 1.0 && kiln_ref_round_bf16(1.0 + 3.0 / 256) == 1.015625 &&
          kiln_ref_round_bf16(-3.0) == -3.0 && kiln_ref_round_bf16(1.0 + 1.0 / 128 + 1e-6) == 1.0078125);
    kiln_graph *g = kiln_graph_new();
    kiln_value x = kiln_param(g, "x", 2, (int64_t[]){8, 96}, 1);
    kiln_value y = kiln_linear(g, x, kiln_param(g, "fc.weight", 2, (int64_t[]){24, 96}, 96), -1);
    kiln_value loss = kiln_sum(g, y);
    kiln_params *P64 = NULL, *P32 = NULL;
    params_pair(g, backend, &P64, &P32);
    double *yy[3];
    const int prec[3] = {KILN_PRECISION_BF16, KILN_PRECISION_BF16, KILN_PRECISION_FP32};
    for (int v = 0; v < 3; v++) {
        kiln_compile_opts o = kiln_compile_defaults();
        o.max_batch = 1;
        o.backend = v == 0 ? "ref" : backend;
        o.round_outputs_as = v == 0 ? backend : NULL; /* the cuda backend writes the product's output in bf16 */
        o.precision = prec[v];
        kiln_plan *pl = NULL;
        kiln_value outs[2] = {loss, y};
        CHECK_OK(kiln_compile(g, v == 0 ? P64 : P32, outs, 2, &o, &pl));
        float f[8 * 24];
        yy[v] = malloc(sizeof f / 4 * 8);
        if (pl) CHECK_OK(kiln_plan_run(pl, 1));
        if (pl) CHECK_OK(kiln_plan_read(pl, y, f, 8 * 24));
        for (int i = 0; i < 8 * 24; i++) yy[v][i] = f[i];
        kiln_plan_free(pl);
    }
    float a[8 * 24];
    for (int i = 0; i < 8 * 24; i++) a[i] = (float)yy[1][i];
    double same = rel_err(a, yy[0], 8 * 24);
    for (int i = 0; i < 8 * 24; i++) a[i] = (float)yy[2][i];
    double fp32 = rel_err(a, yy[0], 8 * 24);
    CHECK_MSG(same <= BF16_TOL * 2e-4 && fp32 > BF16_TOL * 2e-4, "%s: bf16 against the ref's bf16 %.3g, fp32 against it %.3g "
              "(tolerance %.3g)", backend, same, fp32, BF16_TOL * 2e-4);
    for (int v = 0; v < 3; v++) free(yy[v]);
    kiln_params_free(P64);
    kiln_params_free(P32);
    kiln_graph_free(g);
}

/* Where cuDNN refuses a 16-bit convolution (simt's cuDNN told to, KILN_SIMT_CUDNN_FP32_ONLY), the cuda backend
 * runs that one in fp32: the plan compiles, and its output is the fp32 ref's (FMA math at --matmul-precision
 * highest), not the 16-bit one's, which is further from it than the tolerance. */
static void test_conv_fp32_fallback(const char *backend) {
    kiln_graph *g = kiln_graph_new();
    kiln_value x = kiln_param(g, "x", 4, (int64_t[]){2, 3, 9, 9}, 1);
    kiln_value y = kiln_conv2d(g, x, kiln_param(g, "conv.weight", 4, (int64_t[]){5, 3, 3, 3}, 27), -1, 1, 1);
    kiln_value loss = kiln_sum(g, y);
    kiln_params *P64 = NULL, *P32 = NULL;
    params_pair(g, backend, &P64, &P32);
    double err[2] = {0, 0};
    int64_t n = 2 * 5 * 9 * 9;
    double *want = malloc((size_t)n * 8);
    float *got = malloc((size_t)n * 4);
    for (int v = 0; v < 3; v++) { /* the fp32 ref, then the backend in bf16 with and without 16-bit convolutions */
        kiln_compile_opts o = kiln_compile_defaults();
        o.max_batch = 1;
        o.backend = v == 0 ? "ref" : backend;
        o.precision = v == 0 ? KILN_PRECISION_FP32 : KILN_PRECISION_BF16;
        o.matmul_precision = 0;
        if (v == 1) setenv("KILN_SIMT_CUDNN_FP32_ONLY", "1", 1);
        kiln_plan *pl = NULL;
        kiln_value outs[2] = {loss, y};
        CHECK_OK(kiln_compile(g, v == 0 ? P64 : P32, outs, 2, &o, &pl));
        unsetenv("KILN_SIMT_CUDNN_FP32_ONLY");
        if (pl) CHECK_OK(kiln_plan_run(pl, 1));
        if (pl) CHECK_OK(kiln_plan_read(pl, y, got, n)); /* as floats from every backend */
        for (int64_t i = 0; pl && v == 0 && i < n; i++) want[i] = got[i];
        if (pl && v > 0) err[v - 1] = rel_err(got, want, n);
        for (int i = 0; pl && v > 0 && i < kiln_plan_step_count(pl); i++) { /* what kiln inspect says of it */
            kiln_step_info si;
            CHECK_OK(kiln_plan_step_info(pl, i, &si));
            if (strcmp(si.op, "conv2d")) continue;
            int half = strstr(si.kernel, "bf16 NHWC copies") != NULL;
            CHECK_MSG(half == (v == 2) && si.reorders == (v == 2 ? 2 : 0) && si.weight_reorders == (v == 2) &&
                      strstr(si.kernel, "cuDNN algo"), "%s: conv2d's kernel '%s', %d reorders, %d of weights", backend,
                      si.kernel, si.reorders, si.weight_reorders);
        }
        kiln_plan_free(pl);
    }
    CHECK_MSG(err[0] <= 1e-5 && err[1] > BF16_TOL * 2e-5, "%s: a convolution cuDNN refuses in 16 bits: %.3g from the fp32 "
              "ref (want <= 1e-5), in 16 bits %.3g", backend, err[0], err[1]);
    free(want), free(got);
    kiln_params_free(P64);
    kiln_params_free(P32);
    kiln_graph_free(g);
}

/* The forgiveness of err_16 cannot hide a missing rounding: a convolution's bf16 output on a backend that rounds
 * it (round_out) is within the tolerance of the ref rounding it too, and beyond it, forgiven flips and all, from
 * the ref not rounding it (the operands rounded alike in both). */
static void test_round_out_discriminates(const char *backend) {
    kiln_graph *g = kiln_graph_new();
    kiln_value x = kiln_param(g, "x", 4, (int64_t[]){2, 6, 9, 9}, 1);
    kiln_value y = kiln_conv2d(g, x, kiln_param(g, "conv.weight", 4, (int64_t[]){7, 6, 3, 3}, 54), -1, 1, 1);
    kiln_value loss = kiln_sum(g, y), outs[2] = {loss, y};
    kiln_params *P64 = NULL, *P32 = NULL;
    params_pair(g, backend, &P64, &P32);
    enum { N = 2 * 7 * 9 * 9 };
    static float got[3][N];
    for (int v = 0; v < 3; v++) { /* the backend, the ref rounding as it does, the ref rounding operands only */
        kiln_compile_opts o = kiln_compile_defaults();
        o.max_batch = 1;
        o.backend = v ? "ref" : backend;
        o.precision = KILN_PRECISION_BF16;
        o.round_outputs_as = v == 1 ? backend : NULL;
        kiln_plan *pl = NULL;
        CHECK_OK(kiln_compile(g, v ? P64 : P32, outs, 2, &o, &pl));
        if (pl) CHECK_OK(kiln_plan_run(pl, 1));
        if (pl) CHECK_OK(kiln_plan_read(pl, y, got[v], N));
        kiln_plan_free(pl);
    }
    static double ref[2][N];
    for (int i = 0; i < N; i++) ref[0][i] = got[1][i], ref[1][i] = got[2][i];
    int keep = precision_fast;
    precision_fast = KILN_PRECISION_BF16;
    int64_t flips[2];
    double lim = BF16_TOL * 2e-4, with = err_16(got[0], ref[0], N, lim, &flips[0]), without = err_16(got[0], ref[1], N, lim, &flips[1]);
    precision_fast = keep;
    CHECK_MSG(with <= lim && without > lim, "%s: a bf16 convolution's output %.3g from the ref rounding it (%lld flips forgiven), "
              "%.3g from the ref not rounding it (tolerance %.3g)", backend, with, (long long)flips[0], without, lim);
    kiln_params_free(P64);
    kiln_params_free(P32);
    kiln_graph_free(g);
}

/* every forward op of the table has a case */
static void test_coverage(void) {
    for (int op = 0; op < KILN_OP_COUNT; op++) {
        const kiln_op_def *d = kiln_op_get((kiln_op)op);
        if (!d->infer) continue;
        int found = 0;
        for (int c = 0; c < NCASES && !found; c++) {
            const char *s = cases[c].ops;
            size_t n = strlen(d->name);
            for (const char *p = strstr(s, d->name); p && !found; p = strstr(p + 1, d->name))
                found = (p == s || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ');
        }
        CHECK_MSG(found, "op %s has no case in the harness (tests/test_ops.c)", d->name);
    }
}

/* an id outside [0, V), or an f32 id that is no integer, fails the step with a
 * message naming the node; valid ids run */
static void test_embedding_ids(const char *backend) {
    for (int f32 = 0; f32 < 2; f32++) {
        kiln_graph *g = kiln_graph_new();
        kiln_value idx = kiln_input(g, "idx", f32 ? KILN_F32 : KILN_I32, 2, (int64_t[]){KILN_BATCH, 3});
        kiln_value loss = kiln_sum(g, kiln_embedding(g, idx, kiln_param(g, "wte.weight", 2, (int64_t[]){5, 4}, 1)));
        kiln_params *P = NULL;
        kiln_plan *pl = NULL;
        CHECK_OK(kiln_graph_status(g));
        CHECK_OK(kiln_params_new_on(g, backend, &P));
        kiln_compile_opts o = kiln_compile_defaults();
        o.training = 1;
        o.max_batch = 2;
        o.backend = backend;
        CHECK_OK(kiln_compile(g, P, &loss, 1, &o, &pl));
        int32_t ii[3][6] = {{0, 1, 2, 3, 5, 4}, {0, 1, -1, 3, 4, 4}, {4, 3, 2, 1, 0, 0}};
        float ff[3][6] = {{0, 1, 2, 3, 5, 4}, {0, 1, 2, 2.5f, 4, 4}, {4, 3, 2, 1, 0, 0}};
        const char *want[3] = {"position 4 is outside [0, 5)", f32 ? "2.5 at position 3" : "-1 at position 2", NULL};
        for (int k = 0; pl && k < 3; k++) {
            CHECK_OK(kiln_plan_bind(pl, idx, f32 ? (const void *)ff[k] : (const void *)ii[k]));
            kiln_status st = kiln_plan_run(pl, 2);
            const char *msg = kiln_last_error();
            if (!want[k]) CHECK_OK(st);
            else CHECK_MSG(st == KILN_ERR_INVALID_ARG && strstr(msg, "wte") && strstr(msg, want[k]),
                           "%s, %s ids, case %d: status %d, message '%s'", backend, f32 ? "f32" : "i32", k, st, msg);
        }
        kiln_plan_free(pl);
        kiln_params_free(P);
        kiln_graph_free(g);
    }
}

/* b must be a's trailing dims and not batched: otherwise the builder names the node */
static void test_add_bcast_shapes(void) {
    kiln_graph *g = kiln_graph_new();
    kiln_value a = kiln_input(g, "a", KILN_F32, 3, (int64_t[]){KILN_BATCH, 3, 4});
    kiln_add(g, a, kiln_param(g, "b", 2, (int64_t[]){4, 3}, 1));
    CHECK(kiln_graph_status(g) == KILN_ERR_SHAPE && strstr(kiln_last_error(), "add_bcast#") &&
          strstr(kiln_last_error(), "trailing"));
    kiln_graph_free(g);
}

int main(void) {
    tu_seed(20261123);
    CHECK_OK(kiln_test_simt_register()); /* the CUDA backend's own kernels on the host (tests/simt/) */
    test_coverage();
    test_add_bcast_shapes();
    test_embedding_ids("ref");
    for (int b = 0; b < kiln_backend_count(); b++) {
        const kiln_backend *be = kiln_backend_at(b);
        if (be->float_dtype != KILN_F32) continue; /* the f64 ref backend is the oracle */
        char why[192];
        if (!kiln_backend_available(be, why, sizeof why)) {
            printf("test_ops: %s backend skipped: %s\n", be->name, why);
            continue;
        }
        if (be->kernels[KILN_OP_EMBEDDING].run) test_embedding_ids(be->name);
        for (int c = 0; c < NCASES; c++)
            for (int draw = 0; draw < 3; draw++)
                for (int acc = 0; acc < ((cases[c].fill & INFERENCE) ? 1 : 2); acc++) run_case(be->name, c, draw, acc);
        /* autocast on every fast backend: the cpu's oneDNN, the cuda backend's cuBLASLt and cuDNN on 16-bit
         * operands; fp16 (a GPU's) on the cuda backend's kernels too (the ref rounds as a GPU converts) */
        test_bf16_discriminates(be->name);
        if (!strcmp(be->name, "simt") && be->kernels[KILN_OP_CONV2D].round_out) test_conv_fp32_fallback(be->name);
        if (be->kernels[KILN_OP_CONV2D].round_out) test_round_out_discriminates(be->name);
        tol = BF16_TOL;
        /* and on the cuda backend's kernels again with its layout pass keeping conv chains channels last
         * (KILN_CUDA_LAYOUT=nhwc: 16-bit plans only) */
        int nhwc_too = strcmp(be->name, "cpu") != 0 && be->kernels[KILN_OP_CONV2D].round_out;
        for (int pr = 0; pr < 2 + 2 * nhwc_too; pr++) {
            precision_all = precision_fast = pr % 2 ? KILN_PRECISION_FP16 : KILN_PRECISION_BF16;
            if (pr % 2 && !strcmp(be->name, "cpu")) continue;
            if (pr >= 2) setenv("KILN_CUDA_LAYOUT", "nhwc", 1);
            for (int c = 0; c < NCASES; c++)
                for (int draw = 0; draw < 2 && has_bf16_op(c); draw++)
                    for (int acc = 0; acc < ((cases[c].fill & INFERENCE) ? 1 : 2); acc++) run_case(be->name, c, draw, acc);
            unsetenv("KILN_CUDA_LAYOUT");
        }
        precision_all = precision_fast = KILN_PRECISION_FP32;
        tol = 1;
    }
    printf("test_ops: %lld elements of 16-bit runs one rounding apart from the ref (err_16's forgiven flips)\n",
           (long long)flips_forgiven);
    return tu_finish("test_ops");
}
