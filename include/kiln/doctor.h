/* The doctor (docs/doctor.md): runs short profiled windows of a training
 * configuration, says where a step's time and the memory go, and ranks the
 * guide's remedies that apply, each with the flag that applies it and the gain
 * it predicts (and how it predicted it). */
#ifndef KILN_DOCTOR_H
#define KILN_DOCTOR_H

#include "kiln/train.h"

typedef struct kiln_doctor_opts {
    int64_t window_steps;       /* steps of the baseline window and of each remedy's trial (12) */
    int measure_only;           /* 1: the baseline window alone, no remedy looked for (to compare configurations) */
} kiln_doctor_opts;
kiln_doctor_opts kiln_doctor_defaults(void);

typedef struct kiln_remedy {
    char flag[32];              /* the train option that applies it, as the command line spells it */
    char value[160];            /* its value ("" for a flag without one) */
    char technique[96];         /* the guide's technique */
    char why[256];              /* what the doctor saw */
    char how[192];              /* how the gain was predicted */
    double predicted;           /* time per sample before / after (memory remedies: arena before / after) */
    int memory;                 /* 1: the run does not fit without it */
    int wrong;                  /* 1: the given setting is wrong in itself: offered and applied whatever its trial says */
    int applied;                /* 1: --apply applies it (needed to fit, wrong in itself, or predicted >= 1.05x) */
} kiln_remedy;

#define KILN_DOCTOR_MAX_REMEDIES 12
#define KILN_DOCTOR_MAX_CORES 64
typedef struct kiln_doctor_report {
    char cpu[96];               /* /proc/cpuinfo's model name */
    int cores_online, cores_available;
    double peak_gflops, copy_gbps; /* measured here, by the run's thread count */
    int bf16_kernels;           /* oneDNN has bf16 kernels on this CPU (else mixed precision is not offered on it) */
    char device[96];            /* the run's device ("cuda 0 (PCI ...)"); "": the cpu. On a device the kernels are its:
                                   the CPU's peaks do not rate them, and memory is the device's */
    double device_peak_gflops;  /* measured on the device: a square matmul in the run's math (0: not measured) */
    double device_copy_gbps;    /* and a relu over a large buffer, bytes read + written */
    /* memory: the plan's arena against the budget (plan-only, before anything runs) */
    int fits;
    double arena_mb, budget_mb;
    /* the baseline window (with the memory remedy when it did not fit) */
    int64_t steps, batch_size;
    int threads, workers;
    double window_s;            /* wall time of the window, compiling included */
    double step_ms;             /* wall time per step after compiling */
    double data_wait_ms, fwd_ms, bwd_ms, optim_ms, overhead_ms, samples_per_s;
    int ncores;
    double core_busy[KILN_DOCTOR_MAX_CORES];
    double ring_mb, peak_rss_mb;
    int ntop;
    kiln_kernel_stat top[3];
    /* under mpirun (docs/doctor.md): ranks, those on this host, the baseline's gradient all-reduce (means over
     * the ranks: the optimizer's wait per step, the share hidden behind backward, buckets, MiB reduced a step) */
    int world_size, local_ranks, buckets;
    double allreduce_exposed_ms, allreduce_hidden_frac, grad_mb;
    char bottleneck[16];        /* what holds the run back most: memory, threads, data, all-reduce or compute */
    int nremedies;              /* ranked: memory first, then by predicted gain */
    kiln_remedy remedies[KILN_DOCTOR_MAX_REMEDIES];
    double elapsed_s;           /* the doctor's own time */
    /* --apply: a window of the configuration with the applied remedies (0: not measured) */
    double applied_step_ms, applied_samples_per_s, applied_predicted;
} kiln_doctor_report;

/* diagnose c: bounded windows of window_steps each (the baseline and one per remedy tried) */
kiln_status kiln_doctor_run(const kiln_train_config *c, const kiln_doctor_opts *o, kiln_doctor_report *r);
/* c with the remedies of r marked applied (the strings stay r's: keep r alive while c is used) */
kiln_status kiln_doctor_apply(const kiln_doctor_report *r, kiln_train_config *c);
/* wall ms per step of a window of c (steps steps, profiled as the doctor's windows are) */
kiln_status kiln_doctor_measure(const kiln_train_config *c, int64_t steps, double *step_ms, double *samples_per_s);
/* the predicted gain of the applied remedies together (the data remedies counted once) */
double kiln_doctor_predicted_total(const kiln_doctor_report *r);
/* the report as a JSON document (free it) */
char *kiln_doctor_json(const kiln_doctor_report *r);

#endif
