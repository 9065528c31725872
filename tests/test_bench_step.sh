#!/usr/bin/env bash
# kiln bench step: one JSON object with the median step time of a zoo model
# on synthetic data (training and --eval), its FLOPs as counted from the graph
# (resnet20: 81.1 MFLOP per image forward, as the peer counts them with
# module hooks), --profile over the timed steps, the linear layers' matmul
# forms timed once and then read from the cache, and exit 2 naming the bad
# option or model.
#
# Needs $KILN_BIN (ctest sets it) and python3.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_bench_step
export KILN_CACHE_DIR=

# the JSON object's field, or "" when absent
field() { "$PY" -c "import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]).get(sys.argv[2], ''))" "$T/out" "$1" 2>/dev/null; }

S=(bench step --model resnet20 --batch-size 4 --steps 3 --warmup 1 --autotune off --json)
expect 0 "resnet20 training step" -- "$KILN_BIN" "${S[@]}"
check "train: mode, batch, params" test "$(field mode) $(field batch) $(field params)" = "train 4 269722"
# forward conv+linear FLOPs per image, from PyTorch's module hooks: 81,102,080
check "train FLOPs: 3 x forward, no backward-data for the first conv" \
    "$PY" -c "import sys; f=float(sys.argv[1]); fwd=4*81102080; first=4*2*32*32*16*27; assert f == 3*fwd-first, f" "$(field flops)"
check "train: ms, images/s, GFLOP/s and arena positive" \
    "$PY" -c "import sys; assert all(float(v) > 0 for v in sys.argv[1:])" "$(field ms)" "$(field images_per_s)" "$(field gflops)" "$(field arena_mb)"
cp "$T/out" "$T/train.json"
expect 0 "resnet20 inference step" -- "$KILN_BIN" "${S[@]}" --eval
check "eval: forward FLOPs only" "$PY" -c "import sys; assert sys.argv[1] == 'eval' and float(sys.argv[2]) == 4 * 81102080" "$(field mode)" "$(field flops)"
check "eval's arena is smaller than training's" \
    "$PY" -c "import json,sys; t=json.load(open(sys.argv[1])); assert float(sys.argv[2]) < t['arena_mb']" "$T/train.json" "$(field arena_mb)"
expect 0 "resnet18 at 64x64" -- "$KILN_BIN" bench step --model resnet18 --batch-size 2 --size 64 --steps 1 --warmup 0 --autotune off --json
check "resnet18: its parameters" test "$(field params)" = "11181642"
expect 0 "resnet18 with 100 classes" -- "$KILN_BIN" bench step --model resnet18 --batch-size 2 --size 32 --num-classes 100 --steps 1 --warmup 0 --autotune off --json
check "resnet18, 100 classes: fc 512x100 + 100" test "$(field params)" = "$((11181642 + 90 * 513))"

expect 0 "--profile: the timed steps, not the warm-up" -- "$KILN_BIN" bench step --model mnist-cnn --batch-size 4 --steps 2 \
    --warmup 3 --autotune off --profile
check "--profile: over the 2 timed runs" grep -q "by kernel over 2 runs" "$T/out"
check "--profile: conv work in GFLOP/s, the rest in GB/s" sh -c "grep -qE '^  conv1 +[0-9.]+ ms +[0-9.]+% +[0-9.]+ GFLOP/s' '$T/out' &&
    grep -qE '^  max_pool2d#[0-9]+ +[0-9.]+ ms +[0-9.]+% +[0-9.]+ GB/s' '$T/out'"

# the matmul forms (linear_tune.c): timed and remembered by the first run, read from the cache by the second
GPT=(bench step --model gpt --layers 1 --heads 2 --dim 64 --block 32 --batch-size 2 --steps 1 --warmup 0)
expect 0 "gpt: its linear layers' forms timed" "linear:n64i64o192kn: fwd" "bwd_weight" -- env KILN_CACHE_DIR="$T/cache" \
    "$KILN_BIN" "${GPT[@]}"
cp "$T/err" "$T/tuned.log"
expect 0 "gpt again, the same cache" -- env KILN_CACHE_DIR="$T/cache" "$KILN_BIN" "${GPT[@]}"
check "the cache holds what the first run remembered; the second times only what it did not (timed under load)" \
    "$PY" - "$T/tuned.log" "$T/err" "$T/cache/autotune-v4.txt" <<'PYEOF'
import os, re, sys
key = lambda l: re.match(r"kiln: (linear:\S+):", l)
first = [l for l in open(sys.argv[1]) if key(l)]
unsure = {key(l).group(1) for l in first if "not remembered" in l}
again = {key(l).group(1) for l in open(sys.argv[2]) if key(l)}
# under load every form may be unsure, and then nothing is remembered: no cache file at all (ASan's parallel run)
cached = {tuple(l.split()[0:3:2]) for l in open(sys.argv[3]) if l.startswith("linear:")} if os.path.exists(sys.argv[3]) else set()
kept = {(key(l).group(1), d) for l in first for d, rest in re.findall(r" (fwd|bwd_data|bwd_weight) (\S+ \([^)]*\)(?: \(timed under load[^)]*\))?)", l)
        if "not remembered" not in rest}
print(len(first), "layers timed first,", len(unsure), "with a direction unsure,", len(again), "timed again,", len(kept), "kept")
assert len(first) == 5 and all(" bwd_weight " in l for l in first) and again <= unsure, (first, again, unsure)
assert kept <= cached and len(kept) + sum(l.count("not remembered") for l in first) == 15, (kept, cached)
PYEOF
expect 0 "--autotune off: nothing timed" -- env KILN_CACHE_DIR= "$KILN_BIN" "${GPT[@]}" --autotune off
check "--autotune off: no form timed" sh -c "! grep -q 'linear:n' '$T/err'"

expect 2 "an unknown model" "unknown model 'resnet9000'" -- "$KILN_BIN" bench step --model resnet9000
expect 2 "batch 0" "--batch-size" -- "$KILN_BIN" bench step --batch-size 0
expect 2 "bad --autotune" "--autotune" -- "$KILN_BIN" bench step --autotune maybe
expect 2 "an unknown option" "--bogus" -- "$KILN_BIN" bench step --bogus
expect 2 "--num-classes 0" "--num-classes" -- "$KILN_BIN" bench step --num-classes 0
expect 2 "--num-classes for mnist-cnn" "--num-classes 3" -- "$KILN_BIN" bench step --model mnist-cnn --num-classes 3
expect 2 "a bad --matmul-precision" "--matmul-precision: 'low'" -- "$KILN_BIN" bench step --matmul-precision low
expect 2 "a bad --device" "--device: 'tpu'" -- "$KILN_BIN" bench step --device tpu
# --device auto runs where the GPU is, else on the cpu; --device cuda without a GPU says why
expect 0 "--device auto" -- "$KILN_BIN" bench step --model mlp --batch-size 4 --steps 1 --warmup 0 --device auto --json
if "$KILN_BIN" bench step --model mlp --batch-size 4 --steps 1 --warmup 0 --device cuda --json >/dev/null 2>&1; then
    expect 0 "--device cuda on a GPU" -- "$KILN_BIN" bench step --model mlp --batch-size 4 --steps 1 --warmup 0 --device cuda --json
    check "--device cuda on a GPU: the device named" test "$(field device)" = cuda
else
    expect 2 "--device cuda without a GPU" "--device cuda" -- "$KILN_BIN" bench step --model mlp --device cuda
fi
harness_finish
