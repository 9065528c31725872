/* Dynamic loss scaling (kiln_optim_set_grad_scaler, src/optim/grad_scaler.c;
 * PyTorch's GradScaler) on cpu, ref and simt (the CUDA backend's kernels on
 * the host: there the update kernels skip themselves), and fp16 operands on
 * the reference backend (src/backends/ref/reduced.c):
 *   - without an overflow the scaler changes no bit: the scale is a power of
 *     2, so scaling and unscaling are exact (AdamW and clipping, 8 steps);
 *   - a scale that overflows the gradients (backward seeded with 2^100) skips the step: parameters and
 *     optimizer state keep their bits, the scale halves, the skip is counted,
 *     and once the scale fits the run is the plain run begun at that batch
 *     (AdamW's bias corrections leave the skipped steps out);
 *   - the scale doubles after growth_interval good steps;
 *   - a checkpoint keeps the scaler's state: resumed = straight, and a bad
 *     kiln.grad_scaler names the file and changes nothing;
 *   - fp16 operands lose small gradients (half's subnormals and its zero),
 *     and the scaled run keeps them: its gradients are closer to fp32's. */
#include <math.h>
#include <unistd.h>
#include "kiln/graph.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "kiln/safetensors.h"
#include "simt/simt_backend.h"
#include "testutil.h"
#include "train/internal/checkpoint.h"

#define B 8

typedef struct {
    const char *backend, *model;
    int steps, from;                   /* batches from..steps-1 (a plain run begun later) */
    const kiln_grad_scaler_config *gs; /* NULL: no scaler */
    const char *save, *resume;         /* a checkpoint after the last step / to begin from */
    int precision;
    double seed;                       /* backward's seed (0: 1): 2^100 makes the scaled seed overflow */
} run_spec;

typedef struct {
    void *params;       /* host copy after the run (f64 on ref) */
    size_t bytes;
    kiln_grad_scaler_info info;
    int bad_steps;      /* skipped steps whose parameters or state changed */
    int skipped_first;  /* the leading steps skipped */
} run_out;

static void batch(int s, float *x, int32_t *y) {
    tu_seed((uint64_t)s + 101);
    tu_fill(x, B * 784, -1, 2);
    for (int i = 0; i < B; i++) y[i] = (int32_t)tu_int(0, 9);
}

/* parameters and optimizer state as host bytes (8 per element: ref keeps its state in double) */
static char *snapshot(kiln_params *P, kiln_optim *o, int64_t *n) {
    int64_t total = kiln_params_total(P);
    int ns = kiln_optim_state_count(o);
    *n = 8 * total * (1 + ns);
    char *h = calloc((size_t)*n, 1);
    if (!h) return NULL;
    CHECK_OK(kiln_params_read(P, (float *)h));
    for (int k = 0; k < ns; k++) CHECK_OK(kiln_optim_state_read(o, k, h + 8 * (k + 1) * total));
    return h;
}

