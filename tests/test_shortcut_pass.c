/* The option-A shortcut pass (src/graph/pass_subsample_pad.c), with and
 * without it (fusion on and off): resnet20's chain x[:, :, ::2, ::2] ->
 * contiguous -> pad becomes one subsample_pad step each way per downsampling
 * block (2 of them), the training gradients and the loss stay the same on
 * the cpu and the ref backend, and the cpu plan keeps the trunk blocked (no
 * reorder steps where the chain needed plain tensors). The op against
 * PyTorch: tests/test_fixtures.c; against the reference, plain and blocked:
 * tests/test_ops.c. */
#include <stdio.h>
#include "kiln/graph.h"
#include "kiln/nn.h"
#include "kernels/cpu/cpu_internal.h"
#include "testutil.h"
#include "train_once.h"

typedef struct {
    int fwd, bwd, reorders;
    double loss;
} plan_counts;

/* one training step of resnet20 (fuse on or off); the gradients into grad */
static plan_counts train(kiln_graph *g, kiln_params *P, const kiln_model *m, const char *backend, int fuse, int64_t B,
                         const float *x, const int32_t *y, double *grad) {
    plan_counts c = {0, 0, 0, NAN};
    kiln_plan *pl = tu_train_once(g, P, m, backend, fuse, B, x, y, grad);
    if (!pl) return c;
    c.loss = kiln_plan_loss(pl);
    for (int i = 0; i < kiln_plan_step_count(pl); i++) {
        kiln_step_info si;
        if (kiln_plan_step_info(pl, i, &si) != KILN_OK) continue;
        c.fwd += !strcmp(si.op, "subsample_pad");
        c.bwd += !strcmp(si.op, "subsample_pad_bwd");
        c.reorders += strstr(si.name, ":reorder") != NULL;
    }
    kiln_plan_free(pl);
    return c;
}

int main(void) {
    const int64_t B = 4;
    tu_seed(31);
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL, *P64 = NULL;
    CHECK_OK(kiln_model_build(g, "resnet20", &m));
    CHECK_OK(kiln_params_new(g, KILN_F32, &P));
    CHECK_OK(kiln_params_new_on(g, "ref", &P64));
    if (!P || !P64) return tu_finish("test_shortcut_pass");
    int64_t n = kiln_params_total(P);
    float *p = kiln_params_data(P);
    double *q = kiln_params_data(P64);
    for (int64_t i = 0; i < n; i++) q[i] = p[i] = (float)tu_uniform(-0.3, 0.3);
    float *x = malloc((size_t)(B * 3 * 32 * 32) * 4);
    int32_t y[4];
    tu_fill(x, B * 3 * 32 * 32, -1, 2);
    for (int64_t i = 0; i < B; i++) y[i] = (int32_t)tu_int(0, m.num_classes - 1);
    double *g_on = malloc((size_t)n * 8), *g_off = malloc((size_t)n * 8), *r_on = malloc((size_t)n * 8),
           *r_off = malloc((size_t)n * 8);
    plan_counts on = train(g, P, &m, "cpu", 1, B, x, y, g_on), off = train(g, P, &m, "cpu", 0, B, x, y, g_off);
    plan_counts ron = train(g, P64, &m, "ref", 1, B, x, y, r_on), roff = train(g, P64, &m, "ref", 0, B, x, y, r_off);
    CHECK_MSG(on.fwd == 2 && on.bwd == 2 && ron.fwd == 2 && ron.bwd == 2, "subsample_pad steps: cpu %d + %d, ref %d + %d (want 2 + 2)",
              on.fwd, on.bwd, ron.fwd, ron.bwd);
    CHECK_MSG(off.fwd + off.bwd + roff.fwd + roff.bwd == 0, "fusion off: %d subsample_pad steps", off.fwd + off.bwd);
    /* the trunk blocked by 16 (AVX-512) or 8 (src/backends/cpu/cpu.c) */
    CHECK_MSG(on.reorders == 0 && off.reorders > 0, "reorder steps: %d with the pass, %d without", on.reorders, off.reorders);
    CHECK_MSG(on.loss == off.loss && ron.loss == roff.loss, "loss with and without: cpu %.9g %.9g, ref %.17g %.17g", on.loss,
              off.loss, ron.loss, roff.loss);
    /* the copies move the same values and the gradients add the same terms */
    CHECK_MSG(tu_rel_max(g_on, g_off, n) <= 1e-6, "cpu: gradients with and without the pass off by %.3g", tu_rel_max(g_on, g_off, n));
    CHECK_MSG(tu_rel_max(r_on, r_off, n) <= 1e-12, "ref: gradients with and without the pass off by %.3g", tu_rel_max(r_on, r_off, n));
    CHECK_MSG(tu_rel_max(g_on, r_on, n) <= 1e-4, "cpu vs ref with the pass: off by %.3g", tu_rel_max(g_on, r_on, n));
    printf("resnet20 batch %lld: reorder steps %d with the pass, %d without; gradients differ by %.2g (cpu), %.2g (ref); "
           "cpu vs ref %.2g\n", (long long)B, on.reorders, off.reorders, tu_rel_max(g_on, g_off, n), tu_rel_max(r_on, r_off, n),
           tu_rel_max(g_on, r_on, n));
    free(g_on), free(g_off), free(r_on), free(r_off), free(x);
    kiln_params_free(P);
    kiln_params_free(P64);
    kiln_graph_free(g);
    return tu_finish("test_shortcut_pass");
}
