/* Optimizers as one fused pass over the flat parameter, gradient and state
 * buffers (llm.c's layout), run as backend steps (op table: sgd, adamw,
 * adadelta), with gradient clipping in front when asked. Runs of parameters
 * that all have gradients are updated by one step each; a parameter without a
 * gradient is skipped. The step list is built once and rebuilt only when a
 * new training plan changes which parameters get gradients. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kiln/optim.h"
#include "optim/internal/steps.h"

struct kiln_optim {
    kiln_optim_config c;
    kiln_params *P;
    const kiln_backend *be;
    int nstate;
    void *state[2];
    int64_t steps;
    double clip;            /* > 0: clip the gradient norm to this before each update */
    double *norm2;          /* clipping's sum of squares, in the backend's memory */
    kiln_step *list;        /* clip steps, then update steps */
    int nlist;
    uint64_t built_for;     /* the has_grad version the list was built for */
    int built;
};

static const char *state_names[3][2] = {{"momentum_buffer", NULL}, {"exp_avg", "exp_avg_sq"}, {"square_avg", "acc_delta"}};
static const kiln_op update_op[3] = {KILN_OP_SGD_UPDATE, KILN_OP_ADAMW_UPDATE, KILN_OP_ADADELTA_UPDATE};

kiln_optim_config kiln_optim_defaults(kiln_optim_kind kind) {
    kiln_optim_config c = {0};
    c.kind = kind;
    if (kind == KILN_OPT_SGD) c.lr = 0.01f;
    if (kind == KILN_OPT_ADAMW) {
        c.lr = 1e-3f;
        c.beta1 = 0.9f;
        c.beta2 = 0.999f;
        c.eps = 1e-8f;
        c.weight_decay = 1e-2f;
    }
    if (kind == KILN_OPT_ADADELTA) {
        c.lr = 1.0f;
        c.rho = 0.9f;
        c.eps = 1e-6f;
    }
    return c;
}

int kiln_optim_parse(const char *name, kiln_optim_kind *out) {
    static const char *names[3] = {"sgd", "adamw", "adadelta"};
    for (int i = 0; i < 3; i++)
        if (name && strcmp(name, names[i]) == 0) {
            *out = (kiln_optim_kind)i;
            return 0;
        }
    return -1;
}

const char *kiln_optim_name(kiln_optim_kind kind) {
    return kind == KILN_OPT_SGD ? "sgd" : kind == KILN_OPT_ADAMW ? "adamw" : "adadelta";
}

kiln_status kiln_optim_new(const kiln_optim_config *cfg, kiln_params *P, kiln_optim **out) {
    *out = NULL;
    if (!(cfg->lr >= 0) || !(cfg->weight_decay >= 0))
        return kiln_fail(KILN_ERR_INVALID_ARG, "optimizer: lr %g and weight decay %g must be >= 0", (double)cfg->lr,
                         (double)cfg->weight_decay);
    if (cfg->kind == KILN_OPT_ADADELTA && !(cfg->rho >= 0 && cfg->rho <= 1))
        return kiln_fail(KILN_ERR_INVALID_ARG, "adadelta: rho %g outside [0, 1]", (double)cfg->rho);
    if (cfg->kind == KILN_OPT_SGD && cfg->nesterov && (cfg->momentum <= 0 || cfg->dampening != 0))
        return kiln_fail(KILN_ERR_INVALID_ARG, "sgd: nesterov needs momentum > 0 and dampening 0");
    kiln_optim *o = calloc(1, sizeof *o);
    if (!o) return kiln_fail(KILN_ERR_NOMEM, "optimizer: out of memory");
    o->c = *cfg;
    o->P = P;
    o->be = kiln_backend_get(kiln_params_backend(P)); /* the state lives where the parameters do */
    o->nstate = cfg->kind == KILN_OPT_SGD ? (cfg->momentum != 0) : 2;
    size_t bytes = (size_t)kiln_params_total(P) * kiln_dtype_size(kiln_params_dtype(P));
    o->norm2 = o->be->alloc(64);
    for (int i = 0; i < o->nstate; i++) o->state[i] = o->be->alloc(bytes ? bytes : 64);
    if (!o->norm2 || (o->nstate > 0 && !o->state[0]) || (o->nstate > 1 && !o->state[1])) {
        kiln_optim_free(o);
        return kiln_fail(KILN_ERR_NOMEM, "optimizer: out of memory for state");
    }
    for (int i = 0; i < o->nstate; i++) {
        void *z = calloc(1, bytes ? bytes : 64);
        kiln_status st = z ? o->be->copy(o->state[i], z, bytes ? bytes : 64, 0) : KILN_ERR_NOMEM;
        free(z);
        if (st != KILN_OK) {
            kiln_optim_free(o);
            return kiln_fail(KILN_ERR_NOMEM, "optimizer: out of memory for state");
        }
    }
    *out = o;
    return KILN_OK;
}

static void free_list(kiln_optim *o) {
    for (int i = 0; i < o->nlist; i++) kiln_backend_release(o->be, &o->list[i]);
    free(o->list);
    o->list = NULL;
    o->nlist = 0;
    o->built = 0;
}

void kiln_optim_free(kiln_optim *o) {
    if (!o) return;
    for (int i = 0; i < 2; i++)
        if (o->state[i]) o->be->free(o->state[i]);
    if (o->norm2) o->be->free(o->norm2);
    free_list(o);
    free(o);
}

