/* The cuda backend's autocast convolutions (src/backends/cuda/conv.c: 16-bit
 * channels-last copies, cuDNN's 16-bit output) with the half-storage pass
 * (KILN_CUDA_STORE=half) and without, on simt (and on a GPU when there is
 * one): a small ResNet-like classifier, conv (no bias) -> batch norm -> relu
 * twice, a global average pool, a linear layer and cross-entropy, one
 * forward and backward in bf16 and in fp16. Each convolution's output is read
 * only by its batch norm, forward and backward: the pass stores it in 16 bits
 * (it holds what cuDNN rounded, so batch norm reads the same numbers), the
 * gradients and the loss are the same bits, and exactly the two forward
 * convolutions write 16 bits, and conv2's backward-data (only relu's
 * backward reads its output, as dy), and cross-entropy backward (whose
 * output only the linear's products read), and both batch norms' backward
 * (only their convolution's backward reads dx, as its dy, rounded), and bn1
 * (which rounds its output after a 16-bit convolution, as PyTorch's autocast
 * does: conv2 and relu's backward read it as it is). A
 * convolution with a bias keeps an fp32 output (the bias is added after the
 * rounding). conv2's backward-weight finds dy's copy where its
 * backward-data, the step before, left it (conv.c's dy_kept); conv1 has no
 * backward-data, so its own. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backends/internal/backend.h"
#include "kiln/graph.h"
#include "kiln/nn.h"
#include "simt/simt_backend.h"
#include "testutil.h"

enum { B = 6, C0 = 3, H = 8, C1 = 8, C2 = 12, K = 5, MAXP = 4096 };

typedef struct {
    int halves;      /* steps writing a tensor stored in 16 bits */
    int fwd16, bwd16; /* forward and backward convolution steps on 16-bit copies (kiln inspect's kernel) */
    int kept;         /* backward-weight steps reading the dy copy backward-data left */
    size_t ws;        /* the plan's kernel workspace */
    int nhwc;         /* steps reading or writing a channels-last tensor (KILN_CUDA_LAYOUT=nhwc) */
    int copies;       /* activations the convolution steps copy on every run (kiln inspect's reorders) */
    int reorders;     /* the layout pass's reorder steps (contiguous, grad_copy between layouts) */
    double loss;
    int64_t n;       /* parameters */
    kiln_status st;  /* the compile's */
} result;

static void count_steps(kiln_plan *pl, result *r) {
    for (int i = 0; i < kiln_plan_step_count(pl); i++) {
        kiln_step_info si;
        if (kiln_plan_step_info(pl, i, &si) != KILN_OK || si.nout == 0) continue;
        r->halves += strstr(si.out[0].layout, "16") != NULL;
        int copies = strstr(si.kernel, "NHWC copies") != NULL;
        if (!strcmp(si.op, "conv2d")) r->fwd16 += copies;
        else if (!strncmp(si.op, "conv2d_bwd", 10)) r->bwd16 += copies;
        r->kept += strstr(si.kernel, "dy's kept") != NULL;
        int last = 0;
        for (int k = 0; k < si.nin; k++) last |= !strncmp(si.in[k].layout, "nhwc", 4);
        for (int k = 0; k < si.nout; k++) last |= !strncmp(si.out[k].layout, "nhwc", 4);
        r->nhwc += last;
        if (!strncmp(si.op, "conv2d", 6)) r->copies += si.reorders;
        r->reorders += strstr(si.name, ":reorder") != NULL;
    }
}

/* one forward and backward; conv2 with a bias when `bias` */
static result run(const char *backend, int precision, int bias, float *grads) {
    result r = {-1, 0, 0, 0, 0, 0, 0, 0, 0, 0, KILN_OK};
    kiln_graph *g = kiln_graph_new();
    kiln_value x = kiln_input(g, "x", KILN_F32, 4, (int64_t[]){KILN_BATCH, C0, H, H});
    kiln_value y = kiln_input(g, "y", KILN_I32, 1, (int64_t[]){KILN_BATCH});
    kiln_value h = kiln_relu(g, kiln_nn_batch_norm2d(g, "bn1", kiln_nn_conv2d(g, "conv1", x, C0, C1, 3, 1, 1, 0), C1));
    h = kiln_relu(g, kiln_nn_batch_norm2d(g, "bn2", kiln_nn_conv2d(g, "conv2", h, C1, C2, 3, 2, 1, bias), C2));
    h = kiln_flatten(g, kiln_adaptive_avg_pool2d(g, h, 1, 1), 1);
    kiln_value loss = kiln_cross_entropy(g, kiln_nn_linear(g, "fc", h, C2, K, 1), y);
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_params_new_on(g, backend, &P));
    if (P) {
        kiln_params_init(P, 5);
        kiln_compile_opts o = kiln_compile_defaults();
        o.training = 1, o.max_batch = B, o.backend = backend, o.autotune = 0, o.precision = precision;
        r.st = kiln_compile(g, P, &loss, 1, &o, &pl);
    }
    static float xs[B * C0 * H * H];
    int32_t ys[B];
    tu_seed(57);
    tu_fill(xs, B * C0 * H * H, -2, 2);
    for (int i = 0; i < B; i++) ys[i] = (int32_t)tu_int(0, K - 1);
    if (pl && (r.n = kiln_params_total(P)) <= MAXP) {
        kiln_plan_bind(pl, x, xs);
        kiln_plan_bind(pl, y, ys);
        CHECK_OK(kiln_plan_run(pl, B));
        r.loss = kiln_plan_loss(pl);
        CHECK_OK(kiln_params_grad_read(P, grads));
        r.halves = 0;
        r.ws = kiln_plan_workspace_bytes(pl);
        count_steps(pl, &r);
    }
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
    return r;
}

