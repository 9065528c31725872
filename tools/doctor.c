/* kiln doctor train [train's options] [--apply] [--json] [--window-steps N]:
 * the report of kiln_doctor_run, and with --apply the improved command line,
 * measured against the given one, then run. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "kiln/dist.h"
#include "kiln/doctor.h"

static const char *usage =
    "usage: kiln doctor train [the options of kiln train] [--apply] [--json] [--window-steps N]\n"
    "\n"
    "Runs short profiled windows of the training run (the baseline, then one trial per remedy that needs\n"
    "measuring: about (2 + remedies) x N steps plus their compiles), says where a step's time and the memory\n"
    "go, and ranks the remedies with the flag that applies each and the gain it predicts.\n"
    "--apply measures the improved command over the same window, then runs it.\n\n";

static const cli_opt extra[] = {
    {"apply", NULL, "measure the command with every remedy applied against the given one, print it and run it", NULL},
    {"json", NULL, "print the report as one JSON object on stdout", NULL},
    {"window-steps", "N", "steps per measured window", "12"},
    {"measure-only", NULL, "measure the baseline window alone, no remedy looked for (to compare configurations)", NULL},
};
enum { X_APPLY, X_JSON, X_WINDOW, X_MEASURE, X_N };

static void print_step(const kiln_doctor_report *r) {
    double s = r->step_ms > 0 ? r->step_ms : 1;
    double kern = r->fwd_ms + r->bwd_ms + r->optim_ms;
    fprintf(stderr, "where a step's %.2f ms go (batch %lld, %d compute thread%s, %d loader worker%s):\n", r->step_ms,
            (long long)r->batch_size, r->threads, r->threads == 1 ? "" : "s", r->workers, r->workers == 1 ? "" : "s");
    fprintf(stderr, "  data-wait        %8.2f ms %5.1f%%\n", r->data_wait_ms, 100 * r->data_wait_ms / s);
    fprintf(stderr, "  forward          %8.2f ms %5.1f%%\n", r->fwd_ms, 100 * r->fwd_ms / s);
    fprintf(stderr, "  backward         %8.2f ms %5.1f%%\n", r->bwd_ms, 100 * r->bwd_ms / s);
    fprintf(stderr, "  optimizer        %8.2f ms %5.1f%%\n", r->optim_ms, 100 * r->optim_ms / s);
    fprintf(stderr, "  kiln's overhead  %8.2f ms %5.1f%%  (between kernels)\n", r->overhead_ms, 100 * r->overhead_ms / s);
    double rest = r->step_ms - r->data_wait_ms - kern - r->overhead_ms;
    if (rest > 0.05 * s) fprintf(stderr, "  the rest         %8.2f ms %5.1f%%  (the loss read-out, logging)\n", rest, 100 * rest / s);
    if (r->world_size > 1)
        fprintf(stderr, "  all-reduce wait  %8.2f ms %5.1f%%  (%d ranks, %d here; %d buckets of %.2f MiB in all, %.0f%% of "
                "the all-reduce hidden behind backward)\n", r->allreduce_exposed_ms, 100 * r->allreduce_exposed_ms / s,
                r->world_size, r->local_ranks, r->buckets, r->grad_mb, 100 * r->allreduce_hidden_frac);
    fprintf(stderr, "cores busy:");
    for (int i = 0; i < r->ncores; i++) fprintf(stderr, " %d:%.0f%%", i, 100 * r->core_busy[i]);
    fprintf(stderr, "\nmemory: arena %.1f MiB of a %.0f MiB budget%s, loader ring %.1f MiB, peak RSS %.0f MB\n", r->arena_mb,
            r->budget_mb, r->fits ? "" : " (does NOT fit as given)", r->ring_mb, r->peak_rss_mb);
    fprintf(stderr, "largest kernels:\n");
    for (int i = 0; i < r->ntop; i++) {
        const kiln_kernel_stat *k = &r->top[i];
        double peak = r->device[0] ? r->device_peak_gflops : r->peak_gflops, bw = r->device[0] ? r->device_copy_gbps : r->copy_gbps;
        if (k->gflops > 0)
            fprintf(stderr, "  %-28s %7.2f ms  %6.1f GFLOP/s  (%.0f%% of the %.0f GFLOP/s peak)\n", k->name, k->ms, k->gflops,
                    peak > 0 ? 100 * k->gflops / peak : 0, peak);
        else
            fprintf(stderr, "  %-28s %7.2f ms  %6.1f GB/s     (%.0f%% of the %.0f GB/s copy bandwidth)\n", k->name, k->ms,
                    k->gbps, bw > 0 ? 100 * k->gbps / bw : 0, bw);
    }
}

static void print_report(const kiln_doctor_report *r, int measure_only) {
    fprintf(stderr, "kiln doctor: %lld steps measured per window, %.1f s in all, on %s (%d of %d cores; measured FP32 "
            "peak %.0f GFLOP/s, copy %.0f GB/s%s)\n", (long long)r->steps, r->elapsed_s, r->cpu[0] ? r->cpu : "this CPU",
            r->cores_available, r->cores_online, r->peak_gflops, r->copy_gbps,
            r->device[0] || r->bf16_kernels ? "" : "; no bf16 kernels: mixed precision not offered");
    if (r->device[0])
        fprintf(stderr, "kernels on %s (measured there: matmul %.0f GFLOP/s in the run's math, copy %.0f GB/s; memory: the "
                "device's)\n", r->device, r->device_peak_gflops, r->device_copy_gbps);
    print_step(r);
    if (measure_only) return;
    static const char *const says[][2] = {{"memory", "memory: the run does not fit as given"},
                                          {"all-reduce", "communication: the optimizer waits for the gradient all-reduce"},
                                          {"threads", "oversubscription: more compute threads than cores"},
                                          {"data", "data loading: the training thread waits for batches"},
                                          {"compute", "compute: the kernels themselves"}};
    for (int i = 0; i < 5; i++)
        if (!strcmp(r->bottleneck, says[i][0])) fprintf(stderr, "what holds this run back: %s\n", says[i][1]);
    if (!r->nremedies) {
        fprintf(stderr, "remedies: none predicts 5%% or more; this run is limited by its kernels' own speed\n");
        return;
    }
    fprintf(stderr, "remedies, the most useful first:\n");
    for (int i = 0; i < r->nremedies; i++) {
        const kiln_remedy *m = &r->remedies[i];
        int off = strcmp(m->value, "false") == 0; /* --no-autotune false: drop the flag */
        char flag[224];
        snprintf(flag, sizeof flag, off ? "drop --%s" : m->value[0] ? "--%s %s" : "--%s", m->flag, m->value);
        if (m->memory)
            fprintf(stderr, "  %d. %s  [%s]: needed to fit: %.1fx less memory\n", i + 1, flag, m->technique, m->predicted);
        else
            fprintf(stderr, "  %d. %s  [%s]: predicts %.2fx the samples/s\n", i + 1, flag, m->technique, m->predicted);
        fprintf(stderr, "     seen: %s\n     predicted from: %s\n", m->why, m->how);
        if (!m->applied) fprintf(stderr, "     not applied by --apply: predicted under 1.05x\n");
    }
}

