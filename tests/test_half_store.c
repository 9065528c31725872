/* The half-storage pass (src/graph/pass_half_store.c) on graphs, with and
 * without, against a backend's 16-bit slots given as a table here: layer norm
 * and GELU write 16 bits, linear reads its x (and backward-data its dy,
 * backward-weight both) as 16-bit operands. What it must mark: a layer norm's
 * output that only linears of the plan's precision read (and its views with
 * it), in bf16 or fp16 by the precision. What it must not: with precision
 * fp32 or auto, without a table, a value another op also reads, a plan
 * output, a reader left at fp32, a value written twice or accumulated.
 * And a value its writer rounds itself (round_out: the cuda backend's
 * 16-bit convolutions): a bias-free convolution's output that only its batch
 * norm reads (at fp32, with 16-bit slots), forward and backward; not where the
 * writer is left at fp32, without round_out, with a bias (no slot), or where
 * a relu's backward reads the backward-data output without a slot. */
#include <string.h>
#include "graph/internal/graph.h"
#include "testutil.h"

static unsigned out0(int nin, int nout) { return (void)nin, (void)nout, 1u << 8; }
static unsigned in0(int nin, int nout) { return (void)nin, (void)nout, 1u; }
static unsigned in01(int nin, int nout) { return (void)nin, (void)nout, 3u; }
static unsigned in0_out0(int nin, int nout) { return (void)nin, (void)nout, 1u | 1u << 8; }

static kiln_half_slots_fn table[KILN_OP_COUNT];
static void make_table(void) {
    table[KILN_OP_LAYER_NORM] = table[KILN_OP_GELU] = out0;
    table[KILN_OP_LINEAR] = table[KILN_OP_LINEAR_BWD_DATA] = in0;
    table[KILN_OP_LINEAR_BWD_WEIGHT] = in01;
}

typedef struct {
    kiln_graph *g;
    kiln_value ln, view, gelu, loss;
} net;

/* x -> layer norm -> (reshape) -> linear -> GELU -> linear -> sum; `also` makes a relu read the layer norm's
 * output too; autodiff when training */
static net build(int also, int training) {
    net n = {.g = kiln_graph_new()};
    kiln_graph *g = n.g;
    kiln_value x = kiln_input(g, "x", KILN_F32, 3, (int64_t[]){KILN_BATCH, 4, 8});
    n.ln = kiln_layer_norm(g, x, kiln_param(g, "ln.w", 1, (int64_t[]){8}, 8), kiln_param(g, "ln.b", 1, (int64_t[]){8}, 8), 1e-5f);
    n.view = kiln_reshape(g, n.ln, 2, (int64_t[]){KILN_BATCH, 32});
    kiln_value h = kiln_linear(g, n.view, kiln_param(g, "fc1.w", 2, (int64_t[]){16, 32}, 32), kiln_param(g, "fc1.b", 1, (int64_t[]){16}, 32));
    n.gelu = kiln_gelu(g, h, 1);
    kiln_value y = kiln_linear(g, n.gelu, kiln_param(g, "fc2.w", 2, (int64_t[]){4, 16}, 16), -1);
    n.loss = kiln_sum(g, y);
    if (also) n.loss = kiln_add(g, n.loss, kiln_sum(g, kiln_relu(g, n.ln)));
    if (training) CHECK_OK(kiln_autodiff(g, n.loss));
    return n;
}

static int marked(const net *n, kiln_value v) { return n->g->vals[v].half; }