/* AdamW with clipping at 1; each step checked: a skipped one leaves every bit of parameters and state */
static run_out train(const run_spec *r) {
    run_out out = {0};
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL;
    kiln_optim *o = NULL;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_model_build(g, r->model, &m));
    CHECK_OK(kiln_params_new_on(g, r->backend, &P));
    if (!P) return out;
    kiln_params_init(P, 9);
    kiln_optim_config oc = kiln_optim_defaults(KILN_OPT_ADAMW);
    CHECK_OK(kiln_optim_new(&oc, P, &o));
    kiln_optim_set_clip(o, 1.0);
    if (r->gs) CHECK_OK(kiln_optim_set_grad_scaler(o, r->gs));
    kiln_ckpt_state cs = {0};
    if (r->resume) CHECK_OK(kiln_checkpoint_resume(r->resume, P, o, &cs));
    kiln_compile_opts co = kiln_compile_defaults();
    co.training = 1;
    co.max_batch = B;
    co.autotune = 0;
    co.precision = r->precision;
    CHECK_OK(kiln_compile(g, P, &m.loss, 1, &co, &pl));
    if (pl) kiln_plan_set_grad_scaler(pl, kiln_optim_grad_scaler(o));
    static float x[B * 784];
    static int32_t y[B];
    int leading = 1;
    for (int s = r->resume ? (int)cs.step : r->from; pl && s < r->steps; s++) {
        batch(s, x, y);
        kiln_plan_bind(pl, m.x, x);
        kiln_plan_bind(pl, m.y, y);
        kiln_plan_set_step(pl, (uint64_t)s);
        kiln_plan_set_accumulate(pl, 0, r->seed > 0 ? r->seed : 1.0);
        int64_t n;
        char *before = r->gs ? snapshot(P, o, &n) : NULL;
        kiln_grad_scaler_info i0 = {0}, i1 = {0};
        if (r->gs) CHECK_OK(kiln_optim_grad_scaler_read(o, &i0));
        CHECK_OK(kiln_plan_run(pl, B));
        CHECK_OK(kiln_optim_step(o));
        if (r->gs) CHECK_OK(kiln_optim_grad_scaler_read(o, &i1));
        int skipped = r->gs && i1.skipped > i0.skipped;
        if (skipped) {
            char *after = snapshot(P, o, &n);
            out.bad_steps += !after || !before || memcmp(before, after, (size_t)n) != 0;
            out.bad_steps += i1.scale != i0.scale * r->gs->backoff_factor;
            free(after);
        }
        leading = leading && skipped;
        out.skipped_first += leading;
        free(before);
    }
    if (r->save) {
        kiln_ckpt_state st = {.step = r->steps, .batch_size = B, .accumulate = 1, .lr = oc.lr, .optim_steps = kiln_optim_steps(o)};
        snprintf(st.model, sizeof st.model, "%s", r->model);
        snprintf(st.optimizer, sizeof st.optimizer, "adamw");
        CHECK_OK(kiln_checkpoint_save(r->save, P, o, &st));
    }
    if (r->gs) CHECK_OK(kiln_optim_grad_scaler_read(o, &out.info));
    out.bytes = (size_t)kiln_params_total(P) * (strcmp(r->backend, "ref") ? 4 : 8);
    out.params = malloc(out.bytes);
    CHECK_OK(kiln_params_read(P, out.params));
    kiln_plan_free(pl);
    kiln_optim_free(o);
    kiln_params_free(P);
    kiln_graph_free(g);
    return out;
}

static int same(const run_out *a, const run_out *b) {
    return a->params && b->params && a->bytes == b->bytes && !memcmp(a->params, b->params, a->bytes);
}

