/* The doctor under mpirun: the gradient all-reduce's remedies (DDP's overlap
 * and bucket size) and the ranks' share of the host's cores (threads, CPU
 * binding), each measured by a trial window. See
 * train/internal/doctor_dist.h and docs/doctor.md. */
#include "train/internal/doctor_dist.h"
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "dist/internal/comm.h"
#include "dist/internal/dist.h"

/* more buckets than this: each pays MPI's per-collective latency for little data */
#define MANY_BUCKETS 16

void kiln_doctor_dist_baseline(const kiln_train_result *res, kiln_doctor_report *r) {
    r->world_size = res->world_size > 0 ? res->world_size : 1;
    r->local_ranks = kiln_comm_local_size(kiln_dist_comm());
    r->buckets = res->buckets;
    r->allreduce_exposed_ms = res->allreduce_exposed_ms;
    r->allreduce_hidden_frac = res->allreduce_hidden_frac;
    r->grad_mb = res->grad_mb;
}

/* flag's remedy: the one already there replaced (the general --threads remedy knows no ranks), else a new one */
static kiln_remedy *slot(kiln_doctor_report *r, const char *flag) {
    for (int i = 0; i < r->nremedies; i++)
        if (!strcmp(r->remedies[i].flag, flag)) return &r->remedies[i];
    return r->nremedies < KILN_DOCTOR_MAX_REMEDIES ? &r->remedies[r->nremedies++] : NULL;
}

/* a trial window of t; the remedy kept when >= 5 % faster per sample, or always (a setting wrong in itself) */
static void trial(const kiln_train_config *t, int64_t steps, kiln_doctor_report *r, const char *flag, const char *value,
                  const char *technique, const char *why, int always) {
    double ms = 0, sps = 0;
    if (kiln_doctor_measure(t, steps, &ms, &sps) != KILN_OK) {
        kiln_log(KILN_LOG_DEBUG, "doctor: the trial of --%s %s failed: %s", flag, value, kiln_last_error());
        return;
    }
    double gain = r->samples_per_s > 0 ? sps / r->samples_per_s : 0;
    kiln_log(KILN_LOG_DEBUG, "doctor: --%s %s: %.1f ms a step, %.0f samples/s a rank (%.2fx)", flag, value, ms, sps, gain);
    kiln_remedy *m = gain >= 1.05 || always ? slot(r, flag) : NULL;
    if (!m) return;
    memset(m, 0, sizeof *m);
    snprintf(m->flag, sizeof m->flag, "%s", flag);
    snprintf(m->value, sizeof m->value, "%s", value);
    snprintf(m->technique, sizeof m->technique, "%s", technique);
    snprintf(m->why, sizeof m->why, "%s", why);
    m->predicted = gain;
    m->wrong = always;
    /* the bound a wait alone sets: the step without it */
    double bound = r->step_ms > r->allreduce_exposed_ms ? r->step_ms / (r->step_ms - r->allreduce_exposed_ms) : 0;
    if (!strcmp(flag, "overlap") || !strcmp(flag, "bucket-mb"))
        snprintf(m->how, sizeof m->how, "a %lld-step trial window with it at %d ranks: %.0f -> %.0f samples/s a rank (the "
                 "step without its all-reduce wait would give %.2fx)", (long long)steps, r->world_size, r->samples_per_s,
                 sps, bound);
    else
        snprintf(m->how, sizeof m->how, "a %lld-step trial window with it at %d ranks: %.0f -> %.0f samples/s a rank",
                 (long long)steps, r->world_size, r->samples_per_s, sps);
}

