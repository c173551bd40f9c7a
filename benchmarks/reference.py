"""How fast and how lean is the numpy reference model at real sizes?

Prints one table: per workload, the median time of pw.reference beside a
hand-written numpy version in the same process, and the peak memory the
reference allocates beyond its inputs (tracemalloc sees numpy buffers).
The target (issue 2): a 1024x1024x1024 float32 matmul in seconds and under
1 GiB extra, also when the contraction fast path does not apply ("generic").

    .venv/bin/python benchmarks/reference.py [--repeat N]
"""

from __future__ import annotations

import argparse
import functools
import tracemalloc

import numpy as np
from timing import median_seconds

import ptowsp as pw
from ptowsp.workloads import zoo


def matmul_generic(n: int) -> pw.Workload:
    """The same matmul written so the einsum fast path cannot see it (a no-op guard)."""
    wl = pw.Workload("matmul_generic")
    a, b = wl.input("A", (n, n)), wl.input("B", (n, n))
    k = pw.reduce_axis(n, "k")
    wl.output(wl.compute("C", (n, n), lambda i, j: pw.sum(pw.where(k >= 0, a[i, k], 0.0) * b[k, j], k)))
    return wl


def conv_numpy(x, w):
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    h, wd = x.shape[2:]
    return sum(np.einsum("nchw,oc->nohw", xp[:, :, r:r + h, s:s + wd], w[:, :, r, s])
               for r in range(3) for s in range(3))


CASES = [
    ("matmul 1024^3", lambda: zoo.matmul(1024, 1024, 1024), lambda p: p["A"] @ p["B"]),
    ("matmul 1024^3 generic", lambda: matmul_generic(1024), lambda p: p["A"] @ p["B"]),
    ("conv2d 8x64x56x56, 64 out", lambda: zoo.conv2d(8, 64, 56, 56, 64, 3, 1, 1), lambda p: conv_numpy(p["X"], p["W"])),
    ("softmax 4096x1024", lambda: zoo.softmax(4096, 1024),
     lambda p: (lambda e: e / e.sum(1, keepdims=True))(np.exp(p["X"] - p["X"].max(1, keepdims=True)))),
]


def peak_extra_bytes(fn) -> int:
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'workload':28} {'reference':>12} {'numpy':>10} {'ratio':>7} {'ref peak extra':>15}")
    for name, make, numpy_fn in CASES:
        wl = make()
        rng = np.random.default_rng(0)
        inputs = {n: rng.standard_normal(wl.tensor(n).shape).astype(np.float32) for n in wl.inputs}
        run_ours = functools.partial(pw.reference, wl, **inputs)
        ours = median_seconds(run_ours, args.repeat, warmup=0)
        theirs = median_seconds(functools.partial(numpy_fn, inputs), args.repeat, warmup=0)
        peak = peak_extra_bytes(run_ours)
        print(f"{name:28} {ours * 1e3:10.1f}ms {theirs * 1e3:8.1f}ms {ours / theirs:6.1f}x {peak / 2**20:12.1f}MiB")


if __name__ == "__main__":
    main()
