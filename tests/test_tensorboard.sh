#!/usr/bin/env bash
# kiln train --tensorboard DIR: the event file read back by a reader written
# here (TFRecord framing and the protobuf wire format by hand, so the test
# needs no TensorFlow): every record's two CRC-32Cs, the file_version event
# first, and the scalars equal to the metrics file's (same tags, steps and
# values to float precision). A resumed run adds a second event file; bad
# folders are refused (exit 2) naming the folder.
. "$(dirname "$0")/harness.sh"
harness_init test_tensorboard
Q=(--quiet --workers 1)

SMALL="$T/small"
small_idx "$SMALL" 320 100

# the reader: prints nothing and exits 0 when the event files in DIR hold exactly the metrics file's scalars
cat >"$T/check.py" <<'PYEOF'
import glob, json, math, os, struct, sys

def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 & -(c & 1))
    return c ^ 0xFFFFFFFF

def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

def varint(b, i):
    v = s = 0
    while True:
        x = b[i]; i += 1
        v |= (x & 0x7F) << s; s += 7
        if x < 0x80: return v, i

def fields(b):
    """(field number, wire type, value) of one protobuf message"""
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        f, w = key >> 3, key & 7
        if w == 0: v, i = varint(b, i)
        elif w == 1: v = b[i:i + 8]; i += 8
        elif w == 5: v = b[i:i + 4]; i += 4
        elif w == 2:
            n, i = varint(b, i); v = b[i:i + n]; i += n
            assert len(v) == n, "a length-delimited field runs past its message"
        else: raise AssertionError(f"wire type {w}")
        yield f, w, v
    assert i == len(b), "a field runs past its message"