/* the scaler without an overflow, a scale that overflows at first, and growth, on one backend */
static void test_backend(const char *be) {
    /* ref's double convolutions are slow, and so are simt's under the sanitizers (the skips are the model's
     * update kernels': its convolutions are test_ops' and test_models') */
    const char *model = strcmp(be, "ref") && !(getenv("KILN_SANITIZE") && !strcmp(be, "simt")) ? "mnist-cnn" : "mlp";
    kiln_grad_scaler_config gs = kiln_grad_scaler_defaults();
    run_out plain = train(&(run_spec){be, model, 8, 0, NULL, NULL, NULL, 0, 0});
    run_out scaled = train(&(run_spec){be, model, 8, 0, &gs, NULL, NULL, 0, 0});
    CHECK_MSG(same(&plain, &scaled), "%s: scale 65536 without an overflow gives the plain run's bits", be);
    CHECK_MSG(scaled.info.scale == 65536 && scaled.info.skipped == 0 && scaled.info.tracker == 8,
              "%s: scale %g, %lld skipped, tracker %lld", be, scaled.info.scale, (long long)scaled.info.skipped,
              (long long)scaled.info.tracker);

    /* seeded with 2^100 (clipping and AdamW take such gradients in their stride), 2^40 overflows float; ref
     * computes in double, where nothing overflows: there fp16 operands (half's range ends at 65504) do */
    kiln_grad_scaler_config huge = gs;
    huge.init_scale = ldexpf(1.0f, 40);
    huge.backoff_factor = 1.0f / 16; /* down well below the edge: no later step overflows */
    int ref = !strcmp(be, "ref"), prec = ref ? KILN_PRECISION_FP16 : KILN_PRECISION_FP32;
    double seed = ref ? 1.0 : ldexp(1.0, 100);
    run_out over = train(&(run_spec){be, model, 10, 0, &huge, NULL, NULL, prec, seed});
    int k = over.skipped_first;
    CHECK_MSG(k >= 1 && k < 10 && over.info.skipped == k && over.bad_steps == 0,
              "%s: scale 2^40: %d leading steps skipped (%lld in all), %d skipped steps changed something", be, k,
              (long long)over.info.skipped, over.bad_steps);
    CHECK_MSG(over.info.scale == ldexp(1.0, 40 - 4 * k), "%s: the scale halved per skip: %g", be, over.info.scale);
    /* fp16 without the scaler loses small gradients: the same bits only in fp32 */
    run_out later = train(&(run_spec){be, model, 10, k, ref ? &huge : NULL, NULL, NULL, prec, seed});
    CHECK_MSG(ref || same(&over, &later), "%s: after %d skipped steps, the plain run begun at batch %d", be, k, k);
    printf("%s: scale 2^40 (backoff 1/16) on a seed of %s skipped %d steps%s\n", be, ref ? "1 in fp16" : "2^100", k,
           ref ? "" : ", then trained as the plain run from that batch");

    kiln_grad_scaler_config grow = gs;
    grow.init_scale = 1024;
    grow.growth_interval = 3;
    run_out g = train(&(run_spec){be, model, 7, 0, &grow, NULL, NULL, 0, 0});
    CHECK_MSG(g.info.scale == 4096 && g.info.tracker == 1 && same(&g, &plain) == 0 && g.params,
              "%s: growth every 3 steps: scale %g, tracker %lld", be, g.info.scale, (long long)g.info.tracker);
    run_out plain7 = train(&(run_spec){be, model, 7, 0, NULL, NULL, NULL, 0, 0});
    CHECK_MSG(same(&g, &plain7), "%s: a growing scale changes no bit either", be);
    grow.init_scale = ldexpf(1.0f, 126); /* ref's double math takes it: the scale stops at float's largest power of 2 */
    grow.growth_interval = 1;
    run_out top = ref ? train(&(run_spec){be, model, 3, 0, &grow, NULL, NULL, 0, 0}) : (run_out){0};
    CHECK_MSG(!ref || (top.info.scale == ldexp(1.0, 127) && top.info.skipped == 0), "%s: the scale never grows to inf: %g",
              be, top.info.scale);
    free(top.params);
    free(plain.params), free(scaled.params), free(over.params), free(later.params), free(g.params), free(plain7.params);
}