static void test_marks(void) {
    for (int training = 0; training < 2; training++) {
        for (int p = KILN_PRECISION_BF16; p <= KILN_PRECISION_FP16; p += 2) {
            net n = build(0, training);
            kiln_pass_autocast(n.g, p);
            int count = kiln_pass_half_store(n.g, p, table, NULL);
            int want = p == KILN_PRECISION_FP16 ? 2 : 1;
            CHECK_MSG(marked(&n, n.ln) == want && marked(&n, n.view) == want && marked(&n, n.gelu) == want,
                      "training %d, %s: layer norm %d, its view %d, GELU %d (want %d)", training, kiln_precision_name(p),
                      marked(&n, n.ln), marked(&n, n.view), marked(&n, n.gelu), want);
            CHECK_MSG(count == 2, "training %d, %s: %d values marked (2)", training, kiln_precision_name(p), count);
            int other = 0;
            for (int v = 0; v < n.g->nvals; v++)
                other += n.g->vals[v].half && kiln_val_root(n.g, v) != n.ln && v != n.gelu;
            CHECK_MSG(other == 0, "training %d: %d other values marked", training, other);
            kiln_graph_free(n.g);
        }
    }
}

static void test_not_marked(void) {
    net n = build(0, 1);
    kiln_pass_autocast(n.g, KILN_PRECISION_BF16);
    CHECK(kiln_pass_half_store(n.g, KILN_PRECISION_FP32, table, NULL) == 0);
    CHECK(kiln_pass_half_store(n.g, KILN_PRECISION_AUTO, table, NULL) == 0);
    kiln_half_slots_fn none[KILN_OP_COUNT] = {0};
    CHECK(kiln_pass_half_store(n.g, KILN_PRECISION_BF16, none, NULL) == 0);
    kiln_graph_free(n.g);

    n = build(0, 1); /* readers left at fp32: autocast not run */
    CHECK_MSG(kiln_pass_half_store(n.g, KILN_PRECISION_BF16, table, NULL) == 0, "readers at fp32: something marked");
    kiln_graph_free(n.g);

    n = build(1, 1); /* a relu (and its backward) also reads the layer norm's output */
    kiln_pass_autocast(n.g, KILN_PRECISION_BF16);
    kiln_pass_half_store(n.g, KILN_PRECISION_BF16, table, NULL);
    CHECK_MSG(!marked(&n, n.ln) && !marked(&n, n.view) && marked(&n, n.gelu), "a second reader: layer norm %d, GELU %d",
              marked(&n, n.ln), marked(&n, n.gelu));
    kiln_graph_free(n.g);

    n = build(0, 1); /* a plan output */
    n.g->vals[n.gelu].output = 1;
    kiln_pass_autocast(n.g, KILN_PRECISION_BF16);
    kiln_pass_half_store(n.g, KILN_PRECISION_BF16, table, NULL);
    CHECK_MSG(!marked(&n, n.gelu) && marked(&n, n.ln), "a plan output marked (%d)", marked(&n, n.gelu));
    kiln_graph_free(n.g);

    n = build(0, 1); /* accumulated into: its writer's output adds */
    int w = -1;
    for (int i = 0; i < n.g->nnodes; i++)
        if (n.g->nodes[i].op == KILN_OP_GELU) w = i;
    if (w >= 0) n.g->nodes[w].acc[0] = 1;
    kiln_pass_autocast(n.g, KILN_PRECISION_BF16);
    kiln_pass_half_store(n.g, KILN_PRECISION_BF16, table, NULL);
    CHECK_MSG(w >= 0 && !marked(&n, n.gelu), "an accumulated output marked");
    kiln_graph_free(n.g);
}

/* conv's output is 16-bit where it has no bias (the cuda backend adds a bias in fp32 after the rounding) */
static unsigned conv_out(int nin, int nout) { return (void)nout, nin == 2 ? 1u << 8 : 0; }

