/* The CUDA backend on a GPU (skipped, exit 77, without one; the op harness
 * test_ops checks every op of the table on it against the double reference):
 *   - golden: PyTorch's mnist-cnn weights and batch, five Adadelta steps on
 *     the GPU, losses and log-probabilities within 1e-4 of PyTorch's;
 *   - a captured CUDA graph replays exactly what launching the steps one by
 *     one computes (bit for bit), and two identical runs are bit-identical
 *     (cuDNN's deterministic algorithms are preferred when timing);
 *   - the GPU trains as the cpu does, within float rounding (mnist-cnn-bn,
 *     AdamW, clipping: batch norm buffers and optimizer state on the device);
 *   - a GPU checkpoint resumes on the cpu and on the GPU, both continuing as
 *     the straight run does;
 *   - a target outside the classes is reported at the read-out, and with
 *     late read-outs at the taking of its own run's loss;
 *   - the trainer reading each loss a step late (the default) trains as
 *     waiting for each does (--sync-loss): the same losses and parameters;
 *   - fp16 tensor-core math with the gradient scaler trains as fp32 does,
 *     within 5 % of its loss after 100 steps;
 *   - NCCL, where installed, sums and broadcasts in place and in order as a
 *     world of one. */
#include <math.h>
#include <unistd.h>
#include "kiln/graph.h"
#include "testutil.h"
#ifndef KILN_HAVE_CUDA
int main(void) {
    printf("test_cuda: skipped: the CUDA backend was not built (no nvcc or cuDNN)\n");
    return 77;
}
#else
#include "backends/cuda/internal/cuda.h"
#include "kiln/graph.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "kiln/safetensors.h"
#include "kiln/train.h"
#include "testutil.h"
#include "train/internal/checkpoint.h"

#define FX "ref/fixtures/"

/* ---- golden ---- */
/* precision 0 (fp32) within 1e-4 of PyTorch's fp32 run; TF32 and bf16 tensor-core math within their rounding */
static void test_golden(int precision, double tol) {
    static const char *names[] = {"highest", "high", "medium"};
    kiln_st_file *f = NULL;
    CHECK_OK(kiln_st_open(FX "mnist_golden.safetensors", &f));
    if (!f) return;
    const kiln_tensor *tx = kiln_st_find(f, "x"), *ty = kiln_st_find(f, "y"), *tl = kiln_st_find(f, "logp0"),
                      *losses = kiln_st_find(f, "losses");
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    kiln_optim *o = NULL;
    CHECK_OK(kiln_model_build(g, "mnist-cnn", &m));
    CHECK_OK(kiln_params_new_on(g, "cuda", &P));
    CHECK_OK(kiln_checkpoint_load_params(P, FX "state_dict_pt.safetensors"));
    kiln_compile_opts co = kiln_compile_defaults();
    co.training = 1;
    co.max_batch = 64;
    co.dropout_off = 1;
    co.matmul_precision = precision;
    kiln_value outs[2] = {m.loss, m.out};
    CHECK_OK(kiln_compile(g, P, outs, 2, &co, &pl));
    kiln_optim_config oc = kiln_optim_defaults(KILN_OPT_ADADELTA);
    oc.lr = 1.0f;
    CHECK_OK(kiln_optim_new(&oc, P, &o));
    if (!pl || !o || !tx || !ty || !tl || !losses) goto out;
    kiln_plan_bind(pl, m.x, tx->data);
    kiln_plan_bind(pl, m.y, ty->data);
    for (int s = 0; s < 5; s++) {
        kiln_plan_set_step(pl, (uint64_t)s);
        CHECK_OK(kiln_plan_run(pl, 64));
        double l = kiln_plan_loss(pl), want = ((const double *)losses->data)[s], e = fabs(l - want) / fabs(want);
        CHECK_MSG(e <= tol, "golden on the GPU (%s): step %d loss %.8f, PyTorch %.8f (relative error %.3g)", names[precision],
                  s + 1, l, want, e);
        printf("golden cuda %s step %d: loss %.8f PyTorch %.8f relative error %.2e\n", names[precision], s + 1, l, want, e);
        if (s == 0) {
            float lp[640];
            CHECK_OK(kiln_plan_read(pl, m.out, lp, 640));
            double worst = 0;
            for (int i = 0; i < 640; i++)
                worst = fmax(worst, fabs(lp[i] - ((const float *)tl->data)[i]) / (fabs(((const float *)tl->data)[i]) + 1e-3));
            CHECK_MSG(worst <= tol, "golden on the GPU (%s): logp0 off by %.3g", names[precision], worst);
            printf("golden cuda %s logp0: max relative error %.2e\n", names[precision], worst);
        }
        CHECK_OK(kiln_optim_step(o));
    }
out:
    kiln_optim_free(o);
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
    kiln_st_close(f);
}

