#!/usr/bin/env bash
# kiln plot from the command line: metrics files of real runs (kiln train
# --metrics) drawn as PNG (decoded by python3's zlib: the size asked for, the
# whole image there) and SVG (parsed as XML: one stroke colour per run, each
# in every panel), several runs on one picture, and bad input refused with
# exit 2 naming the file and line.
. "$(dirname "$0")/harness.sh"
harness_init test_plot_cli
Q=(--quiet --workers 1)

SMALL="$T/small"
small_idx "$SMALL" 256 100
for r in a b c; do
    opt=(); [ $r = b ] && opt=(--optimizer adamw --lr 1e-3); [ $r = c ] && opt=(--optimizer sgd --lr 0.05)
    "$KILN" train --model mlp --data "$SMALL" --epochs 2 --batch-size 32 --log-every 2 --metrics "$T/$r.jsonl" \
        "${opt[@]}" "${Q[@]}" || bad "training run $r failed"
done

# PNG: the IHDR's size, 8-bit RGB, and IDAT inflating to exactly one filter byte plus 3 bytes per pixel per row
cat >"$T/png.py" <<'PYEOF'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
i, idat, ihdr = 8, b"", None
while i < len(data):
    n, kind = struct.unpack(">I4s", data[i:i + 8])
    body = data[i + 8:i + 8 + n]
    assert struct.unpack(">I", data[i + 8 + n:i + 12 + n])[0] == zlib.crc32(kind + body), f"{kind} CRC"
    if kind == b"IHDR": ihdr = struct.unpack(">IIBBBBB", body)
    if kind == b"IDAT": idat += body
    i += 12 + n
w, h, depth, colour = ihdr[:4]
assert (w, h) == (int(sys.argv[2]), int(sys.argv[3])), (w, h)
assert depth == 8 and colour in (2, 6), (depth, colour)
raw = zlib.decompress(idat)
assert len(raw) == h * (1 + w * (3 if colour == 2 else 4)), len(raw)
PYEOF

# SVG: XML; the distinct non-grey stroke colours are the runs, each stroked in the legend and every panel (5 or more)
cat >"$T/svg.py" <<'PYEOF'
import collections, re, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
assert root.get("viewBox") == f"0 0 {sys.argv[3]} {sys.argv[4]}", root.get("viewBox")
strokes = collections.Counter()
for e in root.iter():
    m = re.search(r"stroke:rgb\(([^)]*)\)", e.get("style", ""))
    if m:
        r, g, b = (float(x.rstrip("%")) for x in m.group(1).split(","))
        if not (r == g == b): strokes[(r, g, b)] += 1
assert len(strokes) == int(sys.argv[2]), strokes
assert all(n >= 5 for n in strokes.values()), strokes
PYEOF

expect 0 "one run as PNG (default size)" "1 run drawn to $T/one.png" -- "$KILN" plot "$T/a.jsonl" --out "$T/one.png"
check "the PNG decodes at 1200 x 800" "$PY" "$T/png.py" "$T/one.png" 1200 800
expect 0 "three runs as PNG, --width/--height" -- "$KILN" plot "$T/a.jsonl" "$T/b.jsonl" "$T/c.jsonl" --out "$T/three.png" \
    --width 900 --height=500
check "the three-run PNG decodes at 900 x 500" "$PY" "$T/png.py" "$T/three.png" 900 500
check "the PNG check fails on a wrong size" bash -c "! '$PY' '$T/png.py' '$T/three.png' 900 501 2>/dev/null"
expect 0 "one run as SVG" -- "$KILN" plot "$T/a.jsonl" --out "$T/one.svg"
check "the one-run SVG: one run colour" "$PY" "$T/svg.py" "$T/one.svg" 1 1200 800
expect 0 "three runs as SVG" -- "$KILN" plot --out "$T/three.svg" "$T/a.jsonl" "$T/b.jsonl" "$T/c.jsonl" --width 1000
check "the three-run SVG: three run colours" "$PY" "$T/svg.py" "$T/three.svg" 3 1000 800

# a resumed run's metrics (appended) plot too
"$KILN" train --model mlp --data "$SMALL" --epochs 1 --batch-size 32 --metrics "$T/r.jsonl" --save "$T/r.safetensors" "${Q[@]}"
"$KILN" train --resume "$T/r.safetensors" --epochs 2 --metrics "$T/r.jsonl" "${Q[@]}"
expect 0 "a resumed run's appended metrics" -- "$KILN" plot "$T/r.jsonl" --out "$T/r.svg"

# bad input: exit 2 naming file:line; no picture written
head -n 3 "$T/a.jsonl" >"$T/cut.jsonl"
head -c 40 "$T/b.jsonl" | tail -n 1 >>"$T/cut.jsonl"
expect 2 "a cut last line" "$T/cut.jsonl:4:" "cut short" -- "$KILN" plot "$T/a.jsonl" "$T/cut.jsonl" --out "$T/bad.png"
check "no picture after a bad input" test ! -e "$T/bad.png"
{ head -n 2 "$T/a.jsonl"; echo '{"kind":"step","step":9,"loss":"high"}'; } >"$T/str.jsonl"
expect 2 "a number field holding a string" "$T/str.jsonl:3:" '"loss" is not a number' -- \
    "$KILN" plot "$T/str.jsonl" --out "$T/bad.svg"
printf 'not json\n' >"$T/text.jsonl"
expect 2 "a text file" "$T/text.jsonl:1: not JSON" -- "$KILN" plot "$T/text.jsonl" --out "$T/bad.svg"
: >"$T/empty.jsonl"
expect 2 "an empty file" "$T/empty.jsonl: no step or epoch lines" -- "$KILN" plot "$T/empty.jsonl" --out "$T/bad.svg"
expect 2 "a missing file" "$T/none.jsonl" -- "$KILN" plot "$T/none.jsonl" --out "$T/bad.svg"
mkfifo "$T/m.fifo"
expect 2 "a FIFO" "$T/m.fifo" "a FIFO" -- "$KILN" plot "$T/m.fifo" --out "$T/bad.svg"
expect 2 "an output that is neither .png nor .svg" "--out $T/curves.pdf" ".png or .svg" -- \
    "$KILN" plot "$T/a.jsonl" --out "$T/curves.pdf"
expect 2 "no --out" "--out FILE.png|FILE.svg is required" -- "$KILN" plot "$T/a.jsonl"
expect 2 "no metrics file" "name 1 to 64 metrics files" -- "$KILN" plot --out "$T/x.png"
expect 2 "--width out of range" "--width" -- "$KILN" plot "$T/a.jsonl" --out "$T/x.png" --width 50
expect 2 "a misspelt option" "did you mean --height" -- "$KILN" plot "$T/a.jsonl" --out "$T/x.png" --heigth 300
expect 2 "an output folder that is missing" "$T/nodir/x.png" -- "$KILN" plot "$T/a.jsonl" --out "$T/nodir/x.png"
harness_finish