/* x -> conv1 -> bn1 -> relu -> conv2 -> bn2 -> sum, trained; conv2 with a bias when `bias` */
static kiln_value bn_of(kiln_graph *g, kiln_value x, const char *name, int c) {
    char n[5][32];
    const char *what[5] = {"w", "b", "mean", "var", "n"};
    for (int k = 0; k < 5; k++) snprintf(n[k], sizeof n[k], "%s.%s", name, what[k]);
    return kiln_batch_norm2d(g, x, kiln_param(g, n[0], 1, (int64_t[]){c}, 1), kiln_param(g, n[1], 1, (int64_t[]){c}, 1),
                             kiln_buffer(g, n[2], KILN_F32, 1, (int64_t[]){c}, 0), kiln_buffer(g, n[3], KILN_F32, 1, (int64_t[]){c}, 1),
                             kiln_buffer(g, n[4], KILN_I64, 0, NULL, 0), 0.1f, 1e-5f);
}
static void test_rounded_writer(void) {
    kiln_half_slots_fn t[KILN_OP_COUNT] = {0};
    t[KILN_OP_CONV2D] = conv_out;
    t[KILN_OP_CONV2D_BWD_DATA] = out0;
    t[KILN_OP_BATCH_NORM2D] = in0;
    t[KILN_OP_BATCH_NORM2D_BWD] = in01;
    unsigned rounds[KILN_OP_COUNT] = {0};
    rounds[KILN_OP_CONV2D] = rounds[KILN_OP_CONV2D_BWD_DATA] = rounds[KILN_OP_CONV2D_BWD_WEIGHT] = 1;
    for (int v = 0; v < 4; v++) { /* 0: as the cuda backend; 1: no autocast; 2: no round_out; 3: conv2 with a bias */
        kiln_graph *g = kiln_graph_new();
        kiln_value x = kiln_input(g, "x", KILN_F32, 4, (int64_t[]){KILN_BATCH, 3, 6, 6});
        kiln_value c1 = kiln_conv2d(g, x, kiln_param(g, "c1.w", 4, (int64_t[]){4, 3, 3, 3}, 27), -1, 1, 1);
        kiln_value h = kiln_relu(g, bn_of(g, c1, "bn1", 4));
        kiln_value c2 = kiln_conv2d(g, h, kiln_param(g, "c2.w", 4, (int64_t[]){5, 4, 3, 3}, 36),
                                    v == 3 ? kiln_param(g, "c2.b", 1, (int64_t[]){5}, 36) : -1, 1, 1);
        CHECK_OK(kiln_autodiff(g, kiln_sum(g, bn_of(g, c2, "bn2", 5))));
        if (v != 1) kiln_pass_autocast(g, KILN_PRECISION_BF16);
        int count = kiln_pass_half_store(g, KILN_PRECISION_BF16, t, v == 2 ? NULL : rounds);
        int want = v == 0 ? 2 : v == 3 ? 1 : 0;
        int others = 0; /* conv2's backward-data output (relu's backward reads it) among them */
        for (int k = 0; k < g->nvals; k++) others += g->vals[k].half && k != c1 && k != c2;
        CHECK_MSG(count == want && g->vals[c1].half == (v == 0 || v == 3) && g->vals[c2].half == (v == 0) && !others,
                  "case %d: %d marked (want %d), conv1 %d, conv2 %d, %d others", v, count, want, g->vals[c1].half,
                  g->vals[c2].half, others);
        kiln_graph_free(g);
    }
}

/* Autocast's followers (kiln_pass_autocast_follow: the cuda backend's batch norm): x -> bn0 -> conv1 -> bn1 -> bn2
 * -> conv2 -> sum, trained. bn1 (after a conv that rounds its output) and bn2 (after bn1, which then rounds its)
 * take the precision, bn0 (after the input) and the backward nodes do not; none with fp32 or without a table. Then
 * half storage, batch norm rounding its output (round_out) and reading x widened: bn2's output (only conv2 reads
 * it, rounding it) is stored in 16 bits in every case; bn1's (read by bn2, widened, not rounded) only where bn1
 * rounds it; conv1's never where half storage is told conv does not round (as it is here, unlike the follow pass),
 * though bn1 takes the plan's precision: a follower does not round what it reads (untrained, bn1 is its only
 * reader) */
