#!/usr/bin/env bash
# ResNet step times, kiln beside PyTorch 1.13 on the same machine: the
# training step (forward, backward, SGD with momentum and weight decay) and
# the inference step (eval, no grad) of resnet20 (batch 128, 3x32x32) and
# resnet18 (batch 32, 3x112x112), on synthetic data. kiln runs
# `kiln bench step --json` (median of STEPS timed steps after a warm-up);
# PyTorch runs the peer script ../shared/bench/peers/conv_bench.py (median of
# BLOCKS x STEPS steps, default and channels_last, 2 threads). Rounds
# alternate kiln and PyTorch so drift in machine load hits both; the table
# gives the medians over rounds and the issue's targets: training step
# <= 0.6 x PyTorch's best format, inference throughput >= 2 x PyTorch's best.
#
#   MODELS="resnet20 resnet18"  REPEAT=N (rounds, default 3)
#   STEPS=N (timed steps per run, default 20)  BLOCKS=N (PyTorch's blocks, default 2)
#   KILN=PATH (default build/kiln)  KILN_SHARED=DIR (default ../shared)
set -euo pipefail

ROOT="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
cd "$ROOT"
KILN="${KILN:-build/kiln}"
SHARED="${KILN_SHARED:-$ROOT/../shared}"
PEER="$SHARED/bench/peers/conv_bench.py"
MODELS="${MODELS:-resnet20 resnet18}"
REPEAT="${REPEAT:-3}"
STEPS="${STEPS:-20}"
BLOCKS="${BLOCKS:-2}"
export OMP_NUM_THREADS=2

die() { echo "resnet: $*" >&2; exit 1; }
[ -x "$KILN" ] || die "$KILN not found: run 'make'"
[ -f "$PEER" ] || die "$PEER not found (set KILN_SHARED)"
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || die "REPEAT must be a positive integer (got '$REPEAT')"

mkdir -p bench/results
OUT="bench/results/resnet-$(date +%Y%m%d-%H%M%S).jsonl"
# the machine's FP32 peak, measured here (bench/fp32_peak.c): the share of it kiln's GFLOP/s are
PEAK_BIN=$(mktemp /tmp/kiln_fp32_peak.XXXXXX)
trap 'rm -f "$PEAK_BIN"' EXIT
gcc -O2 -march=native -ffp-contract=fast -fopenmp bench/fp32_peak.c -o "$PEAK_BIN" || die "cannot build bench/fp32_peak.c"
PEAK=$("$PEAK_BIN")
echo "{\"side\": \"machine\", \"fp32_peak_gflops\": $PEAK, \"threads\": $OMP_NUM_THREADS}" >>"$OUT"
batch() { [ "$1" = resnet20 ] && echo 128 || echo 32; }

for r in $(seq 1 "$REPEAT"); do
    for m in $MODELS; do
        for mode in train eval; do
            flag=(); [ "$mode" = eval ] && flag=(--eval)
            line=$("$KILN" bench step --model "$m" --batch-size "$(batch "$m")" --steps "$STEPS" --warmup 3 --json "${flag[@]}")
            echo "{\"side\": \"kiln\", \"round\": $r, \"result\": $line}" >>"$OUT"
        done
        # the peer: train and infer, default and channels_last, one RESULT line each
        /usr/bin/python3 "$PEER" "$m" "$STEPS" "$BLOCKS" 3 2 2>/dev/null | sed -n 's/^RESULT //p' |
            while read -r l; do echo "{\"side\": \"pytorch\", \"round\": $r, \"result\": $l}"; done >>"$OUT"
    done
done

python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
peak = [r["fp32_peak_gflops"] for r in rows if r["side"] == "machine"][0]
rows = [r for r in rows if r["side"] != "machine"]
def med(xs): return statistics.median(xs) if xs else float("nan")
print(f"FP32 peak of this machine, measured (bench/fp32_peak.c, OMP_NUM_THREADS=2): {peak:.0f} GFLOP/s")
print(f"{'model':9s} {'mode':5s} {'kiln ms':>9s} {'torch ms':>9s} {'(format)':>14s} {'ratio':>6s}  {'target':22s} kiln GFLOP/s (of peak)")
for m in sorted({r["result"]["model"] for r in rows}):
    for mode, pmode in (("train", "train"), ("eval", "infer")):
        k = med([r["result"]["ms"] for r in rows if r["side"] == "kiln" and r["result"]["model"] == m and r["result"]["mode"] == mode])
        gf = med([r["result"]["gflops"] for r in rows if r["side"] == "kiln" and r["result"]["model"] == m and r["result"]["mode"] == mode])
        best, fmt = float("inf"), "-"
        for f in ("default", "channels_last"):
            t = med([r["result"]["ms_median"] for r in rows if r["side"] == "pytorch" and r["result"].get("model") == m
                     and r["result"].get("mode") == pmode and r["result"].get("format") == f])
            if t < best: best, fmt = t, f
        ratio = k / best
        goal = 0.6 if mode == "train" else 0.5
        verdict = "MET" if ratio <= goal else "NOT MET"
        target = f"<= {goal} ({verdict})"
        print(f"{m:9s} {mode:5s} {k:9.1f} {best:9.1f} {fmt:>14s} {ratio:6.2f}  {target:22s} {gf:6.0f} ({100 * gf / peak:.0f}%)")
print(f"(medians over rounds; raw lines in {sys.argv[1]}; load average now {open('/proc/loadavg').read().split()[0]})")
PY