/* --overlap on when off; else, when the optimizer waits 5 % of a step or more, another bucket size */
static void allreduce_remedies(const kiln_train_config *c, int64_t steps, kiln_doctor_report *r) {
    double wait = r->allreduce_exposed_ms, step = r->step_ms;
    kiln_train_config t = *c;
    char why[256], v[32];
    if (!c->overlap) {
        t.overlap = 1;
        snprintf(why, sizeof why, "--overlap off: every bucket's all-reduce starts after backward, and the optimizer waits "
                 "%.2f ms of a %.2f ms step for them (%d buckets, %.2f MiB)", wait, step, r->buckets, r->grad_mb);
        trial(&t, steps, r, "overlap", "on", "DistributedDataParallel: the all-reduce overlapped with backward", why, 1);
        return;
    }
    if (wait < 0.05 * step || r->grad_mb <= 0) return;
    /* what the buckets are now: none above a quarter of the gradients (src/dist/buckets.c) */
    double now = c->bucket_mb < r->grad_mb / 4 ? c->bucket_mb : r->grad_mb / 4;
    int many = r->buckets > MANY_BUCKETS;
    double mb = many ? kiln_train_defaults().bucket_mb : now / 2;
    if (mb <= 0 || (float)mb == c->bucket_mb) return;
    t.bucket_mb = (float)mb;
    snprintf(v, sizeof v, "%.3g", mb);
    snprintf(why, sizeof why, "the optimizer waits %.2f ms of a %.2f ms step for the all-reduce (%.0f%% of it hidden) in %d "
             "buckets of %.2f MiB in all: %s", wait, step, 100 * r->allreduce_hidden_frac, r->buckets, r->grad_mb,
             many ? "each small bucket pays MPI's latency" : "the last buckets, written at backward's end, cannot hide");
    trial(&t, steps, r, "bucket-mb", v, "gradient bucketing (DDP's bucket_cap_mb)", why, 0);
}

/* the host's ranks x threads within its cores, and each rank pinned to its share */
static void core_remedies(const kiln_train_config *c, int64_t steps, kiln_doctor_report *r) {
    int local = r->local_ranks > 0 ? r->local_ranks : 1, cores = r->cores_online;
    int share = cores / local > 0 ? cores / local : 1;
    kiln_train_config t = *c;
    char why[256], v[32];
    if (local > 1 && local * r->threads > cores && r->threads > share) {
        t.threads = share;
        snprintf(v, sizeof v, "%d", share);
        snprintf(why, sizeof why, "%d ranks on this host x %d compute threads on %d cores: threads preempt each other at "
                 "every barrier and every collective", local, r->threads, cores);
        trial(&t, steps, r, "threads", v, "avoid oversubscription: the cores divided among the ranks", why, 1);
    }
    int bound = (c->bind && strcmp(c->bind, "none") != 0) || r->cores_available < cores; /* by kiln or the launcher */
    if (local < 2 || bound) return;
    t.bind = access("/sys/devices/system/node/node1", F_OK) == 0 ? "numa" : "core";
    int n = snprintf(why, sizeof why, "%d ranks share this host's %d cores unbound: the scheduler moves their threads "
                     "between cores and caches", local, cores);
    if (t.threads != c->threads && n > 0 && (size_t)n < sizeof why) /* the trial keeps the threads remedy: say so */
        snprintf(why + n, sizeof why - (size_t)n, " (measured with --threads %d, the remedy above)", t.threads);
    trial(&t, steps, r, "bind", t.bind, "CPU affinity: one process per socket (NUMA node), its threads pinned", why, 1);
}

kiln_status kiln_doctor_dist_remedies(const kiln_train_config *c, int64_t steps, kiln_doctor_report *r) {
    kiln_comm *w = kiln_dist_comm();
    if (kiln_comm_size(w) < 2) return KILN_OK;
    /* rank 0's figures decide which trials run, on every rank alike */
    kiln_status st = kiln_comm_bcast(w, r, sizeof *r, 0, "the doctor's report");
    if (st != KILN_OK) return st;
    allreduce_remedies(c, steps, r);
    core_remedies(c, steps, r); /* last: a trial with --bind leaves the process pinned */
    return kiln_comm_bcast(w, r, sizeof *r, 0, "the doctor's report");
}

void kiln_doctor_dist_bottleneck(kiln_doctor_report *r) {
    if (r->world_size < 2 || !r->fits) return;
    if (r->local_ranks * r->threads > r->cores_online) snprintf(r->bottleneck, sizeof r->bottleneck, "threads");
    else if (!strcmp(r->bottleneck, "compute") && r->allreduce_exposed_ms >= 0.1 * r->step_ms)
        snprintf(r->bottleneck, sizeof r->bottleneck, "all-reduce");
}

json_t *kiln_doctor_dist_json(const kiln_doctor_report *r) {
    if (r->world_size < 2) return json_null();
    json_t *o = json_object();
    json_object_set_new(o, "world_size", json_integer(r->world_size));
    json_object_set_new(o, "local_ranks", json_integer(r->local_ranks));
    json_object_set_new(o, "buckets", json_integer(r->buckets));
    json_object_set_new(o, "grad_mb", json_real(r->grad_mb));
    json_object_set_new(o, "allreduce_exposed_ms", json_real(r->allreduce_exposed_ms));
    json_object_set_new(o, "allreduce_hidden_frac", json_real(r->allreduce_hidden_frac));
    return o;
}
