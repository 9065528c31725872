#!/usr/bin/python3
"""Generate kiln's PyTorch reference fixtures (safetensors files).

    /usr/bin/python3 tests/ref/make_fixtures.py tests/ref/fixtures          # (re)generate
    /usr/bin/python3 tests/ref/make_fixtures.py --check tests/ref/fixtures  # verify files

Needs Debian's python3-torch and python3-numpy (PyTorch is the oracle only; CI
uses the committed files). The safetensors package is not used: the format is
written and read by hand below. Every fixture seeds torch.manual_seed itself,
so the files are byte-for-byte deterministic on a given machine and torch build.

Op fixtures are float64 so they are exact oracles; gradients are those of
sum(y * dy) for a random upstream gradient dy (i.e. autograd.backward(y, dy)).
"""
import gzip
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"

# ---------------------------------------------------------------------------
# safetensors, by hand
# ---------------------------------------------------------------------------
DTYPES = {  # torch dtype -> (safetensors name, numpy little-endian dtype)
    torch.float32: ("F32", "<f4"),
    torch.float64: ("F64", "<f8"),
    torch.int32: ("I32", "<i4"),
    torch.int64: ("I64", "<i8"),
}
NP_OF = {v[0]: v[1] for v in DTYPES.values()}
SIZE_OF = {"F32": 4, "F64": 8, "I32": 4, "I64": 8}
# Rust safetensors' Dtype declaration order (its derived Ord); the library sorts
# tensors by this, descending, then by name.
RUST_DTYPE_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16",
                    "I32", "U32", "F32", "F64", "I64", "U64"]


def encode(tensors, metadata, pt_layout=False):
    """tensors: list of (name, torch.Tensor); metadata: dict str -> str.

    Default layout: tensors in the given order, "__metadata__" last.
    pt_layout: exactly what the Rust safetensors library writes (safetensors.torch
    with metadata={"format": "pt"}): tensors sorted by dtype descending then name,
    "__metadata__" first, compact JSON, header padded with spaces to 8 bytes."""
    items = []
    for name, t in tensors:
        st, npd = DTYPES[t.dtype]
        raw = t.detach().contiguous().cpu().numpy().astype(npd, copy=False).tobytes()
        items.append((name, st, list(t.shape), raw))
    if pt_layout:
        items.sort(key=lambda it: (-RUST_DTYPE_ORDER.index(it[1]), it[0]))
    for k, v in metadata.items():
        assert isinstance(k, str) and isinstance(v, str), (k, v)
    header, off = {}, 0
    if pt_layout and metadata:
        header["__metadata__"] = metadata
    for name, st, shape, raw in items:
        assert name not in header and name != "__metadata__"
        # keep every tensor naturally aligned in the file (data starts 8-aligned)
        assert off % SIZE_OF[st] == 0, f"{name}: offset {off} not aligned for {st}"
        header[name] = {"dtype": st, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    if not pt_layout and metadata:
        header["__metadata__"] = metadata
    hb = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    return struct.pack("<Q", len(hb)) + hb + b"".join(it[3] for it in items)


def decode(buf, path="?"):
    """Strict reader: returns (dict name -> np.ndarray, metadata, names in file order)."""
    def bad(msg):
        raise ValueError(f"{path}: {msg}")
    if len(buf) < 8:
        bad("shorter than 8 bytes")
    (n,) = struct.unpack("<Q", buf[:8])
    if n % 8 != 0:
        bad(f"header length {n} not a multiple of 8")
    if 8 + n > len(buf):
        bad("header runs past end of file")
    text = buf[8:8 + n].decode("utf-8")
    if not text.startswith("{"):
        bad("header does not start with '{'")
    header = json.loads(text)
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in meta.items()):
        bad("__metadata__ is not a string->string map")
    data = buf[8 + n:]
    spans, out = [], {}
    for name, info in header.items():
        if set(info) != {"dtype", "shape", "data_offsets"}:
            bad(f"{name}: keys {sorted(info)}")
        dt, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        if dt not in SIZE_OF:
            bad(f"{name}: dtype {dt}")
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            bad(f"{name}: shape {shape}")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not (0 <= b <= e <= len(data)) or e - b != count * SIZE_OF[dt]:
            bad(f"{name}: offsets [{b},{e}] vs shape {shape} {dt} / data {len(data)}")
        spans.append((b, e, name))
        out[name] = np.frombuffer(data[b:e], dtype=NP_OF[dt]).reshape(shape)
    spans.sort()
    pos = 0
    for b, e, name in spans:
        if b != pos:
            bad(f"{name}: data gap/overlap at {pos} (begins {b})")
        pos = e
    if pos != len(data):
        bad(f"data buffer has {len(data) - pos} trailing bytes")
    order = [s[2] for s in spans]
    if list(header) != order:
        bad("header order is not data order")
    return out, meta, order


WRITTEN = set()  # file names written by this run (generate() removes any other fixture)


def save(folder, fname, tensors, metadata, pt_layout=False):
    md = {"torch": torch.__version__, "generator": "tests/ref/make_fixtures.py"}
    md.update({k: str(v) for k, v in metadata.items()})
    if pt_layout:
        md = {k: str(v) for k, v in metadata.items()}
    buf = encode(tensors, md, pt_layout)
    path = os.path.join(folder, fname)
    with open(path, "wb") as f:
        f.write(buf)
    WRITTEN.add(fname)
    # read back and compare against what was meant
    got, gmeta, _ = decode(buf, path)
    assert gmeta == md
    assert set(got) == {n for n, _ in tensors}
    for name, t in tensors:
        ref = t.detach().contiguous().numpy()
        g = got[name]
        assert g.shape == ref.shape and g.dtype == np.dtype(DTYPES[t.dtype][1]), name
        assert np.array_equal(g, ref), name
    print(f"  {fname:34s} {len(buf):>9d} bytes, {len(tensors)} tensors")
    return len(buf)


def fl(x):
    return repr(float(x))


# ---------------------------------------------------------------------------
# op fixtures (float64)
# ---------------------------------------------------------------------------
D = torch.float64


def rnd(*shape):
    return torch.randn(*shape, dtype=D)


def distinct(shape, shift_to_mid=True, scale=0.1):
    """Random values, pairwise separated by >= 0.2*scale, none within 0.1*scale of 0."""
    n = int(np.prod(shape))
    v = torch.randperm(n).to(D) + torch.empty(n, dtype=D).uniform_(0.1, 0.9)
    if shift_to_mid:
        v = v - n // 2
    return (v * scale).reshape(shape)


def grads(y, dy, *inputs):
    y.backward(dy)
    return [t.grad.detach().clone() for t in inputs]


