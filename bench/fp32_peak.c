/* The machine's FP32 peak, measured: every thread of the OpenMP team runs
 * independent chains of fused multiply-adds on the widest vectors the
 * compiler targets (bench/resnet.sh builds it with -march=native), so the
 * benches can say what share of the machine a model's GFLOP/s are. Best of
 * three rounds, GFLOP/s (an FMA is 2 FLOPs). */
#include <omp.h>
#include <stdio.h>
#include <time.h>

typedef float v16 __attribute__((vector_size(64)));

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    const long iters = 20000000;
    double best = 0;
    for (int round = 0; round < 3; round++) {
        double t0 = now(), sink = 0;
#pragma omp parallel reduction(+ : sink)
        { /* 12 chains: enough in flight to cover the FMA latency on two pipes */
            v16 a0 = {0}, a1 = a0 + 1, a2 = a0 + 2, a3 = a0 + 3, a4 = a0 + 4, a5 = a0 + 5, a6 = a0 + 6, a7 = a0 + 7,
                a8 = a0 + 8, a9 = a0 + 9, a10 = a0 + 10, a11 = a0 + 11, b = a0 + 0.999f, c = a0 + 1e-4f;
            for (long k = 0; k < iters; k++) {
                a0 = a0 * b + c, a1 = a1 * b + c, a2 = a2 * b + c, a3 = a3 * b + c, a4 = a4 * b + c, a5 = a5 * b + c;
                a6 = a6 * b + c, a7 = a7 * b + c, a8 = a8 * b + c, a9 = a9 * b + c, a10 = a10 * b + c, a11 = a11 * b + c;
            }
            v16 s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
            for (int l = 0; l < 16; l++) sink += s[l];
        }
        double t = now() - t0, flops = 2.0 * 16 * 12 * iters * omp_get_max_threads();
        if (flops / t > best) best = flops / t;
        if (sink == 1234.5) printf(" ");
    }
    printf("%.1f\n", best / 1e9);
    return 0;
}
