/* Which form each direction of a linear layer takes (linear.h): every form
 * made is timed on the layer's real shape, a warm-up and the best of three
 * calls, and the fastest kept, in the autotune table (problem `linear:...`,
 * directions fwd, bwd_data, bwd_weight) that the convolutions' decisions
 * share, so the on-disk cache and checkpoints keep it and a later run times
 * nothing; the time counts against the process's tuning budget (conv_tune.c),
 * past which form 0 serves and nothing is remembered. Calls during which the threads waited for a CPU over a tenth of
 * their time (other work held the cores) decide for this process only, as in
 * conv_tune.c. The forms compute the same products from the same values,
 * but oneDNN blocks the sums differently in some (fp32 rounding), so a copy
 * must beat plain by a clear margin to be kept. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "base/internal/sched_wait.h"
#include "kernels/dnnl/internal/linear.h"
#include "kiln/alloc.h"

#define CALLS 3
#define DISTURBED_SHARE 0.1
/* a form that copies an operand is kept only below this share of plain's time: the forms round differently
 * (backward-weights' transposed copy sums in another order), so near-ties must not flip between runs */
#define MARGIN 0.9
/* below this a plain call is not worth a copy (whose own cost is about fixed): the other forms are not timed */
#define WORTH_S 100e-6

/* decisions as the cache's lines take them: algorithm/layout/implementation */
static const char *const form_names[KILN_LINEAR_FORMS] = {"matmul/plain/onednn", "matmul/transposed/onednn",
                                                          "matmul/padded/onednn", "matmul/transposed+padded/onednn"};
static const char *const dir_names[L_NDIR] = {"fwd", "bwd_data", "bwd_weight"};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* scratch operands of the layer's shape: x [n, in], w, dy [n, out], a bias [out], and the workspace */
typedef struct {
    float *x, *w, *dy, *bias, *out;
    void *ws;
} probe;

static void probe_free(probe *p) {
    float *b[5] = {p->x, p->w, p->dy, p->bias, p->out};
    for (int i = 0; i < 5; i++) kiln_free(b[i]);
    kiln_free(p->ws);
}

static kiln_status probe_make(const kiln_dnnl_linear *l, probe *p) {
    size_t big = (size_t)(l->in > l->out ? l->in : l->out), most = (size_t)l->n * big;
    if ((size_t)(l->in * l->out) > most) most = (size_t)(l->in * l->out);
    size_t sizes[5] = {(size_t)(l->n * l->in), (size_t)(l->in * l->out), (size_t)(l->n * l->out), (size_t)l->out, most};
    float **b[5] = {&p->x, &p->w, &p->dy, &p->bias, &p->out};
    memset(p, 0, sizeof *p);
    for (int i = 0; i < 5; i++) {
        if (!(*b[i] = kiln_alloc(sizes[i] * sizeof(float)))) return kiln_fail(KILN_ERR_NOMEM, "linear autotune: out of memory");
        for (size_t j = 0; j < sizes[i]; j++) (*b[i])[j] = (float)((j * 2654435761u + (size_t)i) % 1000) * 1e-3f - 0.5f;
    }
    if (!(p->ws = kiln_alloc(l->ws ? l->ws : 64))) return kiln_fail(KILN_ERR_NOMEM, "linear autotune: out of memory");
    return KILN_OK;
}

static kiln_status call(kiln_dnnl_linear *l, int dir, int form, const probe *p) {
    if (dir == L_DIR_FWD) return kiln_dnnl_linear_call(l, dir, form, p->x, p->w, l->has_bias ? p->bias : NULL, p->out, 0, p->ws);
    if (dir == L_DIR_BD) return kiln_dnnl_linear_call(l, dir, form, p->dy, p->w, NULL, p->out, 0, p->ws);
    return kiln_dnnl_linear_call(l, dir, form, p->x, p->dy, NULL, p->out, 0, p->ws);
}