def op_conv2d(folder, fname, seed, N, C, H, W, K, R, S, stride, pad, bias, dilation=1, groups=1):
    torch.manual_seed(seed)
    x = rnd(N, C, H, W).requires_grad_()
    w = (rnd(K, C // groups, R, S) * 0.5).requires_grad_()
    b = rnd(K).requires_grad_() if bias else None
    y = F.conv2d(x, w, b, stride=stride, padding=pad, dilation=dilation, groups=groups)
    dy = rnd(*y.shape)
    g = grads(y, dy, *([x, w, b] if bias else [x, w]))
    t = [("x", x), ("w", w)] + ([("b", b)] if bias else []) + [("y", y), ("dy", dy), ("dx", g[0]),
                                                               ("dw", g[1])]
    if bias:
        t.append(("db", g[2]))
    return save(folder, fname, t, dict(op="conv2d", stride=stride, pad=pad, has_bias=int(bias),
                                        dilation=dilation, groups=groups))


def op_linear(folder):
    torch.manual_seed(20)
    x, w, b = rnd(4, 5).requires_grad_(), rnd(3, 5).requires_grad_(), rnd(3).requires_grad_()
    y = F.linear(x, w, b)
    dy = rnd(*y.shape)
    dx, dw, db = grads(y, dy, x, w, b)
    return save(folder, "op_linear.safetensors",
                [("x", x), ("w", w), ("b", b), ("y", y), ("dy", dy), ("dx", dx), ("dw", dw), ("db", db)],
                dict(op="linear", has_bias=1))


def op_matmul(folder):
    """HF GPT-2's Conv1D on [B, T, K]: y = x @ w + b with w [K, N]"""
    torch.manual_seed(21)
    x, w, b = rnd(2, 3, 5).requires_grad_(), rnd(5, 4).requires_grad_(), rnd(4).requires_grad_()
    y = torch.addmm(b, x.view(-1, 5), w).view(2, 3, 4)
    dy = rnd(*y.shape)
    dx, dw, db = grads(y, dy, x, w, b)
    return save(folder, "op_matmul.safetensors",
                [("x", x), ("w", w), ("b", b), ("y", y), ("dy", dy), ("dx", dx), ("dw", dw), ("db", db)],
                dict(op="matmul", has_bias=1))


def op_relu(folder):
    torch.manual_seed(30)
    x = distinct((4, 6)).requires_grad_()
    y = F.relu(x)
    dy = rnd(*y.shape)
    (dx,) = grads(y, dy, x)
    return save(folder, "op_relu.safetensors", [("x", x), ("y", y), ("dy", dy), ("dx", dx)],
                dict(op="relu"))


def op_max_pool(folder, fname, seed, shape, k, s, pad=0):
    torch.manual_seed(seed)
    x = distinct(shape).requires_grad_()
    y = F.max_pool2d(x, k, s, pad)
    dy = rnd(*y.shape)
    (dx,) = grads(y, dy, x)
    return save(folder, fname, [("x", x), ("y", y), ("dy", dy), ("dx", dx)],
                dict(op="max_pool2d", kernel=k, stride=s, pad=pad, dilation=1, ceil_mode=0))


def op_pool_like(folder, fname, seed, shape, fn, meta):
    """an op of one input x, through the op table: y = fn(x), dx for upstream dy"""
    torch.manual_seed(seed)
    x = rnd(*shape).requires_grad_()
    y = fn(x)
    dy = rnd(*y.shape)
    (dx,) = grads(y, dy, x)
    return save(folder, fname, [("x", x), ("y", y), ("dy", dy), ("dx", dx)], meta)


def pointwise_fixtures(folder):
    """affine, erf, tanh and the guide's GELU written as five nodes (kiln's fusion pass makes it one kernel)"""
    op_pool_like(folder, "op_affine.safetensors", 48, (3, 5, 7), lambda x: x * 1.5 + (-0.25),
                 dict(op="affine", scale=fl(1.5), shift=fl(-0.25)))
    op_pool_like(folder, "op_erf.safetensors", 49, (4, 33), lambda x: torch.erf(x * 1.5), dict(op="erf", scale=fl(1.5)))
    op_pool_like(folder, "op_tanh.safetensors", 50, (4, 33), lambda x: torch.tanh(x * 1.5), dict(op="tanh", scale=fl(1.5)))
    # x / 1.41421 as kiln writes it: a multiply by the reciprocal rounded to f32 (the attribute's type)
    s = float(np.float32(1.0 / 1.41421))
    op_pool_like(folder, "op_gelu_chain.safetensors", 51, (3, 1000),
                 lambda x: x * 0.5 * (1.0 + torch.erf(x * s)), dict(op="gelu_chain", scale=fl(s)))


def shortcut_a(x, pad):
    """ResNet-20's option-A shortcut: subsample 2, zero-pad the channels"""
    return F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, pad // 2, pad - pad // 2))


def subsample_pad(x, s, before, after):
    """kiln's subsample_pad (the option-A shortcut as one op): subsample s, zero channels around"""
    return F.pad(x[:, :, ::s, ::s], (0, 0, 0, 0, before, after))


def op_log_softmax(folder):
    torch.manual_seed(50)
    x = (rnd(4, 7) * 2).requires_grad_()
    y = F.log_softmax(x, dim=1)
    dy = rnd(*y.shape)
    (dx,) = grads(y, dy, x)
    return save(folder, "op_log_softmax.safetensors", [("x", x), ("y", y), ("dy", dy), ("dx", dx)],
                dict(op="log_softmax", dim=1))


def op_nll_loss(folder, fname, seed, upstream):
    torch.manual_seed(seed)
    N, C = 6, 5
    logp = F.log_softmax(rnd(N, C) * 2, dim=1).detach().requires_grad_()
    target = torch.randint(0, C, (N,))
    loss = F.nll_loss(logp, target)
    dloss = torch.randn((), dtype=D) if upstream else torch.ones((), dtype=D)
    (dlogp,) = grads(loss, dloss, logp)
    t = [("logp", logp), ("target", target.to(torch.int32)), ("loss", loss)]
    if upstream:
        t.append(("dloss", dloss))
    t.append(("dlogp", dlogp))
    return save(folder, fname, t, dict(op="nll_loss", reduction="mean",
                                       upstream=("dloss" if upstream else "1")))


def op_log_softmax_wide(folder):
    """37 classes: two blocks of 16 lanes and a tail in kiln's row loops"""
    torch.manual_seed(51)
    x = (rnd(5, 37) * 4).requires_grad_()
    y = F.log_softmax(x, dim=1)
    dy = rnd(*y.shape)
    (dx,) = grads(y, dy, x)
    return save(folder, "op_log_softmax_wide.safetensors", [("x", x), ("y", y), ("dy", dy), ("dx", dx)],
                dict(op="log_softmax", dim=1))


def op_cross_entropy(folder):
    torch.manual_seed(70)
    N, C = 6, 5
    logits = (rnd(N, C) * 2).requires_grad_()
    target = torch.randint(0, C, (N,))
    loss = F.cross_entropy(logits, target)
    (dlogits,) = grads(loss, torch.ones((), dtype=D), logits)
    return save(folder, "op_cross_entropy.safetensors",
                [("logits", logits), ("target", target.to(torch.int32)), ("loss", loss),
                 ("dlogits", dlogits)],
                dict(op="cross_entropy", reduction="mean", upstream="1"))


def op_cross_entropy_wide(folder):
    """41 classes: two blocks of 16 lanes and a tail in kiln's row loops; logits spread over +-8"""
    torch.manual_seed(72)
    N, C = 8, 41  # 8 int32 targets keep the next F64 tensor 8-byte aligned
    logits = (rnd(N, C) * 8).requires_grad_()
    target = torch.randint(0, C, (N,))
    loss = F.cross_entropy(logits, target)
    (dlogits,) = grads(loss, torch.ones((), dtype=D), logits)
    return save(folder, "op_cross_entropy_wide.safetensors",
                [("logits", logits), ("target", target.to(torch.int32)), ("loss", loss),
                 ("dlogits", dlogits)],
                dict(op="cross_entropy", reduction="mean", upstream="1"))


def op_cross_entropy_masked(folder):
    """F.cross_entropy with ignore_index=-1: padded positions (-1) are left out of the mean"""
    torch.manual_seed(71)
    N, C = 9, 6
    logits = (rnd(N, C) * 2).requires_grad_()
    target = torch.randint(0, C, (N,))
    target[torch.tensor([1, 4, 5, 8])] = -1
    loss = F.cross_entropy(logits, target, ignore_index=-1)
    (dlogits,) = grads(loss, torch.ones((), dtype=D), logits)
    return save(folder, "op_cross_entropy_masked.safetensors",
                [("logits", logits), ("loss", loss), ("dlogits", dlogits), ("target", target.to(torch.int32))],
                dict(op="cross_entropy", ignore_index="-1", reduction="mean", upstream="1"))


def op_mse_loss(folder):
    """F.mse_loss (mean) with an upstream gradient: d/dx and d/dtarget."""
    torch.manual_seed(71)
    x, t = rnd(4, 7).requires_grad_(), rnd(4, 7).requires_grad_()
    loss = F.mse_loss(x, t)
    dloss = torch.randn((), dtype=D)
    dx, dt = grads(loss, dloss, x, t)
    return save(folder, "op_mse_loss.safetensors",
                [("x", x), ("target", t), ("loss", loss), ("dloss", dloss), ("dx", dx), ("dtarget", dt)],
                dict(op="mse_loss", reduction="mean", upstream="dloss"))


def op_binary(folder, name, seed, fn):
    torch.manual_seed(seed)
    a, b = rnd(3, 4).requires_grad_(), rnd(3, 4).requires_grad_()
    y = fn(a, b)
    dy = rnd(*y.shape)
    da, db = grads(y, dy, a, b)
    return save(folder, f"op_{name}.safetensors",
                [("a", a), ("b", b), ("y", y), ("dy", dy), ("da", da), ("db", db)], dict(op=name))


def op_embedding(folder):
    """F.embedding with repeated ids (the weight's gradient adds rows)"""
    torch.manual_seed(110)
    V, C = 7, 5
    idx = torch.randint(0, V, (3, 6))
    w = rnd(V, C).requires_grad_()
    y = F.embedding(idx, w)
    dy = rnd(*y.shape)
    (dw,) = grads(y, dy, w)
    return save(folder, "op_embedding.safetensors",
                [("idx", idx.to(torch.int32)), ("wte.weight", w), ("y", y), ("dy", dy), ("dwte.weight", dw)],
                dict(op="embedding"))


def op_layer_norm(folder):
    """nn.LayerNorm(C) as the GPT calls it ("h.0.ln_1"), with random weight and bias; the
    saved mean and rstd from torch.native_layer_norm"""
    torch.manual_seed(111)
    B, T, C = 2, 5, 24
    x = (rnd(B, T, C) * 1.5 + 0.3).requires_grad_()
    ln = nn.LayerNorm(C).double()
    with torch.no_grad():
        ln.weight.copy_(rnd(C))
        ln.bias.copy_(rnd(C))
    y = ln(x)
    dy = rnd(*y.shape)
    dx, dw, db = grads(y, dy, x, ln.weight, ln.bias)
    _, mean, rstd = torch.native_layer_norm(x.detach(), (C,), ln.weight.detach(), ln.bias.detach(), ln.eps)
    return save(folder, "op_layer_norm.safetensors",
                [("x", x), ("h.0.ln_1.weight", ln.weight), ("h.0.ln_1.bias", ln.bias), ("y", y),
                 ("mean", mean.reshape(B, T)), ("rstd", rstd.reshape(B, T)), ("dy", dy), ("dx", dx),
                 ("dh.0.ln_1.weight", dw), ("dh.0.ln_1.bias", db)],
                dict(op="layer_norm", eps=fl(ln.eps)))


def op_gelu(folder, fname, seed, approximate):
    """F.gelu over [-6, 6] and beyond (the tails of both forms)"""
    torch.manual_seed(seed)
    x = (rnd(4, 50) * 3).requires_grad_()
    y = F.gelu(x, approximate=approximate)
    dy = rnd(*y.shape)
    (dx,) = grads(y, dy, x)
    return save(folder, fname, [("x", x), ("y", y), ("dy", dy), ("dx", dx)],
                dict(op="gelu", tanh_form=int(approximate == "tanh")))


def op_softmax(folder):
    torch.manual_seed(113)
    x = (rnd(3, 4, 9) * 2).requires_grad_()
    y = F.softmax(x, dim=-1)
    dy = rnd(*y.shape)
    (dx,) = grads(y, dy, x)
    return save(folder, "op_softmax.safetensors", [("x", x), ("y", y), ("dy", dy), ("dx", dx)],
                dict(op="softmax", dim=-1))


def op_add_bcast(folder):
    """GPT's token embeddings plus positions: a [B,T,C] + b [T,C]"""
    torch.manual_seed(114)
    a, b = rnd(2, 3, 4).requires_grad_(), rnd(3, 4).requires_grad_()
    y = a + b
    dy = rnd(*y.shape)
    da, db = grads(y, dy, a, b)
    return save(folder, "op_add_bcast.safetensors",
                [("a", a), ("b", b), ("y", y), ("dy", dy), ("da", da), ("db", db)], dict(op="add_bcast"))


def op_batch_norm2d(folder):
    """nn.BatchNorm2d in training mode (batch statistics, running statistics
    updated with momentum 0.1 and the unbiased variance), its gradients, and the
    evaluation-mode output with the updated running statistics. 16 channels, so
    kiln's blocked (nChw16c) kernel can be checked against it too."""
    torch.manual_seed(100)
    N, C, H, W = 2, 16, 3, 5
    x = (rnd(N, C, H, W) * 1.5 + 0.3).requires_grad_()
    bn = nn.BatchNorm2d(C).double()
    with torch.no_grad():
        bn.weight.copy_(rnd(C))
        bn.bias.copy_(rnd(C))
        bn.running_mean.copy_(rnd(C) * 0.1)
        bn.running_var.copy_(torch.rand(C, dtype=D) + 0.5)
    rm0, rv0 = bn.running_mean.clone(), bn.running_var.clone()
    bn.train()
    y = bn(x)
    dy = rnd(*y.shape)
    dx, dw, db = grads(y, dy, x, bn.weight, bn.bias)
    bn.eval()
    with torch.no_grad():
        y_eval = bn(x)
    t = [("x", x), ("weight", bn.weight), ("bias", bn.bias), ("running_mean0", rm0), ("running_var0", rv0),
         ("y", y), ("dy", dy), ("dx", dx), ("dweight", dw), ("dbias", db),
         ("running_mean1", bn.running_mean), ("running_var1", bn.running_var), ("y_eval", y_eval)]
    return save(folder, "op_batch_norm2d.safetensors", t,
                dict(op="batch_norm2d", momentum=fl(bn.momentum), eps=fl(bn.eps),
                     num_batches_tracked=str(int(bn.num_batches_tracked))))


def op_bn_fold(folder):
    """conv2d then BatchNorm2d in evaluation (random running statistics, not 0
    and 1), and the conv's weight and bias with the norm folded in, by
    PyTorch's own torch.nn.utils.fusion.fuse_conv_bn_weights: with the conv's
    bias and without it. The outside oracle for kiln's bn_fold kernels and its
    fold pass."""
    from torch.nn.utils.fusion import fuse_conv_bn_weights
    torch.manual_seed(110)
    N, C, H, W, K = 2, 3, 6, 5, 8
    x, w, b = rnd(N, C, H, W), rnd(K, C, 3, 3) * 0.5, rnd(K)
    bn = nn.BatchNorm2d(K).double().eval()
    with torch.no_grad():
        bn.weight.copy_(rnd(K))
        bn.bias.copy_(rnd(K))
        bn.running_mean.copy_(rnd(K) * 0.5)
        bn.running_var.copy_(torch.rand(K, dtype=D) * 1.5 + 0.5)
        y = bn(F.conv2d(x, w, b, padding=1))
        y_nobias = bn(F.conv2d(x, w, None, padding=1))
        w_fold, b_fold = fuse_conv_bn_weights(w, b, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias)
        _, b_fold_nobias = fuse_conv_bn_weights(w, None, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias)
    t = [("x", x), ("w", w), ("b", b), ("weight", bn.weight), ("bias", bn.bias), ("running_mean", bn.running_mean),
         ("running_var", bn.running_var), ("y", y), ("y_nobias", y_nobias), ("w_fold", w_fold.detach()),
         ("b_fold", b_fold.detach()), ("b_fold_nobias", b_fold_nobias.detach())]
    return save(folder, "op_bn_fold.safetensors", t, dict(op="bn_fold", eps=fl(bn.eps), pad=1))


def op_conv2d_add(folder):
    """A ResNet block's tail in evaluation, relu(conv2d(x, w, b) + relu(r0)),
    and the same without the last relu: the outside oracle for conv2d_add,
    the node the residual fusion pass makes of a conv and the add after it
    (the residual an activation that dies there, so the conv writes into its
    storage)."""
    torch.manual_seed(111)
    N, C, H, W, K = 2, 16, 6, 5, 16
    x, w, b, r0 = rnd(N, C, H, W), rnd(K, C, 3, 3) * 0.2, rnd(K), rnd(N, K, H, W)
    with torch.no_grad():
        z = F.conv2d(x, w, b, padding=1) + F.relu(r0)
    t = [("x", x), ("w", w), ("b", b), ("r0", r0), ("y", F.relu(z)), ("y_norelu", z)]
    return save(folder, "op_conv2d_add.safetensors", t, dict(op="conv2d_add", pad=1))


def op_optim(folder, fname, seed, make, meta):
    torch.manual_seed(seed)
    n, steps = 50, 10
    p0 = rnd(n)
    g = rnd(steps, n)
    p = p0.clone().requires_grad_()
    opt = make([p])
    ps = []
    for i in range(steps):
        p.grad = g[i].clone()
        opt.step()
        ps.append(p.detach().clone())
    meta = dict(meta, n=n, steps=steps)
    return save(folder, fname, [("p0", p0), ("g", g), ("p", torch.stack(ps))], meta)


def op_clip_grad_norm(folder, fname, seed, max_norm):
    """torch.nn.utils.clip_grad_norm_ over two parameters (one global L2 norm)."""
    torch.manual_seed(seed)
    a, b = rnd(30).requires_grad_(), rnd(4, 5).requires_grad_()
    ga, gb = rnd(30), rnd(4, 5)
    a.grad, b.grad = ga.clone(), gb.clone()
    total = torch.nn.utils.clip_grad_norm_([a, b], max_norm, norm_type=2.0)
    return save(folder, fname, [("ga", ga), ("gb", gb), ("total_norm", total.detach().reshape(())),
                                ("ga_clipped", a.grad.clone()), ("gb_clipped", b.grad.clone())],
                dict(op="clip_grad_norm", max_norm=fl(max_norm), norm_type=fl(2.0)))


# ---------------------------------------------------------------------------
# optimizers over several parameter tensors: the decay filter (no weight decay
# on tensors of fewer than 2 dims) and the layer-wise optimizers, whose updates
# depend on each tensor's norms. LAMB, LARS and NovoGrad are plain float64
# transcriptions of their papers' updates (torch.optim has none of them).
# ---------------------------------------------------------------------------
MULTI_SHAPES = [("w", (6, 5)), ("b", (5,)), ("z", (7,)), ("k", (3, 2, 4))]  # z starts at 0: ||w|| = 0


def lamb_step(ps, gs, st, t, lr, b1, b2, eps, wd):
    """You et al. 2019 (LAMB, with bias correction; APEX FusedLAMB, use_nvlamb=True):
    Adam's moments, update u = m^/(sqrt(v^)+eps) + wd*w, w -= lr * ||w||/||u|| * u,
    the ratio 1 when either norm is 0."""
    for k, (p, g) in enumerate(zip(ps, gs)):
        m, v = st.setdefault(("m", k), torch.zeros_like(p)), st.setdefault(("v", k), torch.zeros_like(p))
        m.mul_(b1).add_((1 - b1) * g)
        v.mul_(b2).add_((1 - b2) * g * g)
        u = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps) + (wd if p.dim() >= 2 else 0.0) * p
        wn, un = p.norm().item(), u.norm().item()
        ratio = wn / un if wn > 0 and un > 0 else 1.0
        p.sub_(lr * ratio * u)


def lars_step(ps, gs, st, t, lr, momentum, trust, wd):
    """You et al. 2017 (LARS, Algorithm 1): local_lr = eta*||w|| / (||g|| + wd*||w||)
    (1 when either norm is 0), v = momentum*v + lr*local_lr*(g + wd*w), w -= v."""
    for k, (p, g) in enumerate(zip(ps, gs)):
        buf = st.setdefault(("buf", k), torch.zeros_like(p))
        d = wd if p.dim() >= 2 else 0.0
        wn, gn = p.norm().item(), g.norm().item()
        local = trust * wn / (gn + d * wn) if wn > 0 and gn > 0 else 1.0
        buf.mul_(momentum).add_(lr * local * (g + d * p))
        p.sub_(buf)


def novograd_step(ps, gs, st, t, lr, b1, b2, eps, wd):
    """Ginsburg et al. 2019 (NovoGrad, Algorithm 1; NVIDIA NeMo's Novograd):
    per tensor v = ||g||^2 on the first step, then b2*v + (1-b2)*||g||^2;
    m = b1*m + (g/(sqrt(v)+eps) + wd*w); w -= lr*m."""
    for k, (p, g) in enumerate(zip(ps, gs)):
        m = st.setdefault(("m", k), torch.zeros_like(p))
        n2 = (g * g).sum().item()
        v = st.get(("v", k), 0.0)
        v = n2 if v == 0 else b2 * v + (1 - b2) * n2
        st[("v", k)] = v
        m.mul_(b1).add_(g / (v ** 0.5 + eps) + (wd if p.dim() >= 2 else 0.0) * p)
        p.sub_(lr * m)


def torch_groups_step(make):
    """torch.optim over nanoGPT's two groups: weight decay for tensors of 2+ dims only"""
    def step(ps, gs, st, t):
        if "opt" not in st:
            st["opt"] = make([{"params": [p for p in ps if p.dim() >= 2]},
                              {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0}])
        for p, g in zip(ps, gs):
            p.grad = g.clone()
        st["opt"].step()
    return step


def op_optim_multi(folder, fname, seed, step, meta, steps=10):
    """`steps` updates of the MULTI_SHAPES tensors (random, z at 0) by step(ps, gs, state, t)
    on random gradients; flat concatenations p0 [N], g [steps, N], p [steps, N]."""
    torch.manual_seed(seed)
    ps = [rnd(*s) if n != "z" else torch.zeros(s, dtype=D) for n, s in MULTI_SHAPES]
    p0 = torch.cat([p.flatten() for p in ps]).clone()
    ps = [p.clone().requires_grad_(False) for p in ps]
    st, gflat, pflat = {}, [], []
    for t in range(1, steps + 1):
        gs = [rnd(*s) for _, s in MULTI_SHAPES]
        with torch.no_grad():
            step(ps, gs, st, t)
        gflat.append(torch.cat([g.flatten() for g in gs]))
        pflat.append(torch.cat([p.detach().flatten() for p in ps]).clone())
    shapes = ",".join(n + ":" + "x".join(str(d) for d in s) for n, s in MULTI_SHAPES)
    meta = dict(meta, steps=steps, shapes=shapes, decays=",".join("1" if len(s) >= 2 else "0" for _, s in MULTI_SHAPES))
    return save(folder, fname, [("p0", p0), ("g", torch.stack(gflat)), ("p", torch.stack(pflat))], meta)


def optim_multi_fixtures(folder):
    lamb = dict(lr=1e-2, b1=0.9, b2=0.999, eps=1e-6, wd=0.1)
    op_optim_multi(folder, "op_lamb.safetensors", 100, lambda ps, gs, st, t: lamb_step(ps, gs, st, t, **lamb),
                   dict(optimizer="lamb", lr=fl(1e-2), beta1=fl(0.9), beta2=fl(0.999), eps=fl(1e-6), weight_decay=fl(0.1)))
    lars = dict(lr=1.0, momentum=0.9, trust=0.02, wd=0.1)
    op_optim_multi(folder, "op_lars.safetensors", 101, lambda ps, gs, st, t: lars_step(ps, gs, st, t, **lars),
                   dict(optimizer="lars", lr=fl(1.0), momentum=fl(0.9), trust=fl(0.02), weight_decay=fl(0.1)))
    nov = dict(lr=1e-2, b1=0.95, b2=0.98, eps=1e-8, wd=0.1)
    op_optim_multi(folder, "op_novograd.safetensors", 102, lambda ps, gs, st, t: novograd_step(ps, gs, st, t, **nov),
                   dict(optimizer="novograd", lr=fl(1e-2), beta1=fl(0.95), beta2=fl(0.98), eps=fl(1e-8),
                        weight_decay=fl(0.1)))
    op_optim_multi(folder, "op_adamw_groups.safetensors", 103,
                   torch_groups_step(lambda g: torch.optim.AdamW(g, lr=1e-2, betas=(0.9, 0.999), eps=1e-8,
                                                                 weight_decay=0.1)),
                   dict(optimizer="adamw", lr=fl(1e-2), beta1=fl(0.9), beta2=fl(0.999), eps=fl(1e-8),
                        weight_decay=fl(0.1), groups="weight decay on tensors of 2+ dims only"))
    op_optim_multi(folder, "op_sgd_groups.safetensors", 104,
                   torch_groups_step(lambda g: torch.optim.SGD(g, lr=0.1, momentum=0.9, weight_decay=0.1)),
                   dict(optimizer="sgd", lr=fl(0.1), momentum=fl(0.9), weight_decay=fl(0.1),
                        groups="weight decay on tensors of 2+ dims only"))


# (decay, lr, min_lr, warmup, total, gamma, step_size, batches per epoch): kiln_lr_at's cases
LR_CASES = [("cosine", 1e-3, 1e-4, 5, 40, 0, 1, 40), ("linear", 0.1, 0.0, 0, 25, 0, 1, 25),
            ("step", 1.0, 0.0, 3, 12, 0.7, 1, 4), ("none", 3e-4, 0.0, 10, 20, 0, 1, 20)]


def lr_at(decay, lr, min_lr, warmup, total, gamma, step_size, s, epoch):
    """nanoGPT's get_lr (lr_decay_iters = total) with warmup lr*(s+1)/warmup, or StepLR per epoch"""
    if decay == "step":
        lr = lr * gamma ** (epoch // step_size)
    if s < warmup:
        return lr * (s + 1) / warmup
    q = min(1.0, max(0.0, (s - warmup) / (total - warmup))) if total > warmup else 1.0
    if decay == "cosine":
        return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * q))
    if decay == "linear":
        return lr - (lr - min_lr) * q
    return lr


