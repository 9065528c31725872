/* Per-step timing of a plan's runs (only when asked: --profile, or a short
 * window the trainer samples to name the largest kernels): the report and the
 * top-k list. Times are summed over all step lists (batch sizes) by position,
 * which is the same node in every list. */
#include <stdio.h>
#include <stdlib.h>
#include "graph/internal/plan.h"

/* on: start timing afresh; off: stop, keeping what was timed */
void kiln_plan_set_profile(kiln_plan *pl, int on) {
    pl->profile = on;
    if (!on) return;
    pl->profiled_runs = 0;
    for (int i = 0; i < pl->nlists; i++)
        for (int s = 0; s < pl->lists[i].nsteps; s++) pl->lists[i].time[s] = 0;
}

/* seconds in step s summed over every list */
static double step_time(const kiln_plan *pl, int s) {
    double t = 0;
    for (int i = 0; i < pl->nlists; i++)
        if (s < pl->lists[i].nsteps) t += pl->lists[i].time[s];
    return t;
}

static int nsteps(const kiln_plan *pl) { return pl->nlists ? pl->lists[0].nsteps : 0; }

double kiln_plan_profile_total_ms(const kiln_plan *pl, int64_t *runs) {
    double total = 0;
    for (int s = 0; s < nsteps(pl); s++) total += step_time(pl, s);
    if (runs) *runs = pl->profiled_runs;
    return pl->profiled_runs ? 1e3 * total / (double)pl->profiled_runs : 0;
}

/* what step s achieved in ms a run: GFLOP/s of its conv and matmul work (the direct algorithm's count: a Winograd
 * convolution shows more than the machine's peak), else GB/s of its tensors (each input and output once), at the
 * first list's batch; into buf */
static void step_rate(const kiln_plan *pl, int s, double ms, char *buf, size_t len) {
    const kiln_step *st = &pl->lists[0].steps[s];
    kiln_step_info info;
    double flops = kiln_plan_step_info(pl, s, &info) == KILN_OK ? info.flops : 0, bytes = 0;
    for (int k = 0; k < st->nin; k++) bytes += st->in[k].data ? (double)st->in[k].numel * kiln_dtype_size(st->in[k].dtype) : 0;
    for (int k = 0; k < st->nout; k++) bytes += st->out[k].data ? (double)st->out[k].numel * kiln_dtype_size(st->out[k].dtype) : 0;
    if (ms <= 0) snprintf(buf, len, "%s", "");
    else if (flops > 0) snprintf(buf, len, "%9.1f GFLOP/s", flops / (ms * 1e6));
    else snprintf(buf, len, "%9.1f GB/s", bytes / (ms * 1e6));
}

/* every step: its mean time a run, its share, what it achieved (step_rate: on a GPU, the figures to set against
 * `kiln bench peak`), its folded epilogue */
void kiln_plan_profile_report(const kiln_plan *pl, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    if (!pl->profiled_runs) return;
    double total = kiln_plan_profile_total_ms(pl, NULL), runs = (double)pl->profiled_runs;
    o += (size_t)snprintf(buf, len, "per-step time by kernel over %lld runs (%.2f ms/step):\n", (long long)pl->profiled_runs, total);
    for (int s = 0; s < nsteps(pl) && o < len; s++) {
        const kiln_step *st = &pl->lists[0].steps[s];
        double ms = 1e3 * step_time(pl, s) / runs;
        char rate[48];
        step_rate(pl, s, ms, rate, sizeof rate);
        o += (size_t)snprintf(buf + o, len - o, "  %-22s %7.3f ms  %5.1f%%  %s%s\n", st->name, ms, total > 0 ? 100 * ms / total : 0,
                              rate,
                              st->epilogue == KILN_EPI_RELU            ? "  (+relu)"
                              : st->epilogue == KILN_EPI_RELU_BWD_MASK ? "  (+relu:bwd)"
                              : st->epilogue == KILN_EPI_ADD_RELU      ? "  (+add+relu)"
                                                                       : "");
    }
}

int kiln_plan_profile_top_steps(const kiln_plan *pl, int k, int *steps, double *ms) {
    if (!pl->profiled_runs) return 0;
    int n = 0;
    for (int s = 0; s < nsteps(pl); s++) {
        double t = 1e3 * step_time(pl, s) / (double)pl->profiled_runs;
        int at = n < k ? n++ : k; /* insertion into a sorted top-k */
        while (at > 0 && ms[at - 1] < t) {
            if (at < k) {
                ms[at] = ms[at - 1];
                steps[at] = steps[at - 1];
            }
            at--;
        }
        if (at < k) {
            ms[at] = t;
            steps[at] = s;
        }
    }
    return n;
}

int kiln_plan_profile_top(const kiln_plan *pl, int k, const char **names, double *ms) {
    int steps[64];
    if (k > 64) k = 64;
    int n = kiln_plan_profile_top_steps(pl, k, steps, ms);
    for (int i = 0; i < n; i++) names[i] = pl->lists[0].steps[steps[i]].name;
    return n;
}

void kiln_plan_profile_phases(const kiln_plan *pl, double *fwd_ms, double *bwd_ms) {
    *fwd_ms = *bwd_ms = 0;
    if (!pl->profiled_runs) return;
    for (int s = 0; s < nsteps(pl); s++) {
        const kiln_step *st = &pl->lists[0].steps[s];
        int bwd = pl->o.training && st->node >= pl->nfwd; /* autodiff appends its nodes (recomputations too) */
        *(bwd ? bwd_ms : fwd_ms) += 1e3 * step_time(pl, s) / (double)pl->profiled_runs;
    }
}