/* ---- n steps of a model on a backend: the final parameters and losses, host copies ---- */
typedef struct {
    const char *backend, *model, *save, *resume;
    int steps;
    kiln_optim_kind opt;
    int dropout_off;
} run_spec;

static float *train(const run_spec *r, double *losses) {
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL;
    kiln_optim *o = NULL;
    kiln_plan *pl = NULL;
    float *out = NULL, *x = NULL;
    int32_t *y = NULL;
    CHECK_OK(kiln_model_build(g, r->model, &m));
    CHECK_OK(kiln_params_new_on(g, r->backend, &P));
    if (!P) goto done;
    kiln_params_init(P, 5);
    kiln_optim_config oc = kiln_optim_defaults(r->opt);
    CHECK_OK(kiln_optim_new(&oc, P, &o));
    kiln_optim_set_clip(o, 1.0);
    kiln_ckpt_state cs = {0};
    if (r->resume) CHECK_OK(kiln_checkpoint_resume(r->resume, P, o, &cs));
    kiln_compile_opts co = kiln_compile_defaults();
    co.training = 1;
    co.max_batch = 16;
    co.dropout_off = r->dropout_off;
    CHECK_OK(kiln_compile(g, P, &m.loss, 1, &co, &pl));
    x = kiln_alloc(16 * 784 * 4);
    y = kiln_alloc(16 * 4);
    for (int s = (int)cs.step; pl && s < r->steps; s++) {
        tu_seed((uint64_t)s + 1); /* the same batch for step s on every backend */
        tu_fill(x, 16 * 784, -1, 2);
        for (int i = 0; i < 16; i++) y[i] = (int32_t)tu_int(0, 9);
        kiln_plan_bind(pl, m.x, x);
        kiln_plan_bind(pl, m.y, y);
        kiln_plan_set_step(pl, (uint64_t)s);
        CHECK_OK(kiln_plan_run(pl, 16));
        if (losses) losses[s] = kiln_plan_loss(pl);
        CHECK_OK(kiln_optim_step(o));
    }
    if (r->save) {
        kiln_ckpt_state st = {.step = r->steps, .batch_size = 16, .accumulate = 1, .lr = oc.lr, .optim_steps = kiln_optim_steps(o)};
        snprintf(st.model, sizeof st.model, "%s", r->model);
        snprintf(st.optimizer, sizeof st.optimizer, "%s", kiln_optim_name(r->opt));
        snprintf(st.backend, sizeof st.backend, "%s", r->backend);
        CHECK_OK(kiln_checkpoint_save(r->save, P, o, &st));
    }
    out = malloc((size_t)kiln_params_total(P) * 4);
    CHECK_OK(kiln_params_read(P, out));
done:
    kiln_free(x);
    kiln_free(y);
    kiln_plan_free(pl);
    kiln_optim_free(o);
    kiln_params_free(P);
    kiln_graph_free(g);
    return out;
}

static int64_t total_of(const char *model) {
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL;
    int64_t n = 0;
    if (kiln_model_build(g, model, &m) == KILN_OK && kiln_params_new(g, KILN_F32, &P) == KILN_OK) n = kiln_params_total(P);
    kiln_params_free(P);
    kiln_graph_free(g);
    return n;
}

