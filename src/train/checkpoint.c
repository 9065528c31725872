/* Checkpoints in safetensors: parameters under their PyTorch names (so a
 * kiln model loads in PyTorch with load_state_dict(strict=False) and a
 * PyTorch state_dict loads in kiln), optimizer state as "optim.<state>.<name>",
 * and the run's position in the metadata. Writes are atomic (kiln_st_writer_save). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kiln/safetensors.h"
#include "train/internal/checkpoint.h"

#define FORMAT "kiln-checkpoint"
#define VERSION "1"

/* What a checkpoint holds, readable on the host: the backend's memory itself
 * when it is host memory (cpu), else copies (a device backend). */
typedef struct {
    const float *params, *state[2];
    const void **bufs;
    void *owned[3];
    int nowned;
} host_views;

static void host_views_free(host_views *h, int nbuf) {
    for (int i = 0; i < h->nowned; i++) free(h->owned[i]);
    for (int i = 0; h->bufs && h->nowned && i < nbuf; i++) free((void *)h->bufs[i]);
    free(h->bufs);
}

static kiln_status host_views_of(kiln_params *P, kiln_optim *o, host_views *h) {
    memset(h, 0, sizeof *h);
    int nb = kiln_params_buffer_count(P), ns = o ? kiln_optim_state_count(o) : 0;
    size_t bytes = (size_t)kiln_params_total(P) * 4 + 64;
    if (!(h->bufs = calloc((size_t)(nb ? nb : 1), sizeof *h->bufs))) return KILN_ERR_NOMEM;
    if (kiln_params_host_memory(P)) {
        h->params = kiln_params_data(P);
        for (int k = 0; k < ns; k++) h->state[k] = kiln_optim_state(o, k);
        for (int i = 0; i < nb; i++) h->bufs[i] = kiln_params_buffer_data(P, i);
        return KILN_OK;
    }
    kiln_status st = KILN_OK;
    for (int k = -1; k < ns && st == KILN_OK; k++) {
        void *c = h->owned[h->nowned++] = malloc(bytes);
        st = !c ? KILN_ERR_NOMEM : k < 0 ? kiln_params_read(P, c) : kiln_optim_state_read(o, k, c);
        if (k < 0) h->params = c;
        else h->state[k] = c;
    }
    for (int i = 0; i < nb && st == KILN_OK; i++) {
        void *c = malloc((size_t)kiln_params_buffer_numel(P, i) * 8 + 8);
        h->bufs[i] = c;
        st = c ? kiln_params_buffer_read(P, i, c) : KILN_ERR_NOMEM;
    }
    return st;
}

/* where parameter i's part of optimizer state k lies in its buffer, and its shape:
 * the parameter's, or a scalar for a state kept per tensor (NovoGrad's exp_avg_sq) */
static int64_t state_slot(const kiln_optim *o, int k, kiln_params *P, int i, int *nd, int64_t *shape) {
    if (kiln_optim_state_per_tensor(o, k)) {
        *nd = 0;
        return i;
    }
    *nd = kiln_params_shape(P, i, shape);
    return kiln_params_offset(P, i);
}

