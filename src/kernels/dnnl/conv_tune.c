/* The conv autotuner, the CPU analogue of cudnn.benchmark: for each direction
 * of a convolution, every implementation oneDNN offers is timed on the real
 * shape and the fastest kept.
 *
 * Candidates: the direct and Winograd algorithms, each with the activations
 * in the layout each implementation prefers ("any"), plain NCHW, NHWC and
 * blocked nChw16c (with the plan's own layout, nChw8c where the layout pass
 * blocks by 8, under "any" or "plan"), and every implementation oneDNN lists for each (its
 * primitive descriptor iterator), minus duplicates (same implementation and
 * layouts) and oneDNN's reference implementations (ref:*, orders of magnitude
 * slower); then kiln's own Winograd kernel where it fits (conv_wino.c: AVX2,
 * nChw8c, 3x3 stride 1; oneDNN 2.6 has Winograd only for AVX-512). A candidate whose layout differs from the plan's pays reorders in
 * and out on every call; they are part of what is timed, exactly as the plan
 * would run it.
 *
 * Timing: one warm-up call, then the best of three timed calls. A candidate
 * that cannot win is dropped after its warm-up (over 5x the best so far: a
 * first call may pay one-time costs, such as the pages of Winograd's
 * scratchpad) or after its first timed call (over 1.3x); the finalists (at
 * most 4) take their other two calls in turns, so that a burst of load from
 * elsewhere on the machine does not decide alone. A call during which the
 * process's threads waited for a CPU for over a tenth of its time (other
 * work held the cores: kiln_sched_wait_ns) is run again, up to 3 times; a
 * direction decided by calls that never ran undisturbed serves this process
 * but is not remembered on disk, where a slow choice made under load would
 * outlive the load (it once cost resnet20's training step 45 %). Budget: at most 5 s per
 * direction (the first candidate, oneDNN's own choice, is always timed) and
 * 60 s per process; past it a direction takes oneDNN's own choice and is not
 * remembered, so a later run tunes it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "base/internal/sched_wait.h"
#include "kernels/dnnl/internal/conv2d.h"
#include "kiln/alloc.h"

#define MAX_CANDIDATES 64
#define WARMUP_REJECT 5.0
#define TIMED_REJECT 1.3
#define MAX_FINALISTS 4
#define DIR_BUDGET_S 5.0
#define PROCESS_BUDGET_S 60.0
#define DISTURBED_SHARE 0.1 /* of a call's time its threads may wait for a CPU and the call still count */
static double disturbed_share = DISTURBED_SHARE;
#define ATTEMPTS 3

typedef struct {
    dnnl_alg_kind_t alg;
    int fmt;
    char impl[64];
    dnnl_memory_desc_t md[3]; /* the primitive's layouts, for spotting duplicates */
} candidate;

/* transient tensors the timed calls read and write, in the plan's layouts */
typedef struct {
    float *buf[4];
    void *ws;
    size_t ws_bytes;
} probe;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static kiln_autotune_stats stats;
static kiln_autotune_choice *choices;
static int nchoices, cap_choices;
static double spent_s, dir_budget_s = DIR_BUDGET_S, process_budget_s = PROCESS_BUDGET_S;
static int process_budget_logged;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void kiln_autotune_set_budget(double per_direction_s, double process_s) {
    pthread_mutex_lock(&lock);
    dir_budget_s = per_direction_s > 0 ? per_direction_s : DIR_BUDGET_S;
    process_budget_s = process_s > 0 ? process_s : PROCESS_BUDGET_S;
    pthread_mutex_unlock(&lock);
}

void kiln_autotune_set_wait_share(double share) {
    pthread_mutex_lock(&lock);
    disturbed_share = share == 0 ? DISTURBED_SHARE : share;
    pthread_mutex_unlock(&lock);
}