static double max_rel(const float *a, const float *b, int64_t n) {
    double num = 0, den = 1e-3;
    for (int64_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return num / den;
}

static void test_graphs_and_determinism(void) {
    int64_t n = total_of("mnist-cnn");
    run_spec r = {"cuda", "mnist-cnn", NULL, NULL, 8, KILN_OPT_ADADELTA, 0}; /* dropout on: the RNG counter changes per step */
    double la[8], lb[8], lc[8];
    float *a = train(&r, la), *b = train(&r, lb);
    kiln_cuda_set_graphs(0);
    float *c = train(&r, lc);
    kiln_cuda_set_graphs(1);
    CHECK_MSG(a && b && memcmp(a, b, (size_t)n * 4) == 0, "two identical GPU runs are bit-identical");
    CHECK_MSG(a && c && memcmp(a, c, (size_t)n * 4) == 0, "graph replay computes what launching step by step does");
    CHECK_MSG(memcmp(la, lc, sizeof la) == 0, "graph replay: the same losses");
    /* dropout masks as the cpu draws them: with SGD (Adadelta's normalised steps amplify float
     * rounding on near-zero gradients) every step's loss stays within float rounding of the cpu's;
     * a different mask would move a loss by about 1e-2 */
    double ld[8], le[8];
    float *d = train(&(run_spec){"cpu", "mnist-cnn", NULL, NULL, 8, KILN_OPT_SGD, 0}, ld);
    float *e = train(&(run_spec){"cuda", "mnist-cnn", NULL, NULL, 8, KILN_OPT_SGD, 0}, le);
    double worst = 0;
    for (int s = 0; s < 8; s++) worst = fmax(worst, fabs(ld[s] - le[s]) / fabs(ld[s]));
    CHECK_MSG(worst <= 1e-5, "mnist-cnn with dropout (SGD), GPU against cpu: a loss off by %.3g", worst);
    double pe = d && e ? max_rel(e, d, n) : 1;
    CHECK_MSG(pe <= 1e-4, "mnist-cnn with dropout (SGD), GPU against cpu: parameters off by %.3g", pe);
    printf("mnist-cnn 8 steps (dropout, SGD): GPU against cpu: losses %.2e, parameters %.2e\n", worst, pe);
    free(a), free(b), free(c), free(d), free(e);
}

static void test_resume_across(void) {
    char dir[] = "/tmp/kiln_test_cuda.XXXXXX", ck[128];
    if (!mkdtemp(dir)) return;
    snprintf(ck, sizeof ck, "%s/gpu.safetensors", dir);
    int64_t n = total_of("mnist-cnn-bn");
    float *cpu = train(&(run_spec){"cpu", "mnist-cnn-bn", NULL, NULL, 9, KILN_OPT_ADAMW, 1}, NULL);
    float *gpu = train(&(run_spec){"cuda", "mnist-cnn-bn", NULL, NULL, 9, KILN_OPT_ADAMW, 1}, NULL);
    float *part = train(&(run_spec){"cuda", "mnist-cnn-bn", ck, NULL, 6, KILN_OPT_ADAMW, 1}, NULL);
    float *on_gpu = train(&(run_spec){"cuda", "mnist-cnn-bn", NULL, ck, 9, KILN_OPT_ADAMW, 1}, NULL);
    float *on_cpu = train(&(run_spec){"cpu", "mnist-cnn-bn", NULL, ck, 9, KILN_OPT_ADAMW, 1}, NULL);
    double e1 = cpu && gpu ? max_rel(gpu, cpu, n) : 1, e2 = on_cpu && gpu ? max_rel(on_cpu, gpu, n) : 1;
    CHECK_MSG(e1 <= 2e-3, "mnist-cnn-bn, AdamW: GPU against cpu off by %.3g", e1);
    CHECK_MSG(gpu && on_gpu && memcmp(gpu, on_gpu, (size_t)n * 4) == 0, "a GPU checkpoint resumed on the GPU = 9 steps straight");
    CHECK_MSG(e2 <= 1e-3, "a GPU checkpoint resumed on the cpu: off by %.3g from the GPU's straight run", e2);
    printf("mnist-cnn-bn 9 steps (adamw, clip): GPU vs cpu %.2e; GPU checkpoint resumed on cpu vs GPU %.2e\n", e1, e2);
    free(cpu), free(gpu), free(part), free(on_gpu), free(on_cpu);
    unlink(ck);
    rmdir(dir);
}

/* a target out of range is reported at the read-out; with late read-outs at the taking of its own run's loss,
 * the next run's loss unharmed */
static void test_bad_target(void) {
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_model_build(g, "mlp", &m));
    CHECK_OK(kiln_params_new_on(g, "cuda", &P));
    kiln_compile_opts co = kiln_compile_defaults();
    co.training = 1;
    co.max_batch = 4;
    CHECK_OK(kiln_compile(g, P, &m.loss, 1, &co, &pl));
    static float x[4 * 784];
    int32_t bad[4] = {1, 2, 12, 3}, good[4] = {1, 2, 4, 3};
    tu_fill(x, 4 * 784, 0, 1);
    if (pl) {
        kiln_plan_bind(pl, m.x, x);
        kiln_plan_bind(pl, m.y, bad);
        kiln_status st = kiln_plan_run(pl, 4);
        CHECK_MSG(st == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "target 2 is 12"), "bad target: %s", kiln_last_error());
        kiln_plan_bind(pl, m.y, good);
        CHECK_OK(kiln_plan_run(pl, 4)); /* the error was reported once, and the plan still runs */
        double now = kiln_plan_loss(pl), late, none;
        CHECK_MSG(kiln_plan_set_late_loss(pl, 1), "cuda reads losses late");
        kiln_plan_bind(pl, m.y, bad);
        CHECK_OK(kiln_plan_run(pl, 4));
        kiln_plan_bind(pl, m.y, good);
        CHECK_OK(kiln_plan_run(pl, 4));
        uint64_t t = kiln_plan_ticket(pl);
        CHECK_MSG(kiln_plan_take_loss(pl, t - 1, &none) == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "target 2 is 12"),
                  "late bad target: %s", kiln_last_error());
        CHECK_OK(kiln_plan_take_loss(pl, t, &late));
        CHECK_MSG(late == now, "the next run's loss taken late %.9g, at once %.9g", late, now);
    }
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
}

