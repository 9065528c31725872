#!/usr/bin/env bash
# kiln bench conv: one JSON object with the forward and forward+backward
# median times of one convolution through kiln's plans, GFLOP/s from the
# shape, each direction's implementation and the time the tuner measured for
# it (their sum: the fastest oneDNN forward+backward alone); a second run on
# the same cache times no candidate and keeps the choices; autotune off names
# oneDNN's own choice with no time; exit 2 naming the bad option.
#
# Needs $KILN_BIN (ctest sets it) and python3.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_bench_conv
export KILN_CACHE_DIR="$T/cache"

# the last JSON object's field (dotted path), or "" when absent
field() {
    "$PY" -c "
import json, sys
o = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
for k in sys.argv[2].split('.'):
    o = o.get(k, '') if isinstance(o, dict) else ''
print('null' if o is None else o)" "$T/out" "$1" 2>/dev/null
}

S=(bench conv --shape 2x16x12x12 --out-channels 32 --kernel 3 --padding 1 --steps 3 --warmup 1 --json)
expect 0 "autotuned" -- "$KILN_BIN" "${S[@]}"
cp "$T/out" "$T/first.json"
check "times and GFLOP/s positive, forward GFLOP/s from the shape" "$PY" -c "
import json, sys
o = json.load(open(sys.argv[1]))
assert o['fwd_us'] > 0 and o['fwdbwd_us'] > 0 and o['fwd_us_min'] <= o['fwd_us'], o
flop = 2 * 2 * 32 * 12 * 12 * 16 * 9
assert abs(o['gflops']['fwd'] - flop / (o['fwd_us'] * 1e3)) < 1e-6 * o['gflops']['fwd'], o
assert abs(o['gflops']['fwdbwd'] - 3 * flop / (o['fwdbwd_us'] * 1e3)) < 1e-6 * o['gflops']['fwdbwd'], o" "$T/out"
check "every direction named and timed; alone = their sum; candidates timed" "$PY" -c "
import json, sys
o = json.load(open(sys.argv[1]))
c = o['choices']
assert all(c[d]['impl'].count('/') >= 2 and c[d]['us'] > 0 for d in ('fwd_inf', 'fwd', 'bwd_data', 'bwd_weight')), c
s = c['fwd']['us'] + c['bwd_data']['us'] + c['bwd_weight']['us']
assert abs(o['alone_fwdbwd_us'] - s) < 0.2 and o['alone_fwd_us'] == c['fwd_inf']['us'], o
assert o['candidates_timed'] > 4 and o['problem'].startswith('mb2ic16ih12iw12oc32kh3kw3sh1ph1'), o" "$T/out"
expect 0 "the same conv again, cache warm" -- "$KILN_BIN" "${S[@]}"
check "warm: no candidate timed, the same choices (unless the first run was timed under load)" "$PY" -c "
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
impl = lambda o: {d: c['impl'] for d, c in o['choices'].items()}
assert a['unsure'] > 0 or (b['candidates_timed'] == 0 and impl(a) == impl(b)), (a, b)
assert b['alone_fwdbwd_us'] > 0, b" "$T/first.json" "$T/out"
expect 0 "autotune off" -- "$KILN_BIN" "${S[@]}" --autotune off
check "off: oneDNN's own choice, untimed" "$PY" -c "
import json, sys
o = json.load(open(sys.argv[1]))
assert o['autotune'] == 'off' and o['choices']['fwd']['impl'] and o['choices']['fwd']['us'] is None, o
assert o['alone_fwdbwd_us'] is None and o['candidates_timed'] == 0, o" "$T/out"
expect 0 "stride 2, no bias" -- "$KILN_BIN" bench conv --shape 2x3x9x9 --out-channels 16 --kernel 3 --padding 1 --stride 2 \
    --no-bias --steps 2 --warmup 0 --json
check "the problem says stride 2 and no bias" "$PY" -c "import sys; p = sys.argv[1]; assert 'sh2' in p and '/nb' in p, p" "$(field problem)"
expect 0 "text output" "" -- "$KILN_BIN" bench conv --shape 2x16x12x12 --out-channels 32 --steps 2 --warmup 0
check "text: both figures and the alone line" grep -q "forward+backward.*us.*fastest oneDNN forward+backward measured alone" \
    <(tr '\n' ' ' <"$T/out")

expect 2 "a 3-d shape" "--shape" -- "$KILN_BIN" bench conv --shape 2x16x12
expect 2 "a kernel larger than the input" "does not fit" -- "$KILN_BIN" bench conv --shape 1x1x2x2 --kernel 5 --padding 0
expect 2 "bad --autotune" "--autotune" -- "$KILN_BIN" bench conv --autotune maybe
expect 2 "stride 0" "--stride" -- "$KILN_BIN" bench conv --stride 0
expect 2 "an unknown option" "--bogus" -- "$KILN_BIN" bench conv --bogus
harness_finish
