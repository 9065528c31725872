#!/usr/bin/env bash
# ResNet step times, kiln beside PyTorch 1.13 on the same machine: the
# training step (forward, backward, SGD with momentum and weight decay) and
# the inference step (eval, no grad) of resnet20 (batch 128, 3x32x32) and
# resnet18 (batch 32, 3x112x112), on synthetic data. kiln runs
# `kiln bench step --json --precision P` (median of STEPS timed steps after a
# warm-up) for every P in PRECISIONS; PyTorch runs our peer
# bench/peers/resnet_peer.py (the models and steps of
# ../shared/bench/peers/conv_bench.py, default and channels_last, each in fp32
# and under torch.autocast('cpu', bfloat16); median of BLOCKS x STEPS steps,
# 2 threads). PyTorch's best is the fastest of its four variants; the table
# gives kiln's ratio to PyTorch's best fp32 and to its best of all. Rounds
# alternate kiln and PyTorch so drift in machine load hits both; the table
# gives the medians over rounds and the issue's targets: training step
# <= 0.6 x PyTorch's best, inference throughput >= 2 x PyTorch's best.
# kiln tunes its convolutions into an empty autotune cache made for the run
# (its first round's compiles tune; later rounds remember), so the figures
# never rest on choices an earlier, perhaps busy, moment left in ~/.cache.
#
#   MODELS="resnet20 resnet18"  PRECISIONS="fp32 bf16 auto"  REPEAT=N (rounds, default 3)
#   STEPS=N (timed steps per run, default 20)  BLOCKS=N (PyTorch's blocks, default 2)
#   PEER_PRECISIONS="fp32" (PyTorch's variants, default "fp32 bf16"; its bf16 autocast is
#   emulated and ~25x slower on CPUs without avx512_bf16, never its best there)
#   KILN=PATH (default build/kiln)
set -euo pipefail

ROOT="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
. "$ROOT/bench/openblas.sh" # OPENBLAS_CORETYPE from this CPU's flags
cd "$ROOT"
KILN="${KILN:-build/kiln}"
PEER="$ROOT/bench/peers/resnet_peer.py"
MODELS="${MODELS:-resnet20 resnet18}"
PRECISIONS="${PRECISIONS:-fp32 bf16 auto}"
REPEAT="${REPEAT:-3}"
STEPS="${STEPS:-20}"
BLOCKS="${BLOCKS:-2}"
export OMP_NUM_THREADS=2

die() { echo "resnet: $*" >&2; exit 1; }
[ -x "$KILN" ] || die "$KILN not found: run 'make'"
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || die "REPEAT must be a positive integer (got '$REPEAT')"

mkdir -p bench/results
OUT="bench/results/resnet-$(date +%Y%m%d-%H%M%S).jsonl"
# the machine's FP32 peak, measured here (bench/fp32_peak.c): the share of it kiln's GFLOP/s are
PEAK_BIN=$(mktemp /tmp/kiln_fp32_peak.XXXXXX)
export KILN_CACHE_DIR="$(mktemp -d)"
trap 'rm -f "$PEAK_BIN"; rm -rf "$KILN_CACHE_DIR"' EXIT
gcc -O2 -march=native -ffp-contract=fast -fopenmp bench/fp32_peak.c -o "$PEAK_BIN" || die "cannot build bench/fp32_peak.c"
PEAK=$("$PEAK_BIN")
BF16_PEAK=$("$PEAK_BIN" bf16) # 0 where the CPU has no AVX512-BF16
echo "{\"side\": \"machine\", \"fp32_peak_gflops\": $PEAK, \"bf16_peak_gflops\": $BF16_PEAK, \"threads\": $OMP_NUM_THREADS}" >>"$OUT"
batch() { [ "$1" = resnet20 ] && echo 128 || echo 32; }

for r in $(seq 1 "$REPEAT"); do
    for m in $MODELS; do
        for p in $PRECISIONS; do
            for mode in train eval; do
                flag=(); [ "$mode" = eval ] && flag=(--eval)
                line=$("$KILN" bench step --model "$m" --batch-size "$(batch "$m")" --steps "$STEPS" --warmup 3 \
                    --precision "$p" --json "${flag[@]}" 2>/dev/null)
                echo "{\"side\": \"kiln\", \"round\": $r, \"result\": $line}" >>"$OUT"
            done
        done
        # the peer: train and infer, {default, channels_last} x {fp32, bf16}, one RESULT line each
        /usr/bin/python3 "$PEER" "$m" "$STEPS" "$BLOCKS" 3 2 2>/dev/null | sed -n 's/^RESULT //p' |
            while read -r l; do echo "{\"side\": \"pytorch\", \"round\": $r, \"result\": $l}"; done >>"$OUT"
    done
done

python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
mach = [r for r in rows if r["side"] == "machine"][0]
peak, bpeak = mach["fp32_peak_gflops"], mach["bf16_peak_gflops"]
rows = [r["result"] | {"side": r["side"]} for r in rows if r["side"] != "machine"]
def med(xs): return statistics.median(xs) if xs else float("nan")
print(f"peaks of this machine, measured (bench/fp32_peak.c, OMP_NUM_THREADS=2): fp32 {peak:.0f} GFLOP/s, bf16 dot products {bpeak:.0f}")
print("PyTorch 1.13 (medians over rounds, ms):")
best = {}
for m in sorted({r["model"] for r in rows}):
    for mode, pmode in (("train", "train"), ("eval", "infer")):
        vs = {}
        for f in ("default", "channels_last"):
            for p in ("fp32", "bf16"):
                vs[(f, p)] = med([r["ms_median"] for r in rows if r["side"] == "pytorch" and r["model"] == m
                                  and r["mode"] == pmode and r["format"] == f and r["precision"] == p])
        b32 = min((v for v in vs.items() if v[0][1] == "fp32"), key=lambda v: v[1])
        ball = min(vs.items(), key=lambda v: v[1])
        best[(m, mode)] = (b32, ball)
        print(f"  {m:9s} {mode:5s} " + "  ".join(f"{f}/{p} {t:.1f}" for (f, p), t in vs.items()))
goal = {"train": 0.6, "eval": 0.5}
print(f"{'model':9s} {'mode':5s} {'kiln':5s} {'kiln ms':>8s} {'vs fp32 best':>24s} {'vs best of all':>30s}  "
      f"{'GFLOP/s':>7s} fp32/bf16 peak   (target: ratio <= 0.6 train, <= 0.5 eval)")
for m in sorted({r["model"] for r in rows}):
    for mode in ("train", "eval"):
        (f32, t32), (fall, tall) = best[(m, mode)]
        for p in dict.fromkeys(r["precision"] for r in rows if r["side"] == "kiln"):
            ks = [r for r in rows if r["side"] == "kiln" and r["model"] == m and r["mode"] == mode and r["precision"] == p]
            if not ks:
                continue
            k, gf = med([r["ms"] for r in ks]), med([r["gflops"] for r in ks])
            def cell(t, name):
                verdict = "met" if k / t <= goal[mode] else "not met"
                return f"{k / t:.2f} of {t:.1f} ({name}, {verdict})"
            print(f"{m:9s} {mode:5s} {p:5s} {k:8.1f} {cell(t32, f32[0]):>24s} {cell(tall, '/'.join(fall)):>30s}  "
                  f"{gf:7.0f} {100 * gf / peak:.0f}%/{100 * gf / bpeak if bpeak else float('nan'):.0f}%")
print(f"(medians over rounds; raw lines in {sys.argv[1]}; load average now {open('/proc/loadavg').read().split()[0]})")
PY
