/* Data parallel training: the start-up agreement (same model, same settings,
 * rank 0's weights everywhere) and each step's gradient all-reduce. Gradients
 * arrive already divided by the world size (the trainer scales backward's
 * seed), so a sum over the ranks is their mean and no pass over the buffer
 * follows the reduction. docs/distributed.md. */
#include "dist/internal/ddp.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "base/internal/trace.h"
#include "dist/internal/buckets.h"
#include "dist/internal/ddp_device.h"
#include "graph/internal/plan_hook.h"

/* steps whose last-arriving rank's wait gives the median */
#define RECENT 256
/* requests in flight at once, below the plugin's limit (KILN_MPI_MAX_REQS) */
#define MAX_IN_FLIGHT 128

/* another plan of the run (a --batch-tokens length bucket's): the same buckets, its own ready steps */
typedef struct {
    kiln_ddp *d;
    kiln_buckets B;
} ddp_more;

struct kiln_ddp {
    kiln_comm *c;
    kiln_params *P;
    kiln_ddp_opts o;
    kiln_plan *plan;
    kiln_ddp_dev *dev;    /* parameters in a device's memory (ddp_device.c), else NULL */
    char how[160];        /* kiln_ddp_transport's text */
    int sync;             /* this micro-batch reduces */
    kiln_buckets B;
    ddp_more *more[KILN_DDP_MAX_PLANS]; /* kiln_ddp_attach_more's plans */
    int nmore;
    kiln_comm_req *req;   /* per bucket */
    double *t_start;      /* per bucket: when its all-reduce started */
    int next;             /* the next bucket to start (all ranks start them in index order) */
    int in_flight;
    double busy_from;     /* since when some bucket is in flight */
    double step_wait;     /* this step's wait in kiln_ddp_reduce */
    double *xbuf;         /* kiln_ddp_step_mean's values and the ranks' waits */
    double recent[RECENT]; /* the last-arriving rank's wait of the latest steps, a ring */
    int64_t nrecent;
    kiln_ddp_stats st;
};

kiln_ddp_opts kiln_ddp_defaults(void) { return (kiln_ddp_opts){25, 1, NULL}; }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* "name[2,3] name[4] ...": what two ranks must agree on, parameters then buffers */
static char *describe_model(const kiln_params *P) {
    size_t cap = 4096, o = 0;
    char *s = malloc(cap);
    for (int b = 0; s && b < 2; b++) {
        int n = b ? kiln_params_buffer_count(P) : kiln_params_count(P);
        for (int i = 0; i < n && s; i++) {
            int64_t shape[8];
            int nd = b ? kiln_params_buffer_shape(P, i, shape) : kiln_params_shape(P, i, shape);
            if (cap - o < 512) s = realloc(s, cap *= 2);
            if (!s) break;
            o += (size_t)snprintf(s + o, cap - o, "%s%s[", b ? "buffer " : "", b ? kiln_params_buffer_name(P, i) : kiln_params_name(P, i));
            for (int d = 0; d < nd; d++) o += (size_t)snprintf(s + o, cap - o, "%s%lld", d ? "," : "", (long long)shape[d]);
            o += (size_t)snprintf(s + o, cap - o, "]\n");
        }
    }
    if (s) s[o] = 0;
    return s;
}

/* rank 0's text on every rank: its length, then its bytes */
static kiln_status bcast_text(kiln_comm *c, const char *mine, char **root_text, const char *what) {
    double len = kiln_comm_rank(c) == 0 ? (double)strlen(mine) + 1 : 0;
    kiln_status st = kiln_comm_bcast(c, &len, sizeof len, 0, what);
    if (st != KILN_OK) return st;
    *root_text = malloc((size_t)len);
    if (!*root_text) return kiln_fail(KILN_ERR_NOMEM, "%s: out of memory", what);
    if (kiln_comm_rank(c) == 0) memcpy(*root_text, mine, (size_t)len);
    return kiln_comm_bcast(c, *root_text, (size_t)len, 0, what);
}

/* the first line where two descriptions differ */
static void first_difference(const char *a, const char *b, char *out, size_t len) {
    while (*a && *b) {
        size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
        if (la != lb || memcmp(a, b, la) != 0) {
            snprintf(out, len, "'%.*s' here, '%.*s' on rank 0", (int)la, a, (int)lb, b);
            return;
        }
        a += la + (a[la] ? 1 : 0);
        b += lb + (b[lb] ? 1 : 0);
    }
    snprintf(out, len, *a ? "here '%.*s' and more, rank 0 has no more" : "rank 0 has '%.*s' and more, here no more",
             (int)strcspn(*a ? a : b, "\n"), *a ? a : b);
}