/* one update step over elements [off, off + n) of the flat buffers */
static void update_step(kiln_optim *o, int64_t off, int64_t n, kiln_step *s) {
    kiln_dtype dt = kiln_params_dtype(o->P);
    size_t at = (size_t)off * kiln_dtype_size(dt);
    *s = kiln_flat_step(update_op[o->c.kind], kiln_optim_name(o->c.kind));
    s->nin = 1;
    s->in[0] = kiln_tdesc_flat((char *)kiln_params_grad(o->P) + at, dt, n);
    s->out[0] = kiln_tdesc_flat((char *)kiln_params_data(o->P) + at, dt, n);
    s->nout = 1 + o->nstate;
    for (int k = 0; k < o->nstate; k++) s->out[1 + k] = kiln_tdesc_flat((char *)o->state[k] + at, dt, n);
    const kiln_optim_config *c = &o->c;
    if (c->kind == KILN_OPT_SGD) s->attr.sgd = (kiln_sgd_attrs){c->momentum, c->dampening, c->weight_decay, c->nesterov};
    if (c->kind == KILN_OPT_ADAMW) s->attr.adamw = (kiln_adamw_attrs){c->beta1, c->beta2, c->eps, c->weight_decay};
    if (c->kind == KILN_OPT_ADADELTA) s->attr.adadelta = (kiln_adadelta_attrs){c->rho, c->eps, c->weight_decay};
}

static kiln_status build(kiln_optim *o) {
    free_list(o);
    int np = kiln_params_count(o->P), max = 3 * np + 1;
    int64_t *off = malloc((size_t)(np ? np : 1) * sizeof *off), *cnt = malloc((size_t)(np ? np : 1) * sizeof *cnt);
    o->list = calloc((size_t)max, sizeof *o->list);
    kiln_status st = off && cnt && o->list ? KILN_OK : kiln_fail(KILN_ERR_NOMEM, "optimizer: out of memory");
    if (st == KILN_OK && o->clip > 0) {
        int n = kiln_clip_steps(o->P, o->clip, o->norm2, o->list, max);
        if (n < 0) st = KILN_ERR_NOMEM;
        else o->nlist = n;
    }
    int runs = st == KILN_OK ? kiln_params_grad_runs(o->P, off, cnt, np) : 0;
    for (int r = 0; r < runs; r++) update_step(o, off[r], cnt[r], &o->list[o->nlist++]);
    for (int i = 0; st == KILN_OK && i < o->nlist; i++) st = kiln_backend_prepare(o->be, &o->list[i], NULL);
    free(off);
    free(cnt);
    if (st != KILN_OK) {
        free_list(o);
        return st;
    }
    o->built = 1;
    o->built_for = kiln_params_has_grad_version(o->P);
    return KILN_OK;
}

kiln_status kiln_optim_step(kiln_optim *o) {
    if (!o->built || o->built_for != kiln_params_has_grad_version(o->P)) {
        kiln_status st = build(o);
        if (st != KILN_OK) return st;
    }
    kiln_run_ctx rc = {.lr = o->c.lr, .optim_step = o->steps + 1};
    kiln_status st = kiln_backend_run(o->be, o->list, o->nlist, &rc, NULL);
    if (st == KILN_OK) o->steps++;
    return st;
}

void kiln_optim_set_clip(kiln_optim *o, double max_norm) {
    o->clip = max_norm > 0 ? max_norm : 0;
    free_list(o);
}
double kiln_optim_grad_norm(const kiln_optim *o) {
    double ss = NAN;
    if (o->clip > 0 && o->norm2 && o->be->copy(&ss, o->norm2, sizeof ss, 0) != KILN_OK) ss = NAN;
    return o->clip > 0 ? sqrt(ss) : NAN;
}
void kiln_optim_set_lr(kiln_optim *o, float lr) { o->c.lr = lr; }
float kiln_optim_lr(const kiln_optim *o) { return o->c.lr; }
int64_t kiln_optim_steps(const kiln_optim *o) { return o->steps; }
void kiln_optim_set_steps(kiln_optim *o, int64_t steps) { o->steps = steps; }
int kiln_optim_state_count(const kiln_optim *o) { return o->nstate; }
const char *kiln_optim_state_name(const kiln_optim *o, int i) { return state_names[o->c.kind][i]; }
void *kiln_optim_state(kiln_optim *o, int i) { return o->state[i]; }
int kiln_optim_state_nonnegative(const kiln_optim *o, int i) {
    /* adamw's exp_avg_sq, adadelta's square_avg and acc_delta; sgd's momentum and adamw's exp_avg take either sign */
    return (o->c.kind == KILN_OPT_ADAMW && i == 1) || o->c.kind == KILN_OPT_ADADELTA;
}
static size_t state_bytes(const kiln_optim *o) {
    return (size_t)kiln_params_total(o->P) * kiln_dtype_size(kiln_params_dtype(o->P));
}
kiln_status kiln_optim_state_read(const kiln_optim *o, int i, void *host) { return o->be->copy(host, o->state[i], state_bytes(o), 0); }
kiln_status kiln_optim_state_write(kiln_optim *o, int i, const void *host) { return o->be->copy(o->state[i], host, state_bytes(o), 0); }
kiln_optim_kind kiln_optim_get_kind(const kiln_optim *o) { return o->c.kind; }
const kiln_optim_config *kiln_optim_get_config(const kiln_optim *o) { return &o->c; }

float kiln_lr_step_schedule(float base, float gamma, int64_t step_size, int64_t epoch) {
    if (step_size < 1) step_size = 1;
    return base * powf(gamma, (float)(epoch / step_size));
}
