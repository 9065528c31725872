/* Optimizers as one fused loop over the flat parameter, gradient and state
 * buffers (llm.c's layout). Runs of parameters that all have gradients are
 * updated in one kernel call; a parameter without a gradient is skipped. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "graph/internal/graph.h"
#include "kernels/internal/kernels.h"
#include "kiln/optim.h"

struct kiln_optim {
    kiln_optim_config c;
    kiln_params *P;
    int nstate;
    void *state[2];
    int64_t steps;
};

static const char *state_names[3][2] = {{"momentum_buffer", NULL}, {"exp_avg", "exp_avg_sq"}, {"square_avg", "acc_delta"}};

kiln_optim_config kiln_optim_defaults(kiln_optim_kind kind) {
    kiln_optim_config c = {0};
    c.kind = kind;
    switch (kind) {
    case KILN_OPT_SGD: c.lr = 0.01f; break;
    case KILN_OPT_ADAMW: c.lr = 1e-3f; c.beta1 = 0.9f; c.beta2 = 0.999f; c.eps = 1e-8f; c.weight_decay = 1e-2f; break;
    case KILN_OPT_ADADELTA: c.lr = 1.0f; c.rho = 0.9f; c.eps = 1e-6f; break;
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
    o->nstate = cfg->kind == KILN_OPT_SGD ? (cfg->momentum != 0) : 2;
    size_t bytes = (size_t)kiln_params_total(P) * kiln_dtype_size(kiln_params_dtype(P));
    for (int i = 0; i < o->nstate; i++) {
        o->state[i] = kiln_calloc(bytes ? bytes : 64);
        if (!o->state[i]) {
            kiln_optim_free(o);
            return kiln_fail(KILN_ERR_NOMEM, "optimizer: out of memory for state");
        }
    }
    *out = o;
    return KILN_OK;
}

void kiln_optim_free(kiln_optim *o) {
    if (!o) return;
    for (int i = 0; i < 2; i++) kiln_free(o->state[i]);
    free(o);
}

static void update(kiln_params *P, int64_t off, int64_t n, void *ctx) {
    (void)P;
    kiln_optim *o = ctx;
    const kiln_optim_config *c = &o->c;
    int f64 = kiln_params_dtype(o->P) == KILN_F64;
    size_t es = f64 ? 8 : 4;
    char *p = (char *)kiln_params_data(o->P) + (size_t)off * es;
    char *g = (char *)kiln_params_grad(o->P) + (size_t)off * es;
    char *s0 = o->state[0] ? (char *)o->state[0] + (size_t)off * es : NULL;
    char *s1 = o->state[1] ? (char *)o->state[1] + (size_t)off * es : NULL;
    switch (c->kind) {
    case KILN_OPT_SGD:
        if (f64) kiln_ref_sgd(n, (double *)p, (double *)g, (double *)s0, c->lr, c->momentum, c->dampening, c->weight_decay, c->nesterov, o->steps == 1);
        else kiln_cpu_sgd(n, (float *)p, (float *)g, (float *)s0, c->lr, c->momentum, c->dampening, c->weight_decay, c->nesterov, o->steps == 1);
        break;
    case KILN_OPT_ADAMW:
        if (f64) kiln_ref_adamw(n, (double *)p, (double *)g, (double *)s0, (double *)s1, c->lr, c->beta1, c->beta2, c->eps, c->weight_decay, o->steps);
        else kiln_cpu_adamw(n, (float *)p, (float *)g, (float *)s0, (float *)s1, c->lr, c->beta1, c->beta2, c->eps, c->weight_decay, o->steps);
        break;
    case KILN_OPT_ADADELTA:
        if (f64) kiln_ref_adadelta(n, (double *)p, (double *)g, (double *)s0, (double *)s1, c->lr, c->rho, c->eps, c->weight_decay);
        else kiln_cpu_adadelta(n, (float *)p, (float *)g, (float *)s0, (float *)s1, c->lr, c->rho, c->eps, c->weight_decay);
        break;
    }
}

kiln_status kiln_optim_step(kiln_optim *o) {
    o->steps++;
    kiln_params_grad_runs(o->P, update, o); /* parameters without a gradient are skipped */
    return KILN_OK;
}

void kiln_optim_set_lr(kiln_optim *o, float lr) { o->c.lr = lr; }
float kiln_optim_lr(const kiln_optim *o) { return o->c.lr; }
int64_t kiln_optim_steps(const kiln_optim *o) { return o->steps; }
void kiln_optim_set_steps(kiln_optim *o, int64_t steps) { o->steps = steps; }
int kiln_optim_state_count(const kiln_optim *o) { return o->nstate; }
const char *kiln_optim_state_name(const kiln_optim *o, int i) { return state_names[o->c.kind][i]; }
void *kiln_optim_state(kiln_optim *o, int i) { return o->state[i]; }

float kiln_lr_step_schedule(float base, float gamma, int64_t step_size, int64_t epoch) {
    if (step_size < 1) step_size = 1;
    return base * powf(gamma, (float)(epoch / step_size));
}
kiln_optim_kind kiln_optim_get_kind(const kiln_optim *o) { return o->c.kind; }