kiln_status kiln_checkpoint_save(const char *path, kiln_params *P, kiln_optim *o, const kiln_ckpt_state *s) {
    host_views h;
    kiln_status st = host_views_of(P, o, &h);
    kiln_st_writer *w = st == KILN_OK ? kiln_st_writer_new() : NULL;
    if (!w) {
        host_views_free(&h, kiln_params_buffer_count(P));
        return st != KILN_OK && st != KILN_ERR_NOMEM ? kiln_fail_context(st, "%s", path)
                                                     : kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", path);
    }
    const float *data = h.params;
    int np = kiln_params_count(P);
    /* "optim.<state>.<param>" names must outlive the writer until save */
    char (*names)[128] = calloc((size_t)(2 * np + 1), sizeof *names);
    if (!names) {
        kiln_st_writer_free(w);
        host_views_free(&h, kiln_params_buffer_count(P));
        return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", path);
    }
    for (int i = 0; i < np && st == KILN_OK; i++) {
        int64_t shape[KILN_MAX_DIMS];
        int nd = kiln_params_shape(P, i, shape);
        st = kiln_st_writer_add(w, kiln_params_name(P, i), KILN_F32, nd, shape, data + kiln_params_offset(P, i));
    }
    for (int i = 0; i < kiln_params_buffer_count(P) && st == KILN_OK; i++) {
        int64_t shape[KILN_MAX_DIMS];
        int nd = kiln_params_buffer_shape(P, i, shape);
        st = kiln_st_writer_add(w, kiln_params_buffer_name(P, i), kiln_params_buffer_dtype(P, i), nd, shape, h.bufs[i]);
    }
    for (int k = 0; o && k < kiln_optim_state_count(o) && st == KILN_OK; k++) {
        const float *sd = h.state[k];
        for (int i = 0; i < np && st == KILN_OK; i++) {
            int64_t shape[KILN_MAX_DIMS];
            int nd;
            int64_t at = state_slot(o, k, P, i, &nd, shape);
            char *name = names[k * np + i];
            snprintf(name, sizeof names[0], "optim.%s.%s", kiln_optim_state_name(o, k), kiln_params_name(P, i));
            st = kiln_st_writer_add(w, name, KILN_F32, nd, shape, sd + at);
        }
    }
    char buf[64];
#define META(k, fmt, v)                                            \
    if (st == KILN_OK) {                                           \
        snprintf(buf, sizeof buf, fmt, v);                         \
        st = kiln_st_writer_meta(w, k, buf);                       \
    }
    META("format", "%s", "pt");
    META("kiln.format", "%s", FORMAT);
    META("kiln.version", "%s", VERSION);
    META("kiln.model", "%s", s->model);
    META("kiln.optimizer", "%s", s->optimizer);
    META("kiln.step", "%" PRId64, s->step);
    META("kiln.epoch", "%" PRId64, s->epoch);
    META("kiln.next_batch", "%" PRId64, s->next_batch);
    META("kiln.seed", "%" PRIu64, s->seed);
    META("kiln.batch_size", "%" PRId64, s->batch_size);
    META("kiln.world_size", "%" PRId64, s->world_size > 0 ? s->world_size : 1);
    META("kiln.accumulate", "%" PRId64, s->accumulate);
    META("kiln.lr", "%.9g", (double)s->lr);
    META("kiln.optim_steps", "%" PRId64, s->optim_steps);
    META("kiln.backend", "%s", s->backend[0] ? s->backend : "cpu");
#undef META
    kiln_grad_scaler_info gs;
    if (st == KILN_OK && o && kiln_optim_grad_scaler(o) && (st = kiln_optim_grad_scaler_read(o, &gs)) == KILN_OK) {
        snprintf(buf, sizeof buf, "%.9g %" PRId64 " %" PRId64, gs.scale, gs.tracker, gs.skipped);
        st = kiln_st_writer_meta(w, "kiln.grad_scaler", buf);
    }
    if (st == KILN_OK && s->settings && s->settings[0]) st = kiln_st_writer_meta(w, "kiln.settings", s->settings);
    /* the conv algorithms this run used: a resumed run uses the same ones, so it continues bit for bit */
    const char *be = s->backend[0] ? s->backend : "cpu";
    size_t tlen = kiln_backend_state_export(be, NULL, 0);
    char *tuned = malloc(tlen + 1);
    if (tuned) kiln_backend_state_export(be, tuned, tlen + 1);
    if (st == KILN_OK && tuned && tuned[0]) st = kiln_st_writer_meta(w, "kiln.autotune", tuned);
    if (st == KILN_OK) st = kiln_st_writer_save(w, path);
    kiln_st_writer_free(w);
    host_views_free(&h, kiln_params_buffer_count(P));
    free(names);
    free(tuned);
    return st;
}