static void test_follow(void) {
    kiln_half_slots_fn t[KILN_OP_COUNT] = {0};
    t[KILN_OP_CONV2D] = t[KILN_OP_BATCH_NORM2D] = in0_out0;
    t[KILN_OP_CONV2D_BWD_WEIGHT] = in01;
    t[KILN_OP_BATCH_NORM2D_BWD] = in01;
    unsigned rounds[KILN_OP_COUNT] = {0}, frounds[KILN_OP_COUNT] = {0};
    rounds[KILN_OP_BATCH_NORM2D] = frounds[KILN_OP_BATCH_NORM2D] = frounds[KILN_OP_CONV2D] = 1;
    uint8_t follows[KILN_OP_COUNT] = {0};
    follows[KILN_OP_BATCH_NORM2D] = KILN_FOLLOW_IN0;
    for (int v = 0; v < 5; v++) { /* 0: follow; 1: fp32; 2: no table; 3: no follow pass (the cpu); 4: 0 untrained */
        kiln_graph *g = kiln_graph_new();
        kiln_value x = kiln_input(g, "x", KILN_F32, 4, (int64_t[]){KILN_BATCH, 3, 6, 6});
        kiln_value b0 = bn_of(g, x, "bn0", 3);
        kiln_value c1 = kiln_conv2d(g, b0, kiln_param(g, "c1.w", 4, (int64_t[]){4, 3, 3, 3}, 27), -1, 1, 1);
        kiln_value b1 = bn_of(g, c1, "bn1", 4), b2 = bn_of(g, b1, "bn2", 4);
        kiln_value c2 = kiln_conv2d(g, b2, kiln_param(g, "c2.w", 4, (int64_t[]){5, 4, 3, 3}, 36), -1, 1, 1);
        kiln_value loss = kiln_sum(g, c2);
        if (v < 4) CHECK_OK(kiln_autodiff(g, loss));
        int p = v == 1 ? KILN_PRECISION_FP32 : KILN_PRECISION_BF16;
        kiln_pass_autocast(g, p);
        int n = v == 3 ? 0 : kiln_pass_autocast_follow(g, p, v == 2 ? NULL : follows, frounds);
        int bf[3] = {0}, bwd = 0;
        for (int i = 0; i < g->nnodes; i++) {
            const kiln_node *nd = &g->nodes[i];
            for (int k = 0; k < 3; k++) bf[k] += nd->op == KILN_OP_BATCH_NORM2D && nd->out[0] == (k ? k == 1 ? b1 : b2 : b0) &&
                                                 nd->precision == KILN_PRECISION_BF16;
            bwd += nd->op == KILN_OP_BATCH_NORM2D_BWD && nd->precision != KILN_PRECISION_FP32;
        }
        int on = v == 0 || v == 4;
        CHECK_MSG(n == 2 * on && !bf[0] && bf[1] == on && bf[2] == on && !bwd, "case %d: %d followed (bn0 %d, bn1 %d, bn2 %d, "
                  "%d backward)", v, n, bf[0], bf[1], bf[2], bwd);
        if (p == KILN_PRECISION_BF16) {
            kiln_pass_half_store(g, p, t, rounds);
            CHECK_MSG(g->vals[b2].half && g->vals[b1].half == on && !g->vals[c1].half, "case %d: stored in 16 bits: "
                      "bn1 %d, bn2 %d, conv1 %d", v, g->vals[b1].half, g->vals[b2].half, g->vals[c1].half);
        }
        kiln_graph_free(g);
    }
}

/* Followers in a fused group, member by member: y = relu(bn(conv(x)) + bn(conv(x))), z = relu(bn(conv(y)) + y),
 * u = relu(bn(conv(z)) + x), trained, each tail one fused node (and, unfused, plain nodes). y's add and relu round
 * (both sources 16-bit), z's too (y written so by a fused node), u's not (x is fp32: an add where either operand is
 * fp32 stays fp32, as PyTorch promotes); no backward member rounds. The fused nodes of y and z mark their outputs
 * 16-bit (out_round) and take the plan's precision, u's does not. */
static int follow_tail(const kiln_graph *g, kiln_value v, int fused, int *members) {
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead || n->out[0] != v) continue;
        if (!fused) return n->op == KILN_OP_RELU && n->precision == KILN_PRECISION_BF16;
        const kiln_fused_prog *P = n->attr.fused;
        if (n->op != KILN_OP_FUSED && n->op != KILN_OP_FUSED_PLAIN) return -1;
        for (int j = 0; j < P->ninstr; j++) *members += P->ins[j].round == KILN_PRECISION_BF16;
        return (P->out_round & 1) && n->precision == KILN_PRECISION_BF16;
    }
    return -1;
}

