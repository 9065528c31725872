#!/usr/bin/env bash
# kiln doctor on configurations made slow on purpose, each of which it must
# diagnose (the bottleneck named, the expected remedy among its remedies):
# PNG images loaded on the training thread (data: --workers, --cache), a
# ResNet with --no-autotune (autotuning), a batch far below what memory
# allows (the batch-size finder's batch), twice as many threads as cores
# (threads), a gpt that does not fit its memory budget (memory: activation
# checkpointing). The gains are measured and printed, never asserted (short
# windows on a shared machine). --apply prints the improved command and runs
# it; bad use exits 2. The phases of the breakdown add up to the step time.
#
# Needs $KILN_BIN, python3 and Debian's fashion-mnist and fortunes.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_doctor
export KILN_CACHE_DIR= XDG_CACHE_HOME="$T/cache"
EXPECT_TIMEOUT=240
W=(--window-steps 4)

small_idx "$T/small" 512 64
expect 0 "PNG images, 256x256" -- "$KILN" pack --from "$T/small" --to "$T/png" --format png --size 256 --channels 1
expect 0 "decoded shards, 3x32x32" -- "$KILN" pack --from "$T/small" --to "$T/shards" --format shard --decoded --size 32 --channels 3
expect 0 "fortunes as tokens" -- "$KILN" tokenize --from /usr/share/games/fortunes/fortunes --to "$T/f.tokens"

# diagnose NAME BOTTLENECK FLAG -- train options: the JSON report names both
diagnose() {
    local name=$1 want=$2 flag=$3
    shift 4
    expect 0 "doctor: $name" "what holds this run back" "remedies" -- "$KILN" doctor train "$@" "${W[@]}" --json
    cp "$T/out" "$T/$want.json"  # "any": the batch case
    sed -n '/where a step/,$p' "$T/err" | sed "s/^/    $name: /" >&2
    check "$name: diagnosed as $want, remedy --$flag" "$PY" - "$T/$want.json" "$want" "$flag" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
flags = [m["flag"] for m in d["remedies"]]
print("bottleneck", d["bottleneck"], "remedies", [(m["flag"], m["value"], round(m["predicted_gain"], 2)) for m in d["remedies"]])
assert sys.argv[2] == "any" or d["bottleneck"] == sys.argv[2], d["bottleneck"]
assert sys.argv[3] in flags, flags
assert d["step"]["step_ms"] > 0 and len(d["top_kernels"]) == 3 and d["machine"]["fp32_peak_gflops"] > 0
# where oneDNN has no bf16 kernel, --precision auto is fp32 itself: a trial of it would measure noise
assert d["machine"]["bf16_kernels"] or "precision" not in flags, flags
# the breakdown describes the steps the step time does (the first, with its one-time costs, left out of both)
s = d["step"]
parts = sum(s[k] for k in ("data_wait_ms", "forward_ms", "backward_ms", "optimizer_ms", "overhead_ms"))
print("phases %.2f ms of a %.2f ms step" % (parts, s["step_ms"]))
assert 0.5 * s["step_ms"] <= parts <= 1.1 * s["step_ms"], (parts, s["step_ms"])
PYEOF
}

# under the sanitizers (several times slower) the cheap cases alone: the batch, the memory and bad use
SAN=${KILN_SANITIZE:-0}
[ "$SAN" = 1 ] || diagnose "PNG on the training thread" data workers -- --model mnist-cnn --data "$T/png" --random-resized-crop 28 \
    --channels 1 --hflip --workers 0 --batch-size 64
[ "$SAN" = 1 ] || check "data: --cache is offered too" grep -q '"flag":"cache"' "$T/data.json"
[ "$SAN" = 1 ] || diagnose "resnet20 without autotuning" compute no-autotune -- --model resnet20 --data "$T/shards" --batch-size 16 \
    --no-autotune --optimizer sgd --lr 0.1
# a step of 4 samples may outrun one loader worker on a busy machine: only the remedy is asserted
diagnose "batch 4" any batch-size -- --model mnist-cnn --data "$T/small" --batch-size 4 --workers 1
# the machine's bf16 answer is the one mixed precision meets: emulated exactly where the doctor says no bf16 kernels
expect 0 "--precision bf16, one step" -- "$KILN" train --model mnist-cnn --data "$T/small" --batch-size 4 --max-steps 1 \
    --no-test --workers 1 --no-autotune --precision bf16
