/* kiln gradcheck: a zoo model's backward against central finite differences,
 * in double on the reference backend (the guide lists torch.autograd.gradcheck
 * among the debugging APIs to keep out of real training). Backward runs once;
 * each sampled element of each parameter is moved by +-eps and the forward
 * steps alone run again (kiln_plan_run_forward), so a check costs two forward
 * passes. Dropout is off; batch norm trains on the batch's statistics, which
 * is a smooth function in double. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/internal/rng.h"
#include "kiln/gradcheck.h"

#define REL_FLOOR 1e-5 /* below this, a gradient is compared absolutely */
/* the retries' steps, as multiples of eps: smaller ones step off a ReLU's kink; a larger one lifts the difference
 * above the loss's rounding (a gradient of ~0, as a bias cancelled by the batch norm after it: resnet50's
 * bn1.bias, whose differences at eps 1e-6 are ~4e-7 of rounding, 3e-9 at 1e-5) */
static const double retry_steps[] = {0.1, 0.01, 10};

kiln_gradcheck_config kiln_gradcheck_defaults(void) {
    kiln_gradcheck_config c = {.model = "mnist-cnn", .batch = 0, .eps = 1e-6, .tol = 1e-3, .seed = 1};
    return c;
}

void kiln_gradcheck_result_free(kiln_gradcheck_result *r) {
    if (!r) return;
    free(r->t);
    memset(r, 0, sizeof *r);
}

/* parameter memory changed since the last run: the forward steps before its first reader need not run again */
typedef struct {
    const double *lo, *hi;
} span;

static void touch(span *d, const double *lo, const double *hi) {
    if (!d->lo || lo < d->lo) d->lo = lo;
    if (!d->hi || hi > d->hi) d->hi = hi;
}

/* the loss at the parameters as they are now */
static kiln_status loss_at(kiln_plan *pl, int64_t batch, span *dirty, kiln_gradcheck_result *r, double *loss) {
    kiln_status st = kiln_plan_run_forward(pl, batch, dirty->lo, (size_t)(dirty->hi - dirty->lo) * sizeof(double));
    *dirty = (span){0};
    r->runs++;
    *loss = kiln_plan_loss(pl);
    if (st == KILN_OK && !isfinite(*loss)) st = kiln_fail(KILN_ERR_NUMERIC, "gradcheck: the loss is %g", *loss);
    return st;
}

static double rel_error(double a, double n) { return fabs(a - n) / fmax(fmax(fabs(a), fabs(n)), REL_FLOOR); }

static void record(kiln_gradcheck_tensor *t, int64_t j, double a, double n, double rel) {
    if (t->checked++ == 0 || rel > t->worst_rel) {
        t->worst_rel = rel;
        t->worst_at = j;
        t->analytic = a;
        t->numeric = n;
    }
}

/* the central difference of element j at step eps */
static kiln_status difference(kiln_plan *pl, int64_t batch, double *w, int64_t numel, int64_t j, double eps, span *dirty,
                              kiln_gradcheck_result *r, double *out) {
    double p = w[j], lp = 0, lm = 0;
    w[j] = p + eps;
    touch(dirty, w, w + numel);
    kiln_status st = loss_at(pl, batch, dirty, r, &lp);
    w[j] = p - eps;
    touch(dirty, w, w + numel);
    if (st == KILN_OK) st = loss_at(pl, batch, dirty, r, &lm);
    w[j] = p;
    touch(dirty, w, w + numel);
    *out = (lp - lm) / (2 * eps);
    return st;
}