static void test_follow_fused(void) {
    uint8_t follows[KILN_OP_COUNT] = {0}, tileable[KILN_OP_COUNT] = {0};
    follows[KILN_OP_BATCH_NORM2D] = follows[KILN_OP_RELU] = KILN_FOLLOW_IN0;
    follows[KILN_OP_ADD] = KILN_FOLLOW_ALL;
    unsigned rounds[KILN_OP_COUNT] = {0};
    rounds[KILN_OP_CONV2D] = rounds[KILN_OP_BATCH_NORM2D] = rounds[KILN_OP_ADD] = rounds[KILN_OP_RELU] = 1;
    tileable[KILN_OP_ADD] = tileable[KILN_OP_RELU] = tileable[KILN_OP_RELU_BWD] = tileable[KILN_OP_GRAD_COPY] = 1;
    for (int fused = 0; fused < 2; fused++) {
        kiln_graph *g = kiln_graph_new();
        kiln_value x = kiln_input(g, "x", KILN_F32, 4, (int64_t[]){KILN_BATCH, 4, 6, 6}), t[3];
        char name[4][16];
        for (int k = 0; k < 4; k++) snprintf(name[k], sizeof name[k], "c%d", k);
#define CB(in, k) bn_of(g, kiln_conv2d(g, in, kiln_param(g, name[k], 4, (int64_t[]){4, 4, 3, 3}, 36), -1, 1, 1), name[k], 4)
        t[0] = kiln_relu(g, kiln_add(g, CB(x, 0), CB(x, 1)));
        t[1] = kiln_relu(g, kiln_add(g, CB(t[0], 2), t[0]));
        t[2] = kiln_relu(g, kiln_add(g, CB(t[1], 3), x));
#undef CB
        CHECK_OK(kiln_autodiff(g, kiln_sum(g, t[2])));
        if (fused) CHECK(kiln_pass_fuse_pointwise(g, tileable, 1) >= 3);
        kiln_pass_autocast(g, KILN_PRECISION_BF16);
        int n = kiln_pass_autocast_follow(g, KILN_PRECISION_BF16, follows, rounds), members[3] = {0}, on[3];
        for (int k = 0; k < 3; k++) on[k] = follow_tail(g, t[k], fused, &members[k]);
        int bwd = 0;
        for (int i = 0; i < g->nnodes; i++)
            bwd += g->nodes[i].fwd >= 0 && !(kiln_op_get(g->nodes[i].op)->bf16_in) && g->nodes[i].precision != KILN_PRECISION_FP32;
        int want = fused ? 4 + 2 : 4 + 4; /* the norms, then the tails' nodes */
        CHECK_MSG(on[0] == 1 && on[1] == 1 && on[2] == 0 && n == want && !bwd && (!fused || (members[0] == 2 && members[1] == 2 &&
                  !members[2])), "%s: tails following %d %d %d (rounding members %d %d %d), %d marked (want %d), %d backward",
                  fused ? "fused" : "plain", on[0], on[1], on[2], members[0], members[1], members[2], n, want, bwd);
        kiln_graph_free(g);
    }
}

/* A convolution with a bias holds no 16-bit numbers (the bias is added in fp32 after the rounding): relu and
 * max-pool after it do not follow, after a bias-free one they do; half storage keeps the biased output fp32 even
 * where every reader could read 16 bits (and so the relu's) */
