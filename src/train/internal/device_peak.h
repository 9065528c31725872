/* A device's peaks measured through kiln's own plans on it (device_peak.c). */
#ifndef KILN_TRAIN_DEVICE_PEAK_H
#define KILN_TRAIN_DEVICE_PEAK_H

#include "kiln/graph.h"

#include "kiln/bench.h"

/* GFLOP/s of the backend's square matmul at the given precision and matmul precision (kiln_compile_opts), and GB/s
 * (bytes read + written) of its relu over a large buffer: the best rate of sizes doubled until a run takes 20 ms
 * (kiln_bench_peak is the same, with the sizes) */
kiln_status kiln_device_peaks(const char *backend, int precision, int matmul_precision, double *gflops, double *gbps);

#endif
