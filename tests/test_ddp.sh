#!/usr/bin/env bash
# Data parallel over MPI, against one process: 2 ranks x 32 give the same step
# losses and final weights as 1 x 64 (within 1e-5 relative), over a whole epoch
# of a 1000-sample set (its short last batch included); --accumulate 2 at 32
# equals 64, and so do 2 ranks x 16 with --accumulate 2; the log states the
# world and the global batch and every rank's thread budget; only rank 0 writes.
# Weights compare per tensor (the norm of the difference against the
# tensor's norm). Equality needs a learning rate that is not chaotic (at 0.05
# with momentum float rounding grows to 1e-4 in 16 steps), --no-autotune (autotuning may pick other conv algorithms for
# batches of 32 and 64) and --dropout-off.
#
# Needs $KILN_BIN, mpirun (Open MPI) and kiln's MPI plugin; exits 77 without them.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_ddp
export KILN_CACHE_DIR=
harness_mpi

# launched by an MPI launcher but without the plugin: a clear error, before any work
expect 2 "under a launcher without the plugin" "libkiln_mpi.so" "KILN_MPI_PLUGIN" -- \
    env KILN_MPI_PLUGIN="$T/none.so" OMPI_COMM_WORLD_SIZE=2 "$KILN" train --max-steps 1 --no-test

# a small set: 1000 training samples (500 a rank: 15 batches of 32 and one of 20), 100 test
small_idx "$T/small" 1000 100
A=(--model mnist-cnn --data "$T/small" --epochs 1 --optimizer sgd --lr 0.01 --momentum 0.9 --threads 1 --workers 1
   --no-autotune --dropout-off --no-test --log-every 1 --seed 3)
EXPECT_TIMEOUT=120
expect 0 "one process, batch 64" -- "$KILN" train "${A[@]}" --batch-size 64 --metrics "$T/one.jsonl" --save "$T/one.safetensors"
expect 0 "2 ranks, batch 32 each" "2 ranks" "global batch 64" "thread budget of rank 0" "thread budget of rank 1" -- \
    mpirun -np 2 "$KILN" train "${A[@]}" --batch-size 32 --metrics "$T/two.jsonl" --save "$T/two.safetensors"
expect 0 "one process, batch 32, --accumulate 2" -- "$KILN" train "${A[@]}" --batch-size 32 --accumulate 2 \
    --metrics "$T/acc.jsonl" --save "$T/acc.safetensors"
expect 0 "2 ranks, batch 16 each, --accumulate 2" -- mpirun -np 2 "$KILN" train "${A[@]}" --batch-size 16 --accumulate 2 \
    --metrics "$T/twoacc.jsonl" --save "$T/twoacc.safetensors"
check "rank 0 alone wrote the metrics (one line per step)" test "$(grep -c '"kind":"step"' "$T/two.jsonl")" -eq 16

SAME=("$PY" "$(dirname "$0")/same_run.py") # losses and weights within 1e-5 relative
check "2 x 32 trains as 1 x 64" "${SAME[@]}" "$T/one" "$T/two" 16
check "--accumulate 2 at 32 trains as 64" "${SAME[@]}" "$T/one" "$T/acc" 16
check "2 x 16 with --accumulate 2 trains as 1 x 64" "${SAME[@]}" "$T/one" "$T/twoacc" 16
# the comparison can fail: another seed's run differs
expect 0 "one process, batch 64, another seed" -- "$KILN" train "${A[@]}" --seed 4 --batch-size 64 \
    --metrics "$T/seed.jsonl" --save "$T/seed.safetensors"
check "the comparison tells runs apart" bash -c "! ${SAME[*]} '$T/one' '$T/seed' 16 2>/dev/null"
harness_finish
