/* kiln gradcheck (src/train/gradcheck.c): every model of the zoo passes at its
 * small defaults (the larger ResNets on a spread of their tensors, one element
 * each, so the test takes seconds); a graph with a deliberately wrong backward
 * fails, naming the tensor: the test-only op here is linear's backward-weight
 * kernel wrapped by one that scales its result by 1.25, compiled only into this
 * binary and put in place of fc1's step. The same graph with the real kernel
 * passes, so the failure is the wrong backward's. */
#include <stdlib.h>
#include <time.h>
#include "graph/internal/plan.h"
#include "kiln/gradcheck.h"
#include "testutil.h"

#define B 3

static kiln_step_fn real_bwd_weight;

/* the test-only op: linear's backward-weight, 25 % too large */
static kiln_status wrong_bwd_weight(const kiln_step *s, const kiln_run_ctx *rc) {
    kiln_status st = real_bwd_weight(s, rc);
    double *dw = s->out[0].data;
    for (int64_t i = 0; i < s->out[0].numel; i++) dw[i] *= 1.25;
    return st;
}

static const kiln_gradcheck_tensor *find(const kiln_gradcheck_result *r, const char *name) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->t[i].name, name)) return &r->t[i];
    return NULL;
}

static void wrong_backward(void) {
    kiln_graph *g = kiln_graph_new();
    int64_t xs[2] = {KILN_BATCH, 6}, ys[1] = {KILN_BATCH};
    kiln_value x = kiln_input(g, "x", KILN_F32, 2, xs), y = kiln_input(g, "y", KILN_I32, 1, ys);
    kiln_value h = kiln_nn_linear(g, "fc1", x, 6, 5, 1);
    h = kiln_nn_linear(g, "fc2", kiln_tanh(g, h), 5, 3, 1);
    kiln_value loss = kiln_nll_loss(g, kiln_log_softmax(g, h), y);
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_params_new_on(g, "ref", &P));
    if (!P) return;
    kiln_params_init(P, 3);
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    o.max_batch = B;
    o.fuse = 0;
    o.reuse_memory = 0;
    CHECK_OK(kiln_compile(g, P, &loss, 1, &o, &pl));
    if (!pl) return;
    float xv[B * 6];
    int32_t yv[B] = {0, 2, 1};
    tu_fill(xv, B * 6, -1, 1);
    CHECK_OK(kiln_plan_bind(pl, x, xv));
    CHECK_OK(kiln_plan_bind(pl, y, yv));
    kiln_gradcheck_config c = kiln_gradcheck_defaults();
    c.samples = 1000; /* every element */
    kiln_gradcheck_result r;
    CHECK_OK(kiln_gradcheck_plan(pl, P, B, &c, &r));
    CHECK_MSG(r.n == 4 && !r.failed && r.worst_rel < 1e-6, "right backward: %d tensors, %d failed, worst %g", r.n, r.failed,
              r.worst_rel);
    kiln_gradcheck_result_free(&r);
    /* fc1's backward-weight step gets the wrong kernel */
    kiln_step *s = NULL;
    for (int i = 0; i < pl->lists[0].nsteps; i++)
        if (!strcmp(pl->lists[0].steps[i].name, "fc1:bwd_weight")) s = &pl->lists[0].steps[i];
    CHECK(s != NULL);
    if (s) {
        real_bwd_weight = s->run;
        s->run = wrong_bwd_weight;
        CHECK_OK(kiln_gradcheck_plan(pl, P, B, &c, &r));
        const kiln_gradcheck_tensor *w = find(&r, "fc1.weight"), *b = find(&r, "fc1.bias"), *w2 = find(&r, "fc2.weight");
        CHECK_MSG(r.failed == 1 && w && w->worst_rel > 0.1 && w->checked == 30, "wrong backward: %d failed, fc1.weight %g",
                  r.failed, w ? w->worst_rel : -1);
        CHECK(b && b->worst_rel < 1e-6 && w2 && w2->worst_rel < 1e-6);
        kiln_gradcheck_result_free(&r);
        s->run = real_bwd_weight;
    }
    /* not the reference backend: refused */
    kiln_params *Pc = NULL;
    CHECK_OK(kiln_params_new_on(g, "cpu", &Pc));
    CHECK(kiln_gradcheck_plan(pl, Pc, B, &c, &r) == KILN_ERR_INVALID_ARG);
    kiln_params_free(Pc);
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
}

/* a zoo model at gradcheck's small defaults; tensors 0: all */
static void zoo(const char *model, int tensors, int samples) {
    kiln_gradcheck_config c = kiln_gradcheck_defaults();
    c.model = model;
    c.tensors = tensors;
    c.samples = samples;
    kiln_gradcheck_result r;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kiln_status st = kiln_gradcheck(&c, &r);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK_MSG(st == KILN_OK, "%s: %s", model, kiln_last_error());
    CHECK_MSG(st == KILN_OK && r.batch == (strstr(model, "resnet") && strcmp(model, "resnet20") ? 4 : 2) && !r.failed && r.n > 0 && (!tensors || r.n == tensors), "%s: %d of %d tensors over %g (worst %g)",
              model, r.failed, r.n, c.tol, r.worst_rel);
    printf("%-13s %3d tensors, %4d forward runs, worst relative error %.2e, %.1f s\n", model, r.n, r.runs, r.worst_rel,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    kiln_gradcheck_result_free(&r);
}

int main(void) {
    tu_seed(5);
    wrong_backward();
    zoo("mlp", 0, 4);
    zoo("mlp-deep", 0, 2);
    zoo("gpt", 0, 2);
    zoo("mnist-cnn", 0, 2);
    zoo("mnist-cnn-bn", 0, 1);
    zoo("resnet20", 6, 1);
    /* conv1's gradient comes through every layer's backward: the first and the last tensor check the whole net */
    zoo("resnet18", 3, 1);
    /* resnet34 is resnet18's blocks, more of them: 23 s of the ASan suite for no path of its own; resnet50's
     * bottlenecks are 1x1 and 3x3 convolutions, batch norm and adds, each op under the sanitizers in test_ops
     * (its 7 double forward runs were 23-36 s of the ASan suite) */
    if (!getenv("KILN_SANITIZE")) zoo("resnet34", 2, 1);
    if (!getenv("KILN_SANITIZE")) zoo("resnet50", 2, 1);
    return tu_finish("test_gradcheck");
}
