"""A scaling model for data parallel training over more machines, from
figures measured on this one (bench/ddp.sh's note, issue 10): for each model,
the step's forward, backward and optimizer times (`kiln train --profile
--json` over a few steps) and its gradient bytes; gradients in kiln's buckets (the first 1 MiB, then 25 MiB or a quarter of all)
reduced by a ring all-reduce while backward goes on.

  ring all-reduce of S bytes over N nodes:  2 (N - 1) / N * S / B  +  2 (N - 1) * a
  (B: each node's link bandwidth, a: per-message latency)

Backward writes the buckets at an even pace (bucket i ready at (i + 1) / n of
backward); each all-reduce starts when its bucket is ready and the previous
one is done. The exposed time is what is left after backward ends. Prints,
per model, N and bandwidth, the step time and the scaling efficiency
(one node's step / N nodes' step, at the same per-node batch).

usage: ddp_scaling.py RESULT.json... (each the last line of kiln train --profile --json, with "params" added)"""
import json, sys

MIB = 1048576.0
BUCKET = 25 * MIB
LATENCY = 20e-6


def model(name, fwd, bwd, opt, params, n, bw):
    grad = 4.0 * params
    # kiln's buckets (src/dist/buckets.c): the first at most 1 MiB, none above 25 MiB or a quarter of all
    cap, sizes, left = min(BUCKET, grad / 4), [], grad
    while left > 0:
        s = min(left, MIB if not sizes else cap)
        sizes.append(s)
        left -= s
    nb = len(sizes)
    comm, done = 0.0, 0.0
    for i, s in enumerate(sizes):
        ready = bwd * (i + 1) / nb
        t = 2 * (n - 1) / n * s / bw + 2 * (n - 1) * LATENCY
        done = max(ready, done) + t
        comm += t
    exposed = max(0.0, done - bwd)
    step = fwd + bwd + opt + exposed
    return nb, comm, exposed, step


def main():
    rows = [json.load(open(p)) for p in sys.argv[1:]]
    print(f"{'model':10} {'params':>10} {'fwd+bwd+opt ms':>15} {'N':>4} {'link':>9} {'buckets':>8} {'comm ms':>9} "
          f"{'exposed ms':>11} {'step ms':>9} {'efficiency':>11}")
    for r in rows:
        fwd, bwd, opt = r["forward_ms"] / 1e3, r["backward_ms"] / 1e3, r["optimizer_ms"] / 1e3
        for n in (8, 64):
            for gbit in (10, 100):
                bw = gbit * 1e9 / 8
                nb, comm, exposed, step = model(r["model"], fwd, bwd, opt, r["params"], n, bw)
                print(f"{r['model']:10} {r['params']:10d} {1e3 * (fwd + bwd + opt):15.1f} {n:4d} {gbit:>5d} Gb/s "
                      f"{nb:8d} {1e3 * comm:9.1f} {1e3 * exposed:11.1f} {1e3 * step:9.1f} {(fwd + bwd + opt) / step:11.2f}")


if __name__ == "__main__":
    main()
