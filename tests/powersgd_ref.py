#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""powersgd_ref.py - the PowerSGD codec against a numpy reference.

Runs `test_powersgd --dump DIR` (fixed inputs through the C encoder and
decoder) and recomputes every case in float64 with numpy:
  Q0 from the same SplitMix64 generator and seed, columns scaled to unit length;
  P = M Q0, orthonormalized (Gram-Schmidt for r <= 4, numpy's Householder QR
  for larger r; column signs aligned, as QR conventions may differ);
  Q = M^T P;  approximation = P Q^T over the first n values.
Checks P, Q and the approximation against the C bits with relative tolerances
(float32 arithmetic in C vs float64 here), P^T P against I, and prints the
differences. Exit 77 (skip) without numpy.
usage: powersgd_ref.py TEST_POWERSGD
"""
import os
import subprocess
import sys
import tempfile

SKIP = 77  # the exit status meson counts as "skipped"

try:
    import numpy as np
except ImportError:
    print("numpy is not installed (Debian: python3-numpy); skipped")
    sys.exit(SKIP)

M64 = (1 << 64) - 1


def splitmix(s):
    s = (s + 0x9E3779B97F4A7C15) & M64
    z = s
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def mix64(seed, ctr):
    return splitmix(seed ^ ((ctr * 0xD1B54A32D192ED03) & M64))


def q0(seed, cols, r):
    s0 = mix64(seed, 0)
    v = [np.float32((mix64(s0, t) >> 40) * 2.0 ** -23) - np.float32(1.0)
         for t in range(cols * r)]
    q = np.array(v, dtype=np.float64).reshape(r, cols).T   # column-major
    return q / np.linalg.norm(q, axis=0)


def orthonormalize(p):
    r = p.shape[1]
    if r > 4:
        return np.linalg.qr(p)[0]
    p = p.copy()
    for k in range(r):
        for _ in range(2):
            for j in range(k):
                p[:, k] -= (p[:, j] @ p[:, k]) * p[:, j]
        p[:, k] /= np.linalg.norm(p[:, k])
    return p


def rel(a, b):
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)


def check(path):
    raw = open(path, "rb").read()
    n, rows, cols, r, seed = np.frombuffer(raw[:40], dtype="<u8")
    n, rows, cols, r = int(n), int(rows), int(cols), int(r)
    f = np.frombuffer(raw[40:], dtype="<f4").astype(np.float64)
    x, f = f[:n], f[n:]
    pc, f = f[:rows * r].reshape(r, rows).T, f[rows * r:]
    qc, f = f[:cols * r].reshape(r, cols).T, f[cols * r:]
    yc = f[:n]
    assert len(f) == n, "dump length"

    m = np.zeros(rows * cols)
    m[:n] = x
    m = m.reshape(rows, cols)
    p = orthonormalize(m @ q0(int(seed), cols, r))
    sign = np.sign(np.sum(p * pc, axis=0))
    p *= sign
    q = m.T @ p
    q_from_c = m.T @ pc
    a = (pc @ qc.T).reshape(-1)[:n]
    ortho = np.abs(pc.T @ pc - np.eye(r)).max()
    errs = {
        "P": rel(pc, p), "Q": rel(qc, q), "Q=M^T P(C)": rel(qc, q_from_c),
        "approx": rel(yc, a), "P^T P - I": ortho,
    }
    print("%s: %d x %d rank %d: " % (os.path.basename(path), rows, cols, r) +
          ", ".join("%s %.1e" % kv for kv in errs.items()))
    ok = (errs["P"] < 1e-5 and errs["Q"] < 1e-5 and errs["Q=M^T P(C)"] < 1e-5
          and errs["approx"] < 1e-6 and ortho < 1e-5)
    # The approximation is a projection: it never exceeds the input.
    ok = ok and np.linalg.norm(yc) <= np.linalg.norm(x) * (1 + 1e-5)
    return ok


def main():
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([sys.argv[1], "--dump", d], check=True)
        files = sorted(os.listdir(d))
        if len(files) < 5:
            print("too few cases dumped")
            return 1
        bad = [f for f in files if not check(os.path.join(d, f))]
    if bad:
        print("FAILED:", " ".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
