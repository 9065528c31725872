/* What the doctor measures of the machine it runs on (never assumed: the CPU
 * model changes from machine to machine): the FP32 peak of the compute team,
 * the memory bandwidth, and each core's busy share over a window. */
#ifndef KILN_TRAIN_MACHINE_H
#define KILN_TRAIN_MACHINE_H

#define KILN_MAX_CORES 256

/* FP32 GFLOP/s of `threads` threads doing independent fused multiply-adds (AVX-512 where the CPU has it) */
double kiln_machine_peak_gflops(int threads);
/* GB/s (bytes read + written) of `threads` threads copying a buffer far larger than the caches */
double kiln_machine_copy_gbps(int threads);

/* /proc/stat's per-core counters: take one before and one after a window */
typedef struct {
    int n;
    unsigned long long busy[KILN_MAX_CORES], total[KILN_MAX_CORES];
} kiln_core_times;
void kiln_core_times_read(kiln_core_times *t);
/* each core's busy share between two readings; returns the cores */
int kiln_core_busy(const kiln_core_times *before, const kiln_core_times *after, double *busy);

#endif
