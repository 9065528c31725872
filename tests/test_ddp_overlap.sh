#!/usr/bin/env bash
# Gradient buckets overlapped with backward, at 2 ranks: --overlap on (each
# bucket's all-reduce started inside backward) and --overlap off (all started
# after it) train identically (every step loss and every parameter bit for
# bit: the same sums of the same slices), for mnist-cnn and resnet20 with
# small buckets; the JSON summary states the world, the global batch, more
# than one bucket, the exposed all-reduce time and a hidden fraction above 0
# with overlap and 0 without, the last-arriving rank's wait and the arrival
# imbalance adding up to the mean wait; --trace with %r writes every rank's
# file, each with a span per bucket and the wait on the comm track.
# With --sync-bn (collectives inside backward, between the buckets' starts)
# and with --accumulate 2 (no_sync micro-batches) too.
#
# Needs $KILN_BIN, mpirun (Open MPI) and kiln's MPI plugin; exits 77 without them.
# Under the sanitizers LeakSanitizer is off here (Open MPI's own allocations).
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_ddp_overlap
export KILN_CACHE_DIR=
harness_mpi

# a small set: 512 training samples, 64 test; resnet20 reads them as 3x32x32 PNGs
small_idx "$T/small" 512 64
expect 0 "pack 3x32x32 images" -- "$KILN" pack --from "$T/small" --to "$T/img" --format png --size 32 --channels 3

EXPECT_TIMEOUT=120
A=(--epochs 1 --optimizer sgd --lr 0.01 --momentum 0.9 --threads 1 --workers 1 --no-autotune --dropout-off --no-test
   --log-every 1 --seed 5 --json)
run() { # NAME MODEL DATA BATCH STEPS BUCKET_MB OVERLAP [more]
    local name=$1 model=$2 data=$3 batch=$4 steps=$5 mb=$6 ov=$7
    shift 7
    expect 0 "$name" "2 ranks" "global batch $((2 * batch))" -- mpirun -np 2 "$KILN" train "${A[@]}" --model "$model" \
        --data "$data" --batch-size "$batch" --max-steps "$steps" --bucket-mb "$mb" --overlap "$ov" \
        --metrics "$T/$name.jsonl" --save "$T/$name.safetensors" "$@"
    cp "$T/out" "$T/$name.json"
}
run cnn-on mnist-cnn "$T/small" 32 8 0.05 on --trace "$T/cnn-on.%r.trace.json"
run cnn-off mnist-cnn "$T/small" 32 8 0.05 off
# --accumulate 2: the first micro-batch of a step starts no bucket (no_sync)
run acc-on mnist-cnn "$T/small" 16 4 0.05 on --accumulate 2
run acc-off mnist-cnn "$T/small" 16 4 0.05 off --accumulate 2
run res-on resnet20 "$T/img" 8 4 0.1 on
run res-off resnet20 "$T/img" 8 4 0.1 off
run res-big resnet20 "$T/img" 8 2 25 on
# sync batch norm's collectives inside backward, between the buckets' all-reduces
run sbn-on resnet20 "$T/img" 8 4 0.1 on --sync-bn
run sbn-off resnet20 "$T/img" 8 4 0.1 off --sync-bn

SAME=("$PY" "$(dirname "$0")/same_run.py" --exact) # the same step losses and checkpoint bytes
check "mnist-cnn: --overlap on and off train identically" "${SAME[@]}" "$T/cnn-on" "$T/cnn-off" 8
check "mnist-cnn --accumulate 2: --overlap on and off train identically" "${SAME[@]}" "$T/acc-on" "$T/acc-off" 4
check "resnet20: --overlap on and off train identically" "${SAME[@]}" "$T/res-on" "$T/res-off" 4
check "resnet20 --sync-bn: --overlap on and off train identically" "${SAME[@]}" "$T/sbn-on" "$T/sbn-off" 4

cat >"$T/summary.py" <<'PYEOF'
import json, sys
path, rule = sys.argv[1], sys.argv[2]
j = json.loads(open(path).read())
assert j["world_size"] == 2 and j["global_batch"] == 2 * j["batch_size"], j
b, h, e = j["buckets"], j["allreduce_hidden_frac"], j["allreduce_exposed_ms"]
assert e > 0, f"exposed {e} ms"
# the mean wait is the last-arriving rank's (communication) plus the mean imbalance
c, s = j["allreduce_comm_exposed_ms"], j["allreduce_skew_ms"]
assert 0 <= c <= e and s >= 0 and abs(e - (c + s)) <= 1e-6 * e + 1e-9, (e, c, s)
assert 0 <= j["allreduce_comm_exposed_median_ms"] <= c * j["steps"] + 1e-9, j  # one step's wait is at most all of theirs
ok = {"many-hidden": b > 1 and 0 < h <= 1, "many-none": b > 1 and h == 0, "four": b >= 4}[rule]
assert ok, f"{rule}: buckets {b}, hidden {h}"
print(f"{path}: {b} buckets, {e:.3f} ms exposed per step, {100 * h:.0f}% hidden")
PYEOF
check "mnist-cnn --overlap on: buckets and a hidden fraction" "$PY" "$T/summary.py" "$T/cnn-on.json" many-hidden
check "mnist-cnn --overlap off: nothing hidden" "$PY" "$T/summary.py" "$T/cnn-off.json" many-none
check "resnet20 --bucket-mb 0.1 --overlap on: buckets and a hidden fraction" "$PY" "$T/summary.py" "$T/res-on.json" many-hidden
check "resnet20 --overlap off: nothing hidden" "$PY" "$T/summary.py" "$T/res-off.json" many-none
check "resnet20 --bucket-mb 25: 4 or more buckets (none above a quarter of its 1 MiB)" "$PY" "$T/summary.py" "$T/res-big.json" four
for r in 0 1; do # --trace with %r: every rank its own file, on the host's monotonic clock
    check "--trace rank $r: a span per bucket and the wait on the comm track" grep -q '"all-reduce bucket 2".*"all-reduce wait"' \
        <(tr '\n' ' ' <"$T/cnn-on.$r.trace.json")
    check "--trace rank $r: the clock of ts 0" grep -q '"monotonic_s_at_ts0"' "$T/cnn-on.$r.trace.json"
done
check "the comparison tells runs apart" bash -c "! ${SAME[*]} '$T/cnn-on' '$T/res-on' 8 2>/dev/null"
harness_finish
