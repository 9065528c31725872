#!/usr/bin/env bash
# What the debugging aids cost a training step: --trace over a 20-step window
# (--trace-steps 1-20 of 20 steps) and --detect-anomaly, each against the same
# run without, for mnist-cnn (batch 64) and resnet20 (batch 32, 3x32x32 decoded
# shards of Fashion-MNIST). The step time is the wall time after compiling
# over the run's steps (--json); rounds alternate the variants so machine
# drift hits all alike; medians. The issue's targets: the trace <= 5 %, anomaly
# detection <= 30 % of the step time.
#
#   REPEAT=N (rounds, default 3)  KILN=PATH (default build/kiln)
set -euo pipefail

NAME=debug-cost REPEAT="${REPEAT:-3}"
. "$(dirname "$0")/common.sh"
bench_init
SHARDS="${XDG_CACHE_HOME:-$HOME/.cache}/kiln/bench/fmnist-shard32"
if [ ! -f "$SHARDS/.complete" ]; then
    rm -rf "$SHARDS"; mkdir -p "$(dirname "$SHARDS")"
    "$KILN" pack --from fashion-mnist --to "$SHARDS" --format shard --decoded --size 32 --channels 3 >&2 || die "kiln pack failed"
    touch "$SHARDS/.complete"
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ANOMALY=(); "$KILN" train --help 2>&1 | grep -q -- "--detect-anomaly" && ANOMALY=(--detect-anomaly)
mkdir -p bench/results
OUT="bench/results/debug-cost-$(date +%Y%m%d-%H%M%S).jsonl"
: >"$OUT"

run() { # $1 model, $2 variant, then options
    local m=$1 v=$2 base
    shift 2
    if [ "$m" = mnist-cnn ]; then base=(--model mnist-cnn --data fashion-mnist --batch-size 64)
    else base=(--model resnet20 --data "$SHARDS" --batch-size 32 --optimizer sgd --lr 0.1); fi
    "$KILN" train "${base[@]}" --max-steps 20 --no-test --workers 1 --json --quiet "$@" >"$TMP/out" 2>/dev/null ||
        die "$m $v failed"
    "$PY" -c 'import json,sys; r=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]);
print(json.dumps({"model": sys.argv[2], "variant": sys.argv[3], "round": int(sys.argv[4]),
                  "step_ms": 1e3 * (r["train_time_s"] - r["compile_time_s"]) / r["steps"]}))' "$TMP/out" "$m" "$v" "$i" >>"$OUT"
}

for i in $(seq 1 "$REPEAT"); do
    for m in mnist-cnn resnet20; do
        run "$m" plain
        run "$m" trace --trace "$TMP/t.json" --trace-steps 1-20
        [ ${#ANOMALY[@]} -gt 0 ] && run "$m" anomaly "${ANOMALY[@]}"
    done
done
"$PY" - "$OUT" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda m, v: statistics.median([r["step_ms"] for r in rows if r["model"] == m and r["variant"] == v] or [float("nan")])
for m in ("mnist-cnn", "resnet20"):
    p, t, a = med(m, "plain"), med(m, "trace"), med(m, "anomaly")
    print(f"{m:10} plain {p:7.2f} ms  --trace {t:7.2f} ms ({100 * (t / p - 1):+.1f}%, target <= 5%)  "
          f"--detect-anomaly {a:7.2f} ms ({100 * (a / p - 1):+.1f}%, target <= 30%)")
PYEOF
