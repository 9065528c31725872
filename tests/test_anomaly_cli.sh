#!/bin/bash
# kiln train --detect-anomaly and kiln gradcheck from the command line: a NaN
# planted in a node at a step (KILN_TEST_ANOMALY=NODE@STEP, a test-only hook
# read only when detection is on) stops the run at that step naming the node,
# its phase and that its inputs were finite, exit 1 (a numeric failure, as a
# diverging loss); a clean run says detection is on and what it cost; gradcheck
# prints a table or JSON and exits 0, 2 on bad usage.
. "$(dirname "$0")/harness.sh"
harness_init test_anomaly_cli
RUN=(--model mnist-cnn --data "$DATA" --batch-size 16 --no-test --workers 0 --threads 2 --no-autotune)

KILN_TEST_ANOMALY=conv2@3 expect 1 "a NaN planted in conv2 at step 3" "step 3 (epoch 1, batch 2)" \
    "node 'conv2' (conv2d, forward)" "NaN at element 0" "all inputs finite: the op produced it" \
    -- "$KILN" train "${RUN[@]}" --max-steps 5 --detect-anomaly --save "$T/never.safetensors"
check "no checkpoint after the anomaly" test ! -e "$T/never.safetensors"
KILN_TEST_ANOMALY=fc1:bwd_weight@2 expect 1 "a NaN planted in fc1's weight gradient at step 2" "step 2 (epoch 1, batch 1)" \
    "node 'fc1:bwd_weight' (linear_bwd_weight, backward)" "all inputs finite" \
    -- "$KILN" train "${RUN[@]}" --max-steps 5 --detect-anomaly
KILN_TEST_ANOMALY=conv2@3 expect 0 "the hook does nothing without --detect-anomaly" \
    -- "$KILN" train "${RUN[@]}" --max-steps 4
expect 0 "a clean run says it is on and what it cost" "--detect-anomaly: every step's outputs are checked" \
    "--detect-anomaly: no NaN/Inf in 3 steps; the checks took" "on top of the" \
    -- "$KILN" train "${RUN[@]}" --max-steps 3 --detect-anomaly

expect 0 "gradcheck mlp" -- "$KILN" gradcheck --model mlp --samples 2
"$KILN" gradcheck --model gpt --samples 1 --json > "$T/gc.json" 2>/dev/null
check "gradcheck --json: every tensor of the gpt, all passed" $PY -c "
import json, sys
d = json.load(open('$T/gc.json'))
assert d['passed'] and d['failed'] == 0 and d['batch'] == 2 and d['samples'] == 1, d
assert len(d['tensors']) == 16 and all(t['passed'] and t['checked'] == 1 for t in d['tensors']), d['tensors']
assert any(t['name'] == 'wte.weight' for t in d['tensors'])
"
expect 1 "gradcheck at a tolerance nothing meets fails" -- "$KILN" gradcheck --model mlp --samples 1 --tol 1e-30
expect 2 "gradcheck of an unknown model" "nosuch" -- "$KILN" gradcheck --model nosuch
expect 2 "gradcheck with a bad --eps" "--eps" -- "$KILN" gradcheck --model mlp --eps -1
harness_finish