/* argv without the doctor's own options and with every remedy's flag set (or dropped) */
static int remedied_argv(const kiln_doctor_report *r, int argc, char **argv, char **out) {
    int n = 0;
    out[n++] = "train";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) { /* a value: kept with its option (dropped options skip theirs) */
            out[n++] = argv[i];
            continue;
        }
        int drop = !strcmp(a, "--apply") || !strcmp(a, "--json") || !strncmp(a, "--window-steps", 14);
        for (int k = 0; k < r->nremedies && !drop; k++) {
            if (!r->remedies[k].applied) continue;
            size_t len = strlen(r->remedies[k].flag);
            drop = !strncmp(a + 2, r->remedies[k].flag, len) && (a[2 + len] == 0 || a[2 + len] == '=');
        }
        if (!drop) {
            out[n++] = argv[i];
            continue;
        }
        if (!strchr(a, '=') && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0 && strcmp(a, "--apply") &&
            strcmp(a, "--json") && strncmp(a, "--no-", 5))
            i++; /* its value */
    }
    for (int k = 0; k < r->nremedies; k++) {
        const kiln_remedy *m = &r->remedies[k];
        if (!m->applied || !strcmp(m->value, "false")) continue;
        int dup = 0;
        for (int j = 0; j < k; j++) dup |= r->remedies[j].applied && !strcmp(r->remedies[j].flag, m->flag);
        if (dup) continue;
        static char flags[KILN_DOCTOR_MAX_REMEDIES][40];
        snprintf(flags[k], sizeof flags[k], "--%s", m->flag);
        out[n++] = flags[k];
        if (m->value[0]) out[n++] = (char *)m->value;
    }
    out[n] = NULL;
    return n;
}

