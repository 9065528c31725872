#!/usr/bin/env bash
# Sync batch norm over MPI (--sync-bn, PyTorch's SyncBatchNorm): 2 ranks x 32
# of mnist-cnn-bn give the same step losses and final weights and running
# statistics as one process at batch 64 (within 1e-5 relative), over an epoch
# of 288 samples (the last batch: 16 a rank against 32); without --sync-bn the
# 2-rank losses differ (each rank normalises its own half: the comparison can
# fail); resnet20 (19 norms, nChw16c) with --sync-bn, 2 ranks x 8 for 2 steps,
# gives one process's losses at 16. --no-autotune and --dropout-off as
# test_ddp.sh (other conv algorithms at other batch sizes, no masks).
# The world-of-one and kernel checks are test_sync_bn.c.
#
# Needs $KILN_BIN, mpirun (Open MPI) and kiln's MPI plugin; exits 77 without them.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_sync_bn_mpi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Open MPI's own allocations are not ours to chase under LeakSanitizer
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
if ! command -v mpirun >/dev/null; then echo "test_sync_bn_mpi: skipped: mpirun is not installed (Debian: openmpi-bin)"; exit 77; fi
if [ ! -e "$(dirname "$KILN")/libkiln_mpi.so" ]; then
    echo "test_sync_bn_mpi: skipped: kiln was built without MPI (libkiln_mpi.so)"
    exit 77
fi
EXPECT_TIMEOUT=120

small_idx "$T/small" 288 16
A=(--model mnist-cnn-bn --data "$T/small" --epochs 1 --optimizer sgd --lr 0.01 --momentum 0.9 --threads 1 --workers 1
   --no-autotune --dropout-off --no-test --log-every 1 --seed 3)
expect 0 "one process, batch 64" -- "$KILN" train "${A[@]}" --batch-size 64 --metrics "$T/one.jsonl" --save "$T/one.safetensors"
# small buckets: the norms' blocking all-reduces run while gradient buckets are in flight
expect 0 "2 ranks, batch 32 each, --sync-bn" -- mpirun -np 2 "$KILN" train "${A[@]}" --batch-size 32 --sync-bn \
    --bucket-mb 0.05 --metrics "$T/sync.jsonl" --save "$T/sync.safetensors"
expect 0 "2 ranks, batch 32 each, plain batch norm" -- mpirun -np 2 "$KILN" train "${A[@]}" --batch-size 32 \
    --metrics "$T/plain.jsonl" --save "$T/plain.safetensors"

# same.py REF OTHER STEPS [losses]: step losses (and, without "losses", every f32 tensor of the
# checkpoints: weights and running statistics, per tensor the norm of the difference against
# the tensor's norm, or against 1 for a tensor of smaller norm) within 1e-5. The floor is
# for bn1.bias: norm 0.002 after 5 steps, its gradient a sum over the batch that nearly
# cancels, summed in another order by 2 ranks (3.8e-7 apart: 1.7e-4 of its norm).
cat >"$T/same.py" <<'PYEOF'
import json, struct, sys
def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    out = {}
    for k, v in json.loads(b[8:8 + n]).items():
        if k == "__metadata__" or k.startswith("optim.") or v["dtype"] != "F32": continue
        s, e = v["data_offsets"]
        out[k] = struct.unpack(f"<{(e - s) // 4}f", b[8 + n + s:8 + n + e])
    return out
def losses(path):
    return [json.loads(l)["loss"] for l in open(path) if '"kind":"step"' in l]
ref, other, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
la, lb = losses(ref + ".jsonl"), losses(other + ".jsonl")
assert len(la) == len(lb) == steps, (len(la), len(lb))
worst = max(abs(a - b) / max(abs(a), abs(b), 1e-3) for a, b in zip(la, lb))
msg = f"{other}: {steps} step losses within {worst:.2e}"
if sys.argv[4:] != ["losses"]:
    ta, tb = tensors(ref + ".safetensors"), tensors(other + ".safetensors")
    assert ta.keys() == tb.keys() and any("running_var" in k for k in ta), sorted(ta)
    norm = lambda v: sum(x * x for x in v) ** 0.5
    wt = max(norm([x - y for x, y in zip(ta[k], tb[k])]) / max(norm(ta[k]), 1.0) for k in ta)
    msg += f", {len(ta)} tensors within {wt:.2e}"
    worst = max(worst, wt)
print(msg + " (relative)")
assert worst < 1e-5
PYEOF
check "2 x 32 with --sync-bn trains as 1 x 64" "$PY" "$T/same.py" "$T/one" "$T/sync" 5
check "without --sync-bn 2 x 32 differs from 1 x 64" bash -c "! '$PY' '$T/same.py' '$T/one' '$T/plain' 5 losses 2>/dev/null"

# resnet20 on 32x32 RGB images: two steps on 2 ranks
small_idx "$T/tiny" 64 16
expect 0 "pack a 32x32 RGB image folder" -- "$KILN" pack --from "$T/tiny" --to "$T/img" --size 32 --channels 3 --format png
R=(--model resnet20 --data "$T/img" --max-steps 2 --threads 1 --workers 1 --no-autotune --no-test --log-every 1 --seed 5)
expect 0 "resnet20, one process, batch 16" -- "$KILN" train "${R[@]}" --batch-size 16 --metrics "$T/r1.jsonl"
expect 0 "resnet20, 2 ranks x 8, --sync-bn" -- mpirun -np 2 "$KILN" train "${R[@]}" --batch-size 8 --sync-bn \
    --metrics "$T/r2.jsonl"
check "resnet20: 2 x 8 with --sync-bn trains as 1 x 16" "$PY" "$T/same.py" "$T/r1" "$T/r2" 2 losses
harness_finish
