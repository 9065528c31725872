/* The half-storage pass (src/graph/pass_half_store.c) on graphs, with and
 * without, against a backend's 16-bit slots given as a table here: layer norm
 * and GELU write 16 bits, linear reads its x (and backward-data its dy,
 * backward-weight both) as 16-bit operands. What it must mark: a layer norm's
 * output that only linears of the plan's precision read (and its views with
 * it), in bf16 or fp16 by the precision. What it must not: with precision
 * fp32 or auto, without a table, a value another op also reads, a plan
 * output, a reader left at fp32, a value written twice or accumulated. */
#include <string.h>
#include "graph/internal/graph.h"
#include "testutil.h"

static unsigned out0(int nin, int nout) { return (void)nin, (void)nout, 1u << 8; }
static unsigned in0(int nin, int nout) { return (void)nin, (void)nout, 1u; }
static unsigned in01(int nin, int nout) { return (void)nin, (void)nout, 3u; }

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
            int count = kiln_pass_half_store(n.g, p, table);
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
    CHECK(kiln_pass_half_store(n.g, KILN_PRECISION_FP32, table) == 0);
    CHECK(kiln_pass_half_store(n.g, KILN_PRECISION_AUTO, table) == 0);
    kiln_half_slots_fn none[KILN_OP_COUNT] = {0};
    CHECK(kiln_pass_half_store(n.g, KILN_PRECISION_BF16, none) == 0);
    kiln_graph_free(n.g);

    n = build(0, 1); /* readers left at fp32: autocast not run */
    CHECK_MSG(kiln_pass_half_store(n.g, KILN_PRECISION_BF16, table) == 0, "readers at fp32: something marked");
    kiln_graph_free(n.g);

    n = build(1, 1); /* a relu (and its backward) also reads the layer norm's output */
    kiln_pass_autocast(n.g, KILN_PRECISION_BF16);
    kiln_pass_half_store(n.g, KILN_PRECISION_BF16, table);
    CHECK_MSG(!marked(&n, n.ln) && !marked(&n, n.view) && marked(&n, n.gelu), "a second reader: layer norm %d, GELU %d",
              marked(&n, n.ln), marked(&n, n.gelu));
    kiln_graph_free(n.g);

    n = build(0, 1); /* a plan output */
    n.g->vals[n.gelu].output = 1;
    kiln_pass_autocast(n.g, KILN_PRECISION_BF16);
    kiln_pass_half_store(n.g, KILN_PRECISION_BF16, table);
    CHECK_MSG(!marked(&n, n.gelu) && marked(&n, n.ln), "a plan output marked (%d)", marked(&n, n.gelu));
    kiln_graph_free(n.g);

    n = build(0, 1); /* accumulated into: its writer's output adds */
    int w = -1;
    for (int i = 0; i < n.g->nnodes; i++)
        if (n.g->nodes[i].op == KILN_OP_GELU) w = i;
    if (w >= 0) n.g->nodes[w].acc[0] = 1;
    kiln_pass_autocast(n.g, KILN_PRECISION_BF16);
    kiln_pass_half_store(n.g, KILN_PRECISION_BF16, table);
    CHECK_MSG(w >= 0 && !marked(&n, n.gelu), "an accumulated output marked");
    kiln_graph_free(n.g);
}

int main(void) {
    make_table();
    test_marks();
    test_not_marked();
    return tu_finish("test_half_store");
}
