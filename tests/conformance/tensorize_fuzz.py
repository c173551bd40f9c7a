"""Tensorize under random legal schedules: thousands of (workload, schedule) pairs against numpy.

    python -m tests.conformance.tensorize_fuzz --pairs 5000 [--seed 0] [--failures tensorize-failures.jsonl]

Each pair draws a contraction (float32 matmul for the built-in `gemm`, int8 matmul for `gemm_i8`,
batch_matmul, a matmul with a relu epilogue fused by category, one whose A rows are read 2 or 3
apart) with random sizes, and a random schedule around a tensorized register tile: tile rows and
columns and the k block (divisors of the extents), the order of the tile's inner loops under k,
an optional split and vectorization of the columns, an optional task grid, an optional packed B
panel.  The build and run on cpu (and aicore every fifth pair) must match numpy: exactly for
int8, to 1e-4 for float32.  A pair whose
schedule the matcher refuses counts as refused (a ScheduleError naming what differs), any other
exception or mismatch as a failure, written with its seed and schedule.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

import numpy as np

import ptowsp as pw
from ptowsp.backends.cpu.isa import HostCannotRun


def divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def draw(rng: random.Random):
    """(workload, schedule, inputs, expected, intrinsic)."""
    kind = rng.choice(["gemm", "gemm", "gemm_i8", "batch", "epilogue", "transposed", "strided"])
    m, n, k = rng.choice([4, 8, 12, 16, 24]), rng.choice([16, 32, 48, 64]), rng.choice([8, 12, 16, 30, 32, 64])
    data = np.random.default_rng(rng.randrange(2**32))
    wl = pw.Workload(f"fuzz_{kind}")
    dtype = "int8" if kind == "gemm_i8" or kind == "strided" and rng.random() < 0.5 else "float32"
    batch = (rng.choice([2, 3]),) if kind == "batch" else ()
    step = rng.choice([2, 3]) if kind == "strided" else 1  # A's rows read `step` apart (a strided convolution's pixels)
    a, b = wl.input("A", (*batch, m * step, k), dtype), wl.input("B", (*batch, *((n, k) if kind == "transposed" else (k, n))), dtype)
    r = pw.reduce_axis(k, "r")
    if kind == "transposed":  # B stored [n, k]: the pattern's B window in the other order of its dimensions
        c = wl.compute("C", (m, n), lambda i, j: pw.sum(a[i, r] * b[j, r], axis=r))
    elif dtype == "int8":
        c = wl.compute("C", (m, n), lambda i, j: pw.sum(pw.cast(a[i * step, r], "int32") * pw.cast(b[r, j], "int32"),
                                                         axis=r))
    elif kind == "strided":
        c = wl.compute("C", (m, n), lambda i, j: pw.sum(a[i * step, r] * b[r, j], axis=r))
    elif batch:
        c = wl.compute("C", (*batch, m, n), lambda q, i, j: pw.sum(a[q, i, r] * b[q, r, j], axis=r))
    else:
        c = wl.compute("C", (m, n), lambda i, j: pw.sum(a[i, r] * b[r, j], axis=r))
    out = wl.compute("Y", (m, n), lambda i, j: pw.maximum(c[i, j], 0.0)) if kind == "epilogue" else c
    wl.output(out)
    if dtype == "int8":
        x, y = (data.integers(-128, 128, t.shape, dtype=np.int8) for t in (a, b))
        expected = x[::step].astype(np.int64) @ y.astype(np.int64)
    else:
        x, y = (data.standard_normal(t.shape, dtype=np.float32) for t in (a, b))
        expected = np.matmul(x[::step].astype(np.float64), (y.T if kind == "transposed" else y).astype(np.float64))
        expected = np.maximum(expected, 0.0) if kind == "epilogue" else expected
    rows, cols, block = rng.choice(divisors(m, 8)), rng.choice(divisors(n, 64)), rng.choice(divisors(k, 64))
    s = wl.schedule().tile("C", i=rows, j=cols).split("C", "r", block)
    inner = ["i.inner", "j.inner"]
    rng.shuffle(inner)
    s.reorder("C", *(["q"] if batch else []), "i.outer", "j.outer", "r.outer", "r.inner", *inner)
    if rng.random() < 0.5 and cols % 8 == 0 and cols > 8 and inner[-1] == "j.inner":
        s.split("C", "j.inner", 8).vectorize("C", "j.inner.inner")
    intrinsic = "gemm_i8" if dtype == "int8" else "gemm"
    s.tensorize("C", "r.inner", intrinsic)
    if rng.random() < 0.5:
        s.parallel("C", *(["q"] if batch else []), "i.outer")
    if rng.random() < 0.3 and not batch:
        s.cache_read("C", "B", "local", "r.outer")
    if kind == "epilogue":
        s.fuse_by_category()
    return wl, s, {"A": x, "B": y}, expected, intrinsic


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--failures", default="tensorize-failures.jsonl")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    checked = failed = refused = 0
    start = time.perf_counter()
    with open(args.failures, "w") as failures:
        for n in range(args.pairs):
            wl, s, inputs, expected, intrinsic = draw(rng)
            targets = ["cpu", "aicore"] if n % 5 == 0 else ["cpu"]
            for target in (t for t in targets if t in pw.targets()):
                problem = None
                try:
                    got = pw.build(s, target=target).run(**inputs)[wl.outputs[0]]
                    exact = intrinsic == "gemm_i8"
                    ok = np.array_equal(got, expected) if exact else np.allclose(got, expected, rtol=1e-4, atol=1e-4)
                    problem = None if ok else "mismatch"
                except pw.ScheduleError as e:
                    refused += 1
                    problem = None if "does not match" in str(e) else f"ScheduleError: {e}"
                except HostCannotRun:  # this machine cannot run the CPU level PTOWSP_CPU names: no finding
                    raise
                except Exception as e:  # noqa: BLE001 - every crash is a finding
                    problem = f"{type(e).__name__}: {e}"
                checked += 1
                if problem:
                    failed += 1
                    failures.write(json.dumps({"pair": n, "seed": args.seed, "target": target, "problem": problem,
                                               "schedule": str(s)}) + "\n")
            if (n + 1) % 500 == 0:
                print(f"  {n + 1} pairs, {failed} failures, {refused} refused, {time.perf_counter() - start:.0f} s",
                      flush=True)
    print(f"tensorize fuzz: {checked} (workload, schedule, target) runs, {refused} refused by the matcher, "
          f"{failed} failures, {time.perf_counter() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
