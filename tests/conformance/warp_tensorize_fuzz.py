"""Warp-level tensorize (`mma.sync` on cuda) under random legal schedules, against numpy.

    python -m tests.conformance.warp_tensorize_fuzz --pairs 5000 [--seed 0] [--jobs 16]

Each pair draws a float16 or bfloat16 matmul with float32 results (optionally followed by a relu,
a kernel of its own with the default binding) with random sizes, and a random GPU
schedule around `gemm_f16` / `gemm_bf16` calls: a block tile and a warp tile (multiples of the
16 x 8 x 16 instruction), warps bound to threadIdx.y / threadIdx.z or left as serial loops, the
whole k in one call or k blocks with A and B staged in shared memory, and the order of the
tile's loops under k.  Each runs on the GPU where one is present, else in the host emulator
(backends/cuda/emulate.py), and must match numpy to 1e-3 of the largest value.  Failures are
written with their seed and schedule.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import sys
import time

import ml_dtypes
import numpy as np

import ptowsp as pw
from ptowsp.workloads.zoo import layers

INTRINSICS = {"float16": "gemm_f16", "bfloat16": "gemm_bf16"}


def multiples(n: int, step: int, limit: int) -> list[int]:
    return [d for d in range(step, min(n, limit) + 1, step) if n % d == 0]


def draw(rng: random.Random, small: bool = False):
    """(workload, schedule, inputs, expected); `small`: sizes the host emulator runs in seconds."""
    dtype = rng.choice(list(INTRINSICS))
    if small:
        m, n, k = rng.choice([16, 32]), rng.choice([8, 16]), rng.choice([16, 32])
    else:
        m, n, k = rng.choice([16, 32, 48, 64]), rng.choice([8, 16, 24, 32, 64]), rng.choice([16, 32, 48, 64])
    epilogue = rng.random() < 0.25
    wl = pw.Workload(f"warp_fuzz_{dtype}")
    transposed = rng.random() < 0.3  # B stored [n, k]: ldmatrix cannot read it, the lanes load elements
    a, b = wl.input("A", (m, k), dtype), wl.input("B", (n, k) if transposed else (k, n), dtype)
    if transposed:
        r = pw.reduce_axis(k, "k")
        c = wl.compute("C", (m, n), lambda i, j: pw.sum(pw.cast(a[i, r], "float32") * pw.cast(b[j, r], "float32"),
                                                        axis=r))
    else:
        c = layers.matmul(wl, "C", a, b, accumulate="float32")
    wl.output(wl.compute("Y", (m, n), lambda i, j: pw.maximum(c[i, j], 0.0)) if epilogue else c)
    data = np.random.default_rng(rng.randrange(2**32))
    element = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    x, y = (data.standard_normal(t.shape).astype(np.float32).astype(element) for t in (a, b))
    expected = x.astype(np.float64) @ (y.T if transposed else y).astype(np.float64)
    expected = np.maximum(expected, 0.0) if epilogue else expected

    warp_m, warp_n = rng.choice(multiples(m, 16, 32)), rng.choice(multiples(n, 8, 32))
    block_m = rng.choice([t for t in multiples(m, warp_m, 64)])
    block_n = rng.choice([t for t in multiples(n, warp_n, 64)])
    s = wl.schedule().tile("C", i=block_m, j=block_n).split("C", "i.inner", warp_m).split("C", "j.inner", warp_n)
    inner = ["i.inner.inner", "j.inner.inner"]
    rng.shuffle(inner)
    k_block = rng.choice(multiples(k, 16, 64))
    staged = k_block < k and rng.random() < 0.6
    if k_block < k:
        s.split("C", "k", k_block)
        s.reorder("C", "i.outer", "j.outer", "i.inner.outer", "j.inner.outer", "k.outer", "k.inner", *inner)
    else:
        s.reorder("C", "i.outer", "j.outer", "i.inner.outer", "j.inner.outer", "k", *inner)
    s.bind("C", "i.outer", "blockIdx.y").bind("C", "j.outer", "blockIdx.x")
    warps = [("i.inner.outer", "threadIdx.y"), ("j.inner.outer", "threadIdx.z")]
    for loop, axis in warps:
        if rng.random() < 0.75:
            s.bind("C", loop, axis)
    if staged:
        s.cache_read("C", "A", "shared", "k.outer").cache_read("C", "B", "shared", "k.outer")
    s.tensorize("C", "k.inner" if k_block < k else "k", INTRINSICS[dtype])
    return wl, s, {"A": x, "B": y}, expected


def check(seed: int, pair: int, small: bool = False) -> tuple[int, str | None, str]:
    """One pair: (pair, problem or None, schedule text)."""
    rng = random.Random(seed * 1_000_003 + pair)
    wl, s, inputs, expected = draw(rng, small)
    try:
        if "cuda" in pw.targets():
            got = pw.build(s, target="cuda").run(**inputs)[wl.outputs[0]]
        else:
            from ptowsp.backends.cuda import generate
            from ptowsp.backends.cuda.emulate import emulate

            got = emulate(generate(s), inputs)[wl.outputs[0]]
        scale = max(1.0, float(np.max(np.abs(expected))))
        problem = None if np.allclose(got, expected, rtol=1e-3, atol=1e-3 * scale) else \
            f"mismatch: max error {float(np.max(np.abs(got - expected))):.3g}"
    except Exception as e:  # noqa: BLE001 - every refusal of a legal schedule and every crash is a finding
        problem = f"{type(e).__name__}: {e}"
    return pair, problem, str(s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--small", action="store_true", help="sizes the host emulator runs in seconds")
    parser.add_argument("--failures", default="warp-tensorize-failures.jsonl")
    args = parser.parse_args()
    where = "on the GPU" if "cuda" in pw.targets() else "in the host emulator"
    start, failed = time.perf_counter(), 0
    with open(args.failures, "w") as failures, multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        jobs = [(args.seed, p, args.small) for p in range(args.pairs)]
        for done, (pair, problem, schedule) in enumerate(pool.starmap(check, jobs, chunksize=8), 1):
            if problem:
                failed += 1
                failures.write(json.dumps({"pair": pair, "seed": args.seed, "problem": problem,
                                           "schedule": schedule}) + "\n")
    print(f"warp tensorize fuzz {where}: {args.pairs} pairs, {failed} failures, {time.perf_counter() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