check "bf16_kernels agrees with --precision bf16 (emulated where there are none)" "$PY" - "$T/any.json" "$T/err" <<'PYEOF'
import json, sys
native = json.load(open(sys.argv[1]))["machine"]["bf16_kernels"]
emulated = "bf16 is emulated" in open(sys.argv[2]).read()
print("bf16 kernels:", native, "emulated:", emulated)
assert native != emulated, (native, emulated)
PYEOF
cores=$(nproc)
# batch 16: the oversubscribed team's trial windows took 13 s at 32, 7 s at 16, with the same diagnosis
[ "$SAN" = 1 ] || diagnose "threads above the cores" threads threads -- --model mnist-cnn --data "$T/small" --batch-size 16 \
    --threads $((2 * cores)) --workers 1
[ "$SAN" = 1 ] || check "threads: the remedy is the core count" grep -q "\"flag\":\"threads\",\"value\":\"$cores\"" "$T/threads.json"
diagnose "gpt over its memory budget" memory checkpoint-activations -- --model gpt --layers 2 --heads 2 --dim 64 \
    --block 64 --data "tokens:$T/f.tokens" --batch-size 32 --optimizer adamw --memory-budget-mb 15

# --apply: measured against the given command, the improved command printed, then run
[ "$SAN" = 1 ] || expect 0 "doctor --apply" "measured" "predicted" "the improved command" "--workers" -- "$KILN" doctor train \
    --model mnist-cnn --data "$T/png" --random-resized-crop 28 --channels 1 --workers 0 --batch-size 64 --max-steps 6 \
    --no-test "${W[@]}" --apply --json
grep -E "measured|improved|kiln train|kiln train" "$T/err" | sed 's/^/    apply: /' >&2
[ "$SAN" = 1 ] || check "--apply --json: the applied window and the improved command, the applied remedies' flags in it" \
    "$PY" - "$T/out" <<'PYEOF'
import json, sys
d = json.loads(next(l for l in open(sys.argv[1]) if l.startswith("{")))
a, rem = d["applied"], d["remedies"]
print("applied", {k: a[k] for k in ("samples_per_s", "measured_gain", "predicted_gain")}, a["command"])
assert a["samples_per_s"] > 0 and a["measured_gain"] > 0 and a["command"][0] == "train", a
assert "--workers" in a["command"] and "--apply" not in a["command"] and "--json" not in a["command"]
def has(cmd, flag, value):  # "--flag value" (or "--flag" alone when the remedy has no value) in the command
    return any(t == "--" + flag and (not value or (i + 1 < len(cmd) and cmd[i + 1] == value)) for i, t in enumerate(cmd))
for m in rem:  # an applied remedy's flag is in the command with its value; one not applied is not (the given
    # command's own flags stay: a --batch-size 512 not applied leaves the given --batch-size 64)
    assert m["applied"] == (m["memory"] or m["wrong_in_itself"] or m["predicted_gain"] >= 1.05), m
    if m["flag"] != "cache":
        assert has(a["command"], m["flag"], m["value"]) == m["applied"], (m["flag"], m["value"], a["command"])
PYEOF
# --measure-only: the baseline window alone
expect 0 "doctor --measure-only" "where a step" -- "$KILN" doctor train --model mnist-cnn --data "$T/small" --batch-size 8 \
    --threads $((2 * cores)) "${W[@]}" --measure-only --json
check "--measure-only: no remedy, no diagnosis" grep -q '"bottleneck":"unknown","remedies":\[\]' "$T/out"
expect 2 "doctor --measure-only --apply" "--measure-only" -- "$KILN" doctor train --model mnist-cnn --measure-only --apply

expect 2 "doctor without what to diagnose" "kiln doctor train" -- "$KILN" doctor
expect 2 "doctor train with an unknown model" "nope" -- "$KILN" doctor train --model nope
expect 2 "doctor train --window-steps 0" "--window-steps" -- "$KILN" doctor train --window-steps 0
expect 2 "doctor train --resume" "--resume" -- "$KILN" doctor train --resume x.safetensors
harness_finish
