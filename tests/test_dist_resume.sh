#!/usr/bin/env bash
# Checkpoints work with any world size: a checkpoint keeps the ranks it was
# trained on (kiln.world_size), and --resume keeps the global batch (--batch-size
# x ranks). 2 ranks x 32 for 20 steps (--save-every 10), resumed on 1 rank x 64
# to step 40 (into the second epoch), give the step losses of one uninterrupted
# 1 x 64 run (within 1e-5 relative), and so does 1 x 64 for 20 steps resumed on
# 2 ranks (their batch derived: 32). A resume that changes the global batch is
# refused (exit 2) naming both, and so is one on ranks that cannot share it.
#
# Needs $KILN_BIN, mpirun (Open MPI) and kiln's MPI plugin; exits 77 without them.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_dist_resume
harness_mpi
export KILN_CACHE_DIR=
small_idx "$T/small" 2000 100 # 32 steps of 64 an epoch (the last of 16)
A=(--model mnist-cnn --data "$T/small" --epochs 2 --optimizer sgd --lr 0.01 --momentum 0.9 --threads 1 --workers 1
   --no-autotune --dropout-off --no-test --log-every 1 --seed 3)
R=(--epochs 2 --max-steps 40 --no-test --threads 1 --workers 1 --log-every 1)
EXPECT_TIMEOUT=60

expect 0 "1 x 64, 40 steps straight" -- "$KILN" train "${A[@]}" --batch-size 64 --max-steps 40 --metrics "$T/one.jsonl"
expect 0 "2 x 32, 20 steps" -- mpirun -np 2 "$KILN" train "${A[@]}" --batch-size 32 --max-steps 20 --save-every 10 \
    --save "$T/two.safetensors" --metrics "$T/two.jsonl"
expect 0 "resumed on 1 x 64" "resuming $T/two.safetensors at step 20" "saved on 2 ranks x 32; it continues on 1 rank x 64" -- \
    "$KILN" train --resume "$T/two.safetensors" --batch-size 64 "${R[@]}" --metrics "$T/two.jsonl"
expect 0 "1 x 64, 20 steps" -- "$KILN" train "${A[@]}" --batch-size 64 --max-steps 20 --save "$T/one20.safetensors" \
    --metrics "$T/back.jsonl"
expect 0 "resumed on 2 ranks (--batch-size derived)" "saved on 1 rank x 64; it continues on 2 ranks x 32" -- \
    mpirun -np 2 "$KILN" train --resume "$T/one20.safetensors" "${R[@]}" --metrics "$T/back.jsonl"

cat >"$T/same.py" <<'PYEOF'
import json, sys
def losses(path):
    return {d["step"]: d["loss"] for d in map(json.loads, open(path)) if d.get("kind") == "step"}
ref, other = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(ref) == sorted(other) == list(range(1, 41)), (sorted(ref), sorted(other))
worst = max(abs(ref[s] - other[s]) / abs(ref[s]) for s in ref)
print(f"{sys.argv[2]}: 40 step losses within {worst:.2e} of 1 x 64 straight (relative)")
assert worst < 1e-5
PYEOF
check "2 x 32 resumed on 1 x 64 is the run of 1 x 64" "$PY" "$T/same.py" "$T/one.jsonl" "$T/two.jsonl"
check "1 x 64 resumed on 2 x 32 is the run of 1 x 64" "$PY" "$T/same.py" "$T/one.jsonl" "$T/back.jsonl"
# the comparison can fail: another seed's run differs
expect 0 "1 x 64, another seed" -- "$KILN" train "${A[@]}" --seed 4 --batch-size 64 --max-steps 40 --metrics "$T/seed.jsonl"
check "the comparison tells runs apart" bash -c "! '$PY' '$T/same.py' '$T/one.jsonl' '$T/seed.jsonl' 2>/dev/null"

expect 2 "another global batch is refused" "--batch-size 32 on 1 rank contradicts the run saved in $T/two.safetensors" \
    "(--batch-size 32 on 2 ranks, a global batch of 64)" -- "$KILN" train --resume "$T/two.safetensors" --batch-size 32 "${R[@]}"
expect 2 "3 ranks cannot share a global batch of 64" "a global batch of 64 (2 ranks x 32), which 3 ranks cannot share evenly" -- \
    mpirun -np 3 "$KILN" train --resume "$T/two.safetensors" "${R[@]}"
harness_finish
