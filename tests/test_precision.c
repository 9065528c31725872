/* The autocast pass (mixed precision, --precision) with and without: a
 * graph holding conv2d, linear, matmul and bmm (forward and backward) and
 * other ops. fp32 marks no step; bf16 marks exactly the matmul-class steps
 * (the op table's bf16_in) and changes the loss and gradients a little, not
 * a lot; auto leaves no step undecided on the cpu (each timed fp32 or bf16)
 * and means fp32 on the reference backend; a bad precision is refused naming
 * it. Parameters and gradients stay f32 throughout (master weights). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kiln/graph.h"
#include "testutil.h"

#define B 4

static const char *const matmul_class[] = {"conv2d", "conv2d_bwd_data", "conv2d_bwd_weight", "linear", "linear_bwd_data",
                                           "linear_bwd_weight", "matmul", "matmul_bwd_data", "matmul_bwd_weight",
                                           "bmm", "bmm_bwd"};

static int is_matmul_class(const char *op) {
    for (size_t i = 0; i < sizeof matmul_class / sizeof *matmul_class; i++)
        if (!strcmp(op, matmul_class[i])) return 1;
    return 0;
}

typedef struct {
    kiln_graph *g;
    kiln_value x, t, loss;
} net;

/* img -> conv -> relu -> linear -> cross entropy, plus the logits through matmul and bmm into the loss */
static net build(void) {
    net n = {.g = kiln_graph_new()};
    kiln_graph *g = n.g;
    n.x = kiln_input(g, "x", KILN_F32, 4, (int64_t[]){KILN_BATCH, 3, 8, 8});
    n.t = kiln_input(g, "t", KILN_I32, 1, (int64_t[]){KILN_BATCH});
    kiln_value w = kiln_param(g, "conv.weight", 4, (int64_t[]){8, 3, 3, 3}, 27);
    kiln_value h = kiln_relu(g, kiln_conv2d(g, n.x, w, kiln_param(g, "conv.bias", 1, (int64_t[]){8}, 27), 1, 1));
    h = kiln_reshape(g, h, 2, (int64_t[]){KILN_BATCH, 512});
    kiln_value y = kiln_linear(g, h, kiln_param(g, "fc.weight", 2, (int64_t[]){10, 512}, 512),
                               kiln_param(g, "fc.bias", 1, (int64_t[]){10}, 512));
    kiln_value z = kiln_matmul(g, y, kiln_param(g, "proj.weight", 2, (int64_t[]){10, 12}, 10), -1);
    z = kiln_reshape(g, z, 3, (int64_t[]){KILN_BATCH, 3, 4});
    kiln_value s = kiln_bmm(g, z, kiln_transpose(g, z, 1, 2));
    n.loss = kiln_add(g, kiln_cross_entropy(g, y, n.t), kiln_sum(g, kiln_mul(g, s, s)));
    return n;
}

typedef struct {
    double loss;
    float *grad;
    int bf16, fp32_matmul, other, undecided;
} outcome;

static kiln_status train_once(net *n, kiln_params *P, const char *backend, int precision, outcome *r) {
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    o.max_batch = B;
    o.backend = backend;
    o.precision = precision;
    o.autotune = 0;
    kiln_plan *pl = NULL;
    kiln_status st = kiln_compile(n->g, P, &n->loss, 1, &o, &pl);
    if (st != KILN_OK) return st;
    static float x[B * 3 * 64];
    static int32_t t[B] = {1, 7, 3, 9};
    tu_seed(5);
    tu_fill(x, B * 3 * 64, -1, 1);
    kiln_plan_bind(pl, n->x, x);
    kiln_plan_bind(pl, n->t, t);
    st = kiln_plan_run(pl, B);
    r->loss = kiln_plan_loss(pl);
    r->grad = malloc((size_t)kiln_params_total(P) * sizeof(float) + 4);
    if (st == KILN_OK && !strcmp(backend, "cpu")) st = kiln_params_grad_read(P, r->grad); /* ref's are f64 */
    for (int i = 0; i < kiln_plan_step_count(pl); i++) {
        kiln_step_info si;
        CHECK_OK(kiln_plan_step_info(pl, i, &si));
        int mc = is_matmul_class(si.op), bf = !strcmp(si.precision, "bf16");
        r->bf16 += bf;
        r->fp32_matmul += mc && !strcmp(si.precision, "fp32");
        r->undecided += !bf && strcmp(si.precision, "fp32");
        CHECK_MSG(mc || !bf, "%s (%s) is bf16 but no matmul-class op", si.name, si.op);
        r->other += !mc;
    }
    kiln_plan_free(pl);
    return st;
}

static kiln_params *params_on(net *n, const char *backend) {
    kiln_params *P = NULL;
    CHECK_OK(kiln_params_new_on(n->g, backend, &P));
    if (P) kiln_params_init(P, 3);
    return P;
}

