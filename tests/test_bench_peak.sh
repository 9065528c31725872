#!/usr/bin/env bash
# kiln bench peak: the cpu's matmul GFLOP/s (bf16 operands) and relu GB/s
# through kiln's own plans, as JSON (sizes grown by doubling: a power-of-two
# matmul n from 256, a relu of at least 16 Mi floats, past the caches);
# --device cuda without a GPU exits 2 naming the device, bad options exit 2
# naming the option.
#
# Needs $KILN_BIN (ctest sets it) and python3.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_bench_peak

# one measurement (each is several seconds of compiles and runs): bf16 operands, as JSON
expect 0 "the cpu's peaks, as JSON" -- "$KILN_BIN" bench peak --precision bf16 --json
check "gflops and gbps measured, at sizes the doubling reaches" "$PY" -c "
import json, sys
o = json.load(open(sys.argv[1]))
n, r = o['matmul_n'], o['relu_n']
assert o['device'] == 'cpu' and o['precision'] == 'bf16' and o['gflops'] > 0 and o['gbps'] > 0, o
assert 256 <= n <= 16384 and n & (n - 1) == 0 and (1 << 24) <= r <= (1 << 28) and r & (r - 1) == 0, o
# a plausible matmul: under 100 TFLOP/s on a CPU's cores, over 0.1 GFLOP/s
assert 0.1 < o['gflops'] < 1e5 and 0.1 < o['gbps'] < 1e4, o" "$T/out"

expect 2 "no GPU" "--device cuda" -- "$KILN_BIN" bench peak --device cuda
expect 2 "a bad precision" "--precision" -- "$KILN_BIN" bench peak --precision fp8
expect 2 "a bad matmul precision" "matmul-precision" -- "$KILN_BIN" bench peak --matmul-precision low
expect 2 "an unknown option" "--bogus" -- "$KILN_BIN" bench peak --bogus
harness_finish
