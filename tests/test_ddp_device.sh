#!/usr/bin/env bash
# Data parallel with the parameters in a device's memory (src/dist/ddp_device.c),
# without a GPU: tests/ddp_device_rank.c trains on two device backends made of
# the cpu's kernels behind copies. 2 ranks x 32 give the same step losses and
# final weights as one cpu process at 64 (within 1e-5 relative, whole epoch of
# a 1000-sample set) when the gradients go through host memory and MPI
# (devhost) and when the backend's own collectives sum them (devcoll, a
# stand-in for NCCL over shared memory), its buckets started from inside
# backward (and with --overlap off, one sum after it); a rank that cannot load the
# collectives makes every rank stage through the host, with a warning, and
# trains the same; two ranks on one device fail at start-up (exit 2, both
# named); a rank that hangs in the sums makes the others' host wait end at
# --timeout, exit 2, no checkpoint. NCCL itself needs GPUs: it never runs here.
#
# Needs mpirun (Open MPI) and kiln's MPI plugin; exits 77 without them.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_ddp_device
export KILN_CACHE_DIR=
harness_mpi
RANK_BIN="$(dirname "$KILN")/ddp_device_rank"
[ -x "$RANK_BIN" ] || { echo "test_ddp_device: skipped: $RANK_BIN not built"; exit 77; }

small_idx "$T/small" 1000 100
EXPECT_TIMEOUT=180
expect 0 "one cpu process, batch 64" -- "$RANK_BIN" cpu "$T/small" 64 "$T/one"
expect 0 "2 ranks on devhost: gradients through host memory" "gradients on devhost" "host memory and" -- \
    mpirun -np 2 "$RANK_BIN" devhost "$T/small" 32 "$T/host"
expect 0 "2 ranks on devcoll: the backend's collectives" "summed over the ranks by fake collectives" \
    "each bucket as soon as backward has written it" -- \
    mpirun -np 2 -x TEST_COLL_DIR="$T" "$RANK_BIN" devcoll "$T/small" 32 "$T/coll"
check "buckets: several sums a step, started while backward still ran" awk \
    '/^fake collectives:/ { ok = $3 >= 5 * $5 && $5 == 16 && $7 > 0 } END { exit !ok }' "$T/err"
expect 0 "2 ranks on devcoll, --overlap off" "after backward" -- \
    mpirun -np 2 -x TEST_COLL_DIR="$T" -x TEST_OVERLAP=0 "$RANK_BIN" devcoll "$T/small" 32 "$T/nooverlap"
check "--overlap off: one sum of the whole buffer a step, after backward" awk \
    '/^fake collectives:/ { ok = $3 == $5 && $5 == 16 && $7 == 0 } END { exit !ok }' "$T/err"
expect 0 "rank 1 cannot load the collectives: every rank stages" "rank 1: fake collectives: not on this rank" \
    "through host memory" -- mpirun -np 2 -x TEST_COLL_DIR="$T" -x TEST_COLL_FAIL_RANK=1 "$RANK_BIN" devcoll "$T/small" 32 "$T/fallback"
expect 0 "rank 0 cannot join the communicator: every rank stages" "rank 0: fake collectives: cannot join" \
    "through host memory" -- mpirun -np 2 -x TEST_COLL_DIR="$T" -x TEST_COLL_OPEN_FAIL_RANK=0 "$RANK_BIN" devcoll "$T/small" 32 \
    "$T/nojoin"
expect 2 "two ranks on one device" "ranks 0 and 1 both use" "fake device 0" "one rank per" -- \
    mpirun -np 2 -x TEST_COLL_DIR="$T" -x TEST_SAME_DEVICE=1 "$RANK_BIN" devcoll "$T/small" 32 "$T/same"
check "no checkpoint from the refused run" test ! -e "$T/same.safetensors"
# rank 1 stops at its third step's wait for the sums: rank 0's wait ends at --timeout (3 s), not never
t0=$(date +%s)
expect 2 "rank 1 hangs in the sums: rank 0 gives up at --timeout" "rank 0: the gradient all-reduce (fake collectives" \
    "did not end within 3 s (--timeout)" -- mpirun -np 2 -x TEST_COLL_DIR="$T" -x TEST_COLL_HANG_RANK=1 -x TEST_TIMEOUT=3 \
    "$RANK_BIN" devcoll "$T/small" 32 "$T/hang"
check "the hung run ended within 60 s ($(($(date +%s) - t0)) s)" test $(($(date +%s) - t0)) -lt 60
check "no checkpoint from the hung run" test ! -e "$T/hang.safetensors"
check "no shared file left behind" bash -c "! ls '$T'/kiln-fakecoll-* 2>/dev/null | grep -q ."

SAME=("$PY" "$(dirname "$0")/same_run.py")
check "devhost: 2 x 32 trains as 1 x 64" "${SAME[@]}" "$T/one" "$T/host" 16
check "devcoll: 2 x 32 trains as 1 x 64" "${SAME[@]}" "$T/one" "$T/coll" 16
check "devcoll, --overlap off: 2 x 32 trains as 1 x 64" "${SAME[@]}" "$T/one" "$T/nooverlap" 16
check "fallback: 2 x 32 trains as 1 x 64" "${SAME[@]}" "$T/one" "$T/fallback" 16
check "no join: 2 x 32 trains as 1 x 64" "${SAME[@]}" "$T/one" "$T/nojoin" 16
# the comparison can fail: with sums that do nothing each rank trains on its half alone
expect 0 "2 ranks on devcoll, sums off" -- mpirun -np 2 -x TEST_COLL_DIR="$T" -x TEST_COLL_NO_SUM=1 "$RANK_BIN" devcoll \
    "$T/small" 32 "$T/nosum"
check "the comparison tells runs apart" bash -c "! ${SAME[*]} '$T/one' '$T/nosum' 16 2>/dev/null"
harness_finish