void kiln_autotune_get_budget(double *per_direction_s, double *process_s) {
    pthread_mutex_lock(&lock);
    *per_direction_s = dir_budget_s;
    *process_s = process_budget_s;
    pthread_mutex_unlock(&lock);
}

void kiln_autotune_stats_get(kiln_autotune_stats *s) {
    pthread_mutex_lock(&lock);
    *s = stats;
    pthread_mutex_unlock(&lock);
}

void kiln_autotune_stats_reset(void) {
    pthread_mutex_lock(&lock);
    memset(&stats, 0, sizeof stats);
    nchoices = 0;
    pthread_mutex_unlock(&lock);
}

int kiln_autotune_choices(kiln_autotune_choice *out, int max) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nchoices && i < max; i++) out[i] = choices[i];
    int n = nchoices;
    pthread_mutex_unlock(&lock);
    return n;
}

void kiln_autotune_forget(void) {
    kiln_autotune_table_clear();
    kiln_autotune_stats_reset();
    pthread_mutex_lock(&lock);
    free(choices);
    choices = NULL;
    cap_choices = 0;
    spent_s = 0;
    process_budget_logged = 0;
    pthread_mutex_unlock(&lock);
}

/* adds a choice; 1 when its problem was not in the list yet (so the log names it now) */
static int record_choice(const kiln_dnnl_conv *c, int dir, int remembered, int ncand) {
    int fresh = 1;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nchoices; i++)
        if (!strcmp(choices[i].problem, c->problem)) {
            fresh = 0;
            if (!strcmp(choices[i].dir, kiln_conv_dir_key(c, dir))) goto done;
        }
    if (nchoices == cap_choices) {
        int nc = cap_choices ? 2 * cap_choices : 32;
        kiln_autotune_choice *n = realloc(choices, (size_t)nc * sizeof *n);
        if (!n) goto done;
        choices = n;
        cap_choices = nc;
    }
    kiln_autotune_choice *h = &choices[nchoices++];
    snprintf(h->problem, sizeof h->problem, "%s", c->problem);
    snprintf(h->dir, sizeof h->dir, "%s", kiln_conv_dir_key(c, dir));
    snprintf(h->decision, sizeof h->decision, "%s", c->d[dir].decision);
    h->us = c->d[dir].us;
    h->remembered = remembered;
    h->candidates = ncand;
    h->unsure = !remembered && c->d[dir].unsure;
done:
    pthread_mutex_unlock(&lock);
    return fresh;
}

static const char *alg_name(dnnl_alg_kind_t a) { return a == dnnl_convolution_winograd ? "winograd" : "direct"; }

static void decision_of(const candidate *k, char *out) {
    snprintf(out, KILN_AUTOTUNE_DECISION_MAX, "%s/%s/%s", alg_name(k->alg), kiln_conv_fmt_names[k->fmt], k->impl);
}

/* "direct/nhwc/brgconv:avx512_core" back into a candidate; 0 when it is not one */
static int parse_decision(const char *s, candidate *k) {
    memset(k, 0, sizeof *k);
    const char *a = strchr(s, '/'), *b = a ? strchr(a + 1, '/') : NULL;
    if (!b || !b[1] || strlen(b + 1) >= sizeof k->impl) return 0;
    if (!strncmp(s, "direct/", 7)) k->alg = dnnl_convolution_direct;
    else if (!strncmp(s, "winograd/", 9)) k->alg = dnnl_convolution_winograd;
    else return 0;
    k->fmt = -1;
    for (int f = 0; f < KILN_CONV_NFMT; f++)
        if ((size_t)(b - a - 1) == strlen(kiln_conv_fmt_names[f]) && !strncmp(a + 1, kiln_conv_fmt_names[f], (size_t)(b - a - 1)))
            k->fmt = f;
    snprintf(k->impl, sizeof k->impl, "%s", b + 1);
    return k->fmt >= 0;
}