/* K sampled elements of parameter i (all when it has no more) against their differences */
static kiln_status check_tensor(kiln_plan *pl, kiln_params *P, int i, const double *grad, int64_t batch,
                                const kiln_gradcheck_config *c, int samples, span *dirty, kiln_gradcheck_result *r) {
    kiln_gradcheck_tensor *t = &r->t[r->n++];
    int64_t numel = kiln_params_numel(P, i), off = kiln_params_offset(P, i);
    snprintf(t->name, sizeof t->name, "%s", kiln_params_name(P, i));
    t->numel = numel;
    double *w = (double *)kiln_params_data(P) + off;
    uint64_t key = kiln_rng_key(c->seed, 0x67726164ull, (uint64_t)i);
    int64_t k_n = numel <= samples ? numel : samples;
    for (int64_t k = 0; k < k_n; k++) {
        int64_t j = numel <= samples ? k : (int64_t)kiln_rng_bounded(key, (uint64_t)k, (uint64_t)numel);
        double a = grad[off + j], n, n2;
        kiln_status st = difference(pl, batch, w, numel, j, c->eps, dirty, r, &n);
        double rel = rel_error(a, n);
        /* a ReLU's kink within +-eps or the loss's rounding bends the difference: other steps get clear of them,
         * while a wrong gradient stays wrong at every eps; the best is kept */
        int retried = 0;
        for (size_t s = 0; st == KILN_OK && rel > c->tol && s < sizeof retry_steps / sizeof *retry_steps; s++) {
            if ((st = difference(pl, batch, w, numel, j, c->eps * retry_steps[s], dirty, r, &n2)) != KILN_OK ||
                rel_error(a, n2) >= rel)
                continue;
            n = n2;
            rel = rel_error(a, n2);
            retried = 1;
        }
        t->retried += retried;
        if (st != KILN_OK) return kiln_fail_context(st, "%s[%lld]", t->name, (long long)j);
        record(t, j, a, n, rel);
    }
    if (t->worst_rel > r->worst_rel) r->worst_rel = t->worst_rel;
    r->failed += t->worst_rel > c->tol;
    return KILN_OK;
}

kiln_status kiln_gradcheck_plan(kiln_plan *pl, kiln_params *P, int64_t batch, const kiln_gradcheck_config *c,
                                kiln_gradcheck_result *r) {
    memset(r, 0, sizeof *r);
    if (strcmp(kiln_params_backend(P), "ref") || kiln_params_dtype(P) != KILN_F64)
        return kiln_fail(KILN_ERR_INVALID_ARG, "gradcheck: the parameters must be the reference backend's (double)");
    if (!(c->eps > 0) || !(c->tol > 0) || c->samples < 1)
        return kiln_fail(KILN_ERR_INVALID_ARG, "gradcheck: eps (%g), tol (%g) and samples (%d) must be positive", c->eps,
                         c->tol, c->samples);
    int np = kiln_params_count(P);
    int64_t total = kiln_params_total(P);
    double *grad = malloc((size_t)(total ? total : 1) * sizeof *grad);
    r->t = calloc((size_t)(np ? np : 1), sizeof *r->t);
    if (!grad || !r->t) {
        free(grad);
        return kiln_fail(KILN_ERR_NOMEM, "gradcheck: out of memory");
    }
    r->batch = batch;
    r->samples = c->samples;
    kiln_plan_set_step(pl, 0);
    kiln_plan_set_accumulate(pl, 0, 1.0);
    kiln_status st = kiln_plan_run(pl, batch);
    r->runs++;
    r->loss = kiln_plan_loss(pl);
    if (st == KILN_OK) memcpy(grad, kiln_params_grad(P), (size_t)total * sizeof *grad);
    const uint8_t *has = kiln_params_has_grad(P);
    int ng = 0;
    for (int i = 0; i < np; i++) ng += has[i] && kiln_params_numel(P, i) > 0;
    int want = c->tensors > 0 && c->tensors < ng ? c->tensors : ng;
    span dirty = {0};
    /* `want` of the ng tensors, evenly spread, the first and the last included */
    for (int i = 0, g = 0, k = 0; st == KILN_OK && i < np && k < want; i++) {
        if (!has[i] || kiln_params_numel(P, i) <= 0) continue;
        int pick = want == 1 ? g == 0 : (int64_t)g * (want - 1) >= (int64_t)k * (ng - 1);
        g++;
        if (!pick) continue;
        k++;
        st = check_tensor(pl, P, i, grad, batch, c, c->samples, &dirty, r);
    }
    free(grad);
    return st;
}

/* the gradcheck's small defaults for the model options left 0 */
static kiln_model_opts small_opts(const kiln_gradcheck_config *c) {
    kiln_model_opts o = c->model_opts;
    int resnet = !strncmp(c->model, "resnet", 6), deep = !strcmp(c->model, "mlp-deep");
    if ((resnet || deep) && !o.width) o.width = 32; /* mlp-deep: 16 layers of 32 */
    if (resnet && !o.height) o.height = 32;
    kiln_gpt_config *g = &o.gpt;
    if (!g->layers) g->layers = 1;
    if (!g->dim) g->dim = 32;
    if (!g->heads) g->heads = 2;
    if (!g->block) g->block = 8;
    if (!g->vocab) g->vocab = 32;
    return o;
}