/* the scaler's state in a checkpoint: resumed = straight; a bad kiln.grad_scaler is refused, naming the file */
static void test_checkpoint(const char *dir) {
    char a[256], bad[256];
    snprintf(a, sizeof a, "%s/half.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    kiln_grad_scaler_config grow = kiln_grad_scaler_defaults();
    grow.init_scale = ldexpf(1.0f, 40);
    grow.growth_interval = 2; /* on a seed of 2^100: skips, growth, skips again */
    double seed = ldexp(1.0, 100);
    run_out straight = train(&(run_spec){"cpu", "mnist-cnn", 40, 0, &grow, NULL, NULL, 0, seed});
    run_out first = train(&(run_spec){"cpu", "mnist-cnn", 25, 0, &grow, a, NULL, 0, seed});
    run_out rest = train(&(run_spec){"cpu", "mnist-cnn", 40, 0, &grow, NULL, a, 0, seed});
    CHECK_MSG(same(&straight, &rest) && straight.info.scale == rest.info.scale && straight.info.skipped == rest.info.skipped &&
              straight.info.tracker == rest.info.tracker, "resumed with the scaler = straight (scale %g / %g, skipped %lld / %lld)",
              straight.info.scale, rest.info.scale, (long long)straight.info.skipped, (long long)rest.info.skipped);
    kiln_st_file *f = NULL;
    CHECK_OK(kiln_st_open(a, &f));
    const char *meta = f ? kiln_st_meta(f, "kiln.grad_scaler") : NULL;
    CHECK_MSG(meta && first.info.skipped > 0, "the checkpoint keeps the scaler: %s", meta ? meta : "(none)");
    /* the same file with its scaler's scale not a power of 2 */
    static const char *const keys[] = {"format", "kiln.format", "kiln.version", "kiln.model", "kiln.optimizer",
                                       "kiln.step", "kiln.epoch", "kiln.next_batch", "kiln.seed", "kiln.batch_size",
                                       "kiln.world_size", "kiln.accumulate", "kiln.lr", "kiln.optim_steps", "kiln.backend",
                                       "kiln.grad_scaler"};
    kiln_st_writer *w = kiln_st_writer_new();
    for (int i = 0; f && w && i < kiln_st_count(f); i++) {
        const kiln_tensor *t = kiln_st_at(f, i);
        CHECK_OK(kiln_st_writer_add(w, kiln_st_name(f, i), t->dtype, t->ndim, t->shape, t->data));
    }
    for (size_t i = 0; f && w && i < sizeof keys / sizeof keys[0]; i++)
        if (kiln_st_meta(f, keys[i]))
            CHECK_OK(kiln_st_writer_meta(w, keys[i], strcmp(keys[i], "kiln.grad_scaler") ? kiln_st_meta(f, keys[i]) : "3 0 0"));
    if (w) CHECK_OK(kiln_st_writer_save(w, bad));
    kiln_st_writer_free(w);
    kiln_st_close(f);
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL;
    kiln_optim *o = NULL;
    CHECK_OK(kiln_model_build(g, "mnist-cnn", &m));
    CHECK_OK(kiln_params_new_on(g, "cpu", &P));
    kiln_params_init(P, 9);
    kiln_optim_config oc = kiln_optim_defaults(KILN_OPT_ADAMW);
    CHECK_OK(kiln_optim_new(&oc, P, &o));
    CHECK_OK(kiln_optim_set_grad_scaler(o, &grow));
    float *before = malloc((size_t)kiln_params_total(P) * 4), *after = malloc((size_t)kiln_params_total(P) * 4);
    CHECK_OK(kiln_params_read(P, before));
    kiln_ckpt_state cs;
    kiln_status st = kiln_checkpoint_resume(bad, P, o, &cs);
    CHECK_MSG(st == KILN_ERR_FORMAT && strstr(kiln_last_error(), bad) && strstr(kiln_last_error(), "kiln.grad_scaler"),
              "a bad scaler state is refused, naming the file: %s", kiln_last_error());
    kiln_grad_scaler_info info;
    CHECK_OK(kiln_optim_grad_scaler_read(o, &info));
    CHECK_OK(kiln_params_read(P, after));
    CHECK_MSG(info.scale == grow.init_scale && !memcmp(before, after, (size_t)kiln_params_total(P) * 4),
              "the refused checkpoint changed nothing");
    free(before), free(after);
    kiln_optim_free(o);
    kiln_params_free(P);
    kiln_graph_free(g);
    free(straight.params), free(first.params), free(rest.params);
    unlink(a);
    unlink(bad);
}

/* one backward of mlp on ref seeded with 2^-20 (a loss weighted down, or one micro-batch of a million): the
 * gradients (unscaled by an update with lr 0 when scaled) */
static double *ref_grads(int precision, int scaled, int64_t *n) {
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL;
    kiln_optim *o = NULL;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_model_build(g, "mlp", &m));
    CHECK_OK(kiln_params_new_on(g, "ref", &P));
    kiln_params_init(P, 4);
    kiln_optim_config oc = kiln_optim_defaults(KILN_OPT_SGD);
    oc.lr = 0;
    CHECK_OK(kiln_optim_new(&oc, P, &o));
    kiln_grad_scaler_config gs = kiln_grad_scaler_defaults();
    if (scaled) CHECK_OK(kiln_optim_set_grad_scaler(o, &gs));
    kiln_compile_opts co = kiln_compile_defaults();
    co.training = 1;
    co.max_batch = 64;
    co.precision = precision;
    CHECK_OK(kiln_compile(g, P, &m.loss, 1, &co, &pl));
    static float x[64 * 784];
    static int32_t y[64];
    tu_seed(77);
    tu_fill(x, 64 * 784, 0, 1);
    for (int i = 0; i < 64; i++) y[i] = (int32_t)tu_int(0, 9);
    *n = kiln_params_total(P);
    double *grad = malloc((size_t)*n * sizeof *grad);
    if (pl && grad) {
        kiln_plan_set_grad_scaler(pl, kiln_optim_grad_scaler(o));
        kiln_plan_bind(pl, m.x, x);
        kiln_plan_bind(pl, m.y, y);
        kiln_plan_set_accumulate(pl, 0, ldexp(1.0, -20));
        CHECK_OK(kiln_plan_run(pl, 64));
        CHECK_OK(kiln_optim_step(o)); /* unscales the gradients in place; lr 0 moves nothing */
        memcpy(grad, kiln_params_grad(P), (size_t)*n * sizeof *grad);
    }
    kiln_plan_free(pl);
    kiln_optim_free(o);
    kiln_params_free(P);
    kiln_graph_free(g);
    return grad;
}

