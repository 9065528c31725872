/* The loss read a step late (kiln_plan_set_late_loss, src/graph/plan_late.c;
 * the trainer's default on a device backend). "devlate" is the cpu backend's
 * kernels behind a device's interface (its own memory reached by copies,
 * inputs staged) whose read-out, when late, only fills a slot that
 * readout_take gives later, as the CUDA backend's does with an event (there
 * is no GPU here). It also remembers what each run staged from the host and
 * refuses to give a loss whose run's host inputs changed before it was taken:
 * the loader's batch must stay held until then.
 *
 * Checked: the plan's tickets (losses taken late equal those read at once,
 * bit for bit; a ticket too old is refused, a slot reused is waited for); the
 * trainer with and without --sync-loss (the same losses in the metrics, the
 * same checkpoints, with gradient accumulation too, every loss taken through a
 * slot); a non-finite loss stops the run at the same step with the same
 * message, its last checkpoint the same and finite; on simt (the CUDA
 * backend's read-out and kernels on the host) an error a kernel records comes
 * back with its own run's ticket. */
#include <jansson.h>
#include <unistd.h>
#include "backends/cpu/internal/cpu.h"
#include "kiln/graph.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "kiln/safetensors.h"
#include "kiln/train.h"
#include "simt/simt_backend.h"
#include "testutil.h"

/* ---- devlate ---- */

typedef struct {
    const void *host;
    size_t bytes;
    uint64_t hash;
} staged_input;

#define MAX_STAGED 4
static struct {
    int full;
    float loss;
    staged_input in[MAX_STAGED];
    int nin;
} slots[KILN_READOUT_SLOTS];
static staged_input staging[MAX_STAGED]; /* what the run in progress staged */
static int nstaging, takes, early_release;