static void test_follow_bias(void) {
    uint8_t follows[KILN_OP_COUNT] = {0};
    follows[KILN_OP_RELU] = follows[KILN_OP_MAX_POOL2D] = KILN_FOLLOW_IN0;
    unsigned rounds[KILN_OP_COUNT] = {0};
    rounds[KILN_OP_CONV2D] = rounds[KILN_OP_RELU] = rounds[KILN_OP_MAX_POOL2D] = 1;
    kiln_half_slots_fn t[KILN_OP_COUNT] = {0};
    t[KILN_OP_CONV2D] = t[KILN_OP_RELU] = t[KILN_OP_MAX_POOL2D] = in0_out0;
    for (int bias = 0; bias < 2; bias++) {
        kiln_graph *g = kiln_graph_new();
        kiln_value x = kiln_input(g, "x", KILN_F32, 4, (int64_t[]){KILN_BATCH, 3, 6, 6});
        kiln_value c = kiln_conv2d(g, x, kiln_param(g, "c.w", 4, (int64_t[]){4, 3, 3, 3}, 27),
                                   bias ? kiln_param(g, "c.b", 1, (int64_t[]){4}, 1) : -1, 1, 1);
        kiln_value r = kiln_relu(g, c), m = kiln_max_pool2d(g, r, 2, 2);
        kiln_conv2d(g, m, kiln_param(g, "d.w", 4, (int64_t[]){2, 4, 1, 1}, 4), -1, 1, 0);
        kiln_pass_autocast(g, KILN_PRECISION_BF16);
        int n = kiln_pass_autocast_follow(g, KILN_PRECISION_BF16, follows, rounds);
        kiln_pass_half_store(g, KILN_PRECISION_BF16, t, rounds);
        int on = !bias;
        CHECK_MSG(n == 2 * on && g->vals[c].half == on && g->vals[r].half == on && g->vals[m].half,
                  "a convolution %s a bias: %d followed (want %d), stored in 16 bits: conv %d, relu %d, max-pool %d",
                  bias ? "with" : "without", n, 2 * on, g->vals[c].half, g->vals[r].half, g->vals[m].half);
        kiln_graph_free(g);
    }
}

/* a linear with a bias whose kernel adds it before the rounding (KILN_ROUND_BIAS_IN: the cuda backend's cuBLASLt
 * epilogue) holds 16-bit numbers: a relu after it follows and both outputs are stored in 16 bits; without the flag
 * (a bias added in fp32 after the rounding, as the convolutions' is) neither */
static void test_linear_bias_in(void) {
    uint8_t follows[KILN_OP_COUNT] = {0};
    follows[KILN_OP_RELU] = KILN_FOLLOW_IN0;
    kiln_half_slots_fn t[KILN_OP_COUNT] = {0};
    t[KILN_OP_LINEAR] = t[KILN_OP_RELU] = in0_out0;
    for (int in = 0; in < 2; in++) {
        unsigned rounds[KILN_OP_COUNT] = {0};
        rounds[KILN_OP_LINEAR] = 1 | (in ? KILN_ROUND_BIAS_IN : 0);
        rounds[KILN_OP_RELU] = 1;
        kiln_graph *g = kiln_graph_new();
        kiln_value x = kiln_input(g, "x", KILN_F32, 2, (int64_t[]){KILN_BATCH, 12});
        kiln_value h = kiln_linear(g, x, kiln_param(g, "a.w", 2, (int64_t[]){8, 12}, 12), kiln_param(g, "a.b", 1, (int64_t[]){8}, 1));
        kiln_value r = kiln_relu(g, h);
        kiln_linear(g, r, kiln_param(g, "b.w", 2, (int64_t[]){4, 8}, 8), -1);
        kiln_pass_autocast(g, KILN_PRECISION_BF16);
        int n = kiln_pass_autocast_follow(g, KILN_PRECISION_BF16, follows, rounds);
        kiln_pass_half_store(g, KILN_PRECISION_BF16, t, rounds);
        CHECK_MSG(n == in && g->vals[h].half == in && g->vals[r].half == 1,
                  "a linear with a bias added %s the rounding: %d followed (want %d), stored in 16 bits: linear %d, relu %d",
                  in ? "before" : "after", n, in, g->vals[h].half, g->vals[r].half);
        kiln_graph_free(g);
    }
}

int main(void) {
    make_table();
    test_follow();
    test_follow_fused();
    test_follow_bias();
    test_linear_bias_in();
    test_rounded_writer();
    test_marks();
    test_not_marked();
    return tu_finish("test_half_store");
}