/* copies a tensor into a float destination, converting from what PyTorch may have written */
static kiln_status load_into(const kiln_st_file *f, const char *name, float *dst, int ndim, const int64_t *shape,
                             const char *path) {
    const kiln_tensor *t = kiln_st_find(f, name);
    if (!t) { /* Hugging Face's GPT-2 files name the gpt's tensors "transformer.wte.weight", ... */
        char hf[300];
        snprintf(hf, sizeof hf, "transformer.%s", name);
        t = kiln_st_find(f, hf);
    }
    if (!t) return kiln_fail(KILN_ERR_SHAPE, "%s: tensor '%s' is missing", path, name);
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same) {
        char a[96], b[96];
        return kiln_fail(KILN_ERR_SHAPE, "%s: tensor '%s' has shape %s, the model wants %s", path, name,
                         kiln_shape_str(t->ndim, t->shape, a, sizeof a), kiln_shape_str(ndim, shape, b, sizeof b));
    }
    int64_t n = kiln_tensor_numel(t);
    switch (t->dtype) {
    case KILN_F32: memcpy(dst, t->data, (size_t)n * 4); break;
    case KILN_F64: for (int64_t i = 0; i < n; i++) dst[i] = (float)((const double *)t->data)[i]; break;
    case KILN_BF16: for (int64_t i = 0; i < n; i++) dst[i] = kiln_bf16_to_f32(((const uint16_t *)t->data)[i]); break;
    case KILN_F16: for (int64_t i = 0; i < n; i++) dst[i] = kiln_f16_to_f32(((const uint16_t *)t->data)[i]); break;
    default: return kiln_fail(KILN_ERR_FORMAT, "%s: tensor '%s' is %s, not a float type", path, name, kiln_dtype_name(t->dtype));
    }
    /* bad input, not a numeric failure of the run: NaN or Inf stored, or an f64 beyond float's range */
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(dst[i])) {
            if (t->dtype == KILN_F64 && isfinite(((const double *)t->data)[i]))
                return kiln_fail(KILN_ERR_FORMAT, "%s: tensor '%s' holds %g at %lld, beyond the range of f32", path, name,
                                 ((const double *)t->data)[i], (long long)i);
            return kiln_fail(KILN_ERR_FORMAT, "%s: tensor '%s' holds NaN or Inf at %lld", path, name, (long long)i);
        }
    return KILN_OK;
}

/* Buffers (batch norm's running statistics) staged like the parameters: float
 * buffers through load_into, i64 counters as they are. Returns the staging
 * blocks (one per buffer) for commit_buffers, or NULL with a message. */
static void **stage_buffers(const kiln_st_file *f, kiln_params *P, const char *path, kiln_status *st) {
    int nb = kiln_params_buffer_count(P);
    void **stage = calloc((size_t)(nb ? nb : 1), sizeof *stage);
    *st = stage ? KILN_OK : kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < nb && *st == KILN_OK; i++) {
        int64_t shape[KILN_MAX_DIMS], n = kiln_params_buffer_numel(P, i);
        int nd = kiln_params_buffer_shape(P, i, shape);
        const char *name = kiln_params_buffer_name(P, i);
        if (!(stage[i] = kiln_calloc((size_t)(n ? n : 1) * 8))) {
            *st = kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        if (kiln_params_buffer_dtype(P, i) != KILN_I64) {
            *st = load_into(f, name, stage[i], nd, shape, path);
            continue;
        }
        const kiln_tensor *t = kiln_st_find(f, name);
        if (!t) *st = kiln_fail(KILN_ERR_SHAPE, "%s: tensor '%s' is missing", path, name);
        else if (t->dtype != KILN_I64 || kiln_tensor_numel(t) != n)
            *st = kiln_fail(KILN_ERR_SHAPE, "%s: tensor '%s' is %s with %lld values, the model wants i64 with %lld", path,
                            name, kiln_dtype_name(t->dtype), (long long)kiln_tensor_numel(t), (long long)n);
        else memcpy(stage[i], t->data, (size_t)n * 8);
    }
    if (*st == KILN_OK) return stage;
    for (int i = 0; stage && i < nb; i++) kiln_free(stage[i]);
    free(stage);
    return NULL;
}

/* copies staged buffers in (commit = 1) and frees the staging */
static kiln_status finish_buffers(kiln_params *P, void **stage, int commit) {
    kiln_status st = KILN_OK;
    for (int i = 0; stage && i < kiln_params_buffer_count(P); i++) {
        if (commit && st == KILN_OK) st = kiln_params_buffer_write(P, i, stage[i]);
        kiln_free(stage[i]);
    }
    free(stage);
    return st;
}

