/* Anomaly detection (kiln_plan_set_detect_anomaly, src/graph/plan_anomaly.c):
 * a NaN planted in one node's output at one step is found there, named with its
 * phase and "all inputs finite", forward and backward; a NaN in the data is found
 * at the first node that reads it, naming that input; off, nothing is checked;
 * the reference backend (f64) is checked too; a backend without host memory is
 * refused with a message. The trainer's side (the step number, the cost line)
 * is tests/test_anomaly_cli.sh. */
#include "graph/internal/plan.h"
#include "kiln/nn.h"
#include "testutil.h"

#define B 4

typedef struct {
    kiln_graph *g;
    kiln_params *P;
    kiln_plan *pl;
    kiln_model m;
    float x[B * 28 * 28];
    int32_t y[B];
} net;

static int open_net(net *n, const char *model, const char *backend) {
    memset(n, 0, sizeof *n);
    n->g = kiln_graph_new();
    kiln_compile_opts o = kiln_compile_defaults();
    o.training = 1;
    o.max_batch = B;
    o.autotune = 0;
    o.dropout_off = 1;
    kiln_status st = kiln_model_build(n->g, model, &n->m);
    if (st == KILN_OK) st = kiln_params_new_on(n->g, backend, &n->P);
    if (st == KILN_OK) {
        kiln_params_init(n->P, 7);
        st = kiln_compile(n->g, n->P, &n->m.loss, 1, &o, &n->pl);
    }
    for (int i = 0; i < B * 28 * 28; i++) n->x[i] = (float)tu_uniform(-1, 1);
    for (int i = 0; i < B; i++) n->y[i] = i % 10;
    if (st == KILN_OK) st = kiln_plan_bind(n->pl, n->m.x, n->x);
    if (st == KILN_OK) st = kiln_plan_bind(n->pl, n->m.y, n->y);
    CHECK_MSG(st == KILN_OK, "%s on %s: %s", model, backend, kiln_last_error());
    return st == KILN_OK;
}

static void close_net(net *n) {
    kiln_plan_free(n->pl);
    kiln_params_free(n->P);
    kiln_graph_free(n->g);
}

/* runs steps 1..upto (counter 0..upto-1); the status of the last, or of the first failure */
static kiln_status run_steps(net *n, int upto, int *failed_at) {
    *failed_at = 0;
    for (int s = 1; s <= upto; s++) {
        kiln_plan_set_step(n->pl, (uint64_t)(s - 1));
        kiln_status st = kiln_plan_run(n->pl, B);
        if (st != KILN_OK) {
            *failed_at = s;
            return st;
        }
    }
    return KILN_OK;
}

static int has(const char *needle) {
    int found = strstr(kiln_last_error(), needle) != NULL;
    if (!found) fprintf(stderr, "message lacks '%s': %s\n", needle, kiln_last_error());
    return found;
}

/* NODE poisoned at step 3 of 4: found at step 3, named, its inputs finite */
static void planted(const char *node, const char *phase) {
    net n;
    if (!open_net(&n, "mnist-cnn", "cpu")) return;
    char spec[96];
    snprintf(spec, sizeof spec, "%s@3", node);
    setenv("KILN_TEST_ANOMALY", spec, 1);
    CHECK_OK(kiln_plan_set_detect_anomaly(n.pl, 1));
    unsetenv("KILN_TEST_ANOMALY");
    int at;
    kiln_status st = run_steps(&n, 4, &at);
    CHECK_MSG(st == KILN_ERR_NUMERIC && at == 3, "%s: status %d at step %d", node, st, at);
    char name[112];
    snprintf(name, sizeof name, "node '%s' (", node);
    CHECK(has(name));
    CHECK(has(phase));
    CHECK(has("NaN at element 0"));
    CHECK(has("all inputs finite: the op produced it"));
    CHECK(kiln_plan_anomaly_seconds(n.pl) > 0);
    close_net(&n);
}

/* a NaN in the images: the first node reading them names its input x (before it runs: a folded ReLU would
 * turn the NaN into 0); switched off, the run goes through */
static void data_nan(const char *model, const char *backend, const char *first, const char *input) {
    net n;
    if (!open_net(&n, model, backend)) return;
    CHECK_OK(kiln_plan_set_detect_anomaly(n.pl, 1));
    int at;
    CHECK_OK(run_steps(&n, 1, &at));
    n.x[1 * 28 * 28 + 100] = NAN; /* the second sample */
    kiln_status st = run_steps(&n, 1, &at);
    CHECK_MSG(st == KILN_ERR_NUMERIC, "%s on %s: status %d", model, backend, st);
    char name[112];
    snprintf(name, sizeof name, "node '%s' (", first);
    CHECK(has(name));
    CHECK(has("forward"));
    CHECK(has(input));
    CHECK(has("was already non-finite (NaN at element 884 of 3136) when the run began"));
    /* switched off: the same run goes through unchecked (here even with a finite loss: the ReLU folded into the
     * first layer makes the NaN 0, and only the weight gradient shows it) */
    CHECK_OK(kiln_plan_set_detect_anomaly(n.pl, 0));
    CHECK_OK(run_steps(&n, 1, &at));
    close_net(&n);
}

/* a device backend (memory not the host's) is refused, nothing switched on */
static void device_refused(void) {
    net n;
    if (!open_net(&n, "mlp", "cpu")) return;
    kiln_backend dev = *n.pl->be;
    dev.name = "device";
    dev.host_memory = 0;
    const kiln_backend *was = n.pl->be;
    n.pl->be = &dev;
    CHECK(kiln_plan_set_detect_anomaly(n.pl, 1) == KILN_ERR_INVALID_ARG);
    CHECK(has("not on this device (device"));
    CHECK(!n.pl->anomaly);
    n.pl->be = was;
    close_net(&n);
}

int main(void) {
    tu_seed(11);
    planted("conv2", "conv2d, forward");
    planted("fc1:bwd_weight", "linear_bwd_weight, backward");
    data_nan("mnist-cnn", "cpu", "conv1", "input 0 'x' was");
    data_nan("mlp", "ref", "fc1", "input 0 'reshape#0', a view of 'x' was");
    device_refused();
    return tu_finish("test_anomaly");
}
