/* The cpu's in-place pass (src/backends/cpu/pass_in_place.c): backward
 * kernels writing their gradient over a dying input of the same shape change
 * memory, never numbers. A regression head x -> fc0+relu -> fc1+relu -> mse,
 * 1024 wide, at a batch of 300: mse's backward (relu's folded in) writes over
 * fc1's output, fc1's backward-data over its dy in row blocks of 256 and 44
 * (the kernel's block buffer holds 256 rows of 1024), relu's backward over
 * its dy. Plans with the pass and without it, in fp32 and bf16, and the
 * double reference. */
#include <math.h>
#include "kiln/graph.h"
#include "kiln/nn.h"
#include "testutil.h"

enum { W = 1024, B = 300 };

typedef struct {
    kiln_graph *g;
    kiln_value x, y, loss;
    kiln_params *P32, *P64;
} head;

static void build(head *h) {
    h->g = kiln_graph_new();
    h->x = kiln_input(h->g, "x", KILN_F32, 2, (int64_t[]){KILN_BATCH, W});
    h->y = kiln_input(h->g, "y", KILN_F32, 2, (int64_t[]){KILN_BATCH, W});
    kiln_value a = kiln_relu(h->g, kiln_nn_linear(h->g, "fc0", h->x, W, W, 1));
    kiln_value b = kiln_relu(h->g, kiln_nn_linear(h->g, "fc1", a, W, W, 1));
    h->loss = kiln_mse_loss(h->g, b, h->y);
    CHECK_OK(kiln_params_new(h->g, KILN_F32, &h->P32));
    CHECK_OK(kiln_params_new(h->g, KILN_F64, &h->P64));
    kiln_params_init(h->P32, 5);
    const float *p = kiln_params_data(h->P32);
    double *q = kiln_params_data(h->P64);
    for (int64_t i = 0; i < kiln_params_total(h->P32); i++) q[i] = p[i];
}

/* one training run; the gradient lands in P's buffer, the arena and loss in *arena, *loss */
static void run(head *h, kiln_params *P, const char *backend, int in_place, int precision, const float *x,
                const float *y, size_t *arena, double *loss) {
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    o.max_batch = B;
    o.backend = backend;
    o.in_place = in_place;
    o.precision = precision;
    o.autotune = 0;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_compile(h->g, P, &h->loss, 1, &o, &pl));
    if (!pl) return;
    kiln_plan_bind(pl, h->x, x);
    kiln_plan_bind(pl, h->y, y);
    CHECK_OK(kiln_plan_run(pl, B));
    *arena = kiln_plan_arena_bytes(pl);
    *loss = kiln_plan_loss(pl);
    kiln_plan_free(pl);
}

static void with_and_without(head *h, int precision, const float *x, const float *y) {
    int64_t total = kiln_params_total(h->P32);
    float *g[2];
    size_t arena[2];
    double loss[2];
    for (int ip = 0; ip < 2; ip++) {
        run(h, h->P32, "cpu", ip, precision, x, y, &arena[ip], &loss[ip]);
        g[ip] = malloc((size_t)total * sizeof(float));
        memcpy(g[ip], kiln_params_grad(h->P32), (size_t)total * sizeof(float));
    }
    /* without: the output and mse's gradient, fc1's dy and dx, relu's dy and dx meet; with: one of each pair */
    size_t tensor = (size_t)B * W * sizeof(float);
    CHECK_MSG(arena[0] >= arena[1] + tensor, "precision %d: arena %zu with the pass, %zu without", precision, arena[1],
              arena[0]);
    CHECK_MSG(loss[0] == loss[1], "precision %d: loss %.9g with, %.9g without", precision, loss[1], loss[0]);
    /* the row blocks may sum fc1's dx in another order than one call over all rows */
    double gmax = 0;
    for (int64_t i = 0; i < total; i++) gmax = fmax(gmax, fabs(g[0][i]));
    double e = tu_err_ff(g[1], g[0], total, 1e-6 * gmax, precision ? 1e-3 : 1e-5);
    CHECK_MSG(gmax > 0 && e <= 1, "precision %d: gradients differ (%.3g)", precision, e);
    if (precision == KILN_PRECISION_FP32) { /* and both against the double reference */
        size_t ra;
        double rl;
        run(h, h->P64, "ref", 1, KILN_PRECISION_FP32, x, y, &ra, &rl);
        const double *r = kiln_params_grad(h->P64);
        double rmax = 0;
        for (int64_t i = 0; i < total; i++) rmax = fmax(rmax, fabs(r[i]));
        CHECK_MSG(rmax > 0 && fabs(loss[1] - rl) <= 1e-5 * fabs(rl), "loss %.9g vs reference %.9g", loss[1], rl);
        CHECK_MSG(tu_err(g[1], r, total, 1e-4 * rmax, 1e-3) <= 1, "gradients off the reference");
    }
    free(g[0]);
    free(g[1]);
}

int main(void) {
    head h;
    build(&h);
    float *x = malloc((size_t)B * W * sizeof(float)), *y = malloc((size_t)B * W * sizeof(float));
    tu_fill(x, (int64_t)B * W, -1.0, 1.0);
    tu_fill(y, (int64_t)B * W, -0.5, 0.5);
    with_and_without(&h, KILN_PRECISION_FP32, x, y);
    with_and_without(&h, KILN_PRECISION_BF16, x, y);
    free(x);
    free(y);
    kiln_params_free(h.P32);
    kiln_params_free(h.P64);
    kiln_graph_free(h.g);
    return tu_finish("test_in_place");
}
