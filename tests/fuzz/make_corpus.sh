#!/usr/bin/env bash
# Makes the committed seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/)
# and their dictionaries (tests/fuzz/<target>.dict):
#
#   safetensors  small safetensors files of every dtype, empty and 0-d tensors,
#                a PyTorch-style file without metadata, the small PyTorch
#                fixtures, and a kiln checkpoint's metadata over small tensors
#   checkpoint   the headers of real mlp checkpoints (adadelta, adamw, sgd with
#                and without momentum, accumulation, clipping) and of a
#                mnist-cnn one (with its autotune decisions), and the hostile
#                metadata of tests/test_hostile.sh
#   idx          image + label file pairs from Fashion-MNIST's first samples,
#                plain and gzip (one member, two members), other sizes
#   options      command lines ("name=value" lines) and saved settings (JSON)
#   image        the JPEG and PNG fixtures of tests/ref/fixtures/images (PIL's),
#                each behind a flags byte (channels, DCT scale, crop, cropped decoding)
#   http         header blocks of answers to ranged GETs (206, 200, 404, 416,
#                a redirect, wrong and short ranges, a multipart body of
#                three ranges) behind the range asked for
#   cifar        pairs of CIFAR-10 batch files from tests/ref/fixtures/formats
#                (whole, one record, a cut record, a label out of range)
#   tokens       the token file of tests/ref/fixtures/formats, a short one, a
#                bad magic, a cut one, behind a flags byte (block, split)
#   metrics      a metrics file of a real mlp run (--metrics), lines with test
#                figures, nulls, a later kind, a resumed run's repeated steps,
#                a cut line, behind a flags byte (draw as SVG, as PNG, or not)
#
# Regression inputs (crashes the fuzzers found, fixed) live in the same
# folders under names starting with "regress-"; this script keeps them.
#
#     KILN_BIN=build/kiln bash tests/fuzz/make_corpus.sh
#
# Needs a built kiln, Fashion-MNIST in /usr/share/datasets and python3.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
KILN=${KILN_BIN:-$HERE/../../build/kiln}
[ -x "$KILN" ] || { echo "make_corpus: no kiln at $KILN (build it, or set KILN_BIN)" >&2; exit 1; }
KILN=$(cd "$(dirname "$KILN")" && pwd)/$(basename "$KILN")
cd "$HERE"
T=$(mktemp -d /tmp/kiln_corpus.XXXXXX)
trap 'rm -rf "$T"' EXIT
export KILN_CACHE_DIR="$T/cache"

train() { "$KILN" train --quiet --no-test --workers 1 "$@" >/dev/null; }
train --model mlp --max-steps 3 --save "$T/adadelta.safetensors"
train --model mlp --max-steps 3 --optimizer adamw --lr 0.001 --clip-grad-norm 1.5 --seed 7 --save "$T/adamw.safetensors"
train --model mlp --max-steps 2 --optimizer sgd --save "$T/sgd.safetensors"
train --model mlp --max-steps 4 --optimizer sgd --momentum 0.9 --nesterov --weight-decay 1e-4 --accumulate 2 \
    --batch-size 32 --lr-step-gamma 0.5 --lr-step-size 2 --dropout-off --save "$T/sgd_momentum.safetensors"
train --model mlp --max-steps 3 --optimizer novograd --weight-decay 0.01 --warmup 2 --lr-decay cosine --min-lr 1e-5 \
    --save "$T/novograd.safetensors"
train --model mlp --max-steps 2 --optimizer lamb --lr-decay linear --lr-decay-steps 10 --save "$T/lamb.safetensors"
train --model mnist-cnn --max-steps 1 --save "$T/mnist_cnn.safetensors"
train --model mlp --max-steps 6 --log-every 2 --metrics "$T/metrics.jsonl"
"$KILN" train --help >"$T/help.txt" 2>&1 || true

for t in safetensors checkpoint idx options; do
    mkdir -p "corpus/$t"
    find "corpus/$t" -type f ! -name 'regress-*' -delete
done

