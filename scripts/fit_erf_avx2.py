#!/usr/bin/python3
# Fits the 4-piece erf of src/kernels/cpu/pointwise_math.h (KILN_ERF4_TAB, the
# AVX2 form): piece i = round(u) of u = min(|x|, 4), clamped to 3, a degree-9
# polynomial in t = u - i (the first piece through 0, t in [0, 1/2]; the last
# reaching u = 4, t in [-1/2, 1]). Each piece is fitted near-minimax (Lawson's
# reweighted least squares on Chebyshev nodes) one coefficient at a time, in
# float: coefficient j is rounded to float and the rest refitted to what is
# left, so the rounding of the table is compensated by the higher terms (as
# Sollya's fpminimax does). Checked in float (Horner with one rounding per
# step, as the FMAs) on a dense grid; prints the bound and the table's rows (the
# coefficient of t^k, pieces 0-3). numpy only.
import numpy as np
from math import erf

verf = np.vectorize(erf)
D, NP = 9, 4


def lawson(A, y, iters=40):
    w = np.ones(len(y))
    for _ in range(iters):
        sw = np.sqrt(w)
        c = np.linalg.lstsq(A * sw[:, None], y * sw, rcond=None)[0]
        w = w * (np.abs(A @ c - y) + 1e-300)
        w /= w.sum()
    return c


def fit_piece(i):
    lo = 0.0 if i == 0 else -0.5
    hi = 1.0 if i == NP - 1 else 0.5
    k = np.arange(5000)
    t = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / len(k))
    y = verf(i + t)
    first = 1 if i == 0 else 0  # p_0(0) = 0: small x keep their relative accuracy
    c = np.zeros(D + 1)
    for j in range(first, D + 1):
        A = np.stack([t ** p for p in range(j, D + 1)], 1)
        left = y - sum(c[p] * t ** p for p in range(first, j))
        c[j] = np.float32(lawson(A, left)[0])
    return c


C = np.array([fit_piece(i) for i in range(NP)]).astype(np.float32)


def ev(x):
    x = np.float32(x)
    u = np.minimum(np.abs(x), np.float32(NP))
    i = np.minimum(np.floor(u + np.float32(0.5)), NP - 1).astype(int)
    t = (u - i).astype(np.float32)
    r = C[i, D]
    for j in range(D - 1, -1, -1):
        r = (r.astype(np.float64) * t + C[i, j]).astype(np.float32)
    return np.minimum(r, np.float32(1)) * np.sign(x)


xs = np.linspace(-5, 5, 4000001).astype(np.float32)
err = np.abs(ev(xs).astype(np.float64) - verf(xs.astype(np.float64)))
print("max abs err", err.max(), "at", xs[err.argmax()])
small = np.float32(np.logspace(-30, -1, 20000))
print("rel near 0", np.abs(ev(small) / verf(small.astype(np.float64)) - 1).max())
for j in range(D + 1):
    print("    {" + ", ".join("%.9ef" % v for v in C[:, j]) + "}, \\")
