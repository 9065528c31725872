/* The zoo's gpt against PyTorch (tests/ref/fixtures/gpt_golden, made by
 * tests/ref/make_fixtures.py with torch 1.13): a 2-layer GPT with random
 * weights on a batch of 2 windows gives PyTorch's loss and every parameter's
 * gradient (the tied wte's from both its uses), and 3 AdamW steps with
 * clipping give the same losses, on the ref backend (double) and the cpu
 * backend (float, within 1e-4 relative). The names and shapes are Hugging
 * Face GPT-2's (Conv1D weights [in, out]). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backends/internal/backend.h"
#include "kiln/graph.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "kiln/safetensors.h"
#include "kiln/tensor.h"
#include "testutil.h"
#include "golden.h"
#include "simt/simt_backend.h"

#define FIXTURE "ref/fixtures/gpt_golden.safetensors"

static kiln_model_opts golden_opts(kiln_st_file *f) {
    kiln_model_opts o = {0};
    o.gpt = (kiln_gpt_config){(int)atoi(kiln_st_meta(f, "layers")), (int)atoi(kiln_st_meta(f, "heads")),
                              (int)atoi(kiln_st_meta(f, "dim")), (int)atoi(kiln_st_meta(f, "block")),
                              (int)atoi(kiln_st_meta(f, "vocab")), 0};
    return o;
}

static void run_backend(kiln_st_file *f, const char *backend) {
    int ref = !strcmp(backend, "ref");
    double tol = ref ? 1e-6 : 1e-4; /* ref: the f32 storage of PyTorch's float64 gradients */
    const kiln_tensor *tx = kiln_st_find(f, "x"), *ty = kiln_st_find(f, "y"), *tl = kiln_st_find(f, "losses");
    if (!tx || !ty || !tl) {
        CHECK_MSG(0, "%s: x, y or losses missing", FIXTURE);
        return;
    }
    const double *losses = tl->data;
    int64_t B = tx->shape[0];
    kiln_model_opts mo = golden_opts(f);
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    kiln_optim *o = NULL;
    CHECK_OK(kiln_model_build_ex(g, "gpt", &mo, &m));
    CHECK_OK(kiln_params_new_on(g, backend, &P));
    if (!P) goto out;
    CHECK_MSG(kiln_params_count(P) == 4 + 12 * mo.gpt.layers, "%d parameter tensors (want wte, wpe, 12 per block, ln_f)",
              kiln_params_count(P));
    load_weights(f, P, ref);
    kiln_compile_opts co = kiln_compile_defaults();
    co.training = 1;
    co.max_batch = B;
    co.backend = backend;
    kiln_value outs[2] = {m.loss, m.out};
    CHECK_OK(kiln_compile(g, P, outs, 2, &co, &pl));
    if (!pl) goto out;
    CHECK_OK(kiln_plan_bind(pl, m.x, tx->data));
    CHECK_OK(kiln_plan_bind(pl, m.y, ty->data));
    kiln_optim_config oc = kiln_optim_defaults(KILN_OPT_ADAMW);
    oc.lr = 1e-3f;
    oc.beta2 = 0.95f;
    oc.weight_decay = 0;
    CHECK_OK(kiln_optim_new(&oc, P, &o));
    if (o) kiln_optim_set_clip(o, 1.0);
    for (int step = 0; o && step < 3; step++) {
        kiln_plan_set_step(pl, (uint64_t)step);
        CHECK_OK(kiln_plan_run(pl, B));
        double l = kiln_plan_loss(pl), e = fabs(l - losses[step]) / fabs(losses[step]);
        /* after step 1 the ref plan differs by the f32 hyperparameters (lr 1e-3f) */
        CHECK_MSG(e <= (ref ? (step ? 1e-6 : 1e-9) : 1e-4), "%s step %d: loss %.10g, PyTorch %.10g", backend, step + 1, l,
                  losses[step]);
        if (step == 0) check_grads(f, P, "gpt", backend, ref, tol, l, losses[0]);
        CHECK_OK(kiln_optim_step(o));
    }
out:
    kiln_optim_free(o);
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
}

/* HF GPT-2's names and shapes: every fixture weight matches a parameter */
static void test_names(kiln_st_file *f) {
    kiln_model_opts mo = golden_opts(f);
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL;
    CHECK_OK(kiln_model_build_ex(g, "gpt", &mo, &m));
    CHECK_OK(kiln_params_new_on(g, "cpu", &P));
    if (P) {
        int64_t shape[8];
        int i = kiln_params_find(P, "h.1.attn.c_attn.weight");
        CHECK(i >= 0 && kiln_params_shape(P, i, shape) == 2 && shape[0] == 16 && shape[1] == 48);
        CHECK(kiln_params_find(P, "lm_head.weight") < 0); /* tied to wte */
        int n = 0;
        for (int k = 0; k < kiln_params_count(P); k++) {
            char name[128];
            snprintf(name, sizeof name, "w.%s", kiln_params_name(P, k));
            const kiln_tensor *t = kiln_st_find(f, name);
            n += t && kiln_tensor_numel(t) == kiln_params_numel(P, k);
        }
        CHECK_MSG(n == kiln_params_count(P), "%d of %d parameters named and sized as HF GPT-2's", n, kiln_params_count(P));
    }
    kiln_params_free(P);
    kiln_graph_free(g);
}