/* random values for an input: token ids and labels in range, images and targets in [-1, 1) */
static float *random_input(const kiln_graph *g, kiln_value v, int64_t batch, int64_t range, uint64_t key) {
    int64_t shape[KILN_MAX_DIMS], n = batch;
    int nd = kiln_value_shape(g, v, shape);
    for (int d = 1; d < nd; d++) n *= shape[d];
    float *buf = malloc((size_t)(n ? n : 1) * sizeof(float)); /* int32 and f32 are both 4 bytes */
    if (!buf) return NULL;
    int labels = kiln_value_dtype(g, v) == KILN_I32;
    for (int64_t i = 0; i < n; i++) {
        if (labels) ((int32_t *)buf)[i] = (int32_t)kiln_rng_bounded(key, (uint64_t)i, (uint64_t)range);
        else buf[i] = range ? (float)kiln_rng_bounded(key, (uint64_t)i, (uint64_t)range) : kiln_rng_uniform(key, 0, (uint64_t)i, -1, 1);
    }
    return buf;
}

kiln_status kiln_gradcheck(const kiln_gradcheck_config *c, kiln_gradcheck_result *r) {
    memset(r, 0, sizeof *r);
    if (!c->model) return kiln_fail(KILN_ERR_INVALID_ARG, "gradcheck: --model is required");
    if (c->batch < 0 || c->batch > 64)
        return kiln_fail(KILN_ERR_INVALID_ARG, "--batch-size is %lld; gradcheck takes 1..64", (long long)c->batch);
    kiln_gradcheck_config cc = *c;
    /* the ImageNet ResNets at 32x32 end in 1x1 maps: batch norm over 2 values there has gradients of 1e6 and
     * curvature the differences cannot follow; over 4 it is well conditioned */
    int imagenet = !strncmp(c->model, "resnet", 6) && strcmp(c->model, "resnet20");
    if (cc.samples <= 0) cc.samples = imagenet ? 1 : 4;
    if (cc.batch == 0) cc.batch = imagenet ? 4 : 2;
    c = &cc;
    kiln_model_opts mo = small_opts(c);
    kiln_graph *g = kiln_graph_new();
    kiln_params *P = NULL;
    kiln_plan *pl = NULL;
    float *x = NULL, *y = NULL;
    kiln_model m;
    kiln_status st = kiln_model_build_ex(g, c->model, &mo, &m);
    if (st == KILN_OK) st = kiln_params_new_on(g, "ref", &P);
    if (st == KILN_OK) {
        kiln_params_init(P, c->seed);
        kiln_compile_opts o = kiln_compile_defaults();
        o.training = 1;
        o.max_batch = c->batch;
        o.dropout_off = 1;
        o.fuse = 0;         /* forward steps first, backward after: kiln_plan_run_forward's split */
        o.reuse_memory = 0; /* every value its own storage: a difference reruns only what follows the parameter */
        st = kiln_compile(g, P, &m.loss, 1, &o, &pl);
    }
    if (st == KILN_OK) {
        int64_t classes = m.num_classes > 0 ? m.num_classes : 10;
        x = random_input(g, m.x, c->batch, m.block > 0 ? classes : 0, kiln_rng_key(c->seed, 1, 0));
        y = random_input(g, m.y, c->batch, kiln_value_dtype(g, m.y) == KILN_I32 ? classes : 0, kiln_rng_key(c->seed, 2, 0));
        if (!x || !y) st = kiln_fail(KILN_ERR_NOMEM, "gradcheck: out of memory");
    }
    if (st == KILN_OK) st = kiln_plan_bind(pl, m.x, x);
    if (st == KILN_OK) st = kiln_plan_bind(pl, m.y, y);
    if (st == KILN_OK) st = kiln_gradcheck_plan(pl, P, c->batch, &cc, r);
    free(x);
    free(y);
    kiln_plan_free(pl);
    kiln_params_free(P);
    kiln_graph_free(g);
    return st == KILN_OK ? st : kiln_fail_context(st, "gradcheck %s", c->model);
}
