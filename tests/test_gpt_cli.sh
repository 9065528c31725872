#!/usr/bin/env bash
# The gpt end to end on Debian's fortunes (English text): kiln tokenize holds
# out a val file; 200 training steps of a small GPT make the loss fall well
# below its start (ln 256 = 5.55 for a uniform guess); eval reports test_loss
# on the val file; sample continues a prompt, the same seed giving the same
# text; bad input (a missing file, --heads not dividing --dim, sample without
# --load, a vocabulary too small for the data) exits 2 naming the cause.
#
# Needs $KILN_BIN (ctest sets it), python3 and Debian's fortunes.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_gpt_cli
export KILN_CACHE_DIR=
F=/usr/share/games/fortunes
G=(--model gpt --layers 2 --heads 2 --dim 64 --block 64)

expect 0 "tokenize the fortunes" -- "$KILN_BIN" tokenize --from "$F/fortunes" "$F/literature" "$F/science" \
    --to "$T/f.tokens" --val-fraction 0.1 --json
check "a val file beside it" test -s "$T/f.val.tokens"
expect 2 "tokenize a missing file" "$T/none" -- "$KILN_BIN" tokenize --from "$T/none" --to "$T/x.tokens"
expect 0 "train 200 steps" -- "$KILN_BIN" train "${G[@]}" --data "tokens:$T/f.tokens" --batch-size 8 --optimizer adamw \
    --lr 3e-3 --max-steps 200 --epochs 100 --log-every 20 --metrics "$T/m.jsonl" --no-test --save "$T/g.safetensors" --json
check "the loss falls by 0.5 and below 3.2 (ln 256 = 5.55 at the start)" "$PY" - "$T/m.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
first, last = rows[0]["loss"], rows[-1]["loss"]
print("gpt loss %.3f -> %.3f over %d lines" % (first, last, len(rows)))
assert first > last + 0.5 and last < 3.2, (first, last)
PYEOF
expect 0 "eval on the val file" -- "$KILN_BIN" eval "${G[@]}" --data "tokens:$T/f.tokens" --load "$T/g.safetensors" --json
check "eval reports a test_loss below 3.4" "$PY" -c "
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert r['test_loss'] < 3.4, r" "$T/out"
expect 0 "sample" -- "$KILN_BIN" sample "${G[@]}" --load "$T/g.safetensors" --prompt "The " --tokens 60 --seed 3
cp "$T/out" "$T/s1"
expect 0 "sample again, same seed" -- "$KILN_BIN" sample "${G[@]}" --load "$T/g.safetensors" --prompt "The " --tokens 60 --seed 3
check "the same text" cmp -s "$T/out" "$T/s1"
check "it starts with the prompt and goes on" "$PY" -c "
import sys
t = open(sys.argv[1], 'rb').read()
assert t.startswith(b'The ') and len(t) >= 60, t" "$T/out"
expect 2 "--heads not dividing --dim" "--heads 3" -- "$KILN_BIN" train --model gpt --heads 3 --dim 64 \
    --data "tokens:$T/f.tokens" --max-steps 1
expect 2 "sample without --load" "--load" -- "$KILN_BIN" sample "${G[@]}"
expect 2 "a vocabulary smaller than the data's bytes" "outputs" -- "$KILN_BIN" train "${G[@]}" --vocab 64 \
    --data "tokens:$T/f.tokens" --max-steps 1
harness_finish
