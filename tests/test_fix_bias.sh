#!/usr/bin/env bash
# --fix-bias end to end, on mnist-cnn-bn-bias (mnist-cnn-bn with the conv
# biases its batch norms cancel):
#   - without the flag, training warns about conv1.bias and conv2.bias;
#   - with it, the biases are removed: the run is mnist-cnn-bn's, parameter for
#     parameter (the same losses), and its checkpoint has no such tensor, no
#     optimizer state for one, and records the flag for --resume;
#   - that checkpoint loads into mnist-cnn-bn (the model without the biases),
#     into mnist-cnn-bn-bias --fix-bias, and into mnist-cnn-bn-bias itself
#     (each missing bias is zero, which the norm after it makes the same
#     model): the same test loss all three ways;
#   - a checkpoint that holds the biases is refused by --fix-bias (exit 2,
#     naming the bias): its running means were learned with them.
#
# Needs $KILN_BIN (ctest sets it), Fashion-MNIST in /usr/share/datasets and python3.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_fix_bias

small_idx "$T/fm" 2048 1000
B=(--data "$T/fm" --no-autotune --workers 1 --threads 2 --seed 3)
Q=("${B[@]}" --batch-size 32 --max-steps 12 --optimizer sgd --lr 0.05 --momentum 0.9)

# what a safetensors file holds, and one JSON field of the last line of a run's stdout
cat >"$T/st.py" <<'EOF'
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
h = json.loads(b[8:8 + struct.unpack('<Q', b[:8])[0]])
if sys.argv[2] == 'names':
    print(' '.join(sorted(k for k in h if k != '__metadata__')))
else:
    print(json.loads(h['__metadata__']['kiln.settings']).get(sys.argv[3], 'absent'))
EOF
field() { tail -n 1 "$1" | "$PY" -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
absent() { ! grep -q "$@"; }
same() { "$PY" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-6 * max(1, abs(a)))" "$1" "$2"; }

expect 0 "the biases are warned about" "conv1: its bias 'conv1.bias' does nothing" "conv2.bias" "--fix-bias" -- \
    "$KILN" train --model mnist-cnn-bn-bias --max-steps 2 --no-test "${Q[@]}"

expect 0 "--fix-bias removes them" "removed its bias 'conv1.bias'" "removed its bias 'conv2.bias'" -- \
    "$KILN" train --model mnist-cnn-bn-bias --fix-bias --no-test --save "$T/fixed.safetensors" --json "${Q[@]}"
cp "$T/out" "$T/fixed.json"
check "no warning once fixed" absent "does nothing" "$T/err"
names=$("$PY" "$T/st.py" "$T/fixed.safetensors" names)
check "the checkpoint has no conv bias" absent "conv[12].bias" <<<"$names"
check "the checkpoint has the rest" grep -q "conv1.weight.*optim.momentum_buffer.conv2.weight" <<<"$names"
check "the checkpoint records --fix-bias" [ "$("$PY" "$T/st.py" "$T/fixed.safetensors" setting fix-bias)" = true ]

# the same run as the model written without the biases
expect 0 "mnist-cnn-bn, same seed" -- "$KILN" train --model mnist-cnn-bn --no-test --save "$T/plain.safetensors" --json "${Q[@]}"
check "--fix-bias trains as mnist-cnn-bn" same "$(field "$T/fixed.json" final_loss)" "$(field "$T/out" final_loss)"

# the fixed checkpoint in three models: one test loss
E=(--data "$T/fm" --workers 1 --threads 2 --json)
expect 0 "eval: mnist-cnn-bn" -- "$KILN" eval --model mnist-cnn-bn --load "$T/fixed.safetensors" "${E[@]}"
l1=$(field "$T/out" test_loss)
expect 0 "eval: mnist-cnn-bn-bias --fix-bias" -- "$KILN" eval --model mnist-cnn-bn-bias --fix-bias --load "$T/fixed.safetensors" "${E[@]}"
l2=$(field "$T/out" test_loss)
expect 0 "eval: mnist-cnn-bn-bias, biases zero" "has no 'conv1.bias'" -- \
    "$KILN" eval --model mnist-cnn-bn-bias --load "$T/fixed.safetensors" "${E[@]}"
l3=$(field "$T/out" test_loss)
check "one test loss ($l1, $l2, $l3)" same "$l1" "$l2"
check "one test loss ($l1, $l3)" same "$l1" "$l3"

# --resume keeps the flag: the model it rebuilds has no biases either
expect 0 "--resume a --fix-bias run" -- "$KILN" train --resume "$T/fixed.safetensors" --max-steps 14 --quiet

# a file with the biases is refused where they were removed
expect 0 "a run with the biases" -- "$KILN" train --model mnist-cnn-bn-bias --max-steps 2 --no-test --quiet \
    --save "$T/biased.safetensors" "${B[@]}"
expect 2 "--fix-bias refuses a file holding the biases" "conv1.bias" "without --fix-bias" -- \
    "$KILN" eval --model mnist-cnn-bn-bias --fix-bias --load "$T/biased.safetensors" "${E[@]}"
expect 2 "so does --load in training" "conv1.bias" -- \
    "$KILN" train --model mnist-cnn-bn-bias --fix-bias --load "$T/biased.safetensors" --max-steps 1 --no-test --quiet "${B[@]}"

harness_finish
