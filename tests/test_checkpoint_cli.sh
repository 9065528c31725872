#!/usr/bin/env bash
# --checkpoint-activations end to end: a small gpt trained 30 steps on the
# fortunes with block, gelu,layernorm and none ends on the same loss to the
# last bit (the --json line's final_loss: 9 digits pin down the float loss), with a
# smaller arena_mb and the same arena_mb_plain; the log names both arenas;
# kiln inspect lists the recomputations (phase recompute); a bad value exits 2
# naming the flag; a run resumed with it ends where the plain run does.
#
# Needs $KILN_BIN (ctest sets it), python3 and Debian's fortunes.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_checkpoint_cli
export KILN_CACHE_DIR=
# runs compared to the bit are separate processes without a shared cache: --no-autotune keeps their matmul forms alike

F=/usr/share/games/fortunes
G=(--model gpt --layers 2 --heads 2 --dim 32 --block 32)
expect 0 "tokenize the fortunes" -- "$KILN_BIN" tokenize --from "$F/fortunes" --to "$T/f.tokens" --json
for ck in none block gelu,layernorm; do
    expect 0 "train with --checkpoint-activations $ck" -- "$KILN_BIN" train "${G[@]}" --data "tokens:$T/f.tokens" \
        --batch-size 4 --optimizer adamw --lr 3e-3 --max-steps 30 --no-test --workers 1 --seed 5 --no-autotune \
        --checkpoint-activations "$ck" --json
    tail -1 "$T/out" >"$T/$ck.json"
    cp "$T/err" "$T/$ck.log"
done
check "the same final loss, a smaller arena, the same plain arena" "$PY" - "$T" <<'PYEOF'
import json, sys
r = {ck: json.load(open(f"{sys.argv[1]}/{ck}.json")) for ck in ("none", "block", "gelu,layernorm")}
for ck in ("block", "gelu,layernorm"):
    print(ck, r[ck]["final_loss"], r["none"]["final_loss"], r[ck]["arena_mb"], r["none"]["arena_mb"])
    assert r[ck]["final_loss"] == r["none"]["final_loss"], ck
    assert r[ck]["arena_mb"] < r["none"]["arena_mb"] and r[ck]["arena_mb_plain"] == r["none"]["arena_mb"], ck
assert r["none"]["arena_mb_plain"] == r["none"]["arena_mb"]
PYEOF
# it changes no result, so a run may be resumed with it (or without)
expect 0 "10 steps plain, saved" -- "$KILN_BIN" train "${G[@]}" --data "tokens:$T/f.tokens" --batch-size 4 \
    --optimizer adamw --lr 3e-3 --max-steps 10 --no-test --workers 1 --seed 5 --no-autotune --save "$T/half.safetensors"
expect 0 "resumed to 30 with --checkpoint-activations block" -- "$KILN_BIN" train --resume "$T/half.safetensors" \
    --max-steps 30 --checkpoint-activations block --workers 1 --json
check "the same final loss as 30 plain steps straight" "$PY" -c "
import json, sys
a = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); b = json.load(open(sys.argv[2]))
assert a['final_loss'] == b['final_loss'] and a['arena_mb'] < b['arena_mb'], (a['final_loss'], b['final_loss'])" \
    "$T/out" "$T/none.json"
check "the log gives both arenas" grep -q "checkpoint-activations block: .* nodes recomputed in backward; arena .* MiB -> .* MiB" "$T/block.log"
expect 0 "inspect" -- "$KILN_BIN" inspect "${G[@]}" --batch-size 2 --autotune off --checkpoint-activations block
check "inspect lists the recomputations" grep -q "^[0-9].*h.1.ln_1:recompute .* recompute " "$T/out"
check "inspect's footer counts them" grep -q "nodes recomputed in backward" "$T/out"
expect 2 "a bad value names the flag" "--checkpoint-activations" "'blocks'" -- "$KILN_BIN" train "${G[@]}" \
    --data "tokens:$T/f.tokens" --checkpoint-activations blocks --max-steps 1
expect 2 "bench step refuses it too" "--checkpoint-activations" -- "$KILN_BIN" bench step --model mlp-deep \
    --checkpoint-activations linear
harness_finish
