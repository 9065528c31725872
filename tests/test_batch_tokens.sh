#!/usr/bin/env bash
# --batch-tokens end to end on Debian's fortunes: kiln tokenize records each
# fortune (between "%" lines) as a document; the gpt trains on length-bucketed
# batches of about 1024 tokens (a plan per bucket, compiled once): the loss
# falls from ln 256 = 5.55, no step allocates (step_allocs 0), and the log
# names the buckets; a run resumed mid-epoch goes on with the uninterrupted
# run's losses; a token file without a document index, another model or
# --accumulate are refused naming the cause (exit 2). Under mpirun the same
# run on 2 ranks trains (skipped, with a message, without mpirun or kiln's
# MPI plugin), every length bucket's plan overlapping its all-reduce with its
# backward: the same losses as with --overlap off.
#
# Needs $KILN_BIN (ctest sets it), python3 and Debian's fortunes.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_batch_tokens
export KILN_CACHE_DIR=
F=/usr/share/games/fortunes
# --no-autotune: runs that must agree to the bit take the same matmul forms (linear_tune.c) without a shared cache
G=(--model gpt --layers 2 --heads 2 --dim 64 --block 64 --optimizer adamw --lr 3e-3 --no-test --no-autotune --threads 2 --workers 1)

expect 0 "tokenize the fortunes, one document each" -- "$KILN_BIN" tokenize --from "$F/fortunes" "$F/literature" "$F/science" \
    --to "$T/f.tokens" --val-fraction 0.1 --doc-separator % --json
check "more than 1000 documents" "$PY" -c "
import json, sys
r = json.loads(open(sys.argv[1]).read())
assert r['train_docs'] > 1000 and r['val_docs'] > 50, r" "$T/out"
check "an index beside the token file" test -s "$T/f.tokens.docs"

expect 0 "train 60 steps on batches of about 1024 tokens" "batch-tokens 1024" "plans compiled" -- \
    "$KILN_BIN" train "${G[@]}" --data "tokens:$T/f.tokens" --batch-tokens 1024 --max-steps 60 --epochs 100 \
    --log-every 10 --metrics "$T/m.jsonl" --json
check "the loss falls below 3.6 (ln 256 = 5.55), no step allocated" "$PY" - "$T/m.jsonl" "$T/out" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
first, last = rows[0]["loss"], rows[-1]["loss"]
r = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
print("batch-tokens loss %.3f -> %.3f, %s tokens/s, step_allocs %s" % (first, last, r.get("tokens_per_s"), r["step_allocs"]))
assert first > last + 0.5 and last < 3.6, (first, last)
assert r["step_allocs"] == 0 and r["steps"] == 60, r
PYEOF
expect 0 "12 steps, every loss" -- "$KILN_BIN" train "${G[@]}" --data "tokens:$T/f.tokens" --batch-tokens 1024 \
    --max-steps 12 --epochs 100 --log-every 1 --metrics "$T/m1.jsonl"
expect 0 "8 steps, saved" -- "$KILN_BIN" train "${G[@]}" --data "tokens:$T/f.tokens" --batch-tokens 1024 \
    --max-steps 8 --epochs 100 --save "$T/r.safetensors"
expect 0 "resumed to 12" -- "$KILN_BIN" train --resume "$T/r.safetensors" --epochs 100 --max-steps 12 --threads 2 \
    --workers 1 --no-test --log-every 1 --metrics "$T/r.jsonl"
check "the resumed steps' losses are the uninterrupted run's" "$PY" - "$T/m1.jsonl" "$T/r.jsonl" <<'PYEOF'
import json, sys
a, b = ({r["step"]: r["loss"] for r in map(json.loads, open(f)) if r.get("kind") == "step"} for f in sys.argv[1:])
assert sorted(b) == [9, 10, 11, 12] and all(a[s] == b[s] for s in b), (a, b)
PYEOF

"$PY" - "$T/f.tokens" "$T/old.tokens" <<'PYEOF'
import shutil, sys
shutil.copy(sys.argv[1], sys.argv[2])
PYEOF
expect 2 "a token file without a document index" "no document index" "kiln tokenize" -- \
    "$KILN_BIN" train "${G[@]}" --data "tokens:$T/old.tokens" --batch-tokens 1024 --max-steps 1
expect 2 "another model" "--batch-tokens" "gpt" -- "$KILN_BIN" train --model mlp --batch-tokens 1024 --max-steps 1
expect 2 "with --accumulate" "--accumulate" -- \
    "$KILN_BIN" train "${G[@]}" --data "tokens:$T/f.tokens" --batch-tokens 1024 --accumulate 2 --max-steps 1

if ! command -v mpirun >/dev/null; then
    echo "test_batch_tokens: the 2-rank run skipped: mpirun is not installed (Debian: openmpi-bin)"
elif [ ! -e "$(dirname "$KILN_BIN")/libkiln_mpi.so" ]; then
    echo "test_batch_tokens: the 2-rank run skipped: kiln was built without MPI (libkiln_mpi.so)"
else
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" # Open MPI's own allocations are not ours to chase
    G[${#G[@]}-3]=1 # one thread a rank
    expect 0 "2 ranks, 40 steps" "2 ranks" -- mpirun -np 2 "$KILN_BIN" train "${G[@]}" --data "tokens:$T/f.tokens" \
        --batch-tokens 1024 --max-steps 40 --epochs 100 --log-every 10 --metrics "$T/m2.jsonl" --json
    check "2 ranks: the loss falls, no step allocated" "$PY" - "$T/m2.jsonl" "$T/out" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
first, last = rows[0]["loss"], rows[-1]["loss"]
r = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
print("2 ranks: loss %.3f -> %.3f, step_allocs %s" % (first, last, r["step_allocs"]))
assert first > last + 0.3 and r["world_size"] == 2 and r["steps"] == 40 and r["step_allocs"] == 0, (first, last, r)
PYEOF
    # every length bucket's plan starts the buckets inside its own backward: the same losses as all of them
    # started after backward (--overlap off), bit for bit; a bucket started before its last gradient would differ
    expect 0 "2 ranks, --overlap off" "2 ranks" -- mpirun -np 2 "$KILN_BIN" train "${G[@]}" --data "tokens:$T/f.tokens" \
        --batch-tokens 1024 --max-steps 40 --epochs 100 --log-every 10 --metrics "$T/m2off.jsonl" --overlap off --json
    check "2 ranks: overlap on and off give the same losses" "$PY" - "$T/m2.jsonl" "$T/m2off.jsonl" <<'PYEOF'
import json, sys
on, off = ([json.loads(l)["loss"] for l in open(f) if '"loss"' in l] for f in sys.argv[1:3])
assert on == off and len(on) >= 4, (on, off)
print("2 ranks: %d logged losses equal with overlap on and off" % len(on))
PYEOF
fi
harness_finish