static void check(const char *backend, int precision, int bias) {
    static float plain[MAXP], half[MAXP];
    const char *old = getenv("KILN_CUDA_STORE");
    char *keep = old ? strdup(old) : NULL;
    unsetenv("KILN_CUDA_STORE");
    result a = run(backend, precision, bias, plain);
    setenv("KILN_CUDA_STORE", "half", 1);
    result b = run(backend, precision, bias, half);
    if (keep) setenv("KILN_CUDA_STORE", keep, 1);
    else unsetenv("KILN_CUDA_STORE");
    free(keep);
    const char *pn = kiln_precision_name(precision);
    /* the forward convolutions' outputs (a bias-free one's), conv2's backward-data output (relu's backward reads it),
     * cross-entropy backward's (only the linear's products read it), the batch norms' dx (their convolutions' dy),
     * bn1's output, rounded after conv1 (conv2 reads it, forward and backward-weight, and relu's backward) and bn2's,
     * rounded after a bias-free conv2 (the average pool and relu's backward read it; after a bias, which conv2 adds in
     * fp32, batch norm does not follow autocast), and the logits, which the linear writes rounded (its bias added
     * before the rounding) and cross-entropy reads both ways */
    int want = (bias ? 1 : 2) + 1 + 1 + 2 + 1 + !bias + 1;
    CHECK_MSG(a.st == KILN_OK && b.st == KILN_OK, "%s %s: compile: %s", backend, pn, kiln_last_error());
    CHECK_MSG(a.halves == 0 && b.halves == want, "%s %s%s: steps writing 16 bits: %d without half storage, %d with (%d)", backend,
              pn, bias ? ", conv2 with a bias" : "", a.halves, b.halves, want);
    CHECK_MSG(a.n > 0 && a.n <= MAXP && a.n == b.n && memcmp(plain, half, (size_t)a.n * 4) == 0 && a.loss == b.loss,
              "%s %s%s: half storage changed the loss (%.9g, %.9g) or the gradients", backend, pn, bias ? ", conv2 with a bias" : "",
              a.loss, b.loss);
    /* conv2's three 16-bit copies, each rounded up to 256 bytes, before cuDNN's own: x 6x8x8x8, w 12x8x3x3, y 6x12x4x4 */
    size_t copies = 6144 + 1792 + 2304;
    CHECK_MSG(a.ws >= copies && b.ws >= copies, "%s %s: kernel workspace %zu and %zu bytes, want at least conv2's copies, %zu",
              backend, pn, a.ws, b.ws, copies);
    CHECK_MSG(a.kept == 1 && b.kept == 1, "%s %s: backward-weight steps reading the dy copy backward-data left: %d and %d (want 1: "
              "conv2's)", backend, pn, a.kept, b.kept);
}

/* A backward direction cuDNN has no 16-bit algorithm for (simt's cuDNN told so) runs in fp32 on descriptors of its
 * own while the forward keeps 16 bits: the run's gradients near the all-16-bit run's, not the same; with half storage
 * asking for a 16-bit backward-data output the compile refuses, naming the switch */
