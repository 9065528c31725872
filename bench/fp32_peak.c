/* The machine's FP32 peak, measured: every thread of the OpenMP team runs
 * independent chains of fused multiply-adds on the widest vectors the
 * compiler targets (bench/resnet.sh builds it with -march=native), so the
 * benches can say what share of the machine a model's GFLOP/s are. Best of
 * three rounds, GFLOP/s (an FMA is 2 FLOPs).
 *
 * `fp32_peak bf16`: the same for bf16 dot products with fp32 accumulation
 * (AVX512-BF16's vdpbf16ps, what oneDNN's bf16 convolutions run on such a
 * CPU: 32 products and 32 adds into 16 fp32 lanes per instruction), the
 * ceiling of kiln's --precision bf16; prints 0 where the compiler targets no
 * AVX512-BF16. */
#include <immintrin.h>
#include <omp.h>
#include <string.h>
#include <stdio.h>
#include <time.h>

/* the widest vectors the compiler targets: 16 floats with AVX-512, else 8 (AVX2: 12 chains of 16 would
 * need 24 registers of the 16 there, and spill) */
#ifdef __AVX512F__
#define LANES 16
#else
#define LANES 8
#endif
typedef float vf __attribute__((vector_size(LANES * 4)));

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#ifdef __AVX512BF16__
/* 24 independent accumulators, unrolled into registers: with 12, vdpbf16ps's latency
 * bounded the loop (a third of this rate on a Zen 5) */
static double bf16_peak(long iters) {
    double best = 0;
    for (int round = 0; round < 3; round++) {
        double t0 = now(), sink = 0;
#pragma omp parallel reduction(+ : sink)
        {
            __m512 a[24];
            for (int i = 0; i < 24; i++) a[i] = _mm512_set1_ps((float)i);
            __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.999f), _mm512_set1_ps(1e-4f));
            for (long k = 0; k < iters; k++)
#pragma GCC unroll 24
                for (int i = 0; i < 24; i++) a[i] = _mm512_dpbf16_ps(a[i], b, b);
            __m512 s = a[0];
            for (int i = 1; i < 24; i++) s = _mm512_add_ps(s, a[i]);
            sink += _mm512_reduce_add_ps(s);
        }
        double t = now() - t0, flops = 2.0 * 32 * 24 * iters * omp_get_max_threads();
        if (flops / t > best) best = flops / t;
        if (sink == 1234.5) printf(" ");
    }
    return best;
}
#endif

int main(int argc, char **argv) {
    const long iters = 20000000;
    if (argc > 1 && !strcmp(argv[1], "bf16")) {
#ifdef __AVX512BF16__
        printf("%.1f\n", bf16_peak(iters) / 1e9);
#else
        printf("0\n");
#endif
        return 0;
    }
    double best = 0;
    for (int round = 0; round < 3; round++) {
        double t0 = now(), sink = 0;
#pragma omp parallel reduction(+ : sink)
        { /* 12 chains: enough in flight to cover the FMA latency on two pipes */
            vf a0 = {0}, a1 = a0 + 1, a2 = a0 + 2, a3 = a0 + 3, a4 = a0 + 4, a5 = a0 + 5, a6 = a0 + 6, a7 = a0 + 7,
                a8 = a0 + 8, a9 = a0 + 9, a10 = a0 + 10, a11 = a0 + 11, b = a0 + 0.999f, c = a0 + 1e-4f;
            for (long k = 0; k < iters; k++) {
                a0 = a0 * b + c, a1 = a1 * b + c, a2 = a2 * b + c, a3 = a3 * b + c, a4 = a4 * b + c, a5 = a5 * b + c;
                a6 = a6 * b + c, a7 = a7 * b + c, a8 = a8 * b + c, a9 = a9 * b + c, a10 = a10 * b + c, a11 = a11 * b + c;
            }
            vf s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
            for (int l = 0; l < LANES; l++) sink += s[l];
        }
        double t = now() - t0, flops = 2.0 * LANES * 12 * iters * omp_get_max_threads();
        if (flops / t > best) best = flops / t;
        if (sink == 1234.5) printf(" ");
    }
    printf("%.1f\n", best / 1e9);
    return 0;
}
