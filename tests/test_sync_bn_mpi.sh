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
harness_mpi
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

# weights and running statistics: per tensor against its norm or 1 when that is smaller, for
# bn1.bias: norm 0.002 after 5 steps, its gradient a sum over the batch that nearly cancels,
# summed in another order by 2 ranks (3.8e-7 apart: 1.7e-4 of its norm)
SAME=("$PY" "$(dirname "$0")/same_run.py")
check "2 x 32 with --sync-bn trains as 1 x 64" "${SAME[@]}" "$T/one" "$T/sync" 5 --floor 1
check "without --sync-bn 2 x 32 differs from 1 x 64" bash -c "! ${SAME[*]} '$T/one' '$T/plain' 5 --losses-only 2>/dev/null"

# resnet20 on 32x32 RGB images: two steps on 2 ranks
small_idx "$T/tiny" 64 16
expect 0 "pack a 32x32 RGB image folder" -- "$KILN" pack --from "$T/tiny" --to "$T/img" --size 32 --channels 3 --format png
R=(--model resnet20 --data "$T/img" --max-steps 2 --threads 1 --workers 1 --no-autotune --no-test --log-every 1 --seed 5)
expect 0 "resnet20, one process, batch 16" -- "$KILN" train "${R[@]}" --batch-size 16 --metrics "$T/r1.jsonl"
expect 0 "resnet20, 2 ranks x 8, --sync-bn" -- mpirun -np 2 "$KILN" train "${R[@]}" --batch-size 8 --sync-bn \
    --metrics "$T/r2.jsonl"
check "resnet20: 2 x 8 with --sync-bn trains as 1 x 16" "${SAME[@]}" "$T/r1" "$T/r2" 2 --losses-only
harness_finish