/* a bad shape is refused naming the flags */
static void test_bad_config(void) {
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_model_opts mo = {0};
    mo.gpt = (kiln_gpt_config){2, 3, 16, 8, 256, 0};
    CHECK(kiln_model_build_ex(g, "gpt", &mo, &m) == KILN_ERR_INVALID_ARG);
    CHECK(strstr(kiln_last_error(), "--heads 3") != NULL);
    kiln_graph_free(g);
}

/* one gpt's loss and gradients on the ref backend: seq 0 (the block) or shorter, over P */
static double short_run(kiln_params *P, int seq, int64_t B, const float *x, const int32_t *y, double *grad) {
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_model_opts mo = {0};
    mo.gpt = (kiln_gpt_config){2, 2, 16, 8, 32, seq};
    kiln_plan *pl = NULL;
    double loss = NAN;
    CHECK_OK(kiln_model_build_ex(g, "gpt", &mo, &m));
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    o.max_batch = B;
    if (kiln_graph_status(g) == KILN_OK) CHECK_OK(kiln_compile(g, P, &m.loss, 1, &o, &pl));
    if (pl) {
        kiln_plan_bind(pl, m.x, x);
        kiln_plan_bind(pl, m.y, y);
        CHECK_OK(kiln_plan_run(pl, B));
        loss = kiln_plan_loss(pl);
        memcpy(grad, kiln_params_grad(P), sizeof(double) * (size_t)kiln_params_total(P));
    }
    kiln_plan_free(pl);
    kiln_graph_free(g);
    return loss;
}

/* --batch-tokens' plans: a gpt over 5 positions maps onto the parameters of
 * the 8-position one (wpe keeps 8 rows) and gives the loss and every gradient
 * of the 8-position gpt on the same tokens padded with -1 labels (causal
 * attention: padding after a sequence changes nothing before it); a graph of
 * other parameter shapes is refused */
static void test_shorter_sequences(void) {
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_model_opts mo = {0};
    mo.gpt = (kiln_gpt_config){2, 2, 16, 8, 32, 0};
    kiln_params *P = NULL;
    CHECK_OK(kiln_model_build_ex(g, "gpt", &mo, &m));
    CHECK_OK(kiln_params_new(g, KILN_F64, &P));
    if (!P) return;
    kiln_params_init(P, 5);
    enum { B = 3, T = 5 };
    float xs[B * T], xl[B * 8];
    int32_t ys[B * T], yl[B * 8];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < 8; t++) {
            int in = t < T;
            xl[b * 8 + t] = in ? (float)tu_int(0, 31) : (float)tu_int(0, 31); /* padding's inputs are anything */
            yl[b * 8 + t] = in ? (int32_t)tu_int(0, 31) : -1;
            if (in) xs[b * T + t] = xl[b * 8 + t], ys[b * T + t] = yl[b * 8 + t];
        }
    ys[2] = yl[2] = -1; /* a padded position inside a short sequence too */
    int64_t n = kiln_params_total(P);
    double *gs = calloc((size_t)n, 8), *gl = calloc((size_t)n, 8);
    double ls = short_run(P, T, B, xs, ys, gs), ll = short_run(P, 0, B, xl, yl, gl);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(gs[i] - gl[i]));
    CHECK_MSG(fabs(ls - ll) < 1e-12 && worst < 1e-12 && ls > 0, "5 positions: loss %.15g, 8 padded: %.15g, gradients apart by %g",
              ls, ll, worst);
    free(gs);
    free(gl);
    kiln_graph *g2 = kiln_graph_new();
    mo.gpt.dim = 32;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_model_build_ex(g2, "gpt", &mo, &m));
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    CHECK(kiln_compile(g2, P, &m.loss, 1, &o, &pl) == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "another graph"));
    kiln_plan_free(pl);
    kiln_graph_free(g2);
    kiln_params_free(P);
    kiln_graph_free(g);
}

int main(void) {
    kiln_st_file *f = NULL;
    char why[192];
    CHECK_OK(kiln_st_open(FIXTURE, &f));
    if (f) {
        test_names(f);
        run_backend(f, "ref");
        run_backend(f, "cpu");
        CHECK_OK(kiln_test_simt_register()); /* the CUDA backend's own kernels on the host (tests/simt/) */
        run_backend(f, "simt");
        const kiln_backend *cuda = kiln_backend_get("cuda");
        if (cuda && kiln_backend_available(cuda, why, sizeof why)) run_backend(f, "cuda");
        else printf("test_gpt: the cuda backend skipped: %s\n", cuda ? why : "not built");
        kiln_st_close(f);
    }
    test_bad_config();
    test_shorter_sequences();
    return tu_finish("test_gpt");
}
