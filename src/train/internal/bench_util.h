/* What the benchmarks (bench_step.c, bench_conv.c) share: a clock, the
 * median of timed runs, and synthetic inputs. */
#ifndef KILN_TRAIN_BENCH_UTIL_H
#define KILN_TRAIN_BENCH_UTIL_H

#include <stdint.h>

double kiln_bench_now_ms(void);
/* sorts t[0..n) (n >= 1) and gives its median */
double kiln_bench_median(double *t, int n);
/* n values uniform in [-1, 1], the same for a seed on every machine */
void kiln_bench_fill_uniform(float *x, int64_t n, uint64_t seed);

#endif