/* the first setting whose value differs from rank 0's */
static int settings_difference(const char *mine, const char *root, char *out, size_t len) {
    json_t *a = json_loads(mine, 0, NULL), *b = json_loads(root, 0, NULL);
    const char *key;
    json_t *v;
    int differ = 0;
    json_object_foreach(a, key, v) {
        json_t *w = json_object_get(b, key);
        if (w && json_equal(v, w)) continue;
        char *x = json_dumps(v, JSON_ENCODE_ANY), *y = w ? json_dumps(w, JSON_ENCODE_ANY) : NULL;
        snprintf(out, len, "--%s %s here, %s on rank 0", key, x ? x : "?", y ? y : "(not set)");
        free(x);
        free(y);
        differ = 1;
        break;
    }
    if (!differ && a && b && json_object_size(a) != json_object_size(b)) {
        snprintf(out, len, "rank 0 has settings this rank has not");
        differ = 1;
    }
    json_decref(a);
    json_decref(b);
    return differ;
}

/* every rank compares its own text with rank 0's; all fail when one differs */
static kiln_status agree(kiln_comm *c, const char *mine, int settings, const char *what) {
    char *root = NULL, diff[512] = "";
    kiln_status st = bcast_text(c, mine, &root, what);
    if (st != KILN_OK) return st;
    int differ = settings ? settings_difference(mine, root, diff, sizeof diff) : strcmp(mine, root) != 0;
    if (differ && !settings) first_difference(mine, root, diff, sizeof diff);
    free(root);
    double bad[2] = {differ, differ ? kiln_comm_rank(c) : 1e9};
    if ((st = kiln_comm_allreduce_f64(c, bad, 1, what)) != KILN_OK) return st;
    if (bad[0] == 0) return KILN_OK;
    if (differ)
        return kiln_fail(KILN_ERR_INVALID_ARG, "rank %d: %s differs from rank 0's: %s", kiln_comm_rank(c),
                         settings ? "the command line" : "the model", diff);
    return kiln_fail(KILN_ERR_INVALID_ARG, "rank %d: %.0f rank(s) %s from rank 0's (their messages say how)", kiln_comm_rank(c),
                     bad[0], settings ? "were given other settings" : "built another model");
}

static kiln_status broadcast_state(kiln_ddp *d) {
    kiln_params *P = d->P;
    if (d->dev) {
        kiln_status st = kiln_ddp_dev_bcast_params(d->dev);
        return st == KILN_OK ? kiln_ddp_sync_buffers(d) : st;
    }
    size_t elem = kiln_params_dtype(P) == KILN_F64 ? 8 : 4;
    kiln_status st = kiln_comm_bcast(d->c, kiln_params_data(P), (size_t)kiln_params_total(P) * elem, 0, "the parameter broadcast");
    return st == KILN_OK ? kiln_ddp_sync_buffers(d) : st;
}

