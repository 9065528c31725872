#!/usr/bin/env bash
# Two ranks as two hosts: two network namespaces (each with its own host name,
# by unshare --uts) joined by a veth pair, Open MPI forced onto TCP between
# them (--mca pml ob1 --mca btl tcp,self, the veth's subnet only). mpirun runs
# in the first namespace and starts its daemon in the second through an "rsh
# agent" that enters the namespace instead of ssh-ing to a host: the launcher's
# out-of-band channel and PMIx each stay where they would be on two machines
# (PMIx 4 only speaks TCP to its local server, so a rank in another namespace
# cannot reach an mpirun outside it). The job trains 10 steps of 2 x 32 with
# the same step losses and final weights as the shared-memory run, the log
# names both hosts, and the gradients crossed the veth (its byte counter).
#
# Needs $KILN_BIN, mpirun (Open MPI), kiln's MPI plugin, iproute2 and the right
# to make network namespaces (CAP_NET_ADMIN); exits 77 without them.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_dist_netns
harness_mpi
export KILN_CACHE_DIR=
NA=kiln-a$$ NB=kiln-b$$ NET=10.77.0
trap 'ip netns del "$NA" 2>/dev/null; ip netns del "$NB" 2>/dev/null; rm -rf "$T"' EXIT
if ! command -v ip >/dev/null || ! command -v unshare >/dev/null; then
    echo "test_dist_netns: skipped: needs ip (iproute2) and unshare (util-linux)"
    exit 77
fi
if ! ip netns add "$NA" 2>"$T/ns.err" || ! ip netns add "$NB" 2>>"$T/ns.err"; then
    echo "test_dist_netns: skipped: cannot make network namespaces here (CAP_NET_ADMIN?): $(head -1 "$T/ns.err")"
    exit 77
fi
if ! { ip link add "va$$" type veth peer name "vb$$" && ip link set "va$$" netns "$NA" && ip link set "vb$$" netns "$NB" &&
       ip -n "$NA" addr add "$NET.1/24" dev "va$$" && ip -n "$NB" addr add "$NET.2/24" dev "vb$$" &&
       ip -n "$NA" link set "va$$" up && ip -n "$NB" link set "vb$$" up &&
       ip -n "$NA" link set lo up && ip -n "$NB" link set lo up; } 2>"$T/ns.err"; then
    echo "test_dist_netns: skipped: cannot join the namespaces by a veth pair: $(head -1 "$T/ns.err")"
    exit 77
fi
cat >"$T/agent.sh" <<EOF
#!/bin/sh
# Open MPI's rsh agent: "ssh HOST COMMAND" runs COMMAND in HOST's namespace, under its own host name
host=\$1
shift
case "\$host" in $NET.1) ns=$NA ;; $NET.2) ns=$NB ;; *) echo "agent: unknown host \$host" >&2; exit 1 ;; esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$ns; \$*"
EOF
chmod +x "$T/agent.sh"
printf '%s slots=1\n' "$NET.1" "$NET.2" >"$T/hosts"

small_idx "$T/small" 1000 100
A=(--model mnist-cnn --data "$T/small" --batch-size 32 --max-steps 10 --optimizer sgd --lr 0.01 --momentum 0.9 --threads 1
   --workers 1 --no-autotune --dropout-off --no-test --log-every 1 --seed 3)
EXPECT_TIMEOUT=60
SAME=("$PY" "$(dirname "$0")/same_run.py")
rx() { ip -n "$NB" -s link show "vb$$" | awk '/RX:/ { getline; print $1 }'; }

expect 0 "2 ranks over shared memory" -- mpirun -np 2 "$KILN" train "${A[@]}" --metrics "$T/shm.jsonl" --save "$T/shm.safetensors"
rx0=$(rx)
expect 0 "2 ranks in 2 namespaces over TCP" "thread budget of rank 0 on $NA" "thread budget of rank 1 on $NB" -- \
    ip netns exec "$NA" unshare --uts sh -c 'hostname "$0"; exec "$@"' "$NA" \
    mpirun --hostfile "$T/hosts" --mca plm_rsh_agent "$T/agent.sh" --bind-to none \
    --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24" \
    -np 2 "$KILN" train "${A[@]}" --metrics "$T/tcp.jsonl" --save "$T/tcp.safetensors"
rx1=$(rx)
# 10 all-reduces of mnist-cnn's 1.2 M float gradients: well over 10 MB each way
echo "test_dist_netns: $(((rx1 - rx0) / 1048576)) MiB received over the veth"
check "the gradients crossed the veth ($rx0 -> $rx1 bytes)" test $((rx1 - rx0)) -gt 10000000
check "the same step losses and final weights as over shared memory" "${SAME[@]}" "$T/shm" "$T/tcp" 10 --exact
harness_finish
