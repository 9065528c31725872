#!/usr/bin/python3
# Fits the 8-piece erf of src/kernels/cpu/pointwise_math.h (KILN_ERF8_TAB, the
# AVX2 form): piece i = round(u) of u = min(2|x|, 8), clamped to 7, a degree-9
# polynomial in t = u - i by least squares on Chebyshev nodes (the first piece
# through 0, the last reaching u = 8), checked in float on a dense grid.
# Prints the table's rows (the coefficient of t^k, pieces 0-7). numpy only.
import numpy as np
from math import erf
verf = np.vectorize(erf)
D = 9  # degree
pieces = []
for i in range(8):
    lo, hi = (-0.5, 0.5)
    if i == 0: lo = 0.0
    if i == 7: hi = 1.0
    n = 4000
    k = np.arange(n)
    t = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / n)
    x = (i + t) / 2
    y = verf(x)
    if i == 0:
        A = np.stack([t ** p for p in range(1, D + 1)], 1)
        c = np.linalg.lstsq(A, y, rcond=None)[0]
        c = np.concatenate([[0.0], c])
    else:
        A = np.stack([t ** p for p in range(0, D + 1)], 1)
        # weight: relative near... absolute error is the bound
        c = np.linalg.lstsq(A, y, rcond=None)[0]
    # refine in float32: iterate on residual (Lawson-like simple reweighting skipped)
    pieces.append(c)
C = np.array(pieces)  # [8, D+1]
# evaluate in float32 horner with fma approx
def ev(x):
    x = np.float32(x)
    u = np.minimum(np.abs(x) * np.float32(2), np.float32(8))
    i = np.minimum(np.floor(u + np.float32(0.5)), 7).astype(int)
    t = (u - i).astype(np.float32)
    Cf = C.astype(np.float32)
    r = Cf[i, D]
    for j in range(D - 1, -1, -1):
        r = (r.astype(np.float64) * t + Cf[i, j]).astype(np.float32)
    return np.minimum(r, np.float32(1)) * np.sign(x)
xs = np.linspace(-5, 5, 2000001).astype(np.float32)
err = np.abs(ev(xs).astype(np.float64) - verf(xs.astype(np.float64)))
print("max abs err", err.max(), "at", xs[err.argmax()])
small = xs[(np.abs(xs) < 1e-3) & (xs != 0)]
rel = np.abs(ev(small) / verf(small.astype(np.float64)) - 1)
print("rel near 0", rel.max())
for j in range(D + 1):
    print("    {" + ", ".join("%.9ef" % v for v in C[:, j].astype(np.float32)) + "}, \\")