static void pd_mds(const_dnnl_primitive_desc_t pd, int dir, dnnl_memory_desc_t md[3]) {
    static const dnnl_query_t q[KILN_CONV_NDIR][3] = {
        {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md},
        {dnnl_query_diff_dst_md, dnnl_query_weights_md, dnnl_query_diff_src_md},
        {dnnl_query_src_md, dnnl_query_diff_dst_md, dnnl_query_diff_weights_md}};
    for (int i = 0; i < 3; i++) md[i] = *dnnl_primitive_desc_query_md(pd, q[dir][i], 0);
}

/* oneDNN's implementations of a direction for one algorithm and layout; the
 * backward ones are made against the forward descriptor of the same pair
 * (hint). oneDNN 2.x's iterator keeps a pointer to the operation descriptor:
 * `desc` must outlive it. */
static dnnl_status_t iterate(const kiln_dnnl_conv *c, int dir, dnnl_alg_kind_t alg, int fmt, dnnl_convolution_desc_t *desc,
                             dnnl_primitive_desc_iterator_t *it, dnnl_primitive_desc_t *hint) {
    dnnl_convolution_desc_t fwd;
    dnnl_primitive_attr_t attr;
    *hint = NULL;
    if (dir != KILN_CONV_FWD) {
        dnnl_status_t s = kiln_conv_op_desc(c, KILN_CONV_FWD, alg, fmt, &fwd, &attr);
        if (s == dnnl_success) s = dnnl_primitive_desc_create(hint, &fwd, attr, kiln_dnnl_engine, NULL);
        if (attr) dnnl_primitive_attr_destroy(attr);
        if (s != dnnl_success) return s;
    }
    dnnl_status_t s = kiln_conv_op_desc(c, dir, alg, fmt, desc, &attr);
    if (s == dnnl_success) s = dnnl_primitive_desc_iterator_create(it, desc, attr, kiln_dnnl_engine, *hint);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (s != dnnl_success && *hint) {
        dnnl_primitive_desc_destroy(*hint);
        *hint = NULL;
    }
    return s;
}

static int usable_fmt(const kiln_dnnl_conv *c, int fmt) {
    /* "plan" only adds something when x and y are in different layouts */
    return fmt != KILN_CONV_FMT_PLAN || c->o.x_blocked != c->o.y_blocked;
}

/* every candidate of a direction, oneDNN's own first choice (direct, "any") first */
static int list_candidates(const kiln_dnnl_conv *c, int dir, candidate *out, int max) {
    static const dnnl_alg_kind_t algs[2] = {dnnl_convolution_direct, dnnl_convolution_winograd};
    int n = 0;
    for (int a = 0; a < 2; a++)
        for (int f = 0; f < KILN_CONV_NFMT; f++) {
            dnnl_convolution_desc_t desc;
            dnnl_primitive_desc_iterator_t it;
            dnnl_primitive_desc_t hint;
            if (!usable_fmt(c, f) || iterate(c, dir, algs[a], f, &desc, &it, &hint) != dnnl_success) continue;
            do {
                dnnl_primitive_desc_t pd = dnnl_primitive_desc_iterator_fetch(it);
                if (!pd) continue;
                candidate k = {.alg = algs[a], .fmt = f};
                snprintf(k.impl, sizeof k.impl, "%s", kiln_dn_impl_name(pd));
                pd_mds(pd, dir, k.md);
                dnnl_primitive_desc_destroy(pd);
                int dup = !strncmp(k.impl, "ref", 3) || strchr(k.impl, ' ') || n == max;
                for (int i = 0; i < n && !dup; i++)
                    dup = out[i].alg == k.alg && !strcmp(out[i].impl, k.impl) && dnnl_memory_desc_equal(&out[i].md[0], &k.md[0]) &&
                          dnnl_memory_desc_equal(&out[i].md[1], &k.md[1]) && dnnl_memory_desc_equal(&out[i].md[2], &k.md[2]);
                if (!dup) out[n++] = k;
            } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
            dnnl_primitive_desc_iterator_destroy(it);
            if (hint) dnnl_primitive_desc_destroy(hint);
        }
    if (n < max && kiln_conv_own_fits(c, dir)) { /* kiln's own, after oneDNN's */
        candidate k = {.alg = dnnl_convolution_winograd, .fmt = KILN_CONV_FMT_PLAN};
        snprintf(k.impl, sizeof k.impl, "%s", KILN_CONV_OWN_IMPL);
        out[n++] = k;
    }
    return n;
}