static uint64_t fnv(const void *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

static kiln_status late_stage(void *dst, const void *host, int64_t n, kiln_dtype dtype) {
    size_t bytes = (size_t)n * kiln_dtype_size(dtype);
    if (nstaging < MAX_STAGED) staging[nstaging++] = (staged_input){host, bytes, fnv(host, bytes)};
    return kiln_backend_cpu.stage_input(dst, host, n, dtype);
}

static kiln_status late_readout(const kiln_step *s, const kiln_run_ctx *rc) {
    float v = *(const float *)s->in[0].data;
    if (rc->late_slot <= 0) {
        *(double *)s->out[0].data = v;
        nstaging = 0;
        return KILN_OK;
    }
    int k = rc->late_slot - 1;
    CHECK_MSG(!slots[k].full, "slot %d reused before it was taken", k);
    slots[k].full = 1;
    slots[k].loss = v;
    memcpy(slots[k].in, staging, sizeof staging);
    slots[k].nin = nstaging;
    nstaging = 0;
    return KILN_OK;
}

static kiln_status late_take(int k, double *loss) {
    if (!slots[k].full) return kiln_fail(KILN_ERR_BACKEND, "devlate: slot %d holds no read-out", k);
    slots[k].full = 0;
    for (int i = 0; i < slots[k].nin; i++)
        if (fnv(slots[k].in[i].host, slots[k].in[i].bytes) != slots[k].in[i].hash) early_release++;
    takes++;
    *loss = slots[k].loss;
    return KILN_OK;
}

static kiln_kernel late_kernels[KILN_OP_COUNT];
static kiln_backend devlate;

static int in_place_never(kiln_dtype dtype) {
    (void)dtype;
    return 0;
}

static void register_devlate(void) {
    memcpy(late_kernels, kiln_backend_cpu.kernels, sizeof late_kernels);
    late_kernels[KILN_OP_READOUT].run = late_readout;
    devlate = kiln_backend_cpu;
    devlate.name = "devlate";
    devlate.host_memory = 0;
    devlate.kernels = late_kernels;
    devlate.input_in_place = in_place_never;
    devlate.stage_input = late_stage;
    devlate.readout_take = late_take;
    CHECK_OK(kiln_backend_register(&devlate));
}

/* ---- the plan's tickets ---- */

#define B 8
#define RUNS 7

/* the loss of each of RUNS batches (forward and backward, no update) on a backend; late: each taken after
 * the next run is queued */
static void plan_losses(const char *backend, int late, double *loss) {
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_model_build(g, "mnist-cnn-bn", &m));
    CHECK_OK(kiln_params_new_on(g, backend, &P));
    kiln_params_init(P, 3);
    kiln_compile_opts co = kiln_compile_defaults();
    co.training = 1;
    co.max_batch = B;
    co.autotune = 0;
    CHECK_OK(kiln_compile(g, P, &m.loss, 1, &co, &pl));
    if (!pl) return;
    CHECK_MSG(kiln_plan_set_late_loss(pl, late) == late, "%s: late read-outs %s", backend, late ? "refused" : "on");
    static float x[RUNS][B * 784];
    static int32_t y[RUNS][B];
    uint64_t ticket[RUNS];
    for (int r = 0; r < RUNS; r++) {
        tu_seed((uint64_t)r + 11);
        tu_fill(x[r], B * 784, -1, 2);
        for (int i = 0; i < B; i++) y[r][i] = (int32_t)tu_int(0, 9);
        kiln_plan_bind(pl, m.x, x[r]);
        kiln_plan_bind(pl, m.y, y[r]);
        CHECK_OK(kiln_plan_run(pl, B));
        ticket[r] = kiln_plan_ticket(pl);
        if (r > 0 && late) CHECK_OK(kiln_plan_take_loss(pl, ticket[r - 1], &loss[r - 1]));
        if (!late) loss[r] = kiln_plan_loss(pl);
    }
    if (late) {
        loss[RUNS - 1] = kiln_plan_loss(pl); /* the last run's, waited for */
        double again;
        CHECK_OK(kiln_plan_take_loss(pl, ticket[RUNS - 2], &again));
        CHECK_MSG(again == loss[RUNS - 2], "a loss taken twice is the same");
        CHECK_MSG(kiln_plan_take_loss(pl, ticket[0], &again) != KILN_OK && strstr(kiln_last_error(), "no loss to take"),
                  "a ticket older than %d runs is refused: %s", KILN_PLAN_LATE_RUNS, kiln_last_error());
        /* runs left untaken: the slot each reuses is waited for first */
        for (int r = 0; r < KILN_PLAN_LATE_RUNS + 2; r++) CHECK_OK(kiln_plan_run(pl, B));
        CHECK_MSG(takes >= RUNS + 2, "every late loss went through a slot (%d taken)", takes);
        memset(slots, 0, sizeof slots); /* the last runs' read-outs are left untaken: the plan is freed */
    }
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
}

static void test_plan_tickets(void) {
    double now[RUNS], late[RUNS];
    plan_losses("cpu", 0, now);
    plan_losses("devlate", 1, late);
    for (int r = 0; r < RUNS; r++)
        CHECK_MSG(now[r] == late[r] && isfinite(now[r]), "run %d: %.9g read at once, %.9g taken late", r, now[r], late[r]);
    CHECK_MSG(early_release == 0, "no run's host input changed before its loss was taken");
}

/* simt (the CUDA backend's read-out and kernels on the host, tests/simt/): a target out of range found by the
 * loss kernel reaches the host through the late read-out's slot, with its own run's ticket; the next run's
 * loss is unharmed and equals the one read at once */