kiln_status kiln_ddp_sync_buffers(kiln_ddp *d) {
    if (d->dev) return kiln_ddp_dev_bcast_buffers(d->dev);
    for (int i = 0; i < kiln_params_buffer_count(d->P); i++) {
        size_t elem = kiln_params_buffer_dtype(d->P, i) == KILN_F32 ? 4 : 8;
        kiln_status st = kiln_comm_bcast(d->c, kiln_params_buffer_data(d->P, i),
                                         (size_t)kiln_params_buffer_numel(d->P, i) * elem, 0, "the buffer broadcast");
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}

kiln_status kiln_ddp_open(kiln_comm *c, kiln_params *P, const kiln_ddp_opts *o, kiln_ddp **out) {
    *out = NULL;
    kiln_ddp *d = calloc(1, sizeof *d);
    if (!d) return kiln_fail(KILN_ERR_NOMEM, "ddp: out of memory");
    d->c = c;
    d->P = P;
    d->o = *o;
    d->sync = 1;
    *out = d;
    if (kiln_comm_size(c) == 1) return KILN_OK;
    char *model = describe_model(P);
    if (!model) return kiln_fail(KILN_ERR_NOMEM, "ddp: out of memory");
    kiln_status st = agree(c, model, 0, "the model check");
    free(model);
    if (st == KILN_OK && o->settings) st = agree(c, o->settings, 1, "the settings check");
    if (st == KILN_OK && !kiln_params_host_memory(P)) st = kiln_ddp_dev_open(c, P, &d->dev);
    if (st == KILN_OK) st = broadcast_state(d);
    return st;
}

void kiln_ddp_free(kiln_ddp *d) {
    if (!d) return;
    kiln_buckets_free(&d->B);
    kiln_ddp_dev_free(d->dev);
    for (int i = 0; i < d->nmore; i++) {
        kiln_buckets_free(&d->more[i]->B);
        free(d->more[i]);
    }
    free(d->req);
    free(d->t_start);
    free(d->xbuf);
    free(d);
}

/* --trace: a span per bucket on the "comm" track; the names live as long as the process */
static const char *bucket_span_name(int i) {
    enum { NAMES = 64 };
    static char names[NAMES][32];
    if (i >= NAMES) return "all-reduce, a later bucket";
    if (!names[i][0]) snprintf(names[i], sizeof names[i], "all-reduce bucket %d", i);
    return names[i];
}

static void bucket_done(kiln_ddp *d, int i, double t) {
    if (kiln_trace_on()) kiln_trace_span(bucket_span_name(i), "comm", d->t_start[i], t);
    if (--d->in_flight == 0) d->st.comm_s += t - d->busy_from;
}

/* tests every bucket in flight (MPI progresses them only when called, on this thread) */
static kiln_status progress(kiln_ddp *d) {
    for (int i = 0; i < d->next && d->in_flight > 0; i++) {
        if (d->req[i].slot < 0) continue;
        int done = kiln_comm_test(d->c, &d->req[i]);
        if (done < 0) return KILN_ERR_IO;
        if (done) bucket_done(d, i, now_s());
    }
    return KILN_OK;
}

static kiln_status wait_bucket(kiln_ddp *d, int i) {
    if (d->req[i].slot < 0) return KILN_OK;
    kiln_status st = kiln_comm_wait(d->c, &d->req[i]);
    if (st == KILN_OK) bucket_done(d, i, now_s());
    return st;
}

static kiln_status start_bucket(kiln_ddp *d) {
    for (int i = 0; d->in_flight >= MAX_IN_FLIGHT && i < d->next; i++) {
        kiln_status st = wait_bucket(d, i);
        if (st != KILN_OK) return st;
    }
    int i = d->next++;
    const kiln_bucket *b = &d->B.b[i];
    double t = now_s();
    if (d->dev) { /* the device's collectives: queued, nothing to test; the device orders it */
        d->t_start[i] = t;
        return kiln_ddp_dev_sum_start(d->dev, b->off, b->n);
    }
    kiln_status st = kiln_comm_iallreduce_f32(d->c, (float *)kiln_params_grad(d->P) + b->off, b->n,
                                              "the gradient all-reduce", &d->req[i]);
    if (st != KILN_OK) return st;
    d->t_start[i] = t;
    if (d->req[i].slot < 0) return KILN_OK; /* done at once */
    if (d->in_flight++ == 0) d->busy_from = t;
    return KILN_OK;
}

/* inside backward of a plan whose ready steps are B's: start the buckets written by now, progress the others */
static kiln_status advance(kiln_ddp *d, const kiln_buckets *B, int list, int done) {
    if (!d->sync) return KILN_OK; /* no_sync: --accumulate's first micro-batches */
    kiln_status st = KILN_OK;
    while (st == KILN_OK && d->next < B->nb && kiln_bucket_ready(B, list, d->next) < done) st = start_bucket(d);
    return st == KILN_OK ? progress(d) : st;
}

/* the plans' hooks: the attached plan's (user: the ddp), another plan's (user: its ddp_more) */
static kiln_status on_step(void *user, int list, int done) {
    kiln_ddp *d = user;
    return advance(d, &d->B, list, done);
}

static kiln_status on_step_more(void *user, int list, int done) {
    ddp_more *m = user;
    return advance(m->d, &m->B, list, done);
}

/* the hook after every backward step from the first bucket's ready point on:
 * a bucket starts at once and is tested after each step while in flight */
static kiln_status place_hooks(kiln_plan *plan, const kiln_buckets *B, kiln_status (*fn)(void *, int, int), void *user) {
    kiln_status st = kiln_plan_set_hook(plan, fn, user);
    for (int l = 0; st == KILN_OK && l < B->nlists; l++) {
        int from = kiln_plan_list_steps(plan, l);
        for (int i = 0; i < B->nb; i++) from = kiln_bucket_ready(B, l, i) < from ? kiln_bucket_ready(B, l, i) : from;
        for (int s = from < 0 ? 0 : from; st == KILN_OK && s < kiln_plan_list_steps(plan, l); s++)
            st = kiln_plan_hook_after(plan, l, s);
    }
    return st;
}

/* on a device the hooks go only where a bucket becomes ready: each segment between them is a captured
 * graph of its own, and nothing needs testing in between */
static kiln_status place_ready_hooks(kiln_plan *plan, const kiln_buckets *B, kiln_status (*fn)(void *, int, int), void *user) {
    kiln_status st = kiln_plan_set_hook(plan, fn, user);
    for (int l = 0; st == KILN_OK && l < B->nlists; l++)
        for (int i = 0; st == KILN_OK && i < B->nb; i++)
            if (kiln_bucket_ready(B, l, i) >= 0) st = kiln_plan_hook_after(plan, l, kiln_bucket_ready(B, l, i));
    return st;
}

static kiln_status hooks(kiln_ddp *d, kiln_plan *plan, const kiln_buckets *B, kiln_status (*fn)(void *, int, int), void *user) {
    if (!d->o.overlap) return kiln_plan_set_hook(plan, NULL, NULL);
    return d->dev ? place_ready_hooks(plan, B, fn, user) : place_hooks(plan, B, fn, user);
}

kiln_status kiln_ddp_attach(kiln_ddp *d, kiln_plan *plan) {
    d->plan = plan;
    if (kiln_comm_size(d->c) == 1) return KILN_OK; /* a world of one: no buckets, no hook */
    if (kiln_params_dtype(d->P) != KILN_F32)
        return kiln_fail(KILN_ERR_INVALID_ARG, "data parallel training reduces f32 gradients; these are %s",
                         kiln_dtype_name(kiln_params_dtype(d->P)));
    if (d->dev && !kiln_ddp_dev_collective(d->dev)) { /* staged through the host: the whole buffer after backward */
        d->st.buckets = 1;
        return kiln_plan_set_hook(plan, NULL, NULL);
    }
    kiln_buckets_free(&d->B);
    kiln_status st = kiln_buckets_make(d->P, plan, d->o.bucket_mb, &d->B);
    if (st != KILN_OK) return st;
    free(d->req);
    free(d->t_start);
    d->req = calloc((size_t)d->B.nb, sizeof *d->req);
    d->t_start = calloc((size_t)d->B.nb, sizeof *d->t_start);
    if (!d->req || !d->t_start) return kiln_fail(KILN_ERR_NOMEM, "ddp: out of memory");
    for (int i = 0; i < d->B.nb; i++) d->req[i].slot = -1;
    d->st.buckets = d->B.nb;
    return hooks(d, plan, &d->B, on_step, d);
}

kiln_status kiln_ddp_attach_more(kiln_ddp *d, kiln_plan *plan) {
    if (kiln_comm_size(d->c) == 1 || !d->o.overlap || (d->dev && !kiln_ddp_dev_collective(d->dev)))
        return kiln_plan_set_hook(plan, NULL, NULL);
    if (d->nmore == KILN_DDP_MAX_PLANS) return kiln_fail(KILN_ERR_INVALID_ARG, "ddp: more than %d plans", KILN_DDP_MAX_PLANS);
    ddp_more *m = calloc(1, sizeof *m);
    if (!m) return kiln_fail(KILN_ERR_NOMEM, "ddp: out of memory");
    m->d = d;
    d->more[d->nmore++] = m; /* freed with d, whatever follows */
    kiln_status st = kiln_buckets_make(d->P, plan, d->o.bucket_mb, &m->B);
    if (st == KILN_OK && m->B.nb != d->B.nb) /* the split depends on the parameters alone */
        st = kiln_fail(KILN_ERR_INVALID_ARG, "ddp: a plan of the run splits the gradients into %d buckets, the first %d",
                       m->B.nb, d->B.nb);
    return st == KILN_OK ? hooks(d, plan, &m->B, on_step_more, m) : st;
}

void kiln_ddp_begin_micro(kiln_ddp *d, int sync) { d->sync = sync; }

/* the device's sums: the buckets not started inside backward started, the device's next work made to wait
 * for all (what they cost shows on the device, not here); or the whole buffer staged through the host */
static kiln_status reduce_device(kiln_ddp *d, double t0) {
    kiln_status st = KILN_OK;
    if (!kiln_ddp_dev_collective(d->dev) || !d->o.overlap) st = kiln_ddp_dev_sum(d->dev); /* the whole buffer at once */
    else {
        while (st == KILN_OK && d->next < d->B.nb) st = start_bucket(d);
        if (st == KILN_OK) st = kiln_ddp_dev_join(d->dev);
    }
    d->next = 0;
    double t1 = now_s();
    if (st != KILN_OK) return st;
    if (kiln_trace_on()) kiln_trace_span("all-reduce (device)", "comm", t0, t1);
    d->st.reductions++;
    d->st.exposed_s += t1 - t0;
    d->st.comm_s += t1 - t0;
    d->step_wait = t1 - t0;
    return KILN_OK;
}

const char *kiln_ddp_transport(kiln_ddp *d) {
    if (!d->dev) return NULL;
    int buckets = kiln_ddp_dev_collective(d->dev) && d->o.overlap;
    snprintf(d->how, sizeof d->how, "%s, %s", kiln_ddp_dev_transport(d->dev),
             buckets ? "each bucket as soon as backward has written it (--bucket-mb)" : "after backward");
    return d->how;
}

kiln_status kiln_ddp_reduce(kiln_ddp *d) {
    if (kiln_comm_size(d->c) == 1) return KILN_OK;
    double t0 = now_s();
    kiln_status st = KILN_OK;
    if (d->dev) return reduce_device(d, t0);
    while (st == KILN_OK && d->next < d->B.nb) st = start_bucket(d); /* --overlap off: all of them here */
    for (int i = 0; st == KILN_OK && i < d->B.nb; i++) st = wait_bucket(d, i);
    double t1 = now_s();
    if (st != KILN_OK) return st;
    if (kiln_trace_on()) kiln_trace_span("all-reduce wait", "comm", t0, t1);
    d->next = 0;
    d->st.reductions++;
    d->st.exposed_s += t1 - t0;
    d->step_wait = t1 - t0;
    return st;
}

/* one all-reduce for the step's values and every rank's wait (each in its slot, zeros
 * elsewhere): the smallest wait is the last arriver's, whose wait is communication alone */
kiln_status kiln_ddp_step_mean(kiln_ddp *d, double *v, int n, const char *what) {
    int w = kiln_comm_size(d->c);
    if (w == 1) return KILN_OK;
    if (!d->xbuf && !(d->xbuf = malloc((size_t)(KILN_DDP_STEP_VALUES + w) * sizeof *d->xbuf)))
        return kiln_fail(KILN_ERR_NOMEM, "ddp: out of memory");
    if (n > KILN_DDP_STEP_VALUES) return kiln_fail(KILN_ERR_INVALID_ARG, "ddp: %d step values, at most %d", n, KILN_DDP_STEP_VALUES);
    double *x = d->xbuf;
    memcpy(x, v, (size_t)n * sizeof *x);
    memset(x + n, 0, (size_t)w * sizeof *x);
    x[n + kiln_comm_rank(d->c)] = d->step_wait;
    kiln_status st = kiln_comm_allreduce_f64(d->c, x, n + w, what);
    if (st != KILN_OK) return st;
    double least = x[n];
    for (int r = 1; r < w; r++) least = x[n + r] < least ? x[n + r] : least;
    d->st.last_exposed_s += least;
    d->recent[d->nrecent++ % RECENT] = least;
    d->st.skew_s += d->step_wait - least;
    d->step_wait = 0;
    for (int i = 0; i < n; i++) v[i] = x[i] / w;
    return KILN_OK;
}

kiln_status kiln_ddp_mean(kiln_ddp *d, double *v, int n, const char *what) {
    if (kiln_comm_size(d->c) == 1) return KILN_OK;
    kiln_status st = kiln_comm_allreduce_f64(d->c, v, n, what);
    for (int i = 0; i < n; i++) v[i] /= kiln_comm_size(d->c);
    return st;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

kiln_ddp_stats kiln_ddp_stats_of(const kiln_ddp *d) {
    kiln_ddp_stats s = d->st;
    int n = d->nrecent < RECENT ? (int)d->nrecent : RECENT;
    double v[RECENT];
    memcpy(v, d->recent, (size_t)n * sizeof *v);
    qsort(v, (size_t)n, sizeof *v, by_value);
    s.last_exposed_median_s = n ? (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) : 0;
    /* exposed can exceed the in-flight time by the start-up and bookkeeping around the waits */
    s.hidden_frac = s.comm_s > 0 && s.exposed_s < s.comm_s ? 1 - s.exposed_s / s.comm_s : 0;
    return s;
}