/* makes c->d[dir] as the candidate: its algorithm and layout, the implementation of that name */
static kiln_status make_candidate(kiln_dnnl_conv *c, int dir, const candidate *k) {
    dnnl_convolution_desc_t desc;
    dnnl_primitive_desc_iterator_t it;
    dnnl_primitive_desc_t hint, pd = NULL;
    if (!strcmp(k->impl, KILN_CONV_OWN_IMPL)) return kiln_conv_own_make(c, dir);
    if (!usable_fmt(c, k->fmt) || iterate(c, dir, k->alg, k->fmt, &desc, &it, &hint) != dnnl_success)
        return kiln_fail(KILN_ERR_BACKEND, "oneDNN cannot make %s/%s here", alg_name(k->alg), kiln_conv_fmt_names[k->fmt]);
    do {
        pd = dnnl_primitive_desc_iterator_fetch(it);
        if (pd && !strcmp(kiln_dn_impl_name(pd), k->impl)) break;
        if (pd) dnnl_primitive_desc_destroy(pd);
        pd = NULL;
    } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    dnnl_primitive_desc_iterator_destroy(it);
    if (!pd) {
        if (hint) dnnl_primitive_desc_destroy(hint);
        return kiln_fail(KILN_ERR_BACKEND, "oneDNN has no %s here", k->impl);
    }
    kiln_status st = kiln_conv_dir_make(c, dir, pd, hint);
    if (st == KILN_OK) decision_of(k, c->d[dir].decision);
    return st;
}

static void probe_free(probe *p) {
    for (int i = 0; i < 4; i++) kiln_free(p->buf[i]);
    kiln_free(p->ws);
    memset(p, 0, sizeof *p);
}

/* the four slots each direction passes its tensors through (x or dy, w or dy, bias, y or dx or dw), each as large
 * as the largest, and a workspace of `ws` bytes; pages touched now so no timed call pays their first use */
static kiln_status probe_ready(const kiln_dnnl_conv *c, probe *p, size_t ws) {
    const kiln_conv_shape *cs = &c->cs;
    size_t nx = (size_t)(cs->n * cs->c * cs->h * cs->w), nw = (size_t)(cs->k * (cs->c / cs->groups) * cs->r * cs->s);
    size_t ny = (size_t)(cs->n * cs->k * cs->oh * cs->ow), most = nx > ny ? nx : ny;
    if (nw > most) most = nw;
    for (int i = 0; i < 4 && !p->buf[i]; i++) {
        if (!(p->buf[i] = kiln_alloc(most * sizeof(float)))) return kiln_fail(KILN_ERR_NOMEM, "conv2d autotune: out of memory");
        for (size_t j = 0; j < most; j++) p->buf[i][j] = (float)((j * 2654435761u + (size_t)i) % 1000) * 1e-3f - 0.5f;
    }
    if (p->ws_bytes >= ws) return KILN_OK;
    kiln_free(p->ws);
    p->ws_bytes = 0;
    if (!(p->ws = kiln_alloc(ws))) return kiln_fail(KILN_ERR_NOMEM, "conv2d autotune: out of memory");
    memset(p->ws, 0, ws);
    p->ws_bytes = ws;
    return KILN_OK;
}

/* seconds one call of c->d[dir] takes; < 0 when it fails to run. A disturbed call (its threads waited for a
 * CPU over DISTURBED_SHARE of its time) runs again, up to ATTEMPTS calls; when none ran undisturbed the
 * fastest is returned and *disturbed set */