/* a short mnist-cnn run on the GPU (no evaluation) */
static kiln_train_config gpu_run(int64_t batch, int64_t steps) {
    kiln_train_config c = kiln_train_defaults();
    c.model = "mnist-cnn";
    c.device = "cuda";
    c.batch_size = batch;
    c.max_steps = steps;
    c.test = 0;
    return c;
}

/* the trainer on the GPU: each loss waited for, read a step late, and late with the batches (1.6 MB at 512)
 * copied on the compute stream instead of the copy stream: the same figures */
static void test_trainer_late(void) {
    kiln_train_result r[3];
    for (int k = 0; k < 3; k++) {
        kiln_train_config c = gpu_run(512, 40);
        c.sync_loss = k == 0;
        kiln_cuda_set_copy_stream(k != 2);
        CHECK_OK(kiln_train(&c, &r[k]));
    }
    kiln_cuda_set_copy_stream(1);
    CHECK_MSG(r[0].final_loss == r[1].final_loss && r[0].steps == r[1].steps, "late read-outs: final loss %.9g, "
              "waited for %.9g", r[1].final_loss, r[0].final_loss);
    CHECK_MSG(r[1].final_loss == r[2].final_loss, "copy stream: final loss %.9g, compute stream %.9g", r[1].final_loss,
              r[2].final_loss);
    printf("mnist-cnn 40 steps of 512 on the GPU, images/s: %.0f each loss waited for, %.0f read a step late, %.0f "
           "late without the copy stream\n", r[0].images_per_s, r[1].images_per_s, r[2].images_per_s);
}

/* fp16 tensor-core math with the gradient scaler: trains as fp32 does, within fp16's rounding */
static void test_fp16(void) {
    kiln_train_result r[2];
    for (int k = 0; k < 2; k++) {
        kiln_train_config c = gpu_run(64, 100);
        c.precision = k ? KILN_PRECISION_FP16 : KILN_PRECISION_FP32;
        CHECK_OK(kiln_train(&c, &r[k]));
    }
    double rel = fabs(r[1].final_loss - r[0].final_loss) / r[0].final_loss;
    CHECK_MSG(r[1].loss_scale > 0 && rel < 0.05, "fp16 with the scaler: final loss %.4f against fp32's %.4f (scale %g, %lld "
              "skipped)", r[1].final_loss, r[0].final_loss, r[1].loss_scale, (long long)r[1].skipped_updates);
    printf("mnist-cnn 100 steps: fp32 %.4f (%.0f images/s), fp16 %.4f (%.0f images/s; scale %g, %lld updates skipped)\n",
           r[0].final_loss, r[0].images_per_s, r[1].final_loss, r[1].images_per_s, r[1].loss_scale,
           (long long)r[1].skipped_updates);
}