/* --apply's window: the configuration with the applied remedies, measured into r */
static int measure_applied(kiln_doctor_report *r, const kiln_train_config *given, int64_t steps) {
    kiln_train_config c = *given;
    if (kiln_doctor_apply(r, &c) != KILN_OK) {
        fprintf(stderr, "kiln doctor: %s\n", kiln_last_error());
        return EXIT_USAGE;
    }
    if (kiln_doctor_measure(&c, steps, &r->applied_step_ms, &r->applied_samples_per_s) != KILN_OK) {
        fprintf(stderr, "kiln doctor: the improved run failed: %s\n", kiln_last_error());
        return cli_exit_code(KILN_ERR_INVALID_ARG);
    }
    r->applied_predicted = kiln_doctor_predicted_total(r);
    if (kiln_dist_rank() != 0) return 0; /* under mpirun rank 0 reports */
    fprintf(stderr, "kiln doctor: with the remedies, %.0f samples/s against %.0f: measured %.2fx, predicted %.2fx\n",
            r->applied_samples_per_s, r->samples_per_s,
            r->samples_per_s > 0 ? r->applied_samples_per_s / r->samples_per_s : 0, r->applied_predicted);
    for (int i = 0; i < r->nremedies; i++)
        if (r->remedies[i].applied && !strcmp(r->remedies[i].flag, "cache"))
            fprintf(stderr, "kiln doctor: that window decoded and filled the cache (the first epoch); the cache serves "
                    "from the second epoch on, as predicted (bench/doctor.sh measures both)\n");
    return 0;
}

/* the report on stdout; with --apply, the improved command's words (after `kiln`) in "applied" */
static void print_json(const kiln_doctor_report *r, char **cmd, int n) {
    char *text = kiln_doctor_json(r);
    json_t *o = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    json_t *applied = o ? json_object_get(o, "applied") : NULL;
    if (cmd && json_is_object(applied)) {
        json_t *words = json_array();
        for (int i = 0; i < n; i++) json_array_append_new(words, json_string(cmd[i]));
        json_object_set_new(applied, "command", words);
    }
    if (o && (text = json_dumps(o, JSON_COMPACT))) printf("%s\n", text);
    free(text);
    json_decref(o);
    fflush(stdout);
}

int cli_doctor(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "train") != 0) {
        if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
            fputs(usage, stdout);
            return 0;
        }
        return cli_usage_error("doctor", "say what to diagnose: kiln doctor train [the options of kiln train]");
    }
    kiln_train_config c;
    const char *vals[X_N];
    int given[X_N];
    int rc = cli_train_config("doctor", usage, extra, X_N, argc - 1, argv + 1, &c, vals, given);
    if (rc) return rc == 1 ? 0 : rc;
    int64_t steps = 12;
    if (cli_int("doctor", extra, X_WINDOW, vals, 2, 100000, &steps)) return EXIT_USAGE;
    if (given[X_MEASURE] && given[X_APPLY])
        return cli_usage_error("doctor", "--measure-only looks for no remedy: --apply would have none to apply");
    kiln_doctor_opts o = kiln_doctor_defaults();
    o.window_steps = steps;
    o.measure_only = given[X_MEASURE];
    static kiln_doctor_report r; /* large: off the stack */
    /* under mpirun every rank runs the windows (and trains in them), rank 0 reports */
    if (kiln_dist_init(c.timeout) != KILN_OK) {
        fprintf(stderr, "kiln doctor: %s\n", kiln_last_error());
        return cli_exit_code(KILN_ERR_INVALID_ARG);
    }
    int rank = kiln_dist_rank();
    if (rank != 0) kiln_log_set_level(KILN_LOG_WARN);
    if (rank == 0) fprintf(stderr, "kiln doctor: measuring (a baseline window of %lld steps%s)...\n", (long long)steps,
                           o.measure_only ? "" : ", then a trial per remedy that needs one");
    kiln_status st = kiln_doctor_run(&c, &o, &r);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln doctor: %s\n", kiln_last_error());
        if (kiln_dist_size() > 1) kiln_dist_abort(cli_exit_code(st));
        return cli_exit_code(st);
    }
    if (rank == 0) print_report(&r, o.measure_only);
    if (!given[X_APPLY]) {
        if (given[X_JSON] && rank == 0) print_json(&r, NULL, 0);
        kiln_dist_finalize();
        return 0;
    }
    if ((rc = measure_applied(&r, &c, steps)) != 0) return rc;
    /* the improved command: argv without the doctor's own options and with every applied remedy's flag */
    char **out = calloc((size_t)argc + 2 * KILN_DOCTOR_MAX_REMEDIES + 2, sizeof *out);
    if (!out) return 1;
    int n = remedied_argv(&r, argc - 1, argv + 1, out);
    if (given[X_JSON] && rank == 0) print_json(&r, out, n);
    if (rank == 0) {
        fprintf(stderr, "kiln doctor: the improved command:\n  kiln");
        for (int i = 0; i < n; i++) fprintf(stderr, " %s", out[i]);
        fprintf(stderr, "\n");
    }
    rc = cli_train(n, out); /* train ends the job */
    free(out);
    return rc;
}