static double one_call(kiln_dnnl_conv *c, int dir, probe *p, int *runs, int *disturbed) {
    if (probe_ready(c, p, c->d[dir].ws) != KILN_OK) return -1;
    double best = -1;
    for (int a = 0; a < ATTEMPTS; a++) {
        int64_t w0 = kiln_sched_wait_ns();
        double t0 = now_s();
        if (kiln_conv_run_dir(c, dir, p->buf[0], p->buf[1], p->buf[2], p->buf[3], p->ws) != KILN_OK) return -1;
        double t = now_s() - t0;
        int64_t w1 = kiln_sched_wait_ns();
        ++*runs;
        best = best < 0 || t < best ? t : best;
        if (w0 < 0 || w1 < 0 || disturbed_share < 0 || (double)(w1 - w0) <= disturbed_share * t * 1e9) return best;
    }
    *disturbed = 1;
    return best;
}

typedef struct {
    kiln_conv_dir d;
    double t; /* its best timed call */
} finalist;

/* the first pass: a warm-up and one timed call of the candidate now in c->d[dir]; 1 when it may still win
 * (its time in *t), 0 when it cannot (over WARMUP_REJECT x best after the warm-up, TIMED_REJECT x after
 * the timed call) or did not run */
static int first_pass(kiln_dnnl_conv *c, int dir, probe *p, double best, int *runs, int *timed, double *t, int *disturbed) {
    double w = one_call(c, dir, p, runs, disturbed);
    if (w < 0) return 0;
    ++*timed;
    if (w > WARMUP_REJECT * best) return 0;
    *t = one_call(c, dir, p, runs, disturbed);
    return *t >= 0 && *t <= TIMED_REJECT * best;
}

/* the finalists' other two timed calls, taken in turns so a burst of load on the machine hits them all alike;
 * returns the winner's index */
static int final_rounds(kiln_dnnl_conv *c, int dir, probe *p, finalist *f, int nf, int *runs, int *disturbed) {
    for (int r = 0; r < 2 && nf > 1; r++)
        for (int i = 0; i < nf; i++) {
            c->d[dir] = f[i].d;
            double t = one_call(c, dir, p, runs, disturbed);
            if (t >= 0 && t < f[i].t) f[i].t = t;
        }
    memset(&c->d[dir], 0, sizeof c->d[dir]);
    int w = 0;
    for (int i = 1; i < nf; i++)
        if (f[i].t < f[w].t) w = i;
    return w;
}

