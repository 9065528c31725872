#!/usr/bin/env bash
# kiln bench pointwise: one JSON object for the guide's five-node GELU over N
# floats: fused, one kernel moving 8 bytes per element; unfused, five kernels
# moving 44 (each step's inputs and outputs); gbps = bytes / median; the
# output is erf's GELU; exit 2 naming a bad option.
#
# Needs $KILN_BIN (ctest sets it) and python3.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_bench_pointwise

S=(bench pointwise --op gelu-chain --elements 100003 --steps 3 --warmup 1 --json)
expect 0 "fused" -- "$KILN_BIN" "${S[@]}"
check "fused: one kernel, 8 bytes per element, gbps from bytes and time, erf's GELU" "$PY" -c "
import json, sys
o = json.load(open(sys.argv[1]))
assert o['fuse'] == 'on' and o['kernels'] == 1 and o['bytes'] == 8 * 100003, o
assert o['us'] > 0 and o['us_min'] <= o['us'] and abs(o['gbps'] - o['bytes'] / (o['us'] * 1e3)) < 1e-6 * o['gbps'], o
assert o['max_abs_err'] < 1e-5, o" "$T/out"
expect 0 "unfused" -- "$KILN_BIN" "${S[@]}" --fuse off
check "unfused: five kernels, 44 bytes per element" "$PY" -c "
import json, sys
o = json.load(open(sys.argv[1]))
assert o['fuse'] == 'off' and o['kernels'] == 5 and o['bytes'] == 44 * 100003 and o['max_abs_err'] < 1e-5, o" "$T/out"
expect 0 "text output" -- "$KILN_BIN" bench pointwise --elements 5000 --steps 2 --warmup 0
check "text: kernels and GB/s" grep -q "1 kernels, .* GB/s" "$T/out"

expect 2 "an unknown op" "--op" -- "$KILN_BIN" bench pointwise --op softmax
expect 2 "no elements" "--elements" -- "$KILN_BIN" bench pointwise --elements 0
expect 2 "bad --fuse" "--fuse" -- "$KILN_BIN" bench pointwise --fuse maybe
expect 2 "an unknown option" "--bogus" -- "$KILN_BIN" bench pointwise --bogus
harness_finish
