#!/usr/bin/env bash
# kiln vs PyTorch: one epoch of mnist-cnn on Fashion-MNIST, the same work for
# both (batch 64, Adadelta lr 1.0, StepLR 0.7, 2 loader workers, 2 compute
# threads), then test accuracy. Run i uses seed i for both frameworks: the two
# draw initial weights, shuffles and dropout masks from different generators,
# so accuracy is compared as the median over seeds, not one lucky draw.
# Prints each run, the medians, the
# kiln/PyTorch ratios and whether the targets are met. `make bench` runs it.
#
#   REPEAT=N     pairs of runs (seeds 1..N), interleaved kiln, PyTorch, kiln, ... (default 5)
#   MAX_STEPS=N  quick check: --max-steps N for both (PyTorch's is per epoch;
#                with --epochs 1 the two mean the same)
#   KILN_SHARED  the shared folder holding bench/pytorch_mnist.py
#                (default: ../shared beside the repository)
set -euo pipefail

ROOT="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
. "$ROOT/bench/openblas.sh" # OPENBLAS_CORETYPE from this CPU's flags
cd "$ROOT"
SHARED="${KILN_SHARED:-$ROOT/../shared}"
REF="$SHARED/bench/pytorch_mnist.py"
PY=/usr/bin/python3
REPEAT="${REPEAT:-5}"
MAX_STEPS="${MAX_STEPS:-0}"

die() { echo "mnist_epoch: $*" >&2; exit 1; }
[ -x build/kiln ] || die "build/kiln not found: run 'make' (or 'make bench', which builds it first)"
[ -f "$REF" ] || die "$REF not found: set KILN_SHARED to the folder holding bench/pytorch_mnist.py"
[ -x "$PY" ] || die "$PY not found (the reference needs Debian's python3-torch: scripts/install-deps.sh --bench)"
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || die "REPEAT must be a positive integer (got '$REPEAT')"
[[ "$MAX_STEPS" =~ ^[0-9]+$ ]] || die "MAX_STEPS must be a non-negative integer (got '$MAX_STEPS')"

extra=()
[ "$MAX_STEPS" -gt 0 ] && extra=(--max-steps "$MAX_STEPS")
KILN_CMD=(build/kiln train --model mnist-cnn --data fashion-mnist --epochs 1 --batch-size 64 --optimizer adadelta
          --lr 1.0 --lr-step-gamma 0.7 --workers 2 --threads 2 --json --quiet "${extra[@]}")
TORCH_CMD=("$PY" "$REF" --epochs 1 --workers 2 --threads 2 --json "${extra[@]}")

mkdir -p bench/results
OUT="bench/results/mnist_epoch-$(date +%Y%m%d-%H%M%S).jsonl"
: > "$OUT"

# runs a command, appends its last stdout line (a JSON object) to $OUT
run_one() {
    local name=$1; shift
    local log; log=$(mktemp)
    echo "  run $i/$REPEAT: $name ..." >&2
    if ! "$@" > "$log" 2> "$log.err"; then
        cat "$log.err" >&2; rm -f "$log" "$log.err"; die "$name failed: $*"
    fi
    local line; line=$(grep '^{' "$log" | tail -n 1 || true)
    rm -f "$log" "$log.err"
    [ -n "$line" ] || die "$name printed no JSON line"
    echo "$line" >> "$OUT"
}

what="1 epoch"; [ "$MAX_STEPS" -gt 0 ] && what="1 epoch capped at $MAX_STEPS steps"
echo "mnist-cnn on fashion-mnist, $what: $REPEAT run(s) of each, interleaved" >&2
for i in $(seq 1 "$REPEAT"); do
    run_one kiln "${KILN_CMD[@]}" --seed "$i"
    run_one pytorch "${TORCH_CMD[@]}" --seed "$i"
done

"$PY" - "$OUT" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def fw(r): return "kiln" if r.get("framework") == "kiln" else "pytorch"
keys = ["train_time_s", "images_per_s", "test_accuracy", "peak_rss_mb", "steps", "data_wait_frac"]
print(f"{'run':<4}{'framework':<20}{'steps':>7}{'time s':>10}{'img/s':>10}{'acc %':>8}{'RSS MB':>9}{'wait %':>8}")
for i, r in enumerate(rows):
    acc = r.get("test_accuracy")
    print(f"{i // 2 + 1:<4}{r.get('framework', '?'):<20}{r['steps']:>7}{r['train_time_s']:>10.2f}{r['images_per_s']:>10.0f}"
          f"{(100 * acc if acc is not None else float('nan')):>8.2f}{r['peak_rss_mb']:>9.0f}{100 * r['data_wait_frac']:>8.1f}")
med = {}
for f in ("kiln", "pytorch"):
    rs = [r for r in rows if fw(r) == f]
    med[f] = {k: statistics.median(r[k] for r in rs if r.get(k) is not None) if any(r.get(k) is not None for r in rs)
              else float("nan") for k in keys}
k, p = med["kiln"], med["pytorch"]
print("\nmedians            kiln     pytorch")
print(f"  train_time_s {k['train_time_s']:>10.2f}  {p['train_time_s']:>10.2f}")
print(f"  images_per_s {k['images_per_s']:>10.0f}  {p['images_per_s']:>10.0f}")
print(f"  test_acc %   {100 * k['test_accuracy']:>10.2f}  {100 * p['test_accuracy']:>10.2f}")
print(f"  peak_rss_mb  {k['peak_rss_mb']:>10.0f}  {p['peak_rss_mb']:>10.0f}")
t_ratio = k["train_time_s"] / p["train_time_s"]
r_ratio = k["peak_rss_mb"] / p["peak_rss_mb"]
d_acc = 100 * (k["test_accuracy"] - p["test_accuracy"])
def verdict(ok): return "MET" if ok else "NOT MET"
print("\nkiln vs PyTorch (medians)           value   target")
print(f"  time ratio kiln/pytorch       {t_ratio:>9.3f}   <= 0.5    {verdict(t_ratio <= 0.5)}")
print(f"  accuracy difference (points)  {d_acc:>+9.2f}   within 1  {verdict(abs(d_acc) <= 1.0)}")
print(f"  peak RSS ratio kiln/pytorch   {r_ratio:>9.3f}   <= 0.5    {verdict(r_ratio <= 0.5)}")
if k["steps"] != p["steps"]:
    print(f"  warning: step counts differ (kiln {k['steps']}, pytorch {p['steps']})")
EOF
echo "raw JSON lines: $OUT" >&2
