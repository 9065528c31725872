/* Optimizers as one fused pass over the flat parameter, gradient and state
 * buffers (llm.c's layout), run as backend steps (op table: sgd, adamw,
 * adadelta; lamb, lars, novograd), with gradient clipping in front when asked.
 * Runs of parameters that all have gradients are updated by one step each; a
 * parameter without a gradient is skipped. Weight decay skips parameters of
 * fewer than 2 dims unless decay_all: the kernels read it per tensor from a
 * table (offset, numel, decays); on a device backend the element-wise
 * optimizers instead cut their runs where it changes. The layer-wise ones
 * run two steps per run, one computing every tensor's norms, one updating. The step list is built once and
 * rebuilt only when a new training plan changes which parameters get gradients. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kiln/optim.h"
#include "optim/internal/steps.h"

#define KINDS 6

struct kiln_optim {
    kiln_optim_config c;
    kiln_params *P;
    const kiln_backend *be;
    int nstate;
    void *state[2];
    int64_t state_len[2];   /* elements: the flat buffer's, or one per tensor */
    int64_t steps;
    double clip;            /* > 0: clip the gradient norm to this before each update */
    double *norm2;          /* clipping's sum of squares, in the backend's memory */
    int64_t *tensors;       /* layer-wise: (offset, numel, decays) per parameter, in the backend's memory */
    double *norms;          /* layer-wise: two sums of squares per parameter, in the backend's memory */
    kiln_step *list;        /* the scaler's, clip and update steps, then the scaler's update */
    int nlist;
    kiln_amp_state *amp;    /* the gradient scaler (grad_scaler.c) in the backend's memory, NULL: none */
    double *amp_acc;        /* its sum of squares of the scaled gradients */
    kiln_grad_scaler_config sc;
    int amp_from;           /* the list's steps a non-finite gradient skips: from here to the last but one */
    uint64_t built_for;     /* the has_grad version the list was built for */
    int built;
};

static const char *state_names[KINDS][2] = {{"momentum_buffer", NULL}, {"exp_avg", "exp_avg_sq"},
                                            {"square_avg", "acc_delta"},  {"exp_avg", "exp_avg_sq"},
                                            {"momentum_buffer", NULL},    {"exp_avg", "exp_avg_sq"}};
static const char *names[KINDS] = {"sgd", "adamw", "adadelta", "lamb", "lars", "novograd"};
static const kiln_op update_op[KINDS] = {KILN_OP_SGD_UPDATE,  KILN_OP_ADAMW_UPDATE, KILN_OP_ADADELTA_UPDATE,
                                         KILN_OP_LAMB_UPDATE, KILN_OP_LARS_UPDATE,  KILN_OP_NOVOGRAD_UPDATE};

static int layerwise(kiln_optim_kind k) { return k == KILN_OPT_LAMB || k == KILN_OPT_LARS || k == KILN_OPT_NOVOGRAD; }

/* 1 when the update reads each tensor's decay from the table: the layer-wise
 * kernels always, the element-wise ones on a host backend when there is decay
 * (a device backend's take one decay per step; without decay the table is moot) */
static int per_tensor_decay(const kiln_optim *o) {
    return layerwise(o->c.kind) || (o->be->host_memory && o->c.weight_decay > 0);
}

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
    if (kind == KILN_OPT_LAMB) { /* apex.optimizers.FusedLAMB */
        c.lr = 1e-3f;
        c.beta1 = 0.9f;
        c.beta2 = 0.999f;
        c.eps = 1e-6f;
        c.weight_decay = 1e-2f;
    }
    if (kind == KILN_OPT_LARS) { /* the paper's eta; momentum as its experiments */
        c.lr = 0.1f;
        c.momentum = 0.9f;
        c.trust = 1e-3f;
    }
    if (kind == KILN_OPT_NOVOGRAD) { /* nemo.core.optim.Novograd */
        c.lr = 1e-3f;
        c.beta1 = 0.95f;
        c.beta2 = 0.98f;
        c.eps = 1e-8f;
    }
    return c;
}