python3 - "$T" <<'EOF'
import gzip, json, os, re, struct, sys

T = sys.argv[1]
def put(target, name, data):
    with open(f'corpus/{target}/{name}', 'wb') as f:
        f.write(data)

def st_split(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    return b[8:8 + n], b[8 + n:]

def st_make(tensors, meta=None, pad=True):
    """tensors: [(name, dtype, shape, raw bytes)] -> a safetensors file"""
    h, off, blobs = {}, 0, []
    if meta is not None:
        h['__metadata__'] = meta
    for name, dt, shape, raw in tensors:
        h[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    hb = json.dumps(h, separators=(',', ':')).encode()
    if pad:
        hb += b' ' * (-len(hb) % 8)
    return struct.pack('<Q', len(hb)) + hb + b''.join(blobs)

# ---------- checkpoint: real headers, then the hostile metadata of test_hostile.sh ----------
ckpts = ['adadelta', 'adamw', 'sgd', 'sgd_momentum', 'mnist_cnn', 'novograd', 'lamb']
headers = {}
for c in ckpts:
    hdr, data = st_split(f'{T}/{c}.safetensors')
    headers[c] = hdr
    put('checkpoint', f'{c}.json', hdr.rstrip(b' '))
# NaN and a huge value as the first weight (the data section starts with fc1.weight)
put('checkpoint', 'adadelta-nan.bin', headers['adadelta'].rstrip(b' ') + b'\0' + struct.pack('<f', float('nan')))
put('checkpoint', 'sgd-f64.bin', headers['sgd'].rstrip(b' ').replace(b'"F32"', b'"F64"', 1) + b'\0' + struct.pack('<d', 1e300))
hostile = [('kiln.format', 'not-kiln'), ('kiln.step', '-5'), ('kiln.step', '99999999999999999999'),
           ('kiln.epoch', '1000000000000'), ('kiln.epoch', '-1'), ('kiln.next_batch', '-3'),
           ('kiln.optim_steps', '9'), ('kiln.seed', '-1'), ('kiln.batch_size', '0'), ('kiln.accumulate', '0'),
           ('kiln.lr', 'nan'), ('kiln.lr', '-1'), ('kiln.lr', None), ('kiln.settings', '{"lr":"x"}'),
           ('kiln.settings', '[1]'), ('kiln.autotune', 'mb1ic1 fwd x'), ('kiln.backend', 'cuda')]
base = json.loads(headers['adadelta'])
for i, (k, v) in enumerate(hostile):
    h = json.loads(json.dumps(base))
    if v is None:
        h['__metadata__'].pop(k, None)
    else:
        h['__metadata__'][k] = v
    put('checkpoint', f'hostile-{i:02d}.json', json.dumps(h, separators=(',', ':')).encode())
# the gradient scaler's state (fuzz_checkpoint gives adamw a scaler): a good one, then bad ones
ha = json.loads(headers['adamw'])
for i, v in enumerate(['1024 3 1', '3 0 0', '65536 -1 0', '65536 0 99', 'inf 0 0', '1e39 0 0', '65536 0 0 x', '0.5 1', '1e-300 0 0']):
    h = json.loads(json.dumps(ha))
    h['__metadata__']['kiln.grad_scaler'] = v
    put('checkpoint', 'adamw-scaler.json' if i == 0 else f'hostile-scaler-{i - 1:02d}.json', json.dumps(h, separators=(',', ':')).encode())

# ---------- safetensors ----------
f32 = lambda *v: struct.pack(f'<{len(v)}f', *v)
put('safetensors', 'f32.safetensors', st_make([('w', 'F32', [2, 3], f32(1, 2, 3, 4, 5, 6))], {'format': 'pt'}))
put('safetensors', 'dtypes.safetensors', st_make([
    ('a', 'F64', [2], struct.pack('<2d', 1.5, -2)), ('b', 'BF16', [2], b'\x80\x3f\x00\xc0'),
    ('c', 'F16', [2], b'\x00\x3c\x00\xc0'), ('d', 'I32', [1, 1], struct.pack('<i', -7)),
    ('e', 'I64', [], struct.pack('<q', 123)), ('f', 'U8', [3], b'\x00\x7f\xff')], {'kiln.step': '1'}))
put('safetensors', 'empty-tensors.safetensors', st_make([('z', 'F32', [0, 4], b''), ('s', 'F32', [], f32(3))]))
put('safetensors', 'no-metadata.safetensors', st_make([('x', 'F32', [1], f32(0.5))], None, pad=False))
put('safetensors', 'empty.safetensors', st_make([], {}))
put('safetensors', 'unicode.safetensors', st_make([('\u00e9t\u00e9.w', 'F32', [1], f32(1))], {'k\u00e9y': 'v\u2603 \\"q\\"'}))
# a kiln checkpoint's metadata (settings, autotune) over two small tensors
meta = json.loads(headers['mnist_cnn'])['__metadata__']
put('safetensors', 'kiln-meta.safetensors', st_make([('fc.weight', 'F32', [2, 2], f32(1, 2, 3, 4)),
                                                    ('optim.square_avg.fc.weight', 'F32', [2, 2], f32(0, 0, 0, 0))], meta))
fx = '../ref/fixtures'
for name in sorted(os.listdir(fx)):
    if name.endswith('.safetensors') and os.path.getsize(f'{fx}/{name}') <= 4096:
        put('safetensors', 'fixture-' + name, open(f'{fx}/{name}', 'rb').read())

# ---------- idx: flags (1, 2: the harness gzips images, labels; 4: images in two members),
# 4-byte little-endian length of the image file, the image file, the label file ----------
src = '/usr/share/datasets/fashion-mnist'
img = gzip.open(f'{src}/train-images-idx3-ubyte.gz').read()
lab = gzip.open(f'{src}/train-labels-idx1-ubyte.gz').read()
def idx_pair(images, labels, flags=0):
    return struct.pack('<BI', flags, len(images)) + images + labels
def images_of(n, rows=28, cols=28, pix=None):
    return struct.pack('>IIII', 0x803, n, rows, cols) + (pix if pix is not None else img[16:16 + n * rows * cols])
def labels_of(n, vals=None):
    return struct.pack('>II', 0x801, n) + (vals if vals is not None else lab[8:8 + n])
gz = lambda b: gzip.compress(b, mtime=0)
put('idx', 'plain-2.bin', idx_pair(images_of(2), labels_of(2)))
put('idx', 'gzip-2.bin', idx_pair(gz(images_of(2)), gz(labels_of(2))))
put('idx', 'gzip-plain-1.bin', idx_pair(gz(images_of(1)), labels_of(1)))
i3 = images_of(3)
put('idx', 'gzip-two-members-3.bin', idx_pair(gz(i3[:1000]) + gz(i3[1000:]), gz(labels_of(3))))
put('idx', 'small-dims.bin', idx_pair(images_of(4, 2, 3, bytes(range(24))), labels_of(4, b'\x00\x09\x03\x01')))
put('idx', 'one-pixel.bin', idx_pair(images_of(1, 1, 1, b'\xff'), labels_of(1, b'\x05')))
put('idx', 'label-10.bin', idx_pair(images_of(1, 1, 1, b'\x00'), labels_of(1, b'\x0a')))
put('idx', 'harness-gzip-2.bin', idx_pair(images_of(2), labels_of(2), 3))
put('idx', 'harness-gzip-members-3.bin', idx_pair(images_of(3, 4, 4, bytes(range(48))), labels_of(3, b'\x01\x02\x03'), 7))
put('idx', 'harness-gzip-labels.bin', idx_pair(images_of(2, 2, 2, b'\x10' * 8), labels_of(2, b'\x00\x09'), 2))

# ---------- options ----------
lines = {
    'defaults.txt': 'model=mlp\n',
    'cnn.txt': 'model=mnist-cnn\ndata=fashion-mnist\nepochs=3\nbatch-size=64\noptimizer=adadelta\nlr=1.0\n'
               'lr-step-gamma=0.7\nworkers=2\nthreads=2\nseed=1\nsave=run.safetensors\nmetrics=run.jsonl\n',
    'sgd.txt': 'optimizer=sgd\nmomentum=0.9\nnesterov\nweight-decay=5e-4\nclip-grad-norm=1.5\naccumulate=4\n',
    'auto.txt': 'batch-size=auto\nmemory-budget-mb=64\nmodel=mlp\n',
    'flags.txt': 'no-test\nno-fuse\nno-autotune\ndropout-off\npin-memory=true\nprofile=false\n',
    'resume.txt': 'resume=x.safetensors\nepochs=5\nmax-steps=100\nsave-every=10\neval-every=0\nlog-every=7\n',
    'device.txt': 'device=auto\nmatmul-precision=high\ntest-batch-size=500\nprefetch=4\n',
    'layerwise.txt': 'optimizer=lars\nmomentum=0.9\ntrust-coefficient=0.01\nweight-decay=1e-4\ndecay-all\nwarmup=5\n'
                     'lr-decay=cosine\nmin-lr=1e-5\nlr-decay-steps=100\n',
    'lamb.txt': 'optimizer=lamb\nbeta1=0.9\nbeta2=0.999\neps=1e-6\nlr-decay=linear\nwarmup=3\n',
    'bad.txt': 'batch-size=0\nlr-step-size=-2\nmomentum=-5\nthreads=100000\nclip-grad-norm=off\nbatch_size=3\n',
}
for name, text in lines.items():
    put('options', name, text.encode())
for c in ckpts:
    put('options', f'settings-{c}.json', json.loads(headers[c])['__metadata__']['kiln.settings'].encode())

# ---------- dictionaries ----------
def write_dict(name, words):
    with open(f'{name}.dict', 'w') as f:
        f.write(f'# libFuzzer dictionary for fuzz_{name} (made by make_corpus.sh)\n')
        for w in sorted(set(words)):
            f.write('"' + ''.join(c if 32 <= ord(c) < 127 and c not in '"\\' else '\\x%02x' % ord(c) for c in w) + '"\n')
json_words = ['{', '}', '[', ']', ':', ',', '"', '\\u00', '\\"', 'true', 'null', '-1', '18446744073709551616']
st_words = ['__metadata__', 'dtype', 'shape', 'data_offsets', 'F32', 'F64', 'BF16', 'F16', 'I32', 'I64', 'U8', 'BOOL', 'F8_E4M3']
meta_keys = list(json.loads(headers['mnist_cnn'])['__metadata__'].keys()) + ['kiln.accumulate']
write_dict('safetensors', json_words + st_words + meta_keys)
write_dict('checkpoint', json_words + st_words + meta_keys + ['kiln-checkpoint', 'adadelta', 'adamw', 'sgd', 'mlp', 'cpu',
           'cuda', 'fc1.weight', 'fc2.bias', 'lamb', 'lars', 'novograd', 'optim.square_avg.', 'optim.acc_delta.', 'optim.exp_avg.',
           'optim.exp_avg_sq.', 'optim.momentum_buffer.', ' fwd w\n', ' bwd_data d\n', 'nan', 'inf', '1e39', 'kiln.grad_scaler'])
write_dict('idx', ['\x00\x00\x08\x03', '\x00\x00\x08\x01', '\x1f\x8b\x08\x00', '\x00\x00\x00\x1c'])
help_text = open(f'{T}/help.txt').read()
names = re.findall(r'^\s+--([a-z0-9-]+)', help_text, re.M)
write_dict('options', [n + '=' for n in names] + names + ['auto', 'off', 'true', 'false', 'highest', 'medium', 'adamw',
           'lamb', 'lars', 'novograd', 'cosine', 'linear', 'step', 'none', 'dynamic', 'fp16',
           'sgd', 'mnist-cnn-bn', '1e12', '-1', '0x10', 'nan', '9223372036854775808', '2147483648', '{"', '":"', '",'])
EOF
# ---------- image: the fixtures PIL wrote, behind flags bytes, and a cut one of each ----------
mkdir -p corpus/image
find corpus/image -type f ! -name 'regress-*' -delete
for f in ../ref/fixtures/images/*.jpg ../ref/fixtures/images/*.png; do
    b=$(basename "$f" | tr . -)
    for flags in 00 03 0d 13 1b; do printf "\\x$flags" | cat - "$f" >"corpus/image/$b-$flags.bin"; done
    { printf '\x01'; head -c $(($(stat -c %s "$f") / 2)) "$f"; } >"corpus/image/$b-cut.bin"
done
printf '%s\n' '# libFuzzer dictionary for fuzz_image (made by make_corpus.sh)' '"\xff\xd8\xff"' '"\xff\xc0"' '"\xff\xc2"' \
    '"\xff\xc4"' '"\xff\xda"' '"\xff\xdb"' '"\xff\xd9"' '"\x89PNG\x0d\x0a\x1a\x0a"' '"IHDR"' '"IDAT"' '"IEND"' '"PLTE"' \
    '"tRNS"' >image.dict

# ---------- http: an answer's header lines behind off, len - 1, size, received (fuzz_http.c) ----------
mkdir -p corpus/http
find corpus/http -type f ! -name 'regress-*' -delete
python3 - <<'EOF'
import struct
def put(name, off, n, size, got, lines):
    head = struct.pack('<IHII', off, n - 1, size, got)
    open(f'corpus/http/{name}', 'wb').write(head + ''.join(l + '\r\n' for l in lines).encode() + b'\r\n')
ok = ['HTTP/1.1 206 Partial Content', 'Server: nginx/1.22.1', 'Content-Type: application/octet-stream',
      'Content-Length: 50', 'Connection: keep-alive', 'Content-Range: bytes 100-149/1000']
put('206.bin', 100, 50, 1000, 50, ok)
put('206-probe.bin', 0, 1, 0xffffffff, 1, ok[:3] + ['Content-Range: bytes 0-0/300000'])
put('206-unknown-total.bin', 5, 5, 1000, 5, ok[:3] + ['content-range:bytes 5-9/*'])
put('206-wrong-range.bin', 100, 50, 1000, 50, ok[:5] + ['Content-Range: bytes 0-49/1000'])
put('206-short.bin', 100, 50, 1000, 20, ok)
put('206-resized.bin', 100, 50, 1000, 50, ok[:5] + ['Content-Range: bytes 100-149/999'])
put('200.bin', 0, 1, 0xffffffff, 300000, ['HTTP/1.1 200 OK', 'Accept-Ranges: bytes', 'Content-Length: 300000'])
put('404.bin', 0, 1, 0xffffffff, 0, ['HTTP/1.1 404 Not Found', 'Content-Type: text/html', 'Content-Length: 153'])
put('416-empty.bin', 0, 1, 0xffffffff, 0, ['HTTP/1.1 416 Requested Range Not Satisfiable', 'Content-Range: bytes */0'])
put('redirect.bin', 100, 50, 1000, 50, ['HTTP/1.1 301 Moved Permanently', 'Location: /b/x', ''] + ok)
put('http2-503.bin', 7, 3, 10, 0, ['HTTP/2 503', 'retry-after: 1'])
def part(a, b, total):
    return (f'\r\n--00000000000000000007\r\nContent-Type: application/octet-stream\r\n'
            f'Content-Range: bytes {a}-{b}/{total}\r\n\r\n').encode() + bytes((a + i) % 251 for i in range(b - a + 1))
body = part(10, 19, 1000) + part(500, 503, 1000) + part(0, 0, 1000) + b'\r\n--00000000000000000007--\r\n'
multi = ['HTTP/1.1 206 Partial Content', 'Content-Type: multipart/byteranges; boundary=00000000000000000007',
         f'Content-Length: {len(body)}']
put('206-multipart.bin', 10, 10, 1000, len(body), multi)
with open('corpus/http/206-multipart.bin', 'ab') as f:
    f.write(body)
EOF
printf '%s\n' '# libFuzzer dictionary for fuzz_http (made by make_corpus.sh)' '"HTTP/1.1 "' '"HTTP/2 "' '"206"' \
    '"Content-Range:"' '"bytes "' '"*/"' '"/*"' '"-"' '"\x0d\x0a"' '"9223372036854775807"' \
    '"Content-Type: multipart/byteranges; boundary="' '"--"' >http.dict

# ---------- shard: flags, a 4-byte little-endian manifest length, index.json, one shard (fuzz_shard.c) ----------
# shards that kiln pack writes from a folder of the image fixtures, encoded and decoded
mkdir -p corpus/shard "$T/imgs/train/a" "$T/imgs/train/b" "$T/imgs/test/a" "$T/imgs/test/b"
find corpus/shard -type f ! -name 'regress-*' -delete
F=../ref/fixtures/images
cp $F/gray.jpg $F/rgb.png "$T/imgs/train/a/" && cp $F/rgb.jpg $F/gray.png "$T/imgs/train/b/"
cp $F/gray.jpg "$T/imgs/test/a/" && cp $F/rgba.png "$T/imgs/test/b/"
"$KILN" pack --from "$T/imgs" --to "$T/enc" --format shard >/dev/null 2>&1
"$KILN" pack --from "$T/imgs" --to "$T/dec" --format shard --decoded --size 6 --channels 1 >/dev/null 2>&1
python3 - "$T" <<'EOF'
import json, struct, sys
T = sys.argv[1]
def put(name, flags, manifest, shard):
    m = json.dumps(manifest, separators=(',', ':')).encode()
    open(f'corpus/shard/{name}', 'wb').write(struct.pack('<BI', flags, len(m)) + m + shard)
for kind in ['enc', 'dec']:
    m = json.load(open(f'{T}/{kind}/index.json'))
    shard = open(f'{T}/{kind}/train-00000.kshard', 'rb').read()
    n = m['splits']['train']['count']
    one = {'file': 'train-00000.kshard', 'count': n}
    m['splits']['test'] = {'count': n, 'shards': [{'file': 'test-00000.kshard', 'count': n}]}
    for flags in [0, 3, 5]:
        put(f'{kind}-{flags}.bin', flags, m, shard)
    put(f'{kind}-cut.bin', 1, m, shard[:len(shard) // 2])
    two = dict(m, splits={'train': {'count': 2 * n, 'shards': [one, one]}})
    put(f'{kind}-twice.bin', 2, two, shard)
EOF
printf '%s\n' '# libFuzzer dictionary for fuzz_shard (made by make_corpus.sh)' '"KILNSHRD"' '"kiln-shards"' '"encoded"' \
    '"decoded"' '"splits"' '"train"' '"test"' '"shards"' '"count"' '"file"' '"classes"' '"version"' '"records"' \
    '"train-00000.kshard"' '"\x01\x00\x00\x00"' '"\xff\xd8\xff"' '"\x89PNG\x0d\x0a\x1a\x0a"' >shard.dict

# ---------- cifar: flags, a 4-byte little-endian length, two batch files (fuzz_cifar.c) ----------
# ---------- tokens: flags (block - 1, test split), a token file (fuzz_tokens.c) ----------
mkdir -p corpus/cifar corpus/tokens
find corpus/cifar corpus/tokens -type f ! -name 'regress-*' -delete
python3 - <<'EOF'
import struct
F = '../ref/fixtures/formats'
b1, b2 = open(f'{F}/cifar/data_batch_1.bin', 'rb').read(), open(f'{F}/cifar/test_batch.bin', 'rb').read()
def cifar(name, flags, a, b):
    open(f'corpus/cifar/{name}', 'wb').write(struct.pack('<BI', flags, len(a)) + a + b)
for flags in [0, 2, 5, 7, 8, 13]:
    cifar(f'two-{flags}.bin', flags, b1[:3073], b2[:2 * 3073])
cifar('one-record.bin', 1, b1[:3073], b'')
cifar('cut.bin', 0, b1, b2[:3000])
cifar('label-10.bin', 3, b'\x0a' + b1[1:3073], b'')
t = open(f'{F}/tokens.bin', 'rb').read()
def tokens(name, flags, data):
    open(f'corpus/tokens/{name}', 'wb').write(bytes([flags]) + data)
for flags in [0, 15, 63, 64 + 7]:
    tokens(f'file-{flags}.bin', flags, t)
short = bytearray(t[:1024 + 2 * 5]); short[8:12] = struct.pack('<i', 5)
tokens('five-tokens.bin', 3, bytes(short))
tokens('bad-magic.bin', 0, b'\x00' + t[1:])
tokens('cut.bin', 1, t[:-3])
tokens('header-only.bin', 0, t[:1024])
def docs(offs):  # a document index (docs.c): magic, version, count, 0, then the offsets
    return struct.pack('<4i', 20240521, 1, len(offs) - 1, 0) + struct.pack(f'<{len(offs)}q', *offs)
def with_docs(name, flags, index, data):
    tokens(name, 128 | flags, struct.pack('<H', len(index)) + index + data)
with_docs('docs-4.bin', 15, docs([0, 100, 350, 999, 1000]), t)
with_docs('docs-test.bin', 64 + 7, docs([0, 2, 500, 1000]), t)
with_docs('docs-foreign.bin', 15, docs([0, 100, 999]), t)
EOF
printf '%s\n' '# libFuzzer dictionary for fuzz_tokens (made by make_corpus.sh)' '"\x88\xd8\x34\x01"' '"\x01\x00\x00\x00"' \
    '"\xff\xff\xff\x7f"' '"\xff\xff"' >tokens.dict

# ---------- metrics: flags (bit 0 draw SVG, bit 1 draw PNG), a metrics file (fuzz_metrics.c) ----------
mkdir -p corpus/metrics
find corpus/metrics -type f ! -name 'regress-*' -delete
python3 - "$T/metrics.jsonl" <<'EOF'
import sys
real = open(sys.argv[1], 'rb').read()
def metrics(name, flags, text):
    open(f'corpus/metrics/{name}', 'wb').write(bytes([flags]) + text)
for flags in (0, 1, 2):
    metrics(f'mlp-{flags}.jsonl', flags, real)
epochs = (b'{"kind":"epoch","epoch":1,"step":60,"train_loss":0.61,"lr":1,"images_per_s":5234.5,"data_wait":0.01,'
          b'"time_s":11.5,"test_loss":0.52,"test_accuracy":0.8125}\n'
          b'{"kind":"epoch","epoch":2,"step":120,"train_loss":0.43,"lr":0.7,"images_per_s":5301,"data_wait":0.0,'
          b'"time_s":22.9,"test_loss":0.47,"test_accuracy":0.834}\n')
metrics('epochs.jsonl', 1, epochs)
metrics('nulls.jsonl', 2, b'{"kind":"step","step":1,"epoch":1,"loss":null,"lr":0.5,"images_per_s":null,"data_wait":null,'
        b'"time_s":0.1}\n\n{"kind":"eval","step":1}\n')
metrics('resumed.jsonl', 1, real + real)
metrics('cut.jsonl', 0, real[:-7])
EOF
printf '%s\n' '# libFuzzer dictionary for fuzz_metrics (made by make_corpus.sh)' '"\"kind\""' '"\"step\""' '"\"epoch\""' \
    '"\"loss\""' '"\"train_loss\""' '"\"test_loss\""' '"\"test_accuracy\""' '"\"images_per_s\""' '"\"data_wait\""' \
    '"null"' '"1e308"' '"-1e-308"' '"9223372036854775807"' >metrics.dict

for t in safetensors checkpoint idx options image http shard cifar tokens metrics; do
    echo "make_corpus: corpus/$t: $(find "corpus/$t" -type f | wc -l) files, $(du -sk "corpus/$t" | cut -f1) KB"
done