/* times every candidate within the budget; leaves the fastest in c->d[dir] */
static kiln_status tune_dir(kiln_dnnl_conv *c, int dir, const candidate *list, int n, probe *p, int *timed) {
    double start = now_s(), best = 1e30;
    finalist f[MAX_FINALISTS];
    int runs = 0, i = 0, nf = 0, disturbed = 0;
    for (; i < n; i++) {
        if (nf && now_s() - start > dir_budget_s) break;
        double t;
        if (make_candidate(c, dir, &list[i]) != KILN_OK) continue;
        if (!first_pass(c, dir, p, best, &runs, timed, &t, &disturbed)) {
            kiln_conv_dir_free(&c->d[dir]);
            continue;
        }
        best = t < best ? t : best;
        int slot = nf;
        if (nf == MAX_FINALISTS) { /* the slowest finalist makes room, if it is slower */
            slot = 0;
            for (int k = 1; k < nf; k++)
                if (f[k].t > f[slot].t) slot = k;
            if (f[slot].t <= t) {
                kiln_conv_dir_free(&c->d[dir]);
                continue;
            }
            kiln_conv_dir_free(&f[slot].d);
        } else {
            nf++;
        }
        f[slot] = (finalist){c->d[dir], t};
        memset(&c->d[dir], 0, sizeof c->d[dir]);
    }
    /* those the later candidates beat by far are out */
    int kept = 0;
    for (int k = 0; k < nf; k++) {
        if (f[k].t <= TIMED_REJECT * best) f[kept++] = f[k];
        else kiln_conv_dir_free(&f[k].d);
    }
    int w = kept ? final_rounds(c, dir, p, f, kept, &runs, &disturbed) : -1;
    for (int k = 0; k < kept; k++)
        if (k != w) kiln_conv_dir_free(&f[k].d);
    if (w >= 0) {
        c->d[dir] = f[w].d;
        c->d[dir].us = f[w].t * 1e6;
    }
    double took = now_s() - start;
    pthread_mutex_lock(&lock);
    stats.candidates += *timed;
    stats.runs += runs;
    stats.seconds += took;
    spent_s += took;
    stats.tuned++;
    stats.over_budget += i < n;
    stats.unsure += w >= 0 && disturbed;
    pthread_mutex_unlock(&lock);
    if (w < 0) return kiln_fail(KILN_ERR_BACKEND, "no %s candidate ran", kiln_conv_dir_names[dir]);
    if (i < n)
        kiln_log(KILN_LOG_INFO, "conv %s %s: tuning budget (%.0f s a direction) reached after %d of %d candidates", c->problem,
                 kiln_conv_dir_key(c, dir), dir_budget_s, i, n);
    if (disturbed)
        kiln_log(KILN_LOG_INFO, "conv %s %s: other work held the cores while it was timed; its choice serves this process "
                 "and is not remembered", c->problem, kiln_conv_dir_key(c, dir));
    c->d[dir].unsure = disturbed;
    kiln_autotune_store(c->problem, kiln_conv_dir_key(c, dir), c->d[dir].decision, c->d[dir].us, !disturbed);
    return KILN_OK;
}

/* a remembered decision made again, without timing; 0 when it cannot be made here */
static int remake(kiln_dnnl_conv *c, int dir) {
    char dec[KILN_AUTOTUNE_DECISION_MAX];
    double us = 0;
    candidate k;
    if (!kiln_autotune_lookup(c->problem, kiln_conv_dir_key(c, dir), dec, sizeof dec, &us)) return 0;
    if (parse_decision(dec, &k) && make_candidate(c, dir, &k) == KILN_OK) {
        c->d[dir].us = us;
        pthread_mutex_lock(&lock);
        stats.remembered++;
        pthread_mutex_unlock(&lock);
        return 1;
    }
    kiln_log(KILN_LOG_WARN, "conv %s %s: the remembered implementation %s is not available here; choosing again", c->problem,
             kiln_conv_dir_key(c, dir), dec);
    return 0;
}

static int over_process_budget(void) {
    pthread_mutex_lock(&lock);
    int over = spent_s >= process_budget_s, first = over && !process_budget_logged;
    if (over) {
        stats.over_budget++;
        process_budget_logged = 1;
    }
    double b = process_budget_s;
    pthread_mutex_unlock(&lock);
    if (first)
        kiln_log(KILN_LOG_WARN, "conv autotune: the process's tuning budget (%.0f s) is spent; the remaining convolutions use "
                 "oneDNN's own choice and are tuned by a later run", b);
    return over;
}

int kiln_autotune_budget_spent(void) {
    pthread_mutex_lock(&lock);
    int over = spent_s >= process_budget_s;
    pthread_mutex_unlock(&lock);
    return over;
}

void kiln_autotune_spend(double seconds) {
    pthread_mutex_lock(&lock);
    spent_s += seconds;
    pthread_mutex_unlock(&lock);
}

static int prefer_own;

void kiln_conv_prefer_own(int on) {
    pthread_mutex_lock(&lock);
    prefer_own = on;
    pthread_mutex_unlock(&lock);
}

