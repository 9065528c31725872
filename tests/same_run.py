"""Two training runs compared (the MPI tests: test_ddp.sh, test_ddp_overlap.sh,
test_sync_bn_mpi.sh, test_dist_resume.sh, test_dist_netns.sh). Each run is a
path prefix P: P.jsonl holds its step losses (--metrics, --log-every 1),
P.safetensors its final checkpoint (--save), read as raw bytes (no torch);
the optimizer's state is left out (it holds gradients, differences of nearly
equal sums).

    same_run.py A B STEPS [--exact] [--losses-only] [--floor F] [--tol T]

Both runs must have STEPS step losses. Default: losses within T (1e-5)
relative and every f32 tensor within T: the norm of the difference against the
tensor's norm, or against F (default 1e-12) when that is smaller. --exact:
the same losses and the same bytes in every tensor, whatever its dtype.
Exits non-zero, saying why, when the runs differ."""
import argparse, json, struct

ap = argparse.ArgumentParser()
ap.add_argument("a")
ap.add_argument("b")
ap.add_argument("steps", type=int)
ap.add_argument("--exact", action="store_true")
ap.add_argument("--losses-only", action="store_true")
ap.add_argument("--floor", type=float, default=1e-12)
ap.add_argument("--tol", type=float, default=1e-5)
o = ap.parse_args()


def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    out = {}
    for k, v in json.loads(b[8:8 + n]).items():
        if k == "__metadata__" or k.startswith("optim.") or (v["dtype"] != "F32" and not o.exact):
            continue
        s, e = v["data_offsets"]
        raw = b[8 + n + s:8 + n + e]
        out[k] = raw if o.exact else struct.unpack(f"<{len(raw) // 4}f", raw)
    return out


def losses(path):
    return [json.loads(l)["loss"] for l in open(path) if '"kind":"step"' in l]


la, lb = losses(o.a + ".jsonl"), losses(o.b + ".jsonl")
assert len(la) == len(lb) == o.steps, (len(la), len(lb))
if o.exact:
    assert la == lb, f"step losses differ: {la} {lb}"
worst = max(abs(x - y) / max(abs(x), abs(y), 1e-3) for x, y in zip(la, lb))
msg = f"{o.b}: {o.steps} step losses within {worst:.2e}"
if not o.losses_only:
    ta, tb = tensors(o.a + ".safetensors"), tensors(o.b + ".safetensors")
    assert ta.keys() == tb.keys() and len(ta) > 0, (sorted(ta), sorted(tb))
    if o.exact:
        diff = [k for k in ta if ta[k] != tb[k]]
        assert not diff, f"{len(diff)} tensors differ, first {diff[0]}"
    else:
        norm = lambda v: sum(x * x for x in v) ** 0.5
        wt = max(norm([x - y for x, y in zip(ta[k], tb[k])]) / max(norm(ta[k]), o.floor) for k in ta)
        msg += f", {len(ta)} tensors within {wt:.2e}"
        worst = max(worst, wt)
print(msg + (" (identical)" if o.exact else " (relative)"))
assert worst < o.tol