/* A model whose biases --fix-bias removed cannot take a file that has them: its
 * batch norms' running means were learned with the bias added, and would be
 * off by it without. */
static kiln_status check_removed(const kiln_st_file *f, kiln_params *P, const char *path) {
    const char *r = kiln_params_removed(P);
    while (*r) {
        size_t n = strcspn(r, ",");
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), r);
        if (kiln_st_find(f, name))
            return kiln_fail(KILN_ERR_INVALID_ARG, "%s holds '%s', a bias --fix-bias removes from this model: the running "
                             "mean of the batch norm after it was learned with the bias, so dropping it would change "
                             "the results; load this file without --fix-bias", path, name);
        r += n + (r[n] == ',');
    }
    return KILN_OK;
}

static kiln_status load_params_from(const kiln_st_file *f, kiln_params *P, const char *path) {
    if (kiln_params_dtype(P) != KILN_F32) return kiln_fail(KILN_ERR_INVALID_ARG, "%s: loading needs f32 parameters", path);
    kiln_status st = check_removed(f, P, path);
    if (st != KILN_OK) return st;
    /* check every tensor before touching the parameters: a bad file changes nothing */
    float *stage = kiln_calloc((size_t)kiln_params_total(P) * 4 + 64); /* zero padding between views */
    if (!stage) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < kiln_params_count(P) && st == KILN_OK; i++) {
        int64_t shape[KILN_MAX_DIMS];
        int nd = kiln_params_shape(P, i, shape);
        const char *name = kiln_params_name(P, i);
        if (kiln_params_cancelled(P, i) && !kiln_st_find(f, name)) { /* saved by a --fix-bias run: zero is the same model */
            kiln_log(KILN_LOG_INFO, "%s has no '%s' (saved with --fix-bias?): it is zero, which the batch norm after it "
                     "makes the same model", path, name);
            continue;
        }
        st = load_into(f, name, stage + kiln_params_offset(P, i), nd, shape, path);
    }
    void **bufs = st == KILN_OK ? stage_buffers(f, P, path, &st) : NULL;
    if (st == KILN_OK) st = kiln_params_write(P, stage);
    kiln_status sb = finish_buffers(P, bufs, st == KILN_OK);
    kiln_free(stage);
    return st == KILN_OK ? sb : st;
}

kiln_status kiln_checkpoint_load_params(kiln_params *P, const char *path) {
    kiln_st_file *f;
    kiln_status st = kiln_st_open(path, &f);
    if (st != KILN_OK) return st;
    st = load_params_from(f, P, path);
    kiln_st_close(f);
    return st;
}

/* an integer of the metadata within [lo, hi]; errors name the file and the key */
static kiln_status meta_i64(const kiln_st_file *f, const char *key, int64_t lo, int64_t hi, int64_t *out, const char *path) {
    const char *v = kiln_st_meta(f, key);
    char *end;
    if (!v) return kiln_fail(KILN_ERR_FORMAT, "%s: not a kiln checkpoint (no '%s' in its metadata); --load reads weights only", path, key);
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (*end || end == v) return kiln_fail(KILN_ERR_FORMAT, "%s: metadata '%s' is '%.40s', not an integer", path, key, v);
    if (errno == ERANGE || x < lo || x > hi)
        return kiln_fail(KILN_ERR_FORMAT, "%s: metadata '%s' is %.40s, outside [%lld, %lld]", path, key, v, (long long)lo,
                         (long long)hi);
    *out = x;
    return KILN_OK;
}