/* NCCL (src/backends/cuda/nccl.c) on this GPU as a world of one: loaded, a communicator opened from an id
 * made here, a sum and a broadcast in place on its own stream behind the compute stream's copy (event
 * order: a sum that ran before the copy finished would leave device memory's NaNs), the compute stream's
 * copy back after join, closed. Several ranks need several GPUs; tests/test_ddp_device.sh checks the rest
 * of the path on the cpu. Skipped, said, where NCCL is not installed. */
static void test_nccl_one_rank(const kiln_backend *be) {
    const kiln_coll_ops *co = &kiln_cuda_nccl;
    char why[200];
    if (!co->load(why, sizeof why)) {
        printf("test_cuda: NCCL not checked: %s\n", why);
        return;
    }
    enum { N = 1 << 22 };
    float *h = malloc(N * sizeof *h), *back = malloc(N * sizeof *back), *d = be->alloc(N * sizeof *d);
    unsigned char id[KILN_COLL_ID_BYTES];
    void *comm = NULL;
    CHECK_OK(co->make_id(id));
    CHECK_OK(co->open(id, 0, 1, &comm));
    if (h && back && d && comm) {
        tu_fill(h, N, -1, 1);
        float nan = NAN;
        for (int i = 0; i < N; i++) back[i] = nan;
        CHECK_OK(be->copy(d, back, N * sizeof *d, 0));
        CHECK_OK(be->copy(d, h, N * sizeof *d, 1));
        CHECK_OK(co->sum_f32(comm, d, N));
        CHECK_OK(co->bcast(comm, d, N * sizeof *d, 0));
        CHECK_OK(co->join(comm));
        CHECK_OK(co->wait(comm, 60)); /* the host's bounded wait: a world of one ends at once */
        CHECK_OK(be->copy(back, d, N * sizeof *d, 0));
        int differ = 0;
        for (int i = 0; i < N; i++) differ += memcmp(&h[i], &back[i], sizeof *h) != 0;
        CHECK_MSG(differ == 0, "NCCL, one rank: %d of %d values changed by a sum and a broadcast", differ, N);
        printf("test_cuda: %s, one rank: a sum and a broadcast of %d floats in place, in order\n", co->version(), N);
    }
    co->close(comm);
    be->free(d);
    free(h), free(back);
}

int main(void) {
    char why[192];
    /* cuBLASLt is opened, not linked: its functions are found on any machine */
    const char *blas = kiln_cuda_open_blas();
    if (blas) {
        printf("test_cuda: FAILED: %s\n", blas);
        return 1;
    }
    const kiln_backend *be = kiln_backend_get("cuda");
    if (!be || !kiln_backend_available(be, why, sizeof why)) {
        printf("test_cuda: skipped: %s\n", be ? why : "the CUDA backend was not built");
        return 77;
    }
    tu_seed(20261123);
    if (getenv("KILN_TEST_CUDA_QUICK")) { /* for compute-sanitizer's slow tools: every kernel, a few steps */
        test_golden(0, 1e-4);
        free(train(&(run_spec){"cuda", "mnist-cnn-bn", NULL, NULL, 2, KILN_OPT_ADAMW, 0}, NULL));
        free(train(&(run_spec){"cuda", "mnist-cnn", NULL, NULL, 2, KILN_OPT_SGD, 0}, NULL));
        test_bad_target(); /* not NCCL: its own kernels are not kiln's to check */
        return tu_finish("test_cuda (quick)");
    }
    test_golden(0, 1e-4);
    test_golden(1, 5e-3);
    test_golden(2, 3e-2);
    test_graphs_and_determinism();
    test_resume_across();
    test_bad_target();
    test_trainer_late();
    test_fp16();
    test_nccl_one_rank(be);
    return tu_finish("test_cuda");
}
#endif