int kiln_optim_parse(const char *name, kiln_optim_kind *out) {
    for (int i = 0; i < KINDS; i++)
        if (name && strcmp(name, names[i]) == 0) {
            *out = (kiln_optim_kind)i;
            return 0;
        }
    return -1;
}

const char *kiln_optim_name(kiln_optim_kind kind) { return kind >= 0 && kind < KINDS ? names[kind] : "?"; }

static kiln_status check_config(const kiln_optim_config *c) {
    if (!(c->lr >= 0) || !(c->weight_decay >= 0))
        return kiln_fail(KILN_ERR_INVALID_ARG, "optimizer: lr %g and weight decay %g must be >= 0", (double)c->lr,
                         (double)c->weight_decay);
    if (c->kind < 0 || c->kind >= KINDS) return kiln_fail(KILN_ERR_INVALID_ARG, "optimizer: unknown kind %d", (int)c->kind);
    if (c->kind == KILN_OPT_ADADELTA && !(c->rho >= 0 && c->rho <= 1))
        return kiln_fail(KILN_ERR_INVALID_ARG, "adadelta: rho %g outside [0, 1]", (double)c->rho);
    if (c->kind == KILN_OPT_SGD && c->nesterov && (c->momentum <= 0 || c->dampening != 0))
        return kiln_fail(KILN_ERR_INVALID_ARG, "sgd: nesterov needs momentum > 0 and dampening 0");
    int betas = c->kind == KILN_OPT_ADAMW || c->kind == KILN_OPT_LAMB || c->kind == KILN_OPT_NOVOGRAD;
    if (betas && !(c->beta1 >= 0 && c->beta1 < 1 && c->beta2 >= 0 && c->beta2 < 1 && c->eps >= 0))
        return kiln_fail(KILN_ERR_INVALID_ARG, "%s: betas (%g, %g) must be in [0, 1) and eps %g >= 0", names[c->kind],
                         (double)c->beta1, (double)c->beta2, (double)c->eps);
    if (c->kind == KILN_OPT_LARS && !(c->trust > 0 && c->momentum >= 0))
        return kiln_fail(KILN_ERR_INVALID_ARG, "lars: trust coefficient %g must be > 0 and momentum %g >= 0",
                         (double)c->trust, (double)c->momentum);
    return KILN_OK;
}

/* a zeroed buffer of `bytes` in the backend's memory, or a copy of `init` */
static void *backend_buffer(const kiln_backend *be, size_t bytes, const void *init) {
    void *d = be->alloc(bytes ? bytes : 64), *z = init ? NULL : calloc(1, bytes ? bytes : 64);
    kiln_status st = d && (init || z) ? be->copy(d, init ? init : z, bytes ? bytes : 64, 0) : KILN_ERR_NOMEM;
    free(z);
    if (st != KILN_OK && d) be->free(d);
    return st == KILN_OK ? d : NULL;
}

/* the layer-wise kernels' table: (offset, numel, decays) per parameter */
static int64_t *tensor_table(const kiln_optim *o) {
    int np = kiln_params_count(o->P);
    int64_t *t = malloc((size_t)(np ? np : 1) * 3 * sizeof *t);
    for (int i = 0; t && i < np; i++) {
        t[3 * i] = kiln_params_offset(o->P, i);
        t[3 * i + 1] = kiln_params_numel(o->P, i);
        t[3 * i + 2] = kiln_optim_decays(o, i);
    }
    return t;
}

static kiln_status alloc_state(kiln_optim *o) {
    int np = kiln_params_count(o->P);
    size_t es = kiln_dtype_size(kiln_params_dtype(o->P));
    o->nstate = o->c.kind == KILN_OPT_SGD ? (o->c.momentum != 0) : o->c.kind == KILN_OPT_LARS ? 1 : 2;
    o->norm2 = backend_buffer(o->be, 64, NULL);
    int ok = o->norm2 != NULL;
    for (int i = 0; i < o->nstate; i++) {
        o->state_len[i] = o->c.kind == KILN_OPT_NOVOGRAD && i == 1 ? np : kiln_params_total(o->P);
        ok = ok && (o->state[i] = backend_buffer(o->be, (size_t)o->state_len[i] * es, NULL));
    }
    if (ok) {
        int64_t *t = tensor_table(o);
        ok = t && (o->tensors = backend_buffer(o->be, (size_t)np * 3 * sizeof *t, t));
        free(t);
    }
    if (ok && layerwise(o->c.kind)) ok = (o->norms = backend_buffer(o->be, (size_t)np * 2 * sizeof(double), NULL)) != NULL;
    return ok ? KILN_OK : kiln_fail(KILN_ERR_NOMEM, "optimizer: out of memory for state");
}