static void test_fp16_underflow(void) {
    int64_t n;
    double *exact = ref_grads(KILN_PRECISION_FP32, 0, &n), *half = ref_grads(KILN_PRECISION_FP16, 0, &n),
           *scaled = ref_grads(KILN_PRECISION_FP16, 1, &n);
    if (!exact || !half || !scaled) return;
    int64_t lost = 0, kept = 0, small = 0;
    double e_half = 0, e_scaled = 0, norm = 0;
    for (int64_t i = 0; i < n; i++) {
        norm += exact[i] * exact[i];
        e_half += (half[i] - exact[i]) * (half[i] - exact[i]);
        e_scaled += (scaled[i] - exact[i]) * (scaled[i] - exact[i]);
        if (exact[i] != 0) {
            small++;
            lost += half[i] == 0;
            kept += scaled[i] != 0;
        }
    }
    e_half = sqrt(e_half / norm), e_scaled = sqrt(e_scaled / norm);
    printf("mlp on ref seeded with 2^-20, fp16 operands: gradient error %.2e unscaled, %.2e scaled by 65536; of %lld "
           "non-zero gradients, %lld lost unscaled, %lld kept scaled\n", e_half, e_scaled, (long long)small, (long long)lost,
           (long long)kept);
    CHECK_MSG(lost > small / 2 && kept > small * 9 / 10, "fp16 loses small gradients, the scaler keeps them");
    CHECK_MSG(e_scaled < e_half / 10, "scaled fp16 gradients are closer to fp32's");
    free(exact), free(half), free(scaled);
}

int main(void) {
    CHECK_OK(kiln_test_simt_register());
    char dir[] = "/tmp/kiln_test_grad_scaler.XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_backend("cpu");
    test_backend("ref");
    test_backend("simt");
    test_checkpoint(dir);
    test_fp16_underflow();
    rmdir(dir);
    return tu_finish("test_grad_scaler");
}