static void check_bwd_fallback(void) {
    static float want[MAXP], got[MAXP];
    const char *old = getenv("KILN_CUDA_STORE"); /* a and b without half storage whatever the environment says */
    char *keep = old ? strdup(old) : NULL;
    unsetenv("KILN_CUDA_STORE");
    result a = run("simt", KILN_PRECISION_BF16, 0, want);
    setenv("KILN_SIMT_CUDNN_FP32_BWD", "1", 1);
    result b = run("simt", KILN_PRECISION_BF16, 0, got);
    setenv("KILN_CUDA_STORE", "half", 1);
    result c = run("simt", KILN_PRECISION_BF16, 0, got);
    if (keep) setenv("KILN_CUDA_STORE", keep, 1);
    else unsetenv("KILN_CUDA_STORE");
    free(keep);
    unsetenv("KILN_SIMT_CUDNN_FP32_BWD");
    double num = 0, den = 0, same = 1;
    for (int64_t i = 0; i < a.n && a.n == b.n; i++) {
        double d = fabs((double)want[i] - got[i]);
        num = d > num ? d : num, den = fabs(want[i]) > den ? fabs(want[i]) : den;
        same = same && want[i] == got[i];
    }
    CHECK_MSG(a.st == KILN_OK && a.fwd16 == 2 && a.bwd16 == 3 && b.st == KILN_OK && b.fwd16 == 2 && b.bwd16 == 0 && b.kept == 0,
              "16-bit convolution steps: %d forward, %d backward; with no 16-bit backward %d and %d (%d keeping dy)", a.fwd16,
              a.bwd16, b.fwd16, b.bwd16, b.kept);
    CHECK_MSG(a.n == b.n && !same && num <= 2e-2 * den, "fp32 backward steps: gradients %.3g of their largest from the 16-bit "
              "ones (want within 2e-2 and not the same bits)", den > 0 ? num / den : num);
    CHECK_MSG(c.st == KILN_ERR_BACKEND && strstr(kiln_last_error(), "KILN_CUDA_STORE"), "half storage of an fp32 backward-data "
              "output: status %d, '%s'", c.st, kiln_last_error());
}

/* KILN_CUDA_LAYOUT=nhwc: the layout pass keeps the conv-bn-relu chain channels last up to the average pool, which
 * reads it so (and its backward writes dx so): no reorder; with half storage the convolutions then copy fewer activations (none of a tensor already 16-bit
 * channels last), and the gradients and loss are the plain layout's but for batch norm's summation order */
static void check_nhwc(int precision, int store) {
    static float plain[MAXP], last[MAXP];
    if (store) setenv("KILN_CUDA_STORE", "half", 1);
    result a = run("simt", precision, 0, plain);
    setenv("KILN_CUDA_LAYOUT", "nhwc", 1);
    result b = run("simt", precision, 0, last);
    unsetenv("KILN_CUDA_LAYOUT");
    unsetenv("KILN_CUDA_STORE");
    double num = 0, den = 1e-6;
    for (int64_t i = 0; i < a.n && a.n == b.n; i++) {
        num = fmax(num, fabs((double)plain[i] - last[i]));
        den = fmax(den, fabs(plain[i]));
    }
    const char *pn = kiln_precision_name(precision), *sn = store ? " with half storage" : "";
    CHECK_MSG(a.st == KILN_OK && b.st == KILN_OK, "%s%s, channels last: compile: %s", pn, sn, kiln_last_error());
    /* fp32 channels-last tensors are still rounded into copies (element by element, not transposed) */
    CHECK_MSG(a.nhwc == 0 && b.nhwc >= 8 && b.reorders == 0 && (store ? b.copies < a.copies : b.copies == a.copies),
              "%s%s: %d steps on channels-last tensors "
              "(plain: %d), %d reorders; convolutions copy %d activations, %d plain", pn, sn, b.nhwc, a.nhwc, b.reorders, b.copies,
              a.copies);
    CHECK_MSG(a.n == b.n && num <= 1e-2 * den && fabs(a.loss - b.loss) <= 1e-3 * fabs(a.loss), "%s%s: channels last moved "
              "the gradients %.3g of their largest, the loss %.9g -> %.9g", pn, sn, num / den, a.loss, b.loss);
}

/* resnet18 (16x16, batch 2, one training step in bf16; every parameter's gradient and the loss) on simt: channels
 * last (with half storage: the convolutions' copies fall from ~2.5 a step to the inputs' roundings) against the
 * plain layout, the pools reading channels last too; and channels last without half
 * storage, which must give the same bits: the residual blocks' outputs, which their fused add and relu round
 * (autocast follows), stored in 16 bits by that fused step, all 8 (the pools read channels-last 16-bit tensors) */
typedef struct {
    double loss;
    float *g;
    int64_t n;
    result r;
    int fused16; /* fused steps writing a 16-bit output */
} resnet_run;

