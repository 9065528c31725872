#!/usr/bin/env bash
# Faults in a data parallel job (docs/distributed.md, "Faults, timeouts and resume"):
# - ranks given other flags (MPMD: --lr 0.1 on rank 0, 0.2 on rank 1) or another
#   model fail at start with exit 2, naming the flag or the first differing parameter;
# - a rank killed (SIGKILL) mid-run ends the job with an error in under 30 s; the
#   checkpoint rank 0 wrote with --save-every loads, and --resume continues it on
#   2 ranks and on 1 rank (twice the batch) to the same loss;
# - rank 0 stopped while writing its checkpoint, then killed, leaves the previous
#   checkpoint whole (writes are atomic); the next save removes the dead temporary;
# - a rank that hangs (SIGSTOP) ends the job within --timeout 5 (plus the abort),
#   the error naming --timeout, and no rank outlives the job.
# The times measured are printed.
#
# Needs $KILN_BIN, mpirun (Open MPI) and kiln's MPI plugin; exits 77 without them.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_dist_faults
harness_mpi
export KILN_CACHE_DIR=
small_idx "$T/small" 2000 100
A=(--data "$T/small" --optimizer sgd --momentum 0.9 --threads 1 --workers 1 --no-autotune --dropout-off --no-test --seed 3)
B=(--model mnist-cnn --lr 0.01 "${A[@]}" --batch-size 32 --epochs 100)
EXPECT_TIMEOUT=60

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# wait_for CONDITION SECONDS: polls a shell condition every 20 ms
wait_for() {
    local i
    for ((i = 0; i < $2 * 50; i++)); do
        eval "$1" && return 0
        sleep 0.02
    done
    return 1
}
# gone PID: the process ended (a zombie counts as ended) within 5 s
gone() { wait_for "! [ -e /proc/$1 ] || grep -q '^State:.*Z' /proc/$1/status 2>/dev/null" 5; }
meta() { "$PY" -c "import json,struct,sys; b=open(sys.argv[1],'rb').read(); n=struct.unpack('<Q',b[:8])[0]; print(json.loads(b[8:8+n])['__metadata__'][sys.argv[2]])" "$1" "$2"; }
final_loss() { "$PY" -c "import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])['final_loss'])" "$1"; }

# --- start-up: every rank must be given the same flags and build the same model
expect 2 "other flags on rank 1" 'rank 1: the command line differs' '--lr "0.2" here, "0.1" on rank 0' -- \
    mpirun -np 1 "$KILN" train --model mnist-cnn "${A[@]}" --max-steps 2 --lr 0.1 : \
    -np 1 "$KILN" train --model mnist-cnn "${A[@]}" --max-steps 2 --lr 0.2
expect 2 "another model on rank 1" "rank 1: the model differs" "'fc1.weight[256,784]' here, 'conv1.weight[32,1,3,3]' on rank 0" -- \
    mpirun -np 1 "$KILN" train --model mnist-cnn "${A[@]}" --max-steps 2 : -np 1 "$KILN" train --model mlp "${A[@]}" --max-steps 2

# --- a rank killed mid-run
CK=$T/ck.safetensors
mpirun -np 2 "$KILN" train "${B[@]}" --save "$CK" --save-every 5 >"$T/kill.out" 2>"$T/kill.err" &
job=$!
wait_for "[ -s '$CK' ]" 30 && sleep 0.5
r0=$(rank_pid $job 0) r1=$(rank_pid $job 1)
t0=$(now)
kill -9 "$r1"
wait $job
rc=$? took=$(since "$t0")
echo "test_dist_faults: rank 1 killed: the job ended in $took s (mpirun's exit code $rc)"
check "the job ended with an error (exit $rc)" test "$rc" -ne 0
check "... in under 30 s ($took s)" awk "BEGIN { exit !($took < 30) }"
check "rank 0 did not outlive the job" gone "$r0"
step=$(meta "$CK" kiln.step)
check "a checkpoint of 2 ranks at a multiple of 5 steps ($step)" test "$((step % 5))" -eq 0 -a "$step" -ge 5 -a "$(meta "$CK" kiln.world_size)" = 2
expect 0 "it loads (kiln eval)" -- "$KILN" eval --model mnist-cnn --data "$T/small" --load "$CK" --threads 1
R=(--resume "$CK" --epochs 100 --max-steps $((step + 8)) --no-test --threads 1 --workers 1 --json)
expect 0 "--resume on 2 ranks" "resuming $CK at step $step" -- mpirun -np 2 "$KILN" train "${R[@]}"
cp "$T/out" "$T/resumed2.json"
expect 0 "--resume on 1 rank" "resuming $CK at step $step" "continues on 1 rank x 64, the same global batch 64" -- "$KILN" train "${R[@]}"
l2=$(final_loss "$T/resumed2.json") l1=$(final_loss "$T/out")
check "both continue the same run (final loss $l2 on 2 ranks, $l1 on 1)" \
    awk "BEGIN { d = $l2 - $l1; if (d < 0) d = -d; exit !(d <= 1e-5 * $l1) }"

# --- rank 0 dies while writing its checkpoint: the previous one stays whole
CK2=$T/atomic.safetensors
mpirun -np 2 "$KILN" train "${B[@]}" --save "$CK2" --save-every 1 >"$T/atomic.out" 2>"$T/atomic.err" &
job=$!
wait_for "[ -s '$CK2' ]" 30
r0=$(rank_pid $job 0)
caught=0
for try in 1 2 3 4 5 6 7 8 9 10; do # catch rank 0 between creating the temporary and renaming it
    wait_for "ls '$CK2'.tmp.* >/dev/null 2>&1" 5 || break
    kill -STOP "$r0"
    if ls "$CK2".tmp.* >/dev/null 2>&1; then caught=1 && break; fi
    kill -CONT "$r0"
done
kill -9 "$r0"
wait $job
check "rank 0 was caught writing (a temporary beside the checkpoint)" test $caught -eq 1
expect 0 "the checkpoint is whole: it loads" -- "$KILN" eval --model mnist-cnn --data "$T/small" --load "$CK2" --threads 1
s=$(meta "$CK2" kiln.step)
expect 0 "the next save to it" -- "$KILN" train --resume "$CK2" --epochs 100 --max-steps $((s + 1)) --no-test --threads 1 \
    --save "$CK2"
check "removed the dead rank's temporary" bash -c "! ls '$CK2'.tmp.* 2>/dev/null"

# --- a rank that hangs: the others give up after --timeout and end the job
mpirun -np 2 "$KILN" train "${B[@]}" --timeout 5 --metrics "$T/hang.jsonl" --log-every 1 >"$T/hang.out" 2>"$T/hang.err" &
job=$!
wait_for "[ -s '$T/hang.jsonl' ]" 30
r0=$(rank_pid $job 0) r1=$(rank_pid $job 1)
t0=$(now)
kill -STOP "$r1"
wait $job
rc=$? took=$(since "$t0")
echo "test_dist_faults: rank 1 stopped: the job ended in $took s with --timeout 5 (mpirun's exit code $rc)"
check "the job ended with exit 2 (got $rc)" test "$rc" -eq 2
check "... within --timeout 5 and the abort ($took s)" awk "BEGIN { exit !($took >= 5 && $took < 15) }"
check "the error names --timeout" grep -q "waited 5 s for the other ranks (--timeout)" "$T/hang.err"
check "no rank outlived the job" bash -c "$(declare -f wait_for gone); gone $r0 && gone $r1"
kill -CONT "$r1" 2>/dev/null; kill -9 "$r1" 2>/dev/null # ours, if it outlived the job
harness_finish
