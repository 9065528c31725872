/* The machine's memory bandwidth, measured (STREAM's copy and triad): every
 * thread of the OpenMP team streams its static share of float arrays far
 * larger than the caches (first touched by the same thread), with ordinary
 * stores as kiln's kernels make. Bytes counted as STREAM counts them: what
 * the loop reads and writes (copy 8, triad 12 bytes per element; the cache's
 * read-for-ownership of stored lines is not counted, nor is it in kiln's
 * figures). Best of five rounds, GB/s, one JSON line. bench/pointwise.sh
 * builds it with -O2 -march=native -fopenmp. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1L << 26; /* 256 MB per array */
    float *a = aligned_alloc(64, (size_t)n * 4), *b = aligned_alloc(64, (size_t)n * 4), *c = aligned_alloc(64, (size_t)n * 4);
    if (!a || !b || !c || n < 1024) {
        fprintf(stderr, "membw: cannot allocate 3 x %ld floats\n", n);
        return 1;
    }
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) a[i] = 1.0f, b[i] = 2.0f, c[i] = 0.5f;
    double copy = 0, triad = 0;
    for (int round = 0; round < 5; round++) {
        double t0 = now();
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++) c[i] = a[i];
        double t1 = now();
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++) a[i] = b[i] + 3.0f * c[i];
        double t2 = now();
        if (8.0 * n / (t1 - t0) > copy) copy = 8.0 * n / (t1 - t0);
        if (12.0 * n / (t2 - t1) > triad) triad = 12.0 * n / (t2 - t1);
    }
    printf("{\"copy_gbps\": %.2f, \"triad_gbps\": %.2f, \"elements\": %ld, \"threads\": %d, \"check\": %g}\n", copy / 1e9,
           triad / 1e9, n, omp_get_max_threads(), (double)a[n / 2]);
    free(a), free(b), free(c);
    return 0;
}