kiln_status kiln_optim_new(const kiln_optim_config *cfg, kiln_params *P, kiln_optim **out) {
    *out = NULL;
    kiln_status st = check_config(cfg);
    if (st != KILN_OK) return st;
    kiln_optim *o = calloc(1, sizeof *o);
    if (!o) return kiln_fail(KILN_ERR_NOMEM, "optimizer: out of memory");
    o->c = *cfg;
    o->P = P;
    o->be = kiln_backend_get(kiln_params_backend(P)); /* the state lives where the parameters do */
    if ((st = alloc_state(o)) != KILN_OK) {
        kiln_optim_free(o);
        return st;
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
    void *bufs[7] = {o->state[0], o->state[1], o->norm2, o->tensors, o->norms, o->amp, o->amp_acc};
    for (int i = 0; i < 7; i++)
        if (bufs[i]) o->be->free(bufs[i]);
    free_list(o);
    free(o);
}

/* wd: the element-wise optimizers' decay for this run; the layer-wise ones take it per tensor from the table */
static void set_attrs(const kiln_optim_config *c, float wd, int phase, kiln_attrs *a) {
    if (c->kind == KILN_OPT_SGD) a->sgd = (kiln_sgd_attrs){c->momentum, c->dampening, wd, c->nesterov};
    if (c->kind == KILN_OPT_ADAMW) a->adamw = (kiln_adamw_attrs){c->beta1, c->beta2, c->eps, wd};
    if (c->kind == KILN_OPT_ADADELTA) a->adadelta = (kiln_adadelta_attrs){c->rho, c->eps, wd};
    if (layerwise(c->kind))
        a->layerwise = (kiln_layerwise_attrs){c->beta1, c->beta2, c->eps, c->weight_decay, c->momentum, c->trust, phase};
}

/* Parameters first..last (with gradients, adjacent): elements [off, off + n)
 * of the flat buffers, up to the next parameter (its alignment padding too). */
static void span_of(const kiln_params *P, int first, int last, int64_t *off, int64_t *n) {
    *off = kiln_params_offset(P, first);
    *n = (last + 1 < kiln_params_count(P) ? kiln_params_offset(P, last + 1) : kiln_params_total(P)) - *off;
}

/* one update step over parameters first..last; phase as kiln_layerwise_attrs */
static void update_step(kiln_optim *o, int first, int last, int phase, kiln_step *s) {
    kiln_dtype dt = kiln_params_dtype(o->P);
    int64_t off, n, np = last - first + 1;
    span_of(o->P, first, last, &off, &n);
    size_t es = kiln_dtype_size(dt), at = (size_t)off * es;
    *s = kiln_flat_step(update_op[o->c.kind], kiln_optim_name(o->c.kind));
    s->nin = 1;
    s->in[0] = kiln_tdesc_flat((char *)kiln_params_grad(o->P) + at, dt, n);
    s->out[0] = kiln_tdesc_flat((char *)kiln_params_data(o->P) + at, dt, n);
    s->nout = 1 + o->nstate;
    for (int k = 0; k < o->nstate; k++)
        s->out[1 + k] = kiln_optim_state_per_tensor(o, k) ? kiln_tdesc_flat((char *)o->state[k] + (size_t)first * es, dt, np)
                                                          : kiln_tdesc_flat((char *)o->state[k] + at, dt, n);
    int table = per_tensor_decay(o);
    set_attrs(&o->c, table || kiln_optim_decays(o, first) ? o->c.weight_decay : 0.0f, phase, &s->attr);
    if (!table) return;
    s->nin = 2;
    s->in[1] = kiln_tdesc_flat(o->tensors + 3 * first, KILN_I64, 3 * np);
    if (layerwise(o->c.kind)) s->out[s->nout++] = kiln_tdesc_flat(o->norms + 2 * first, KILN_F64, 2 * np);
}
/* From *i, the next parameters one update covers: adjacent ones with gradients
 * (where the kernels take one decay per step, with decay on, also alike in
 * taking it); 0 when none is left. */
static int next_group(const kiln_optim *o, int *i, int *first, int *last) {
    const uint8_t *has = kiln_params_has_grad(o->P);
    int np = kiln_params_count(o->P), cut = !per_tensor_decay(o) && o->c.weight_decay > 0;
    while (*i < np && !has[*i]) (*i)++;
    if (*i >= np) return 0;
    *first = *last = *i;
    while (*last + 1 < np && has[*last + 1] && (!cut || kiln_optim_decays(o, *last + 1) == kiln_optim_decays(o, *first)))
        (*last)++;
    *i = *last + 1;
    return 1;
}

static kiln_status build(kiln_optim *o) {
    free_list(o);
    int np = kiln_params_count(o->P), max = 6 * np + 2, phases = layerwise(o->c.kind) ? 2 : 1;
    o->list = calloc((size_t)max, sizeof *o->list);
    kiln_status st = o->list ? KILN_OK : kiln_fail(KILN_ERR_NOMEM, "optimizer: out of memory");
    if (st == KILN_OK && o->amp) {
        int n = kiln_amp_steps(o->P, o->amp, o->amp_acc, o->list, max);
        if (n < 0) st = KILN_ERR_NOMEM;
        else o->nlist = o->amp_from = n;
    }
    if (st == KILN_OK && o->clip > 0) {
        int n = kiln_clip_steps(o->P, o->clip, o->norm2, o->list + o->nlist, max - o->nlist);
        if (n < 0) st = KILN_ERR_NOMEM;
        else o->nlist += n;
    }
    for (int i = 0, first, last; st == KILN_OK && next_group(o, &i, &first, &last);)
        for (int phase = 0; phase < phases; phase++) update_step(o, first, last, phase, &o->list[o->nlist++]);
    if (st == KILN_OK && o->amp) kiln_amp_update_step(o->amp, &o->sc, &o->list[o->nlist++]);
    for (int i = 0; st == KILN_OK && i < o->nlist; i++) st = kiln_backend_prepare(o->be, &o->list[i], NULL);
    if (st != KILN_OK) {
        free_list(o);
        return st;
    }
    o->built = 1;
    o->built_for = kiln_params_has_grad_version(o->P);
    return KILN_OK;
}

/* With the scaler on a backend whose kernels do not check it: the scaler's steps, then found_inf read (in
 * place on a host backend) to run either the update or only the scaler's update. Bias corrections count the
 * updates made (the device kernels subtract the skipped ones themselves). */
static kiln_status scaled_step(kiln_optim *o, kiln_run_ctx *rc) {
    kiln_status st = kiln_backend_run(o->be, o->list, o->amp_from, rc, NULL);
    kiln_amp_state a;
    if (st == KILN_OK) st = o->be->copy(&a, o->amp, sizeof a, 0);
    if (st != KILN_OK) return st;
    rc->optim_step -= a.skipped;
    int from = a.found_inf ? o->nlist - 1 : o->amp_from;
    return kiln_backend_run(o->be, o->list + from, o->nlist - from, rc, NULL);
}

kiln_status kiln_optim_step(kiln_optim *o) {
    if (!o->built || o->built_for != kiln_params_has_grad_version(o->P)) {
        kiln_status st = build(o);
        if (st != KILN_OK) return st;
    }
    kiln_run_ctx rc = {.lr = o->c.lr, .optim_step = o->steps + 1, .amp = o->amp};
    kiln_status st = o->amp && !o->be->amp_on_device ? scaled_step(o, &rc) : kiln_backend_run(o->be, o->list, o->nlist, &rc, NULL);
    if (st == KILN_OK) o->steps++;
    return st;
}

kiln_status kiln_optim_set_grad_scaler(kiln_optim *o, const kiln_grad_scaler_config *c) {
    free_list(o);
    if (o->amp) o->be->free(o->amp);
    if (o->amp_acc) o->be->free(o->amp_acc);
    o->amp = NULL;
    o->amp_acc = NULL;
    if (!c) return KILN_OK;
    int pow2 = 0;
    if (c->init_scale > 0 && isfinite(c->init_scale)) frexpf(c->init_scale, &pow2);
    if (!(c->init_scale > 0) || !isfinite(c->init_scale) || ldexpf(0.5f, pow2) != c->init_scale || c->growth_factor < 1 ||
        !(c->backoff_factor > 0 && c->backoff_factor < 1) || c->growth_interval < 1)
        return kiln_fail(KILN_ERR_INVALID_ARG, "grad scaler: the scale %g must be a power of 2, growth %g >= 1, backoff %g in "
                         "(0, 1), interval %lld >= 1", (double)c->init_scale, (double)c->growth_factor,
                         (double)c->backoff_factor, (long long)c->growth_interval);
    o->sc = *c;
    kiln_amp_state a = {.scale = c->init_scale};
    o->amp = backend_buffer(o->be, sizeof a, &a);
    o->amp_acc = backend_buffer(o->be, sizeof(double), NULL);
    return o->amp && o->amp_acc ? KILN_OK : kiln_fail(KILN_ERR_NOMEM, "grad scaler: out of memory");
}

const void *kiln_optim_grad_scaler(const kiln_optim *o) { return o->amp; }

kiln_status kiln_optim_grad_scaler_read(const kiln_optim *o, kiln_grad_scaler_info *out) {
    kiln_amp_state a;
    if (!o->amp) return kiln_fail(KILN_ERR_INVALID_ARG, "grad scaler: the optimizer has none");
    kiln_status st = o->be->copy(&a, o->amp, sizeof a, 0);
    if (st == KILN_OK) *out = (kiln_grad_scaler_info){a.scale, a.tracker, a.skipped};
    return st;
}

kiln_status kiln_optim_grad_scaler_write(kiln_optim *o, const kiln_grad_scaler_info *in) {
    if (!o->amp) return kiln_fail(KILN_ERR_INVALID_ARG, "grad scaler: the optimizer has none");
    kiln_amp_state a = {.scale = (float)in->scale, .tracker = (int32_t)in->tracker, .skipped = in->skipped};
    return o->be->copy(o->amp, &a, sizeof a, 0);
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
    /* the exp_avg_sq of adamw, lamb and novograd, adadelta's square_avg and acc_delta;
     * momentum buffers and exp_avg take either sign */
    return (i == 1 && o->c.kind != KILN_OPT_SGD && o->c.kind != KILN_OPT_LARS) || o->c.kind == KILN_OPT_ADADELTA;
}
int kiln_optim_state_per_tensor(const kiln_optim *o, int i) { return o->c.kind == KILN_OPT_NOVOGRAD && i == 1; }
int kiln_optim_decays(const kiln_optim *o, int i) {
    int64_t shape[KILN_MAX_DIMS];
    return o->c.decay_all || kiln_params_shape(o->P, i, shape) >= 2;
}
static size_t state_bytes(const kiln_optim *o, int i) {
    return (size_t)o->state_len[i] * kiln_dtype_size(kiln_params_dtype(o->P));
}
kiln_status kiln_optim_state_read(const kiln_optim *o, int i, void *host) { return o->be->copy(host, o->state[i], state_bytes(o, i), 0); }
kiln_status kiln_optim_state_write(kiln_optim *o, int i, const void *host) { return o->be->copy(o->state[i], host, state_bytes(o, i), 0); }
kiln_optim_kind kiln_optim_get_kind(const kiln_optim *o) { return o->c.kind; }
const kiln_optim_config *kiln_optim_get_config(const kiln_optim *o) { return &o->c; }