static void resnet_step(int nhwc, int store, resnet_run *out) {
    enum { RB = 2, RS = 16 };
    if (store) setenv("KILN_CUDA_STORE", "half", 1);
    if (nhwc) setenv("KILN_CUDA_LAYOUT", "nhwc", 1);
    kiln_graph *gr = kiln_graph_new();
    kiln_model m;
    kiln_model_opts mo = {.num_classes = 10, .height = RS, .width = RS};
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_model_build_ex(gr, "resnet18", &mo, &m));
    CHECK_OK(kiln_params_new_on(gr, "simt", &P));
    if (P) kiln_params_init(P, 9);
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1, o.max_batch = RB, o.backend = "simt", o.autotune = 0, o.precision = KILN_PRECISION_BF16;
    if (P) CHECK_OK(kiln_compile(gr, P, &m.loss, 1, &o, &pl));
    static float xs[RB * 3 * RS * RS];
    int32_t ys[RB] = {3, 7};
    tu_seed(91);
    tu_fill(xs, RB * 3 * RS * RS, -2, 2);
    if (pl) {
        kiln_plan_bind(pl, m.x, xs);
        kiln_plan_bind(pl, m.y, ys);
        CHECK_OK(kiln_plan_run(pl, RB));
        out->loss = kiln_plan_loss(pl);
        out->n = kiln_params_total(P);
        out->g = malloc((size_t)out->n * 4);
        CHECK_OK(kiln_params_grad_read(P, out->g));
        count_steps(pl, &out->r);
        for (int i = 0; i < kiln_plan_step_count(pl); i++) {
            kiln_step_info si;
            out->fused16 += kiln_plan_step_info(pl, i, &si) == KILN_OK && !strcmp(si.op, "fused") && si.nout > 0 &&
                            strstr(si.out[0].layout, "16") != NULL;
        }
    }
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(gr);
    unsetenv("KILN_CUDA_LAYOUT");
    unsetenv("KILN_CUDA_STORE");
}

static void resnet_nhwc(void) {
    resnet_run v[3] = {{0}}; /* plain and stored, channels last and stored, channels last */
    for (int k = 0; k < 3; k++) resnet_step(k > 0, k < 2, &v[k]);
    int64_t n = v[0].n;
    double num = 0, den = 1e-6;
    int same = v[1].g && v[2].g && v[1].n == v[2].n && !memcmp(v[1].g, v[2].g, (size_t)n * 4) && v[1].loss == v[2].loss;
    for (int64_t i = 0; v[0].g && v[1].g && i < n; i++)
        num = fmax(num, fabs((double)v[0].g[i] - v[1].g[i])), den = fmax(den, fabs(v[0].g[i]));
    CHECK_MSG(v[0].g && v[1].g && num <= 2e-2 * den && fabs(v[0].loss - v[1].loss) <= 1e-3 * fabs(v[0].loss) &&
              v[1].r.nhwc > 50 && v[1].r.copies < v[0].r.copies, "resnet18, bf16, channels last: gradients %.3g of their "
              "largest from the plain layout's, loss %.7g -> %.7g, %d steps channels last, the convolutions' copies %d -> %d",
              num / den, v[0].loss, v[1].loss, v[1].r.nhwc, v[0].r.copies, v[1].r.copies);
    CHECK_MSG(same && v[1].fused16 == 8 && v[2].fused16 == 0 && v[1].r.copies < v[2].r.copies, "resnet18, bf16, channels "
              "last: half storage %s the gradients and loss (%.9g, %.9g without), %d fused steps write 16 bits (want 8), "
              "%d without; the convolutions' copies %d, %d without", same ? "keeps" : "changes", v[1].loss, v[2].loss,
              v[1].fused16, v[2].fused16, v[1].r.copies, v[2].r.copies);
    printf("test_conv_half: resnet18 channels last, bf16: the convolutions copy %d activations a step (%d without half "
           "storage, %d in the plain layout)\n", v[1].r.copies, v[2].r.copies, v[0].r.copies);
    for (int k = 0; k < 3; k++) free(v[k].g);
}

int main(void) {
    CHECK_OK(kiln_test_simt_register());
    const kiln_backend *cu = kiln_backend_get("cuda");
    char why[192] = "the CUDA backend was not built";
    int gpu = cu && kiln_backend_available(cu, why, sizeof why);
    const kiln_backend *simt = kiln_backend_get("simt");
    if (!simt || !simt->kernels[KILN_OP_CONV2D].round_out) { /* conv.c runs on simt only where cuDNN's header was found */
        printf("test_conv_half: skipped: simt has no cuDNN stand-in here\n");
        return 77;
    }
    check_bwd_fallback();
    for (int k = 0; k < 2; k++) {
        int p = k ? KILN_PRECISION_FP16 : KILN_PRECISION_BF16;
        check("simt", p, 0);
        check("simt", p, 1);
        check_nhwc(p, 0);
        check_nhwc(p, 1);
        if (gpu) check("cuda", p, 0);
    }
    /* 16 s of simt here, most of it its threads' emulation at fixed grid sizes: left to the release run (CI's sanitizer
     * run sets KILN_SANITIZE) */
    if (getenv("KILN_SANITIZE")) printf("test_conv_half: resnet18 in channels last skipped under the sanitizers\n");
    else resnet_nhwc();
    if (!gpu) printf("test_conv_half: the GPU's run skipped: %s\n", why);
    return tu_finish("test_conv_half");
}
