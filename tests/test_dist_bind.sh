#!/usr/bin/env bash
# --bind none|core|numa: with mpirun --bind-to none, --bind core pins each of 2
# ranks to its half of the cpus this process may use; checked in /proc while
# the job runs: the main thread, the OpenMP team's second thread and the loader
# worker of each rank are on its half, no thread on the other rank's (Open
# MPI's own threads, started before, keep their mask). The log names what was
# bound; --bind numa names the node, or on a host of one NUMA node says so and
# binds as core; ranks the launcher bound (mpirun --bind-to core) keep that;
# a bad value exits 2 naming --bind.
#
# Needs $KILN_BIN, mpirun (Open MPI), kiln's MPI plugin and 2 cpus; exits 77 without them.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_dist_bind
harness_mpi
export KILN_CACHE_DIR=
allowed=$(awk '/^Cpus_allowed_list/ { print $2 }' /proc/self/status)
# the two halves of the allowed cpus, as Cpus_allowed_list writes them
read -r half0 half1 < <("$PY" - "$allowed" <<'PYEOF'
import sys
cpus = []
for part in sys.argv[1].split(","):
    lo, _, hi = part.partition("-")
    cpus += range(int(lo), int(hi or lo) + 1)
def text(cs):
    out, i = [], 0
    while i < len(cs):
        j = i
        while j + 1 < len(cs) and cs[j + 1] == cs[j] + 1: j += 1
        out.append(str(cs[i]) if i == j else f"{cs[i]}-{cs[j]}")
        i = j + 1
    return ",".join(out)
n = len(cpus)
print(text(cpus[:n // 2]) or "-", text(cpus[n // 2:]))
PYEOF
)
if [ "$half0" = "-" ]; then echo "test_dist_bind: skipped: one cpu allowed ($allowed), nothing to share out"; exit 77; fi
small_idx "$T/small" 1000 100
A=(--model mnist-cnn --data "$T/small" --batch-size 32 --no-autotune --no-test --workers 1)
EXPECT_TIMEOUT=60

# threads of a process pinned to exactly these cpus
pinned() { grep -lx "Cpus_allowed_list:[[:space:]]*$2" /proc/"$1"/task/*/status 2>/dev/null | wc -l; }
mpirun --bind-to none -np 2 "$KILN" train "${A[@]}" --epochs 1000 --threads 2 --bind core >"$T/run.out" 2>"$T/run.err" &
job=$!
for i in $(seq 300); do grep -q "thread budget of rank 1" "$T/run.err" && break; sleep 0.1; done
r0=$(rank_pid $job 0) r1=$(rank_pid $job 1)
# the OpenMP team and the loader worker start after the budget line, later
# still under a sanitizer on a busy host: look until each rank has 3 or 30 s pass
for i in $(seq 300); do
    p00=$(pinned "$r0" "$half0") p01=$(pinned "$r0" "$half1") p11=$(pinned "$r1" "$half1") p10=$(pinned "$r1" "$half0")
    [ "$p00" -ge 3 ] && [ "$p11" -ge 3 ] && break
    sleep 0.1
done
echo "test_dist_bind: rank 0: $p00 threads on cpus $half0, $p01 on $half1; rank 1: $p11 on $half1, $p10 on $half0"
check "rank 0's main thread is on cpus $half0" grep -qx "Cpus_allowed_list:[[:space:]]*$half0" /proc/"$r0"/status
check "rank 1's main thread is on cpus $half1" grep -qx "Cpus_allowed_list:[[:space:]]*$half1" /proc/"$r1"/status
check "3 threads of each rank on its half (main, OpenMP, loader)" test "$p00" -ge 3 -a "$p11" -ge 3
check "none on the other rank's half" test "$p01" -eq 0 -a "$p10" -eq 0
kill -TERM $job # mpirun passes it on: the ranks stop together
wait $job
check "the log names each rank's cpus" grep -q "thread budget of rank 1 on .*, bound to cpus $half1 (--bind core, local rank 1 of 2)" "$T/run.err"

nodes=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
if [ "$nodes" -le 1 ]; then
    expect 0 "--bind numa on one node binds as core" "bound to cpus $half0 (--bind numa on a host of one NUMA node: as core, local rank 0 of 2)" \
        -- mpirun --bind-to none -np 2 "$KILN" train "${A[@]}" --max-steps 2 --bind numa
else
    expect 0 "--bind numa names the node" "thread budget of rank 0 on" "bound to NUMA node" -- \
        mpirun --bind-to none -np 2 "$KILN" train "${A[@]}" --max-steps 2 --bind numa
fi
expect 0 "a launcher's binding is kept" "as the launcher bound it (--bind core keeps that)" -- \
    mpirun --bind-to core -np 2 "$KILN" train "${A[@]}" --max-steps 2 --bind core
expect 0 "one process takes every allowed cpu" "bound to cpus $allowed (--bind core, local rank 0 of 1)" -- \
    "$KILN" train "${A[@]}" --max-steps 2 --bind core
expect 2 "a bad value" "--bind is 'socket'; use none, core or numa" -- "$KILN" train "${A[@]}" --max-steps 2 --bind socket
harness_finish