/* the run's position and settings, each checked before anything is loaded */
static kiln_status read_state(const kiln_st_file *f, const char *path, kiln_ckpt_state *s) {
    const char *model = kiln_st_meta(f, "kiln.model"), *opt = kiln_st_meta(f, "kiln.optimizer"), *lr = kiln_st_meta(f, "kiln.lr");
    snprintf(s->model, sizeof s->model, "%s", model ? model : "");
    snprintf(s->optimizer, sizeof s->optimizer, "%s", opt ? opt : "");
    const int64_t big = (int64_t)1 << 53; /* positions beyond any run; keeps every sum of them exact */
    int64_t seed = 0;
    kiln_status st = meta_i64(f, "kiln.step", 0, big, &s->step, path);
    if (st == KILN_OK) st = meta_i64(f, "kiln.epoch", 0, big, &s->epoch, path);
    if (st == KILN_OK) st = meta_i64(f, "kiln.next_batch", 0, big, &s->next_batch, path);
    if (st == KILN_OK) st = meta_i64(f, "kiln.seed", 0, INT64_MAX, &seed, path);
    if (st == KILN_OK) st = meta_i64(f, "kiln.batch_size", 1, KILN_MAX_BATCH, &s->batch_size, path);
    if (st == KILN_OK) st = meta_i64(f, "kiln.optim_steps", 0, s->step, &s->optim_steps, path);
    s->seed = (uint64_t)seed;
    s->accumulate = 1; /* absent in checkpoints of runs without accumulation */
    if (st == KILN_OK && kiln_st_meta(f, "kiln.accumulate")) st = meta_i64(f, "kiln.accumulate", 1, 1 << 20, &s->accumulate, path);
    s->world_size = 1; /* absent in checkpoints written before data parallel training */
    if (st == KILN_OK && kiln_st_meta(f, "kiln.world_size")) st = meta_i64(f, "kiln.world_size", 1, KILN_MAX_WORLD, &s->world_size, path);
    if (st != KILN_OK) return st;
    char *end = NULL;
    double v = lr ? strtod(lr, &end) : NAN;
    if (!lr || end == lr || *end || !isfinite(v) || v < 0 || v > 3.4e38)
        return kiln_fail(KILN_ERR_FORMAT, "%s: metadata 'kiln.lr' is %.40s, not a learning rate (a finite number >= 0)", path,
                         lr ? lr : "absent");
    s->lr = (float)v;
    return KILN_OK;
}

/* optimizer state that is an average of squares cannot be negative */
static kiln_status check_state_signs(const float *state, const kiln_optim *o, int k, kiln_params *P, const char *path) {
    if (!kiln_optim_state_nonnegative(o, k)) return KILN_OK;
    for (int i = 0; i < kiln_params_count(P); i++) {
        int per_tensor = kiln_optim_state_per_tensor(o, k);
        const float *v = state + (per_tensor ? i : kiln_params_offset(P, i));
        for (int64_t j = 0; j < (per_tensor ? 1 : kiln_params_numel(P, i)); j++)
            if (v[j] < 0)
                return kiln_fail(KILN_ERR_FORMAT, "%s: tensor 'optim.%s.%s' holds %g at %lld; an average of squares cannot be "
                                 "negative", path, kiln_optim_state_name(o, k), kiln_params_name(P, i), (double)v[j], (long long)j);
    }
    return KILN_OK;
}

/* the gradient scaler's "scale tracker skipped": a power of 2, counts within the updates made */
static kiln_status read_scaler(const char *v, int64_t optim_steps, kiln_grad_scaler_info *gs, const char *path) {
    char end;
    long long tracker, skipped;
    int e = 0;
    int n = sscanf(v, "%lf %lld %lld %c", &gs->scale, &tracker, &skipped, &end);
    /* within float's normal powers of 2: the scale is a float, and its inverse must be one too */
    if (n == 3 && gs->scale >= 0x1p-126 && gs->scale <= 0x1p127) frexp(gs->scale, &e);
    if (n != 3 || !(gs->scale >= 0x1p-126) || ldexp(0.5, e) != gs->scale || tracker < 0 || skipped < 0 || skipped > optim_steps ||
        tracker > optim_steps)
        return kiln_fail(KILN_ERR_FORMAT, "%s: metadata 'kiln.grad_scaler' is '%.60s', not 'SCALE TRACKER SKIPPED' (a power "
                         "of 2, then counts within the %lld updates made)", path, v, (long long)optim_steps);
    gs->tracker = tracker;
    gs->skipped = skipped;
    return KILN_OK;
}

