#!/usr/bin/env bash
# The guide's pointwise-fusion table (its GELU, x * 0.5 * (1 + erf(x / 1.41421)),
# float32): kernels launched and microseconds per call at 1M elements, kiln
# unfused (the five nodes as five kernels) and fused (the pointwise fusion
# pass: one kernel), beside PyTorch 1.13 eager, torch.jit.script (fuser off,
# and NNC's fuser where it runs) and F.gelu from the peer
# ../shared/bench/peers/w3_gelu_fusion.py; and at 16M elements the bandwidth
# each achieves (bytes read and written per call / time) against the
# machine's, measured here by bench/membw.c (STREAM copy and triad, 2 threads).
# Rounds alternate the sides; medians over rounds. Targets: fused >= 3x the
# unfused chain at 1M, >= 60 % of the measured bandwidth at 16M.
#
# (NNC without LLVM, its IR interpreter, takes about a second per call at 1M here: left out.)
#
#   REPEAT=N (rounds, default 3)  STEPS=N (timed calls per run, default 50)
#   KILN=PATH (default build/kiln)  KILN_SHARED=DIR (default ../shared)
set -euo pipefail

NAME=pointwise
REPEAT="${REPEAT:-3}"
STEPS="${STEPS:-50}"
source "$(dirname "$0")/common.sh"
bench_init
SHARED="${KILN_SHARED:-$ROOT/../shared}"
PEER="$SHARED/bench/peers/w3_gelu_fusion.py"
[ -f "$PEER" ] || die "$PEER not found (set KILN_SHARED)"
[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || die "STEPS must be a positive integer (got '$STEPS')"
export OMP_NUM_THREADS=2
SIZES=(1000000 16000000) # the peer's sizes

mkdir -p bench/results
OUT="bench/results/pointwise-$(date +%Y%m%d-%H%M%S).jsonl"
MEMBW_BIN=$(mktemp /tmp/kiln_membw.XXXXXX)
trap 'rm -f "$MEMBW_BIN"' EXIT
gcc -O2 -march=native -fopenmp bench/membw.c -o "$MEMBW_BIN" || die "cannot build bench/membw.c"

for r in $(seq 1 "$REPEAT"); do
    echo "{\"side\": \"machine\", \"round\": $r, \"result\": $("$MEMBW_BIN")}" >>"$OUT"
    for n in "${SIZES[@]}"; do
        for fuse in off on; do
            line=$("$KILN" bench pointwise --op gelu-chain --elements "$n" --fuse "$fuse" --steps "$STEPS" --warmup 5 --json)
            echo "{\"side\": \"kiln\", \"round\": $r, \"result\": $line}" >>"$OUT"
        done
    done
    "$PY" "$PEER" --threads 2 --warmup 5 --reps "$STEPS" \
        --sizes "$(IFS=,; echo "${SIZES[*]}")" --nollvm-max-n 0 --no-wait-quiet 2>/dev/null | sed -n 's/^RESULT //p' |
        while read -r l; do echo "{\"side\": \"pytorch\", \"round\": $r, \"result\": $l}"; done >>"$OUT"
done

"$PY" - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda xs: statistics.median(xs) if xs else float("nan")
kiln = lambda n, fuse, k: med([r["result"][k] for r in rows if r["side"] == "kiln"
                               and r["result"]["elements"] == n and r["result"]["fuse"] == fuse])
torch_rows = lambda n: [r["result"] for r in rows if r["side"] == "pytorch" and r["result"]["n"] == n]
COMPUTE = ("aten::div", "aten::erf", "aten::add", "aten::mul", "aten::gelu")
def kernels(ev):
    """pointwise kernels PyTorch ran: the compute ops and fusion groups (not the copies of its scalar operands)"""
    return sum(c for k, c in ev.items() if k in COMPUTE or k.startswith("fused_") or "TensorExprGroup" in k)
def torch(n, v):
    rs = [t[v] for t in torch_rows(n) if v in t and "median_us" in t[v]]
    if not rs:
        errs = [t[v]["error"] for t in torch_rows(n) if v in t and "error" in t[v]]
        return None, None, (errs[0][:40] if errs else "not run")
    return med([x["median_us"] for x in rs]), kernels(rs[-1]["profiler_events"]), None
bw = med([r["result"]["copy_gbps"] for r in rows if r["side"] == "machine"])
triad = med([r["result"]["triad_gbps"] for r in rows if r["side"] == "machine"])
VARIANTS = (("eager", "PyTorch eager gelu(x)"), ("script_nofuse", "torch.jit.script, fuser off"),
            ("script_texpr", "torch.jit.script, NNC fuser (LLVM)"), ("script_texpr_nollvm", "torch.jit.script, NNC interpreter"),
            ("F.gelu", "F.gelu"))
for n in sorted({r["result"]["elements"] for r in rows if r["side"] == "kiln"}):
    print(f"\n{n:,} elements (float32), 2 threads     kernels   us per call     GB/s")
    for fuse, label in (("off", "kiln, five nodes unfused"), ("on", "kiln, fusion pass on")):
        print(f"  {label:36s} {kiln(n, fuse, 'kernels'):7.0f} {kiln(n, fuse, 'us'):13.1f} {kiln(n, fuse, 'gbps'):8.1f}")
    for v, label in VARIANTS:
        us, k, err = torch(n, v)
        if us is None:
            print(f"  {label:36s} {'-':>7s} {'(' + err + ')':>13s}")
        else:
            print(f"  {label:36s} {k:7d} {us:13.1f} {8 * n / (us * 1e3):8.1f}")
n1, n16 = 1000000, 16000000
speedup = kiln(n1, "off", "us") / kiln(n1, "on", "us")
share = kiln(n16, "on", "gbps") / bw
print(f"\nmemory bandwidth of this machine, measured (bench/membw.c, 2 threads): copy {bw:.1f} GB/s, triad {triad:.1f} GB/s")
print(f"fused / unfused at 1M: {speedup:.2f}x  >= 3 ({'MET' if speedup >= 3 else 'NOT MET'})")
print(f"fused at 16M: {kiln(n16, 'on', 'gbps'):.1f} GB/s = {100 * share:.0f} % of copy bandwidth  >= 60 % "
      f"({'MET' if share >= 0.6 else 'NOT MET'})")
fc = [t[v]["foreign_cores"] for n in (n1, n16) for t in torch_rows(n) for v in ("eager", "F.gelu") if v in t]
print(f"(medians over {max(r['round'] for r in rows)} rounds of {rows[1]['result']['steps']} calls; bytes: each kernel's "
      f"inputs and outputs, 8 per element fused, 44 unfused; PyTorch's GB/s at 8 bytes per element; raw lines in "
      f"{sys.argv[1]}; other processes' load during PyTorch's runs: up to {max(fc or [0]):.2f} cores)")
PY
