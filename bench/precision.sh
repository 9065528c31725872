#!/usr/bin/env bash
# Mixed precision (--precision fp32|bf16|auto) on this CPU: `kiln bench step`
# training steps of the issue's gpt (4 layers, 4 heads, 256 wide, block 128,
# batch 8) and of resnet20 at batch 128, each precision in turn within every
# round (so drift in machine load hits all alike), one process per run; the
# table gives the median over rounds of each run's median step time, and how
# many steps ran bf16 (auto: those it measured faster at compile; the
# autocast lines of the last auto run's log follow the table). Autotuned
# convolutions come from the cache like any run; a first untimed round fills
# it for the bf16 problems.
#
#   REPEAT=N (rounds, default 3)  STEPS=N (timed steps per run, default 10)  KILN=PATH (default build/kiln)
set -euo pipefail

NAME=precision
REPEAT="${REPEAT:-3}"
STEPS="${STEPS:-10}"
source "$(dirname "$0")/common.sh"
bench_init
export OMP_NUM_THREADS=2

mkdir -p bench/results
OUT="bench/results/precision-$(date +%Y%m%d-%H%M%S).jsonl"
LOG="${OUT%.jsonl}.log"
GPT=(--model gpt --batch-size 8)
RESNET=(--model resnet20 --batch-size 128)

run() { # model-args... -- precision round
    local args=("${@:1:$#-2}") p=${*: -2:1} r=${*: -1}
    local line
    line=$("$KILN" bench step "${args[@]}" --steps "$STEPS" --warmup 2 --precision "$p" --json 2>>"$LOG" | tail -1)
    [ "$r" -gt 0 ] && echo "{\"round\": $r, \"precision\": \"$p\", \"result\": $line}" >>"$OUT"
    return 0
}

for r in $(seq 0 "$REPEAT"); do
    for p in fp32 bf16 auto; do
        [ "$r" -eq 0 ] && [ "$p" != bf16 ] && continue # round 0: the bf16 convolutions' tuning, untimed
        run "${GPT[@]}" "$p" "$r"
        run "${RESNET[@]}" "$p" "$r"
    done
done

"$PY" - "$OUT" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| model | batch | precision | ms per step (median of %d rounds) | bf16 steps | vs fp32 |" % max(r["round"] for r in rows))
print("|---|---|---|---|---|---|")
for model in ("gpt", "resnet20"):
    base = None
    for p in ("fp32", "bf16", "auto"):
        rs = [r["result"] for r in rows if r["precision"] == p and r["result"]["model"] == model]
        ms = statistics.median(x["ms"] for x in rs)
        base = base or ms
        print("| %s | %d | %s | %.2f (%s) | %d | %.2fx |" % (model, rs[0]["batch"], p, ms,
              ", ".join("%.1f" % x["ms"] for x in rs), rs[-1]["bf16_steps"], ms / base))
PYEOF
echo "raw: $OUT; log: $LOG"
grep "autocast:" "$LOG" | tail -40 || true
