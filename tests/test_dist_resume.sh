#!/usr/bin/env bash
# Checkpoints work with any world size: a checkpoint keeps the ranks it was
# trained on (kiln.world_size), and --resume keeps the global batch (--batch-size
# x ranks). 2 ranks x 32 for 6 steps (--save-every 3), resumed on 1 rank x 64
# to step 14 (into the second epoch), give the step losses of one uninterrupted
# 1 x 64 run and its final weights (tests/same_run.py: within 1e-4 relative:
# the halves' gradients summed by the all-reduce, in another order than one
# batch's, and 14 momentum steps on; 1.1e-5 on a 2-core AMD EPYC VM,
# 2026-12-01, where another seed's run is 1.5 off),
# and so does 1 x 64 for 6 steps resumed on 2 ranks (their batch derived:
# 32). A resume that changes the global batch is refused (exit 2) naming
# both, and so is one on ranks that cannot share it.
#
# Needs $KILN_BIN, mpirun (Open MPI) and kiln's MPI plugin; exits 77 without them.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_dist_resume
harness_mpi
export KILN_CACHE_DIR=
small_idx "$T/small" 600 100 # 10 steps of 64 an epoch (the last of 24; 2 x 12 on 2 ranks)
A=(--model mnist-cnn --data "$T/small" --epochs 2 --optimizer sgd --lr 0.01 --momentum 0.9 --threads 1 --workers 1
   --no-autotune --dropout-off --no-test --log-every 1 --seed 3)
R=(--epochs 2 --max-steps 14 --no-test --threads 1 --workers 1 --log-every 1)
EXPECT_TIMEOUT=60
SAME=("$PY" "$(dirname "$0")/same_run.py")

expect 0 "1 x 64, 14 steps straight" -- "$KILN" train "${A[@]}" --batch-size 64 --max-steps 14 --metrics "$T/one.jsonl" \
    --save "$T/one.safetensors"
expect 0 "2 x 32, 6 steps" -- mpirun -np 2 "$KILN" train "${A[@]}" --batch-size 32 --max-steps 6 --save-every 3 \
    --save "$T/two6.safetensors" --metrics "$T/two.jsonl"
expect 0 "resumed on 1 x 64" "resuming $T/two6.safetensors at step 6" "saved on 2 ranks x 32; it continues on 1 rank x 64" -- \
    "$KILN" train --resume "$T/two6.safetensors" --batch-size 64 "${R[@]}" --metrics "$T/two.jsonl" --save "$T/two.safetensors"
expect 0 "1 x 64, 6 steps" -- "$KILN" train "${A[@]}" --batch-size 64 --max-steps 6 --save "$T/one6.safetensors" \
    --metrics "$T/back.jsonl"
expect 0 "resumed on 2 ranks (--batch-size derived)" "saved on 1 rank x 64; it continues on 2 ranks x 32" -- \
    mpirun -np 2 "$KILN" train --resume "$T/one6.safetensors" "${R[@]}" --metrics "$T/back.jsonl" --save "$T/back.safetensors"
check "2 x 32 resumed on 1 x 64 is the run of 1 x 64" "${SAME[@]}" "$T/one" "$T/two" 14 --tol 1e-4
check "1 x 64 resumed on 2 x 32 is the run of 1 x 64" "${SAME[@]}" "$T/one" "$T/back" 14 --tol 1e-4
# the comparison can fail: another seed's run differs
expect 0 "1 x 64, another seed" -- "$KILN" train "${A[@]}" --seed 4 --batch-size 64 --max-steps 14 --metrics "$T/seed.jsonl" \
    --save "$T/seed.safetensors"
check "the comparison tells runs apart" bash -c "! ${SAME[*]} '$T/one' '$T/seed' 14 --tol 1e-4 2>/dev/null"

expect 2 "another global batch is refused" "--batch-size 32 on 1 rank contradicts the run saved in $T/two6.safetensors" \
    "(--batch-size 32 on 2 ranks, a global batch of 64)" -- "$KILN" train --resume "$T/two6.safetensors" --batch-size 32 "${R[@]}"
expect 2 "3 ranks cannot share a global batch of 64" "a global batch of 64 (2 ranks x 32), which 3 ranks cannot share evenly" -- \
    mpirun -np 3 "$KILN" train --resume "$T/two6.safetensors" "${R[@]}"
harness_finish