static kiln_status choose_dir(kiln_dnnl_conv *c, int dir, probe *p, int *remembered, int *timed) {
    pthread_mutex_lock(&lock);
    int own = prefer_own;
    pthread_mutex_unlock(&lock);
    if (own && kiln_conv_own_fits(c, dir)) return kiln_conv_own_make(c, dir);
    if (c->o.autotune && remake(c, dir)) {
        *remembered = 1;
        return KILN_OK;
    }
    candidate *list = malloc(MAX_CANDIDATES * sizeof *list);
    if (!list) return kiln_fail(KILN_ERR_NOMEM, "conv2d: out of memory");
    int n = list_candidates(c, dir, list, MAX_CANDIDATES);
    kiln_status st = KILN_OK;
    if (n == 0) st = kiln_fail(KILN_ERR_BACKEND, "oneDNN has no %s convolution for this shape", kiln_conv_dir_names[dir]);
    else if (c->o.autotune && !over_process_budget()) st = tune_dir(c, dir, list, n, p, timed);
    else {
        /* untuned: oneDNN's own first choice for direct convolution, untimed, not remembered */
        st = KILN_ERR_BACKEND;
        for (int i = 0; i < n && st != KILN_OK; i++) st = make_candidate(c, dir, &list[i]);
    }
    free(list);
    return st;
}

static void log_choices(const kiln_dnnl_conv *c, int fresh, int any_timed, int timed, double took) {
    char line[1024];
    size_t o = (size_t)snprintf(line, sizeof line, "conv %s:", c->problem);
    for (int dir = 0; dir < KILN_CONV_NDIR && o < sizeof line; dir++)
        if (kiln_conv_dir_made(&c->d[dir]))
            o += (size_t)snprintf(line + o, sizeof line - o, " %s %s (%.0f us)", kiln_conv_dir_key(c, dir), c->d[dir].decision,
                                  c->d[dir].us);
    if (any_timed) kiln_log(KILN_LOG_INFO, "%s; %d candidates timed in %.2f s", line, timed, took);
    else kiln_log(fresh ? KILN_LOG_INFO : KILN_LOG_DEBUG, "%s (remembered)", line);
}

kiln_status kiln_conv_choose_all(kiln_dnnl_conv *c) {
    probe p = {0};
    kiln_status st = KILN_OK;
    double start = now_s();
    int fresh = 0, any_timed = 0, timed_all = 0;
    for (int dir = 0; dir < KILN_CONV_NDIR && st == KILN_OK; dir++) {
        if (dir == KILN_CONV_BWD_DATA && !c->o.need_bwd_data) continue;
        if (dir == KILN_CONV_BWD_WEIGHT && !c->o.need_bwd_weight) continue;
        int remembered = 0, timed = 0;
        st = choose_dir(c, dir, &p, &remembered, &timed);
        if (st == KILN_OK) fresh |= record_choice(c, dir, remembered, timed);
        any_timed |= timed > 0;
        timed_all += timed;
    }
    probe_free(&p);
    if (st == KILN_OK && c->o.autotune) log_choices(c, fresh, any_timed, timed_all, now_s() - start);
    return st;
}

int kiln_dnnl_conv_candidates(const kiln_conv_shape *cs, const kiln_dnnl_conv_opts *o, const char *dir,
                              char (*out)[KILN_AUTOTUNE_DECISION_MAX], int max) {
    if (kiln_dnnl_init() != KILN_OK) return 0;
    kiln_dnnl_conv c;
    memset(&c, 0, sizeof c);
    kiln_conv_setup(&c, cs, o);
    int d = 0;
    while (d < KILN_CONV_NDIR && strcmp(dir, kiln_conv_dir_key(&c, d))) d++;
    if (d == KILN_CONV_NDIR) return 0;
    candidate *list = malloc(MAX_CANDIDATES * sizeof *list);
    int n = list ? list_candidates(&c, d, list, MAX_CANDIDATES) : 0;
    for (int i = 0; i < n && i < max; i++) decision_of(&list[i], out[i]);
    free(list);
    return n;
}