kiln_status kiln_checkpoint_resume(const char *path, kiln_params *P, kiln_optim *o, kiln_ckpt_state *s) {
    kiln_st_file *f;
    kiln_status st = kiln_st_open(path, &f);
    if (st != KILN_OK) return st;
    memset(s, 0, sizeof *s);
    const char *fmt = kiln_st_meta(f, "kiln.format");
    if (!fmt || strcmp(fmt, FORMAT) != 0) {
        /* the message first: fmt points into the file's memory */
        st = kiln_fail(KILN_ERR_FORMAT, "%s: not a kiln checkpoint (metadata kiln.format is %.64s)", path, fmt ? fmt : "absent");
        kiln_st_close(f);
        return st;
    }
    st = read_state(f, path, s);
    const char *tuned = kiln_st_meta(f, "kiln.autotune");
    const char *be = kiln_st_meta(f, "kiln.backend");
    if (st == KILN_OK && tuned) st = kiln_backend_state_import(be ? be : "cpu", tuned, path);
    /* everything is read into staging buffers first: a bad tensor changes nothing */
    int64_t total = kiln_params_total(P);
    int ns = o ? kiln_optim_state_count(o) : 0;
    float *stage = st == KILN_OK ? kiln_calloc((size_t)(total * (1 + ns)) * 4 + 64) : NULL;
    if (st == KILN_OK && !stage) st = kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", path);
    if (st == KILN_OK && o && strcmp(s->optimizer, kiln_optim_name(kiln_optim_get_kind(o))) != 0)
        st = kiln_fail(KILN_ERR_INVALID_ARG, "%s: saved with optimizer %s, resumed with %s", path, s->optimizer,
                       kiln_optim_name(kiln_optim_get_kind(o)));
    for (int k = -1; st == KILN_OK && k < ns; k++) {
        float *dst = stage + (k + 1) * total;
        for (int i = 0; i < kiln_params_count(P) && st == KILN_OK; i++) {
            char name[160];
            int64_t shape[KILN_MAX_DIMS];
            int nd = kiln_params_shape(P, i, shape);
            int64_t at = k < 0 ? kiln_params_offset(P, i) : state_slot(o, k, P, i, &nd, shape);
            if (k < 0) snprintf(name, sizeof name, "%s", kiln_params_name(P, i));
            else snprintf(name, sizeof name, "optim.%s.%s", kiln_optim_state_name(o, k), kiln_params_name(P, i));
            st = load_into(f, name, dst + at, nd, shape, path);
        }
        if (st == KILN_OK && k >= 0) st = check_state_signs(dst, o, k, P, path);
    }
    kiln_grad_scaler_info gs;
    int scaler = st == KILN_OK && o && kiln_optim_grad_scaler(o) && kiln_st_meta(f, "kiln.grad_scaler");
    if (scaler) st = read_scaler(kiln_st_meta(f, "kiln.grad_scaler"), s->optim_steps, &gs, path);
    void **bufs = st == KILN_OK ? stage_buffers(f, P, path, &st) : NULL;
    if (st == KILN_OK && scaler) st = kiln_optim_grad_scaler_write(o, &gs);
    if (st == KILN_OK) st = kiln_params_write(P, stage);
    for (int k = 0; k < ns && st == KILN_OK; k++) st = kiln_optim_state_write(o, k, stage + (k + 1) * total);
    kiln_status sb = finish_buffers(P, bufs, st == KILN_OK);
    if (st == KILN_OK) st = sb;
    if (st == KILN_OK) {
        if (o) {
            kiln_optim_set_steps(o, s->optim_steps);
            kiln_optim_set_lr(o, s->lr);
        }
    }
    kiln_free(stage);
    kiln_st_close(f);
    return st;
}

kiln_status kiln_checkpoint_world_size(const char *path, int64_t *world) {
    *world = 1;
    kiln_st_file *f;
    kiln_status st = kiln_st_open(path, &f);
    if (st != KILN_OK) return st;
    if (kiln_st_meta(f, "kiln.world_size")) st = meta_i64(f, "kiln.world_size", 1, KILN_MAX_WORLD, world, path);
    kiln_st_close(f);
    return st;
}

kiln_status kiln_checkpoint_settings(const char *path, char **json) {
    *json = NULL;
    kiln_st_file *f;
    kiln_status st = kiln_st_open(path, &f);
    if (st != KILN_OK) return st;
    const char *s = kiln_st_meta(f, "kiln.settings");
    if (s && !(*json = strdup(s))) st = kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", path);
    kiln_st_close(f);
    return st;
}
