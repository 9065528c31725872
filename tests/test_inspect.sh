#!/usr/bin/env bash
# kiln inspect: the compiled plan of resnet20 names every one of its 19
# convolutions (forward, and backward-data except the first's, and
# backward-weights in training), has ResNet-20's 269,722 parameters, and
# FLOPs equal to a count made here from the architecture alone; every conv
# step's FLOPs follow from its own shapes; the totals add up the steps; eval's
# plan has forward steps only and a smaller arena; --json is JSON; bad options
# exit 2 naming them.
#
# Needs $KILN_BIN (ctest sets it) and python3.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_inspect
export KILN_CACHE_DIR=

B=4
expect 0 "resnet20 training plan, as a table" -- "$KILN_BIN" inspect --model resnet20 --batch-size $B --autotune off
cp "$T/out" "$T/table"
missing=""
for conv in conv1 $(for i in 0 1 2 3 4 5 6 7 8; do echo layers.$i.conv1 layers.$i.conv2; done); do
    grep -qE "^[0-9]+ +$conv +conv2d " "$T/table" || missing="$missing $conv"
    grep -qE "^[0-9]+ +$conv:bwd_weight +conv2d_bwd_weight " "$T/table" || missing="$missing $conv:bwd_weight"
    [ "$conv" = conv1 ] || grep -qE "^[0-9]+ +$conv:bwd_data +conv2d_bwd_data " "$T/table" || missing="$missing $conv:bwd_data"
done
check "the table names every conv step:${missing:- all there}" test -z "$missing"
check "the table's summary: parameters, arena, workspace and reorders" grep -qE "269722 parameters, arena [0-9.]+ MiB, kernel workspace [0-9.]+ MiB, .* reorders of activations" "$T/table"

expect 0 "resnet20 training plan, as JSON" -- "$KILN_BIN" inspect --model resnet20 --batch-size $B --autotune off --json
cp "$T/out" "$T/train.json"
# resnet20 from its architecture: (in, out, stride) of each 3x3 conv, the image 32x32, fc 64 -> 10
check "JSON: parameters, FLOPs from the architecture, per-step FLOPs from the shapes, totals" "$PY" - "$T/train.json" $B <<'EOF'
import json, sys
d = json.load(open(sys.argv[1])); B = int(sys.argv[2])
assert d["params"] == 269722, d["params"]
assert d["mode"] == "train" and d["batch"] == B
convs, h, cin = [(3, 16, 1, 32)], 32, 16
for cout in (16, 32, 64):
    for b in range(3):
        s = 2 if b == 0 and cout > 16 else 1
        convs.append((cin, cout, s, h)); h //= s; convs.append((cout, cout, 1, h)); cin = cout
fwd = [2 * B * co * (hh // s) ** 2 * ci * 9 for ci, co, s, hh in convs]
fc = 2 * B * 64 * 10
want = sum(fwd) + fc                      # forward
want += sum(fwd) + fc                     # backward-weights of every layer
want += sum(fwd[1:]) + fc                 # backward-data of all but the first conv (the image needs no gradient)
assert d["flops"] == want, (d["flops"], want)
steps = d["steps"]
for s in steps:
    if s["op"].startswith("conv2d"):
        y = s["out"][0]["shape"] if s["op"] == "conv2d" else s["in"][1 if s["op"] == "conv2d_bwd_weight" else 0]["shape"]
        w = s["in"][1]["shape"] if s["op"] != "conv2d_bwd_weight" else s["out"][0]["shape"]
        n = 1
        for v in y: n *= v
        per = 1
        for v in w[1:]: per *= v
        assert s["flops"] == 2 * n * per, (s["name"], s["flops"], 2 * n * per)
        assert s["kernel"], s["name"] + " has no kernel"
    elif not s["op"].startswith("linear"):
        assert s["flops"] == 0, s["name"]
assert sum(s["flops"] for s in steps) == d["flops"]
assert sum(s["reorders"] for s in steps) == d["reorders"] and sum(s["weight_reorders"] for s in steps) == d["weight_reorders"]
assert sum(1 for s in steps if s["op"] == "conv2d") == 19
# the layout pass blocks only where the CPU has AVX-512 (src/backends/cpu/cpu.c)
flags = set(next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split())
if {"avx512f", "avx512dq", "avx512bw", "avx512vl"} <= flags:
    assert any(a["layout"] == "nChw16c" for s in steps for a in s["out"]), "the layout pass blocked nothing"
else:
    assert not any(a["layout"] == "nChw16c" for s in steps for a in s["out"]), "blocked without AVX-512"
assert {s["phase"] for s in steps} == {"forward", "backward", "other"}
EOF

expect 0 "resnet20 inference plan" -- "$KILN_BIN" inspect --model resnet20 --batch-size $B --autotune off --eval --json
check "eval: forward steps only, forward FLOPs, a smaller arena" "$PY" - "$T/out" "$T/train.json" $B <<'EOF'
import json, sys
d, t, B = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
assert d["mode"] == "eval" and all(s["phase"] != "backward" for s in d["steps"])
assert d["flops"] == B * 81102080, d["flops"]   # resnet20's forward, as PyTorch's module hooks count it
assert d["arena_bytes"] < t["arena_bytes"]
EOF
expect 0 "resnet50 at 64x64, 5 classes" -- "$KILN_BIN" inspect --model resnet50 --batch-size 2 --size 64 --num-classes 5 --eval --autotune off --json
check "resnet50: 53 convs, torchvision's parameters" "$PY" -c "
import json, sys; d = json.load(open(sys.argv[1]))
assert sum(1 for s in d['steps'] if s['op'] in ('conv2d', 'conv2d_add')) == 53
assert sum(1 for s in d['steps'] if s['op'] == 'conv2d_add') == 16   # each block's last conv takes the shortcut's sum
assert d['params'] == 23528522 - 2049 * 5, d['params']" "$T/out"

expect 2 "batch 0" "--batch-size" -- "$KILN_BIN" inspect --batch-size 0
expect 2 "an unknown model" "resnet9000" -- "$KILN_BIN" inspect --model resnet9000
expect 2 "bad --autotune" "--autotune" -- "$KILN_BIN" inspect --autotune maybe
expect 2 "--num-classes 0" "--num-classes" -- "$KILN_BIN" inspect --num-classes 0
expect 2 "an unknown option" "--bogus" -- "$KILN_BIN" inspect --bogus
expect 0 "--help" -- "$KILN_BIN" inspect --help
harness_finish