static void test_simt_errors(void) {
    kiln_graph *g = kiln_graph_new();
    kiln_model m;
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    CHECK_OK(kiln_model_build(g, "mnist-cnn", &m));
    CHECK_OK(kiln_params_new_on(g, "simt", &P));
    kiln_params_init(P, 4);
    kiln_compile_opts co = kiln_compile_defaults();
    co.training = 1;
    co.max_batch = 4;
    co.autotune = 0;
    CHECK_OK(kiln_compile(g, P, &m.loss, 1, &co, &pl));
    if (!pl) return;
    static float x[2][4 * 784];
    int32_t y[2][4] = {{1, 2, 12, 3}, {4, 5, 6, 7}};
    tu_seed(5);
    tu_fill(x[0], 2 * 4 * 784, -1, 2);
    double now = NAN, bad, good;
    kiln_plan_bind(pl, m.x, x[1]);
    kiln_plan_bind(pl, m.y, y[1]);
    CHECK_OK(kiln_plan_run(pl, 4));
    now = kiln_plan_loss(pl);
    CHECK_MSG(kiln_plan_set_late_loss(pl, 1), "simt reads late");
    for (int r = 0; r < 2; r++) {
        kiln_plan_bind(pl, m.x, x[r]);
        kiln_plan_bind(pl, m.y, y[r]);
        CHECK_OK(kiln_plan_run(pl, 4)); /* the bad target is not known yet */
    }
    uint64_t t = kiln_plan_ticket(pl);
    CHECK_MSG(kiln_plan_take_loss(pl, t - 1, &bad) != KILN_OK && strstr(kiln_last_error(), "target 2 is 12"),
              "the bad target comes with its run: %s", kiln_last_error());
    CHECK_OK(kiln_plan_take_loss(pl, t, &good));
    CHECK_MSG(good == now && isfinite(now), "the next run's loss: %.9g late, %.9g at once", good, now);
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
}

/* ---- the trainer ---- */

static char dir[] = "/tmp/kiln_test_late_loss.XXXXXX";

static kiln_train_config config(int sync_loss, int64_t steps, int accumulate, const char *save, const char *metrics) {
    kiln_train_config c = kiln_train_defaults();
    c.model = "mnist-cnn";
    c.device = "devlate";
    c.batch_size = 16;
    c.max_steps = steps;
    c.accumulate = accumulate;
    c.test = 0;
    c.workers = 2; /* threads refill a slot as soon as it is given back */
    c.autotune = 0;
    c.log_every = 1;
    c.save = save;
    c.save_every = 4;
    c.metrics = metrics;
    c.sync_loss = sync_loss;
    return c;
}

/* the loss and learning rate of each step line of a metrics file, in order */
static int metric_losses(const char *path, double *loss, double *lr, int max) {
    FILE *f = fopen(path, "r");
    char line[4096];
    int n = 0;
    while (f && fgets(line, sizeof line, f) && n < max) {
        json_t *o = json_loads(line, 0, NULL);
        const char *kind = json_string_value(json_object_get(o, "kind"));
        if (kind && !strcmp(kind, "step")) {
            loss[n] = json_number_value(json_object_get(o, "loss"));
            lr[n++] = json_number_value(json_object_get(o, "lr"));
        }
        json_decref(o);
    }
    if (f) fclose(f);
    return n;
}

static int same_file(const char *a, const char *b) {
    kiln_st_file *fa = NULL, *fb = NULL;
    int same = kiln_st_open(a, &fa) == KILN_OK && kiln_st_open(b, &fb) == KILN_OK && kiln_st_count(fa) == kiln_st_count(fb);
    for (int i = 0; same && i < kiln_st_count(fa); i++) {
        const kiln_tensor *t = kiln_st_at(fa, i), *u = kiln_st_find(fb, kiln_st_name(fa, i));
        same = u && kiln_tensor_nbytes(t) == kiln_tensor_nbytes(u) && !memcmp(t->data, u->data, kiln_tensor_nbytes(t));
    }
    kiln_st_close(fa);
    kiln_st_close(fb);
    return same;
}