static void test_with_and_without(void) {
    net n = build();
    CHECK_OK(kiln_graph_status(n.g));
    kiln_params *P = params_on(&n, "cpu");
    if (!P) return;
    outcome f = {0}, b = {0}, a = {0};
    CHECK_OK(train_once(&n, P, "cpu", KILN_PRECISION_FP32, &f));
    CHECK_OK(train_once(&n, P, "cpu", KILN_PRECISION_BF16, &b));
    CHECK_OK(train_once(&n, P, "cpu", KILN_PRECISION_AUTO, &a));
    /* conv2d, its backward-weights (x needs no gradient), linear, matmul and bmm with theirs */
    const int want = 10;
    CHECK_MSG(f.bf16 == 0 && f.fp32_matmul == want && f.undecided == 0, "fp32: %d bf16 steps, %d fp32 matmul-class", f.bf16,
              f.fp32_matmul);
    CHECK_MSG(b.bf16 == want && b.fp32_matmul == 0 && b.other > 5, "bf16: %d bf16 steps (want the %d matmul-class), %d fp32 "
              "matmul-class, %d others", b.bf16, want, b.fp32_matmul, b.other);
    CHECK_MSG(a.undecided == 0 && a.bf16 + a.fp32_matmul == want, "auto: %d undecided, %d bf16 + %d fp32 matmul-class",
              a.undecided, a.bf16, a.fp32_matmul);
    /* bf16 operands move the loss and each gradient tensor by about bf16's epsilon (2^-8), not more, and not zero */
    double dl = fabs(b.loss - f.loss) / fabs(f.loss), worst = 0, moved = 0;
    for (int k = 0; k < kiln_params_count(P); k++) {
        double num = 0, den = 1e-6;
        for (int64_t i = kiln_params_offset(P, k), e = i + kiln_params_numel(P, k); i < e; i++) {
            num = fmax(num, fabs((double)b.grad[i] - f.grad[i]));
            den = fmax(den, fabs((double)f.grad[i]));
        }
        worst = fmax(worst, num / den);
        moved = fmax(moved, num);
    }
    printf("precision: loss fp32 %.7f, bf16 %.7f (%.2g relative); worst gradient difference %.3g of its tensor's largest; "
           "auto chose bf16 for %d of %d\n", f.loss, b.loss, dl, worst, a.bf16, want);
    CHECK_MSG(dl > 0 && dl < 1e-2 && moved > 0 && worst < 0.1, "bf16 against fp32: loss %.3g relative, gradients %.3g", dl, worst);
    free(f.grad), free(b.grad), free(a.grad);
    kiln_params_free(P);
    /* the reference has nothing to time: auto is fp32 there, bf16 rounds like the cpu */
    P = params_on(&n, "ref");
    outcome r = {0}, rb = {0};
    CHECK_OK(train_once(&n, P, "ref", KILN_PRECISION_AUTO, &r));
    CHECK_OK(train_once(&n, P, "ref", KILN_PRECISION_BF16, &rb));
    CHECK_MSG(r.bf16 == 0 && r.undecided == 0 && rb.bf16 == want, "ref: auto %d bf16, %d undecided; bf16 %d", r.bf16,
              r.undecided, rb.bf16);
    CHECK_MSG(fabs(rb.loss - b.loss) < 1e-3 * fabs(b.loss), "bf16 loss cpu %.7f, ref %.7f", b.loss, rb.loss);
    free(r.grad), free(rb.grad);
    kiln_params_free(P);
    kiln_graph_free(n.g);
}

static void test_bad_precision(void) {
    kiln_precision p;
    CHECK(kiln_precision_parse("bf16", &p) == 0 && p == KILN_PRECISION_BF16);
    CHECK(kiln_precision_parse("auto", &p) == 0 && p == KILN_PRECISION_AUTO);
    CHECK(kiln_precision_parse("fp16", &p) == 0 && p == KILN_PRECISION_FP16);
    CHECK(kiln_precision_parse("fp8", &p) != 0 && kiln_precision_parse("BF16", &p) != 0 && kiln_precision_parse(NULL, &p) != 0);
    net n = build();
    kiln_params *P = params_on(&n, "cpu");
    outcome r = {0};
    kiln_status st = P ? train_once(&n, P, "cpu", 7, &r) : KILN_ERR_INVALID_ARG;
    CHECK_MSG(st == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "precision"), "status %d: %s", st, kiln_last_error());
    free(r.grad);
    r = (outcome){0};
    st = P ? train_once(&n, P, "cpu", KILN_PRECISION_FP16, &r) : KILN_ERR_INVALID_ARG; /* no fp16 kernels on the cpu */
    CHECK_MSG(st == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "fp16"), "fp16 on the cpu: status %d: %s", st,
              kiln_last_error());
    free(r.grad);
    kiln_params_free(P);
    kiln_graph_free(n.g);
}

int main(void) {
    test_with_and_without();
    test_bad_precision();
    return tu_finish("test_precision");
}