def records(path):
    data = open(path, "rb").read()
    i = 0
    while i < len(data):
        head = data[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        (hc,) = struct.unpack("<I", data[i + 8:i + 12])
        assert hc == masked(head), f"{path}: the length's CRC at byte {i}"
        body = data[i + 12:i + 12 + n]
        (dc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        assert len(body) == n and dc == masked(body), f"{path}: the data's CRC at byte {i}"
        i += 16 + n
        yield body

def events(path):
    for k, body in enumerate(records(path)):
        ev = {"scalars": {}}
        for f, w, v in fields(body):
            if f == 1: assert w == 1; ev["wall_time"] = struct.unpack("<d", v)[0]
            elif f == 2: assert w == 0; ev["step"] = v
            elif f == 3: assert w == 2; ev["file_version"] = v.decode()
            elif f == 5:
                for sf, sw, value in fields(v):
                    assert sf == 1 and sw == 2
                    tag = val = None
                    for vf, vw, x in fields(value):
                        if vf == 1: tag = x.decode()
                        elif vf == 2: assert vw == 5; val = struct.unpack("<f", x)[0]
                    assert tag is not None and val is not None, value
                    ev["scalars"][tag] = val
        assert ev["wall_time"] > 1.6e9, ev
        yield k, ev

metrics, tbdir, nfiles = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = sorted(glob.glob(os.path.join(tbdir, "events.out.tfevents.*")))
assert len(files) == nfiles, files
if metrics == "-":  # the framing and CRCs only
    sys.exit(sum(1 for f in files for _ in records(f)) == 0)
want = []
tags = {"step": {"loss": "train/loss", "lr": "train/lr", "images_per_s": "train/images_per_s",
                 "data_wait": "train/data_wait", "time_s": "train/time_s"},
        "epoch": {"train_loss": "epoch/train_loss", "lr": "epoch/lr", "images_per_s": "epoch/images_per_s",
                  "data_wait": "epoch/data_wait", "time_s": "epoch/time_s", "test_loss": "test/loss",
                  "test_accuracy": "test/accuracy"}}
for line in open(metrics):
    r = json.loads(line)
    known = {"kind", "step", "epoch"} | set(tags[r["kind"]])
    assert set(r) <= known, f"a metrics field the event file does not carry: {set(r) - known}"
    want.append((r["step"], {tags[r["kind"]][k]: v for k, v in r.items() if k in tags[r["kind"]] and v is not None}))
got = []
for path in files:
    for k, ev in events(path):
        if k == 0:
            assert ev.get("file_version") == "brain.Event:2" and not ev["scalars"], f"{path}: first event {ev}"
        else:
            assert "file_version" not in ev, ev
            got.append((ev["step"], ev["scalars"]))
assert len(got) == len(want), (len(got), len(want))
for (gs, gv), (ws, wv) in zip(got, want):
    assert gs == ws and set(gv) == set(wv), ((gs, sorted(gv)), (ws, sorted(wv)))
    for tag in wv:
        f32 = struct.unpack("<f", struct.pack("<f", wv[tag]))[0]
        assert math.isclose(gv[tag], f32, rel_tol=1e-6, abs_tol=1e-30), (gs, tag, gv[tag], wv[tag])
assert any("test/accuracy" in v for _, v in got) and any("train/loss" in v for _, v in got)
PYEOF

expect 0 "three epochs with --metrics and --tensorboard" "tensorboard: writing $T/tb/events.out.tfevents." -- \
    "$KILN" train --model mlp --data "$SMALL" --epochs 2 --eval-every 1 --log-every 3 --metrics "$T/m.jsonl" \
    --tensorboard "$T/tb" --workers 1 --save "$T/run.safetensors"
check "the event file holds the metrics file's scalars, CRCs right" "$PY" "$T/check.py" "$T/m.jsonl" "$T/tb" 1
check "step and epoch lines both there" bash -c "grep -q '\"kind\":\"epoch\"' '$T/m.jsonl' && grep -q '\"kind\":\"step\"' '$T/m.jsonl'"

# a resumed run appends to the metrics file and starts a second event file: together they still agree
expect 0 "resumed for a third epoch" -- "$KILN" train --resume "$T/run.safetensors" --epochs 3 --metrics "$T/m.jsonl" \
    --tensorboard "$T/tb" "${Q[@]}"
check "after resume: two event files, the scalars of the whole metrics file" "$PY" "$T/check.py" "$T/m.jsonl" "$T/tb" 2

# --tensorboard alone (no metrics file)
expect 0 "--tensorboard without --metrics" -- "$KILN" train --model mlp --data "$SMALL" --max-steps 4 --log-every 2 \
    --no-test --tensorboard "$T/tb2" "${Q[@]}"
check "an event file without a metrics file" bash -c "ls '$T'/tb2/events.out.tfevents.* >/dev/null"

# a checksum that a flipped byte breaks: the reader must notice (a test that cannot fail is a defect)
mkdir -p "$T/tb3" && cp "$(ls "$T"/tb2/events.out.tfevents.* | head -n 1)" "$T/tb3/events.out.tfevents.0.x"
check "the copy's records and CRCs are right" "$PY" "$T/check.py" - "$T/tb3" 1
"$PY" -c "import sys; p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[-30] ^= 1; open(p, 'wb').write(b)" \
    "$T/tb3/events.out.tfevents.0.x"
check "a flipped bit fails the reader's CRC check" bash -c "! '$PY' '$T/check.py' - '$T/tb3' 1 2>/dev/null"

: >"$T/notdir"
expect 2 "--tensorboard naming a file" "--tensorboard $T/notdir" "not a folder" -- \
    "$KILN" train --model mlp --data "$SMALL" --max-steps 1 --no-test --tensorboard "$T/notdir" "${Q[@]}"
expect 2 "--tensorboard under a missing folder" "--tensorboard $T/nodir/tb" "cannot create" -- \
    "$KILN" train --model mlp --data "$SMALL" --max-steps 1 --no-test --tensorboard "$T/nodir/tb" "${Q[@]}"
harness_finish