/* the best of CALLS calls after a warm-up, in seconds (< 0: it failed); *disturbed when every call waited */
static double time_form(kiln_dnnl_linear *l, int dir, int form, const probe *p, int *disturbed) {
    if (call(l, dir, form, p) != KILN_OK) return -1;
    double best = -1;
    int calm = 0;
    for (int i = 0; i < CALLS; i++) {
        int64_t w0 = kiln_sched_wait_ns();
        double t0 = now_s();
        if (call(l, dir, form, p) != KILN_OK) return -1;
        double dt = now_s() - t0;
        int64_t w1 = kiln_sched_wait_ns();
        calm |= w0 < 0 || w1 < 0 || (double)(w1 - w0) <= DISTURBED_SHARE * dt * 1e9;
        best = best < 0 || dt < best ? dt : best;
    }
    *disturbed |= !calm;
    return best;
}

/* every form of direction dir made; sets l->form[dir], stores the decision and appends it to the log line */
static void tune(kiln_dnnl_linear *l, int dir, const probe *p, const char *problem, char *line, size_t cap) {
    double t[KILN_LINEAR_FORMS], t0 = now_s();
    int disturbed = 0, best = 0;
    for (int f = 0; f < KILN_LINEAR_FORMS; f++) {
        int worth = f == 0 || t[0] < 0 || t[0] >= WORTH_S;
        t[f] = l->p[L_PRIM(dir, f, 0)] && worth ? time_form(l, dir, f, p, &disturbed) : -1;
        if (t[f] >= 0 && (t[best] < 0 || t[f] < t[best])) best = f;
    }
    kiln_autotune_spend(now_s() - t0);
    if (t[0] >= 0 && t[best] > MARGIN * t[0]) best = 0; /* a copy must pay for itself clearly */
    l->form[dir] = best;
    if (t[best] < 0) return; /* nothing ran: form 0, not remembered */
    kiln_autotune_store(problem, dir_names[dir], form_names[best], 1e6 * t[best], !disturbed);
    size_t n = strlen(line);
    if (best)
        snprintf(line + n, cap - n, " %s %s (%.0f us; plain %.0f us)%s", dir_names[dir], form_names[best], 1e6 * t[best],
                 1e6 * t[0], disturbed ? " (timed under load: not remembered)" : "");
    else
        snprintf(line + n, cap - n, " %s %s (%.0f us)%s", dir_names[dir], form_names[best], 1e6 * t[best],
                 disturbed ? " (timed under load: not remembered)" : "");
}

/* the remembered form of direction dir; -1: none */
static int remembered(const char *problem, int dir) {
    char dec[KILN_AUTOTUNE_DECISION_MAX];
    double us;
    if (!kiln_autotune_lookup(problem, dir_names[dir], dec, sizeof dec, &us)) return -1;
    for (int f = 0; f < KILN_LINEAR_FORMS; f++)
        if (strcmp(dec, form_names[f]) == 0) return f;
    return -1;
}

kiln_status kiln_dnnl_linear_choose(kiln_dnnl_linear *l, int autotune) {
    memset(l->form, 0, sizeof l->form);
    if (!autotune) return KILN_OK;
    char problem[KILN_AUTOTUNE_PROBLEM_MAX];
    snprintf(problem, sizeof problem, "linear:n%lldi%lldo%lld%s%s", (long long)l->n, (long long)l->in, (long long)l->out,
             l->w_kn ? "kn" : "nk", l->bf16 == KILN_DN_BF16 ? "bf16" : l->bf16 ? "bf16e" : "");
    probe p = {0};
    kiln_status st = KILN_OK;
    char line[512] = "";
    for (int dir = 0; dir < L_NDIR && st == KILN_OK; dir++) {
        if (!l->p[L_PRIM(dir, 0, 0)]) continue;
        int f = remembered(problem, dir);
        if (f >= 0 && l->p[L_PRIM(dir, f, 0)]) {
            l->form[dir] = f;
            continue;
        }
        if (kiln_autotune_budget_spent()) continue; /* form 0, tuned by a later run (conv_tune.c warns once) */
        if (!p.ws) st = probe_make(l, &p);
        if (st == KILN_OK) tune(l, dir, &p, problem, line, sizeof line);
    }
    probe_free(&p);
    if (line[0]) kiln_log(KILN_LOG_INFO, "%s:%s", problem, line); /* one line per layer tuned, as the convs' */
    if (st != KILN_OK) /* tuning never fails a compile: no room for the scratch operands, so plain, untimed */
        kiln_log(KILN_LOG_WARN, "%s: %s; its matmuls run plain", problem, kiln_last_error());
    return KILN_OK;
}
