/* The machine's measured peaks and per-core use (internal/machine.h). Peaks
 * are measured where they are used, in the same process and thread team,
 * because the CPU differs between machines (AVX-512 or not, clock, cores). */
#include "train/internal/machine.h"
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define ACC 12 /* independent chains: enough to cover the FMA latency on two ports */

__attribute__((target("avx512f"))) static float fma_avx512(long iters) {
    __m512 a[ACC], m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int k = 0; k < ACC; k++) a[k] = _mm512_set1_ps((float)k);
    for (long i = 0; i < iters; i++)
#pragma GCC unroll 12 /* ACC: unrolled, the chains live in registers; rolled, GCC kept them on the stack (a third of the peak) */
        for (int k = 0; k < ACC; k++) a[k] = _mm512_fmadd_ps(a[k], m, c);
    float s = 0;
    for (int k = 0; k < ACC; k++) s += _mm512_reduce_add_ps(a[k]);
    return s;
}

__attribute__((target("avx2,fma"))) static float fma_avx2(long iters) {
    __m256 a[ACC], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int k = 0; k < ACC; k++) a[k] = _mm256_set1_ps((float)k);
    for (long i = 0; i < iters; i++)
#pragma GCC unroll 12
        for (int k = 0; k < ACC; k++) a[k] = _mm256_fmadd_ps(a[k], m, c);
    float out[8], s = 0;
    for (int k = 0; k < ACC; k++) {
        _mm256_storeu_ps(out, a[k]);
        for (int j = 0; j < 8; j++) s += out[j];
    }
    return s;
}

double kiln_machine_peak_gflops(int threads) {
    int wide = __builtin_cpu_supports("avx512f"), lanes = wide ? 16 : 8;
    if (!wide && !__builtin_cpu_supports("fma")) return 0; /* no FMA: no peak worth quoting */
    long iters = 4000000;
    volatile float sink = 0;
    double best = 0;
    for (int rep = 0; rep < 2; rep++) { /* the first round also wakes the cores up */
        double t0 = now_s();
#pragma omp parallel num_threads(threads)
        {
            float s = wide ? fma_avx512(iters) : fma_avx2(iters);
#pragma omp atomic
            sink += s;
        }
        double dt = now_s() - t0, g = 2.0 * lanes * ACC * (double)iters * threads / dt * 1e-9;
        if (g > best) best = g;
    }
    (void)sink;
    return best;
}

double kiln_machine_copy_gbps(int threads) {
    size_t n = (size_t)128 << 20; /* 128 MiB each way */
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, n);
    memset(b, 2, n);
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
#pragma omp parallel num_threads(threads)
        {
            int t = omp_get_thread_num(), nt = omp_get_num_threads();
            size_t lo = n / (size_t)nt * (size_t)t, hi = t + 1 == nt ? n : n / (size_t)nt * (size_t)(t + 1);
            memcpy(b + lo, a + lo, hi - lo);
        }
        double g = 2.0 * (double)n / (now_s() - t0) * 1e-9;
        if (g > best) best = g;
    }
    free(a);
    free(b);
    return best;
}

void kiln_core_times_read(kiln_core_times *t) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f) && t->n < KILN_MAX_CORES) {
        unsigned long long v[8] = {0};
        int cpu;
        if (strncmp(line, "cpu", 3) != 0 || line[3] < '0' || line[3] > '9') continue; /* the total line, and the rest */
        if (sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &v[6], &v[7]) < 5)
            continue; /* the "cpu " total line, or the lines after the cores */
        unsigned long long total = 0;
        for (int k = 0; k < 8; k++) total += v[k];
        t->busy[t->n] = total - v[3] - v[4]; /* idle and iowait are not busy */
        t->total[t->n] = total;
        t->n++;
    }
    fclose(f);
}

int kiln_core_busy(const kiln_core_times *before, const kiln_core_times *after, double *busy) {
    int n = before->n < after->n ? before->n : after->n;
    for (int i = 0; i < n; i++) {
        unsigned long long dt = after->total[i] - before->total[i];
        busy[i] = dt ? (double)(after->busy[i] - before->busy[i]) / (double)dt : 0;
    }
    return n;
}
