#!/usr/bin/env bash
# Hostile input, one case per finding of the red-team pass (issue 6): special
# files where regular ones belong, corrupt or out-of-range checkpoint
# metadata, resuming onto other data, gzip trailers cut or followed by
# garbage, headers claiming more data than a file holds, runs that would train
# nothing, NaN in loaded tensors, a file-size limit during a save, save
# temporaries left by killed runs, and flags validated alike in every command.
# Every hostile file is made here, by this script. Each case must exit 2 (130
# for a signal) with a message naming the file or flag, never hang, crash or
# touch an existing checkpoint.
#
# Needs $KILN_BIN (ctest sets it), Fashion-MNIST in /usr/share/datasets, python3.
set -u

. "$(dirname "$0")/harness.sh"
harness_init test_hostile
EXPECT_TIMEOUT=60 # every case is quick: longer is a hang

Q=(--quiet --no-autotune --workers 1 --no-test)

# ---------- the script that makes the hostile files ----------
cat >"$T/make.py" <<'EOF'
import gzip, json, struct, sys

def read_st(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    d = b[8 + n:]
    meta = h.pop('__metadata__', {})
    return {k: (v['dtype'], v['shape'], d[v['data_offsets'][0]:v['data_offsets'][1]]) for k, v in h.items()}, meta

def write_st(path, ts, meta):
    h, off, blobs = {'__metadata__': meta}, 0, []
    for k, (dt, shape, raw) in ts.items():
        h[k] = {'dtype': dt, 'shape': shape, 'data_offsets': [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    hb = json.dumps(h).encode()
    hb += b' ' * (-len(hb) % 8)
    open(path, 'wb').write(struct.pack('<Q', len(hb)) + hb + b''.join(blobs))

mode = sys.argv[1]
if mode == 'meta':          # meta SRC DST KEY VALUE|-: one metadata entry set (- removes it)
    ts, meta = read_st(sys.argv[2])
    if sys.argv[5] == '-':
        meta.pop(sys.argv[4], None)
    else:
        meta[sys.argv[4]] = sys.argv[5]
    write_st(sys.argv[3], ts, meta)
elif mode == 'value':       # value SRC DST TENSOR FLOAT: element 0 of an F32 tensor set
    ts, meta = read_st(sys.argv[2])
    dt, shape, raw = ts[sys.argv[4]]
    ts[sys.argv[4]] = (dt, shape, struct.pack('<f', float(sys.argv[5])) + raw[4:])
    write_st(sys.argv[3], ts, meta)
elif mode == 'f64':         # f64 SRC DST TENSOR: the tensor as F64, element 0 beyond float's range
    ts, meta = read_st(sys.argv[2])
    dt, shape, raw = ts[sys.argv[4]]
    vals = list(struct.unpack('<%df' % (len(raw) // 4), raw))
    vals[0] = 1e300
    ts[sys.argv[4]] = ('F64', shape, struct.pack('<%dd' % len(vals), *vals))
    write_st(sys.argv[3], ts, meta)
elif mode == 'idx':         # idx SRC_DIR DST_DIR N_TRAIN N_TEST: the first samples, plain IDX
    src, dst, ntr, nte = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    for split, n in (('train', ntr), ('t10k', nte)):
        img = gzip.open(f'{src}/{split}-images-idx3-ubyte.gz').read()
        lab = gzip.open(f'{src}/{split}-labels-idx1-ubyte.gz').read()
        open(f'{dst}/{split}-images-idx3-ubyte', 'wb').write(struct.pack('>IIII', 0x803, n, 28, 28) + img[16:16 + n * 784])
        open(f'{dst}/{split}-labels-idx1-ubyte', 'wb').write(struct.pack('>II', 0x801, n) + lab[8:8 + n])
elif mode == 'gzcut':       # gzcut SRC DST K: a gzip file with its last K bytes (trailer) cut
    b = open(sys.argv[2], 'rb').read()
    open(sys.argv[3], 'wb').write(b[:-int(sys.argv[4])])
elif mode == 'gzjunk':      # gzjunk SRC DST: garbage after the gzip member
    open(sys.argv[3], 'wb').write(open(sys.argv[2], 'rb').read() + b'this is not gzip')
elif mode == 'gzcrc':       # gzcrc SRC DST: the member's CRC32 flipped
    b = bytearray(open(sys.argv[2], 'rb').read())
    b[-8] ^= 0xff
    open(sys.argv[3], 'wb').write(bytes(b))
elif mode == 'bigheader':   # bigheader DST GZ: an image header claiming 60000x28x28 over a few bytes of data
    raw = struct.pack('>IIII', 0x803, 60000, 28, 28) + b'\x01' * 100
    open(sys.argv[2], 'wb').write(gzip.compress(raw) if sys.argv[3] == '1' else raw)
else:
    sys.exit('unknown mode ' + mode)
EOF
mk() { "$PY" "$T/make.py" "$@" || bad "make.py $*"; }

# a dataset folder sharing the real files by links, with one replaced
mkdata() {
    mkdir -p "$1"
    local f
    for f in "$DATA"/*; do ln -s "$f" "$1/"; done
}

# ---------- special files where regular ones belong: refused at once ----------
mkdata "$T/fifo"
rm "$T/fifo/train-labels-idx1-ubyte.gz"
mkfifo "$T/fifo/train-labels-idx1-ubyte.gz"
expect 2 "a FIFO as an IDX file" "train-labels-idx1-ubyte.gz" "not a regular file (a FIFO)" -- \
    "$KILN" train --model mlp --data "$T/fifo" "${Q[@]}"
mkfifo "$T/ck.fifo"
expect 2 "a FIFO as --load" "$T/ck.fifo" "a FIFO" -- "$KILN" train --model mlp --load "$T/ck.fifo" "${Q[@]}"
expect 2 "a FIFO as --resume" "$T/ck.fifo" "a FIFO" -- "$KILN" train --model mlp --resume "$T/ck.fifo" "${Q[@]}"
expect 2 "a FIFO as eval --load" "$T/ck.fifo" "a FIFO" -- "$KILN" eval --model mlp --load "$T/ck.fifo"
expect 2 "a FIFO as --metrics" "$T/ck.fifo" "a FIFO" -- \
    "$KILN" train --model mlp --max-steps 1 --metrics "$T/ck.fifo" "${Q[@]}"
expect 2 "a folder as --resume" "$T" "a folder" -- "$KILN" train --model mlp --resume "$T" "${Q[@]}"
mkdir -p "$T/cache"
mkfifo "$T/cache/autotune-v4.txt"
expect 0 "a FIFO as the autotune cache: ignored with a warning" "autotune cache" "a FIFO" -- \
    env KILN_CACHE_DIR="$T/cache" "$KILN" train --model mnist-cnn --max-steps 1 --no-test --workers 1

# a signal while starting (loading data, compiling) ends the run before its first step: exit 130, nothing saved
"$KILN" train --model mnist-cnn --max-steps 50 --no-test --workers 1 --save "$T/early.safetensors" >"$T/out" 2>"$T/err" &
pid=$!
for _ in $(seq 1 400); do grep -q "thread budget" "$T/err" 2>/dev/null && break; sleep 0.01; done
kill -TERM $pid
wait $pid
rc=$?
check "SIGTERM while starting: exit 130 (got $rc)" test "$rc" -eq 130
check "SIGTERM while starting: it says so" grep -q "interrupted before the first step" "$T/err"
check "SIGTERM while starting: no checkpoint" test ! -e "$T/early.safetensors"

# ---------- checkpoints whose metadata lies ----------
C="$T/c.safetensors"
expect 0 "a good mlp checkpoint at step 4" -- "$KILN" train --model mlp --max-steps 4 --save "$C" "${Q[@]}"
cp "$C" "$T/c.orig"
S="$T/save.safetensors"
cp "$C" "$S"
while IFS='|' read -r key value needle; do
    mk meta "$C" "$T/m.safetensors" "$key" "$value"
    expect 2 "metadata $key=$value" "$T/m.safetensors" "$needle" -- \
        "$KILN" train --resume "$T/m.safetensors" --max-steps 6 --save "$S" "${Q[@]}"
    check "metadata $key=$value: the --save target is untouched" cmp -s "$S" "$T/c.orig"
done <<'CASES'
kiln.format|not-kiln|not-kiln
kiln.step|-5|kiln.step
kiln.step|99999999999999999999|kiln.step
kiln.step|7|does not match
kiln.epoch|1000000000000|does not match epoch
kiln.epoch|-1|kiln.epoch
kiln.next_batch|-3|kiln.next_batch
kiln.next_batch|5000|batch 5000
kiln.optim_steps|-2|kiln.optim_steps
kiln.optim_steps|9|kiln.optim_steps
kiln.seed|-1|kiln.seed
kiln.batch_size|0|kiln.batch_size
kiln.accumulate|0|kiln.accumulate
kiln.lr|nan|kiln.lr
kiln.lr|-1|kiln.lr
kiln.lr|-|kiln.lr
CASES
mk value "$C" "$T/neg.safetensors" optim.square_avg.fc1.weight -0.5
expect 2 "a negative Adadelta square average" "optim.square_avg.fc1.weight" "cannot be negative" -- \
    "$KILN" train --resume "$T/neg.safetensors" --max-steps 6 "${Q[@]}"
mk value "$C" "$T/nan.safetensors" fc1.weight nan
expect 2 "NaN in a loaded weight is bad input" "fc1.weight" "NaN" -- "$KILN" eval --model mlp --load "$T/nan.safetensors"
expect 2 "NaN in a resumed weight" "fc1.weight" "NaN" -- "$KILN" train --resume "$T/nan.safetensors" --max-steps 6 "${Q[@]}"
mk value "$C" "$T/nanstate.safetensors" optim.acc_delta.fc2.bias inf
expect 2 "Inf in optimizer state" "optim.acc_delta.fc2.bias" -- \
    "$KILN" train --resume "$T/nanstate.safetensors" --max-steps 6 "${Q[@]}"
mk f64 "$C" "$T/f64.safetensors" fc2.bias
expect 2 "an f64 value beyond float's range" "fc2.bias" "beyond the range of f32" -- \
    "$KILN" eval --model mlp --load "$T/f64.safetensors"

# ---------- a run that would train nothing never reports success or overwrites ----------
expect 2 "--max-steps at the saved step" "nothing to train" "$C" -- \
    "$KILN" train --resume "$C" --max-steps 4 --save "$S" "${Q[@]}"
check "nothing to train: the --save target is untouched" cmp -s "$S" "$T/c.orig"
expect 2 "--max-steps below the saved step" "nothing to train" -- "$KILN" train --resume "$C" --max-steps 2 --save "$S" "${Q[@]}"
# resuming onto other data in the same folder: the saved batch lies past the end of its epochs
mkdir -p "$T/shrinks"
mk idx "$DATA" "$T/shrinks" 3000 100
D="$T/d.safetensors"
expect 0 "a run on a folder, saved at step 10" -- "$KILN" train --model mlp --data "$T/shrinks" --max-steps 10 --save "$D" "${Q[@]}"
cp "$D" "$T/d.orig"
mk idx "$DATA" "$T/shrinks" 128 100
expect 2 "resuming after the data shrank" "$D" "gives 2 batches of 64 per epoch" -- \
    "$KILN" train --resume "$D" --max-steps 20 --save "$D" "${Q[@]}"
check "other data: the checkpoint is untouched" cmp -s "$D" "$T/d.orig"

# ---------- IDX files ----------
mkdata "$T/gzcut"
rm "$T/gzcut/train-labels-idx1-ubyte.gz"
mk gzcut "$DATA/train-labels-idx1-ubyte.gz" "$T/gzcut/train-labels-idx1-ubyte.gz" 8
expect 2 "gzip with its trailer cut off" "train-labels-idx1-ubyte.gz" "truncated gzip data" -- \
    "$KILN" train --model mlp --data "$T/gzcut" "${Q[@]}"
mkdata "$T/gzjunk"
rm "$T/gzjunk/train-labels-idx1-ubyte.gz"
mk gzjunk "$DATA/train-labels-idx1-ubyte.gz" "$T/gzjunk/train-labels-idx1-ubyte.gz"
expect 2 "garbage after the gzip member" "train-labels-idx1-ubyte.gz" "garbage after the gzip data" -- \
    "$KILN" train --model mlp --data "$T/gzjunk" "${Q[@]}"
mkdata "$T/gzcrc"
rm "$T/gzcrc/train-labels-idx1-ubyte.gz"
mk gzcrc "$DATA/train-labels-idx1-ubyte.gz" "$T/gzcrc/train-labels-idx1-ubyte.gz"
expect 2 "a wrong gzip checksum" "train-labels-idx1-ubyte.gz" "corrupt gzip data" -- \
    "$KILN" train --model mlp --data "$T/gzcrc" "${Q[@]}"
for gz in 0 1; do
    mkdata "$T/big$gz"
    rm "$T/big$gz/train-images-idx3-ubyte.gz"
    name="train-images-idx3-ubyte"
    [ $gz -eq 1 ] && name="$name.gz"
    mk bigheader "$T/big$gz/$name" $gz
    # refused before allocating: 47 MB would not fit under this limit on top of the program
    # (not under ASan, whose shadow memory needs terabytes of address space: there only the message is checked)
    limit="ulimit -v 1500000;"
    [ "${KILN_SANITIZE:-0}" = 1 ] && limit=""
    expect 2 "a header claiming more than the file holds (gzip $gz)" "$name" -- \
        bash -c "$limit exec \"$KILN\" train --model mlp --data \"$T/big$gz\" --quiet --no-autotune --workers 0 --no-test --threads 1"
done

# ---------- flags: validated alike in every command, before any work ----------
expect 2 "--lr-step-size 0" "--lr-step-size" -- "$KILN" train --model mlp --lr-step-size 0 "${Q[@]}"
expect 2 "--lr-step-size -2" "--lr-step-size" -- "$KILN" train --model mlp --lr-step-size -2 "${Q[@]}"
expect 2 "--momentum -5" "--momentum" -- "$KILN" train --model mlp --optimizer sgd --momentum -5 "${Q[@]}"
expect 2 "--test-batch-size 1e12, before training" "--test-batch-size" -- \
    "$KILN" train --model mlp --test-batch-size 1000000000000 --workers 1 --no-autotune
check "--test-batch-size 1e12: no step ran" bash -c "! grep -q 'kiln: step' '$T/err'"
expect 2 "eval --threads 100000" "--threads" -- "$KILN" eval --model mlp --load "$C" --threads 100000
expect 2 "eval --threads -3" "--threads" -- "$KILN" eval --model mlp --load "$C" --threads -3
expect 2 "eval --workers 99999999999" "--workers" -- "$KILN" eval --model mlp --load "$C" --workers 99999999999
expect 2 "eval --batch-size 0" "--batch-size" -- "$KILN" eval --model mlp --load "$C" --batch-size 0

# ---------- writing checkpoints ----------
# a file-size limit during a save: an error (exit 2) naming it, no temporary left
mkdir -p "$T/limit"
expect 2 "ulimit -f during a save" "$T/limit/x.safetensors" "file-size limit" -- \
    bash -c "ulimit -f 64; exec \"$KILN\" train --model mlp --max-steps 2 --quiet --no-autotune --workers 1 --no-test --save \"$T/limit/x.safetensors\""
check "ulimit -f: no temporary file left" bash -c "! ls '$T/limit' | grep -q tmp"
check "ulimit -f: no checkpoint" test ! -e "$T/limit/x.safetensors"
# temporaries of saves killed mid-write are removed by the next save to the same file; a live process's stays
mkdir -p "$T/stale"
X="$T/stale/run.safetensors"
sleep 60 &
live=$!
dead=$(bash -c 'echo $$')
head -c 1000 /dev/urandom >"$X.tmp.$dead"
head -c 1000 /dev/urandom >"$X.tmp.$live"
head -c 1000 /dev/urandom >"$X.other.$dead"
expect 0 "a save next to stale temporaries" -- "$KILN" train --model mlp --max-steps 1 --save "$X" "${Q[@]}"
check "the dead process's temporary is removed" test ! -e "$X.tmp.$dead"
check "the live process's temporary stays" test -e "$X.tmp.$live"
check "other files stay" test -e "$X.other.$dead"
kill $live 2>/dev/null
# SIGKILL during saves: never a half-written checkpoint; the old file or the new one
K="$T/kill.safetensors"
"$KILN" train --model mlp --max-steps 1 --save "$K" "${Q[@]}" >/dev/null 2>&1
for i in 1 2 3 4 5; do
    "$KILN" train --model mlp --max-steps 400 --save-every 1 --save "$K" "${Q[@]}" >/dev/null 2>&1 &
    p=$!
    sleep 0.$((3 + i))
    kill -KILL $p 2>/dev/null
    wait $p 2>/dev/null
    expect 0 "after SIGKILL $i the checkpoint loads" -- "$KILN" eval --model mlp --load "$K"
done
"$KILN" train --model mlp --max-steps 1 --save "$K" "${Q[@]}" >/dev/null 2>&1
check "after the kills and one more save, no temporary is left" bash -c "! ls '$T' | grep -q 'kill.safetensors.tmp'"

harness_finish