static void train_both(int64_t steps, int accumulate) {
    char save[2][300], metrics[2][300];
    double loss[2][64], lr[2][64];
    int n[2];
    kiln_train_result r[2];
    for (int late = 0; late < 2; late++) {
        snprintf(save[late], sizeof save[late], "%s/run%d.safetensors", dir, late);
        snprintf(metrics[late], sizeof metrics[late], "%s/run%d.jsonl", dir, late);
        unlink(metrics[late]);
        int t0 = takes;
        kiln_train_config c = config(!late, steps, accumulate, save[late], metrics[late]);
        CHECK_OK(kiln_train(&c, &r[late]));
        CHECK_MSG(late ? takes - t0 == steps * accumulate : takes == t0, "accumulate %d, %s: %d losses taken late",
                  accumulate, late ? "late" : "--sync-loss", takes - t0);
        n[late] = metric_losses(metrics[late], loss[late], lr[late], 64);
    }
    CHECK_MSG(n[0] == steps && n[1] == steps, "a metrics line per step (%d, %d of %lld)", n[0], n[1], (long long)steps);
    for (int i = 0; i < n[0] && i < n[1]; i++)
        CHECK_MSG(loss[0][i] == loss[1][i] && lr[0][i] == lr[1][i], "accumulate %d, step %d: loss %.9g, lr %g waited "
                  "for; %.9g, %g late", accumulate, i + 1, loss[0][i], lr[0][i], loss[1][i], lr[1][i]);
    CHECK_MSG(r[0].final_loss == r[1].final_loss && r[0].steps == r[1].steps && r[0].samples == r[1].samples,
              "the same final loss (%.9g, %.9g), steps and samples", r[0].final_loss, r[1].final_loss);
    CHECK_MSG(same_file(save[0], save[1]), "accumulate %d: the same checkpoint late and waited for", accumulate);
    CHECK_MSG(early_release == 0, "no batch went back to the loader before its loss was taken");
}

/* a learning rate that makes the loss non-finite: both ways stop at the same step with the same message, and
 * the checkpoint of every step (--save-every 1) is the last finite one, the same both ways */
static void test_nonfinite(void) {
    char msg[2][512], save[2][300];
    for (int late = 0; late < 2; late++) {
        snprintf(save[late], sizeof save[late], "%s/blowup%d.safetensors", dir, late);
        kiln_train_config c = config(!late, 30, 1, save[late], NULL);
        c.save_every = 1;
        c.optim = kiln_optim_defaults(KILN_OPT_SGD);
        c.optim.lr = 1e4f;
        kiln_train_result r;
        CHECK_MSG(kiln_train(&c, &r) == KILN_ERR_NUMERIC, "lr 1e4 %s: the run fails", late ? "late" : "waited for");
        snprintf(msg[late], sizeof msg[late], "%s", kiln_last_error());
    }
    CHECK_MSG(strstr(msg[0], "the loss is") && !strcmp(msg[0], msg[1]), "the same error:\n  %s\n  %s", msg[0], msg[1]);
    CHECK_MSG(same_file(save[0], save[1]), "the last checkpoint before the non-finite loss is the same late");
    kiln_st_file *f = NULL;
    int finite = kiln_st_open(save[1], &f) == KILN_OK;
    for (int i = 0; finite && i < kiln_st_count(f); i++) {
        const kiln_tensor *t = kiln_st_at(f, i);
        for (size_t k = 0; t->dtype == KILN_F32 && k < kiln_tensor_nbytes(t) / 4; k++) finite &= isfinite(((const float *)t->data)[k]);
    }
    kiln_st_close(f);
    CHECK_MSG(finite, "that checkpoint holds finite numbers");
}

int main(void) {
    register_devlate();
    CHECK_OK(kiln_test_simt_register());
    if (!mkdtemp(dir)) return 1;
    test_plan_tickets();
    test_simt_errors();
    train_both(9, 1);
    train_both(4, 3);
    test_nonfinite();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return tu_finish("test_late_loss");
}