def lr_schedules(folder):
    t = []
    for c in LR_CASES:
        t.append(("lr." + c[0], torch.tensor([lr_at(*c[:7], s, s // c[7]) for s in range(c[4])], dtype=D)))
    return save(folder, "lr_schedule.safetensors", t,
                dict(cases=" ".join(",".join(str(v) for v in c) for c in LR_CASES),
                     fields="decay,lr,min_lr,warmup,total,gamma,step_size,batches_per_epoch"))


# ---------------------------------------------------------------------------
# mnist-cnn (exactly /work/shared/bench/pytorch_mnist.py's Net)
# ---------------------------------------------------------------------------
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


PARAM_NAMES = ["conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
               "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    assert zero == 0 and dtype == 0x08
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def state(model, prefix=""):
    sd = model.state_dict()
    assert list(sd) == PARAM_NAMES, list(sd)
    return [(prefix + k, sd[k].detach().clone()) for k in PARAM_NAMES]


def golden_model():
    """The golden run's initial model: torch.manual_seed(1) Net()."""
    torch.manual_seed(1)
    return Net()


def mnist_golden(folder):
    """The batch, logp0, 5 Adadelta losses and the final weights. The initial
    weights are not repeated here: they are state_dict_pt.safetensors (same seed).
    fc1.weight (1.2M values) is summarised by checksums and its first two rows."""
    B, STEPS, LR, RHO, EPS = 64, 5, 1.0, 0.9, 1e-6
    images = read_idx(os.path.join(DATA, "train-images-idx3-ubyte.gz"))[:B]
    labels = read_idx(os.path.join(DATA, "train-labels-idx1-ubyte.gz"))[:B]
    # exactly the reference's per-sample transform, batched (elementwise, same ops)
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    x = (x - 0.1307) / 0.3081
    assert x.dtype == torch.float32 and x.shape == (B, 1, 28, 28)
    y = torch.from_numpy(labels.astype(np.int64))

    model = golden_model()
    model.eval()  # dropout off
    with torch.no_grad():
        logp0 = model(x)
    opt = torch.optim.Adadelta(model.parameters(), lr=LR, rho=RHO, eps=EPS)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = F.nll_loss(model(x), y)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    final = [(n, t) for n, t in state(model, "final.") if n != "final.fc1.weight"]
    fc1 = model.fc1.weight.detach().clone()
    fc1d = fc1.to(torch.float64)
    checks = [("final_fc1_sum", fc1d.sum()), ("final_fc1_abs_sum", fc1d.abs().sum()),
              ("final.fc1.weight.rows01", fc1[:2].clone())]
    t = [("x", x), ("y", y.to(torch.int32)), ("logp0", logp0),
         ("losses", torch.tensor(losses, dtype=torch.float64))] + final + checks
    save(folder, "mnist_golden.safetensors", t,
         dict(model="mnist-cnn", dataset="fashion-mnist train[0:64]",
              normalize="((u8/255) - 0.1307) / 0.3081 in float32", dropout="off (eval mode)",
              init="state_dict_pt.safetensors (torch.manual_seed(1); Net())",
              init_seed=1, optimizer="adadelta", lr=fl(LR), rho=fl(RHO), eps=fl(EPS),
              weight_decay=fl(0.0), steps=STEPS, batch_size=B, loss="nll_loss(mean)",
              fc1_weight="final_fc1_sum, final_fc1_abs_sum (float64 sums of the float32 "
                         "weights), final.fc1.weight.rows01 = final.fc1.weight[:2]",
              threads=1))
    return losses


def state_dict_pt(folder):
    """The golden run's initial weights, in the Hugging Face safetensors torch layout."""
    save(folder, "state_dict_pt.safetensors", state(golden_model()), {"format": "pt"},
         pt_layout=True)


# ---------------------------------------------------------------------------
class BasicBlock(nn.Module):
    """the CIFAR ResNet's block, exactly ../shared/bench/peers/conv_bench.py's"""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.stride, self.pad = stride, cout - cin

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        sc = x
        if self.stride != 1 or self.pad:  # option A: subsample, zero-pad channels
            sc = F.pad(x[:, :, ::self.stride, ::self.stride],
                       (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(out + sc)


class ResNet20(nn.Module):
    def __init__(self, num_classes=10, n=3):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers, cin = [], 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(n):
                layers.append(BasicBlock(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layers(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def resnet20_golden(folder):
    """PyTorch's initial resnet20 (f32, seed 0), a batch of 4, and in float64
    from those weights: the loss and every parameter's gradient (stored f32),
    then 3 SGD steps (lr 0.1, momentum 0.9, weight decay 5e-4) on the batch:
    their losses and the batch norms' running statistics after them."""
    B, STEPS = 4, 3
    torch.manual_seed(0)
    model = ResNet20()
    init = [(k, v.detach().clone()) for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")
            and not k.endswith("running_mean") and not k.endswith("running_var")]
    x = torch.randn(B, 3, 32, 32)
    y = torch.randint(0, 10, (B,))
    model = model.double().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    losses, grads0 = [], None
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x.double()), y)
        losses.append(loss.item())
        loss.backward()
        if grads0 is None:
            grads0 = [("grad." + n, p.grad.detach().float().clone()) for n, p in model.named_parameters()]
        opt.step()
    stats = [("after." + k, v.detach().clone() if v.dtype == torch.int64 else v.detach().float().clone())
             for k, v in model.state_dict().items()
             if k.endswith("running_mean") or k.endswith("running_var") or k.endswith("num_batches_tracked")]
    t = ([("x", x), ("y", y.to(torch.int32)), ("losses", torch.tensor(losses, dtype=torch.float64))] +
         [("w." + k, v) for k, v in init] + grads0 + stats)
    save(folder, "resnet20_golden.safetensors", t,
         dict(model="resnet20", batch=B, steps=STEPS, lr=fl(0.1), momentum=fl(0.9), weight_decay=fl(5e-4),
              precision="weights f32, loss, gradients and steps computed in float64"))


def gpt_forward(p, x, y, L, H):
    """GPT-2's forward with HF names (Conv1D weights [in, out]), tied embeddings, GELU-tanh"""
    B, T = x.shape
    C = p["wte.weight"].shape[1]
    h = p["wte.weight"][x] + p["wpe.weight"][:T]
    for i in range(L):
        q = lambda n: p["h.%d.%s" % (i, n)]
        a = F.layer_norm(h, (C,), q("ln_1.weight"), q("ln_1.bias"))
        qkv = a @ q("attn.c_attn.weight") + q("attn.c_attn.bias")
        qq, kk, vv = [t.view(B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=2)]
        att = (qq @ kk.transpose(-2, -1)) / math.sqrt(C // H)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).tril().logical_not(), float("-inf"))
        o = (F.softmax(att, dim=-1) @ vv).transpose(1, 2).contiguous().view(B, T, C)
        h = h + o @ q("attn.c_proj.weight") + q("attn.c_proj.bias")
        m = F.layer_norm(h, (C,), q("ln_2.weight"), q("ln_2.bias"))
        m = F.gelu(m @ q("mlp.c_fc.weight") + q("mlp.c_fc.bias"), approximate="tanh")
        h = h + m @ q("mlp.c_proj.weight") + q("mlp.c_proj.bias")
    h = F.layer_norm(h, (C,), p["ln_f.weight"], p["ln_f.bias"])
    logits = h @ p["wte.weight"].t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def gpt_golden(folder):
    """A 2-layer GPT (2 heads, 16 wide, block 8, vocab 256) with random weights
    (biases and layer norms random too), a batch of 2 windows: in float64 the
    loss and every parameter's gradient, then 3 AdamW steps (lr 1e-3, betas
    0.9/0.95, no weight decay) with clipping to norm 1: their losses."""
    L, H, C, T, V, B, STEPS = 2, 2, 16, 8, 256, 2, 3
    torch.manual_seed(7)
    shapes = [("wte.weight", (V, C)), ("wpe.weight", (T, C))]
    for i in range(L):
        for n, s in [("ln_1.weight", (C,)), ("ln_1.bias", (C,)), ("attn.c_attn.weight", (C, 3 * C)),
                     ("attn.c_attn.bias", (3 * C,)), ("attn.c_proj.weight", (C, C)), ("attn.c_proj.bias", (C,)),
                     ("ln_2.weight", (C,)), ("ln_2.bias", (C,)), ("mlp.c_fc.weight", (C, 4 * C)),
                     ("mlp.c_fc.bias", (4 * C,)), ("mlp.c_proj.weight", (4 * C, C)), ("mlp.c_proj.bias", (C,))]:
            shapes.append(("h.%d.%s" % (i, n), s))
    shapes += [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    init = {}
    for n, s in shapes:
        v = torch.randn(*s) * (0.3 if len(s) == 2 else 0.1)
        if n.endswith("ln_1.weight") or n.endswith("ln_2.weight") or n == "ln_f.weight":
            v = v + 1
        init[n] = v.float()
    x = torch.randint(0, V, (B, T))
    y = torch.randint(0, V, (B, T))
    p = {n: v.double().requires_grad_() for n, v in init.items()}
    opt = torch.optim.AdamW(list(p.values()), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.0)
    losses, grads0 = [], None
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = gpt_forward(p, x, y, L, H)
        losses.append(loss.item())
        loss.backward()
        if grads0 is None:
            grads0 = [("grad." + n, t.grad.detach().float().clone()) for n, t in p.items()]
        torch.nn.utils.clip_grad_norm_(list(p.values()), 1.0)
        opt.step()
    t = ([("x", x.to(torch.float32)), ("y", y.to(torch.int32)), ("losses", torch.tensor(losses, dtype=D))] +
         [("w." + n, v) for n, v in init.items()] + grads0)
    save(folder, "gpt_golden.safetensors", t,
         dict(model="gpt", layers=L, heads=H, dim=C, block=T, vocab=V, batch=B, steps=STEPS, lr=fl(1e-3),
              beta1=fl(0.9), beta2=fl(0.95), clip=fl(1.0),
              precision="weights f32, loss, gradients and steps computed in float64"))


def resnet_names(folder, name):
    """torchvision's resnetNN(num_classes=10) state_dict: every name and shape
    (metadata "state_dict": "name:d0xd1x... " in order), its parameter count,
    (the weights, 45 MB and more, are not shipped)."""
    import torchvision
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10)
    sd = model.state_dict()
    text = " ".join(k + ":" + "x".join(str(d) for d in v.shape) for k, v in sd.items())
    nparams = sum(p.numel() for p in model.parameters())
    save(folder, name + "_names.safetensors", [("nparams", torch.tensor([nparams], dtype=torch.int64))],
         dict(model=f"torchvision.models.{name}(num_classes=10)", state_dict=text))


def nanogpt_attention(q, k, v, heads):
    """nanoGPT's CausalSelfAttention between its projections: plain (materialised) attention.
    Also returns each score row's logsumexp, which kiln saves for backward."""
    B, T, C = q.shape
    q, k, v = (t.view(B, T, heads, C // heads).transpose(1, 2) for t in (q, k, v))
    att = (q @ k.transpose(-2, -1)) * (1.0 / (k.size(-1) ** 0.5))
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T)
    att = att.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(att, dim=-1)
    y = F.softmax(att, dim=-1) @ v
    return y.transpose(1, 2).contiguous().view(B, T, C), lse


def op_causal_attention(folder, fname, seed, B, T, C, heads):
    """q, k, v: the column thirds of one [B, T, 3C] tensor x (c_attn's output); dx holds all three gradients"""
    torch.manual_seed(seed)
    qkv = rnd(B, T, 3 * C).requires_grad_()
    y, lse = nanogpt_attention(*qkv.split(C, dim=2), heads)
    dy = rnd(*y.shape)
    (dqkv,) = grads(y, dy, qkv)
    return save(folder, fname, [("x", qkv), ("y", y), ("lse", lse.detach()), ("dy", dy), ("dx", dqkv)],
                dict(op="causal_attention", heads=heads))


def op_bmm(folder):
    """a @ b over two leading dims, b a transposed view of bt (q @ k^T's pattern)"""
    torch.manual_seed(22)
    a, bt = rnd(2, 3, 4, 5).requires_grad_(), rnd(2, 3, 6, 5).requires_grad_()
    y = a @ bt.transpose(-2, -1)
    dy = rnd(*y.shape)
    da, dbt = grads(y, dy, a, bt)
    return save(folder, "op_bmm.safetensors",
                [("a", a), ("bt", bt), ("y", y), ("dy", dy), ("da", da), ("dbt", dbt)], dict(op="bmm"))


def generate(folder):
    os.makedirs(folder, exist_ok=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    print(f"writing fixtures to {folder} (torch {torch.__version__})")
    op_conv2d(folder, "op_conv2d_a.safetensors", 10, 2, 3, 7, 7, 4, 3, 3, 1, 0, True)
    op_conv2d(folder, "op_conv2d_b.safetensors", 11, 2, 3, 8, 8, 5, 3, 3, 2, 1, True)
    op_conv2d(folder, "op_conv2d_c.safetensors", 12, 2, 4, 6, 6, 3, 5, 5, 1, 2, False)
    op_conv2d(folder, "op_conv2d_d.safetensors", 13, 2, 5, 4, 4, 3, 1, 1, 1, 0, False)
    op_conv2d(folder, "op_conv2d_grouped.safetensors", 14, 2, 4, 9, 9, 6, 3, 3, 2, 2, True, 2, 2)
    op_conv2d(folder, "op_conv2d_depthwise.safetensors", 15, 2, 5, 7, 7, 5, 3, 3, 1, 1, False, 1, 5)
    op_linear(folder)
    op_matmul(folder)
    op_relu(folder)
    op_max_pool(folder, "op_max_pool2d.safetensors", 40, (2, 3, 6, 6), 2, 2)
    op_max_pool(folder, "op_max_pool2d_k3s2.safetensors", 41, (2, 3, 7, 7), 3, 2)
    op_max_pool(folder, "op_max_pool2d_k3s2p1.safetensors", 47, (2, 3, 8, 7), 3, 2, 1)  # resnet18's
    op_pool_like(folder, "op_avg_pool2d.safetensors", 42, (2, 3, 7, 7),
                 lambda x: F.avg_pool2d(x, 3, 2, 1),
                 dict(op="avg_pool2d", kernel=3, stride=2, pad=1, count_include_pad=1))
    op_pool_like(folder, "op_avg_pool2d_exclude_pad.safetensors", 43, (2, 2, 6, 5),
                 lambda x: F.avg_pool2d(x, 2, 1, 1, count_include_pad=False),
                 dict(op="avg_pool2d", kernel=2, stride=1, pad=1, count_include_pad=0))
    op_pool_like(folder, "op_adaptive_avg_pool2d.safetensors", 44, (2, 3, 7, 5),
                 lambda x: F.adaptive_avg_pool2d(x, (3, 2)), dict(op="adaptive_avg_pool2d", out_h=3, out_w=2))
    op_pool_like(folder, "op_adaptive_avg_pool2d_global.safetensors", 45, (2, 4, 6, 6),
                 lambda x: F.adaptive_avg_pool2d(x, 1), dict(op="adaptive_avg_pool2d", out_h=1, out_w=1))
    op_pool_like(folder, "op_shortcut_a.safetensors", 46, (2, 4, 7, 6), lambda x: shortcut_a(x, 4),
                 dict(op="shortcut_a", pad=4))
    op_pool_like(folder, "op_subsample_pad.safetensors", 53, (2, 3, 8, 7), lambda x: subsample_pad(x, 3, 1, 2),
                 dict(op="subsample_pad", stride=3, before=1, after=2))
    pointwise_fixtures(folder)
    op_log_softmax(folder)
    op_nll_loss(folder, "op_nll_loss.safetensors", 60, False)
    op_nll_loss(folder, "op_nll_loss_dloss.safetensors", 61, True)
    op_log_softmax_wide(folder)
    op_cross_entropy(folder)
    op_cross_entropy_wide(folder)
    op_cross_entropy_masked(folder)
    op_mse_loss(folder)
    op_binary(folder, "add", 80, lambda a, b: a + b)
    op_binary(folder, "mul", 81, lambda a, b: a * b)
    op_batch_norm2d(folder)
    op_bn_fold(folder)
    op_conv2d_add(folder)
    op_embedding(folder)
    op_layer_norm(folder)
    op_gelu(folder, "op_gelu.safetensors", 112, "none")
    op_gelu(folder, "op_gelu_tanh.safetensors", 115, "tanh")
    op_softmax(folder)
    op_add_bcast(folder)
    op_bmm(folder)
    op_causal_attention(folder, "op_causal_attention.safetensors", 23, 2, 37, 24, 3)      # D = 8, 2 tiles of rows
    op_causal_attention(folder, "op_causal_attention_d64.safetensors", 24, 1, 34, 64, 1)  # GPT's D = 64
    op_causal_attention(folder, "op_causal_attention_d40.safetensors", 25, 2, 45, 80, 2)  # D = 40: 32 + 16 columns
    op_optim(folder, "op_adadelta.safetensors", 90,
             lambda ps: torch.optim.Adadelta(ps, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0),
             dict(optimizer="adadelta", lr=fl(1.0), rho=fl(0.9), eps=fl(1e-6), weight_decay=fl(0)))
    op_optim(folder, "op_sgd.safetensors", 91,
             lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0, weight_decay=1e-2,
                                        nesterov=True),
             dict(optimizer="sgd", lr=fl(0.1), momentum=fl(0.9), dampening=fl(0),
                  weight_decay=fl(1e-2), nesterov=1))
    op_optim(folder, "op_adamw.safetensors", 92,
             lambda ps: torch.optim.AdamW(ps, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                          weight_decay=1e-2, amsgrad=False),
             dict(optimizer="adamw", lr=fl(1e-3), beta1=fl(0.9), beta2=fl(0.999), eps=fl(1e-8),
                  weight_decay=fl(1e-2), amsgrad=0))
    op_clip_grad_norm(folder, "op_clip_grad_norm.safetensors", 95, 1.0)      # clips
    op_clip_grad_norm(folder, "op_clip_grad_norm_noop.safetensors", 96, 1e3)  # leaves the gradients
    optim_multi_fixtures(folder)
    lr_schedules(folder)
    losses = mnist_golden(folder)
    print("  golden losses: " + " ".join(repr(v) for v in losses))
    state_dict_pt(folder)
    resnet20_golden(folder)
    gpt_golden(folder)
    for name in ("resnet18", "resnet34", "resnet50"):
        resnet_names(folder, name)
    for fname in sorted(os.listdir(folder)):
        if fname.endswith(".safetensors") and fname not in WRITTEN:
            os.remove(os.path.join(folder, fname))
            print(f"  removed stale {fname}")


def check(folder):
    total, ok = 0, True
    for fname in sorted(os.listdir(folder)):
        if not fname.endswith(".safetensors"):
            continue
        path = os.path.join(folder, fname)
        with open(path, "rb") as f:
            buf = f.read()
        try:
            tensors, meta, order = decode(buf, path)
        except Exception as e:  # noqa: BLE001
            print(f"FAIL {e}")
            ok = False
            continue
        total += len(buf)
        print(f"{fname} ({len(buf)} bytes)")
        for name in order:
            a = tensors[name]
            dt = {v: k for k, v in NP_OF.items()}[a.dtype.str]
            print(f"    {name:16s} {dt} {list(a.shape)}")
            if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
                print(f"FAIL {path}: {name} has non-finite values")
                ok = False
        print("    metadata: " + ", ".join(f"{k}={v}" for k, v in meta.items()))
    print(f"total {total} bytes")
    return ok


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    if len(args) != 1 or any(a not in ("--check",) for a in argv if a.startswith("--")):
        sys.exit(__doc__)
    if "--check" in argv:
        sys.exit(0 if check(args[0]) else 1)
    generate(args[0])
    if not check(args[0]):
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
