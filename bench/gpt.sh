#!/usr/bin/env bash
# The GPT training step, kiln beside PyTorch 1.13 on the same machine: the
# issue's config (4 layers, 4 heads, 256 wide, block 128, vocab 256, batch 8),
# forward, backward, clipping to norm 1 and AdamW (lr 3e-4, betas 0.9/0.95,
# weight decay 0.1). kiln runs `kiln bench step --model gpt --json` (median of
# STEPS timed steps after a warm-up, random tokens bound once); PyTorch runs
# the peer ../shared/bench/peers/w8_gpt.py (nanoGPT's model, median of STEPS
# steps, each drawing its random batch) with 1 and with 2 threads: two thread
# pools fight on 2 cores, so its best of the two is the reference. Rounds
# alternate kiln and PyTorch. Target: kiln's step <= 0.5 x PyTorch's best.
# The peer's MLP uses the erf GELU and kiln's GPT-2's tanh form (the same cost
# class: one pointwise pass either way). PRECISIONS="fp32 auto" also times
# kiln's mixed precision (bf16 matmuls where the cpu measures them faster)
# beside the same PyTorch fp32 runs (the peer has no bf16 mode; PyTorch
# 1.13's CPU autocast is not its fast path). With LLMC_DIR naming a checkout
# of karpathy/llm.c (not part of kiln: fetch it yourself), llm.c's CPU
# trainer joins on the same config (bench/llmc_step.c drives its
# train_gpt2.c, built with llm.c's own flags; 1 and 2 threads, its best
# reported; it does not clip gradients).
#
#   REPEAT=N (rounds, default 3)  STEPS=N (timed steps, default 30)
#   PRECISIONS="fp32 [bf16] [auto]" (kiln's --precision, default fp32)
#   KILN=PATH (default build/kiln)  KILN_SHARED=DIR (default ../shared)
#   LLMC_DIR=DIR (a karpathy/llm.c checkout: adds llm.c's CPU trainer)
set -euo pipefail

ROOT="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
. "$ROOT/bench/openblas.sh" # OPENBLAS_CORETYPE from this CPU's flags
cd "$ROOT"
KILN="${KILN:-build/kiln}"
SHARED="${KILN_SHARED:-$ROOT/../shared}"
PEER="$SHARED/bench/peers/w8_gpt.py"
REPEAT="${REPEAT:-3}"
STEPS="${STEPS:-30}"
PRECISIONS="${PRECISIONS:-fp32}"
CFG=(--layers 4 --heads 4 --dim 256 --block 128 --vocab 256)

die() { echo "gpt: $*" >&2; exit 1; }
[ -x "$KILN" ] || die "$KILN not found: run 'make'"
[ -f "$PEER" ] || die "$PEER not found (set KILN_SHARED)"
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || die "REPEAT must be a positive integer (got '$REPEAT')"

LLMC_BIN=
if [ -n "${LLMC_DIR:-}" ]; then
    [ -f "$LLMC_DIR/train_gpt2.c" ] || die "LLMC_DIR=$LLMC_DIR has no train_gpt2.c"
    LLMC_BIN=$(mktemp /tmp/kiln_llmc.XXXXXX)
    trap 'rm -f "$LLMC_BIN"' EXIT
    # llm.c's Makefile's flags for its CPU trainer
    gcc -Ofast -march=native -fopenmp -DOMP -Wno-unused-result -Wno-unknown-pragmas -I"$LLMC_DIR" bench/llmc_step.c \
        -o "$LLMC_BIN" -lm || die "cannot build bench/llmc_step.c against $LLMC_DIR"
fi
mkdir -p bench/results
OUT="bench/results/gpt-$(date +%Y%m%d-%H%M%S).jsonl"
for r in $(seq 1 "$REPEAT"); do
    for p in $PRECISIONS; do
        line=$(OMP_NUM_THREADS=2 "$KILN" bench step --model gpt "${CFG[@]}" --batch-size 8 --steps "$STEPS" --warmup 5 \
            --precision "$p" --json 2>/dev/null | tail -1)
        echo "{\"side\": \"kiln\", \"precision\": \"$p\", \"round\": $r, \"result\": $line}" >>"$OUT"
    done
    for th in 1 2; do
        OMP_NUM_THREADS=$th /usr/bin/python3 "$PEER" --threads "$th" --steps "$STEPS" --warmup 5 --no-wait-quiet 2>/dev/null |
            sed -n 's/^RESULT //p' | while read -r l; do echo "{\"side\": \"pytorch\", \"round\": $r, \"result\": $l}"; done >>"$OUT"
    done
    for th in 1 2; do
        [ -n "$LLMC_BIN" ] || break
        line=$(OMP_NUM_THREADS=$th "$LLMC_BIN" 4 4 256 128 256 8 "$STEPS" 5)
        echo "{\"side\": \"llmc\", \"threads\": $th, \"round\": $r, \"result\": $line}" >>"$OUT"
    done
done

python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda xs: statistics.median(xs) if xs else float("nan")
precs = list(dict.fromkeys(r.get("precision", "fp32") for r in rows if r["side"] == "kiln"))
ks = {p: med([r["result"]["ms"] for r in rows if r["side"] == "kiln" and r.get("precision", "fp32") == p]) for p in precs}
tok = 8 * 128
print(f"GPT step (4 layers, 4 heads, 256 wide, block 128, vocab 256, batch 8; AdamW, clipping)")
print(f"{'':22s} {'ms/step':>9s} {'tokens/s':>10s}")
for p, k in ks.items():
    name = "kiln (2 threads)" if p == "fp32" else f"kiln {p} (2 threads)"
    print(f"{name:22s} {k:9.1f} {tok / k * 1e3:10.0f}")
best = float("inf")
for th in (1, 2):
    t = med([r["result"]["median_ms"] for r in rows if r["side"] == "pytorch" and r["result"]["threads"] == th])
    best = min(best, t)
    print(f"{'pytorch (%d thread%s)' % (th, 's' if th > 1 else ''):22s} {t:9.1f} {tok / t * 1e3:10.0f}")
lbest = float("inf")
for th in (1, 2):
    ls = [r["result"]["ms"] for r in rows if r["side"] == "llmc" and r["threads"] == th]
    if ls:
        lbest = min(lbest, med(ls))
        print(f"{'llm.c (%d thread%s)' % (th, 's' if th > 1 else ''):22s} {med(ls):9.1f} {tok / med(ls) * 1e3:10.0f}")
for p, k in ks.items():
    ratio = k / best
    what = "kiln" if p == "fp32" else f"kiln {p}"
    print(f"{what} / PyTorch's best (fp32): {ratio:.2f} (target <= 0.5: {'MET' if ratio <= 0.5 else 'NOT MET'})")
if lbest < float("inf"):
    print(f"kiln / llm.c's best: {ks[precs[0]] / lbest:.2f}")
print(f"(medians over {len([r for r in rows if r['side'] == 'pytorch']) // 2} rounds; raw lines in {sys.argv[1]}; "
      f"load average now {open('/proc/loadavg').read().split()[0]})")
PY
