"""cpu target vs numpy, single-threaded on both sides, with hand schedules.

Prints one table: per kernel the median time (>= 7 runs after warm-up) of
numpy and of ptowsp's cpu target, the ratio, and compile times (cold, with an
empty kernel cache, and from the cache).  Every ptowsp result is checked
against numpy before it is timed.  Targets (issue 3): matmul >= 50% of
numpy's GFLOP/s; softmax >= 5x, layernorm >= 10x and exp(x*a+b)*c >= 4x
faster than numpy.

    .venv/bin/python benchmarks/cpu_kernels.py [--repeat 7]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads: one thread on both sides
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from timing import side_by_side  # noqa: E402

import ptowsp as pw  # noqa: E402
from ptowsp.backends.cpu.isa import target_cpu  # noqa: E402
from ptowsp.workloads import zoo  # noqa: E402


def matmul_case(n: int, blocks: int = 16):
    """Rows in `blocks` blocks (a block of A stays in L2 while every column panel passes it;
    the grid loop when run in parallel); within one, a 4 x (2 vectors) register tile (8
    accumulators: enough FMAs in flight to hide their latency, few enough for AVX2's 16
    registers), k blocked by 256, and the 256 x (2 vectors) panel of B copied to a contiguous
    buffer per k block (cache_read): read in place, its rows lie 4 KB apart and all map to
    the same L1 set."""
    lanes = target_cpu().vector_bytes // 4
    wl = zoo.matmul(n, n, n)
    s = (wl.schedule().tile("C", i=4, j=2 * lanes).split("C", "k", 256).split("C", "j.inner", lanes)
         .split("C", "i.outer", n // 4 // blocks)
         .reorder("C", "i.outer.outer", "j.outer", "k.outer", "i.outer.inner", "k.inner", "i.inner",
                  "j.inner.outer", "j.inner.inner")
         .unroll("C", "i.inner").unroll("C", "j.inner.outer").vectorize("C", "j.inner.inner")
         .cache_read("C", "B", "local", loop="k.outer"))
    return wl, s, lambda p: p["A"] @ p["B"], 2.0 * n**3


def row_reduction(s, task: str, cols: int, accumulators: int = 4, lanes: int = 16):
    """A row reduction as `accumulators` independent 16-lane vector partials (vectorizing a
    reduction loop is the schedule's permission to reassociate it)."""
    if cols % (accumulators * lanes) == 0:
        s.split(task, "k", accumulators * lanes).split(task, "k.inner", lanes)
        s.unroll(task, "k.inner.outer").vectorize(task, "k.inner.inner")
    return s


def per_row(s, task: str, rows: int, producers: tuple[str, ...], blocks: int | None):
    """Compute the producers inside `task`'s row loop; with `blocks`, split the rows into that many
    grid tasks first (the runtime benchmark's parallel schedules)."""
    row = "i"
    if blocks is not None:
        s.split(task, "i", rows // blocks).parallel(task, "i.outer")
        row = "i.inner"
    for producer in producers:
        s.compute_at(producer, task, row)
    return s


def softmax_case(rows: int, cols: int, blocks: int | None = None):
    """One pass per row with every intermediate in L1: max, exp and sum are computed at Y's row
    loop (Halide's compute_at), so X is read from memory once and Y written once."""
    wl = zoo.softmax(rows, cols)
    s = wl.schedule()
    for task in ("Y_max", "Y_sum"):
        row_reduction(s, task, cols)
    for task in ("Y_exp", "Y"):
        s.split(task, "j", 16).vectorize(task, "j.inner")
    per_row(s, "Y", rows, ("Y_sum", "Y_exp", "Y_max"), blocks)

    def numpy_softmax(p):  # the usual three passes with temporaries
        x = p["X"]
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return wl, s, numpy_softmax, None


def layernorm_case(rows: int, cols: int, blocks: int | None = None):
    """mean and variance computed per row inside Y's row loop, as vector partial sums."""
    wl = zoo.layernorm(rows, cols)
    s = wl.schedule().split("Y", "j", 16).vectorize("Y", "j.inner")
    for task in ("Y_var", "Y_mean"):
        row_reduction(s, task, cols)
    per_row(s, "Y", rows, ("Y_var", "Y_mean"), blocks)

    def numpy_layernorm(p):
        x = p["X"]
        mu = x.mean(axis=1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * p["gamma"] + p["beta"]

    return wl, s, numpy_layernorm, None


def exp_chain_case(n: int):
    wl = pw.Workload("exp_chain")
    x = wl.input("x", (n,))
    a, b, c = 1.5, 0.25, 3.0
    wl.output(wl.compute("y", (n,), lambda i: pw.exp(x[i] * a + b) * c))
    s = wl.schedule().split("y", "i", 16).vectorize("y", "i.inner")
    return wl, s, lambda p: np.exp(p["x"] * a + b) * c, None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    cases = [
        ("matmul 1024^3 f32", matmul_case(1024), "GFLOP/s >= 50% of numpy"),
        ("softmax 4096x1024", softmax_case(4096, 1024), ">= 5x faster"),
        ("layernorm 4096x1024", layernorm_case(4096, 1024), ">= 10x faster"),
        ("exp(x*a+b)*c 16M", exp_chain_case(16 * 2**20), ">= 4x faster"),
    ]
    print(f"{'kernel':22} {'numpy':>10} {'ptowsp cpu':>11} {'speed-up':>9} {'compile cold':>13} {'cached':>8}  target")
    for name, (wl, schedule, numpy_fn, flops), target in cases:
        rng = np.random.default_rng(0)
        inputs = {n: rng.standard_normal(wl.tensor(n).shape).astype(np.float32) for n in wl.inputs}
        with tempfile.TemporaryDirectory() as cache:
            os.environ["PTOWSP_CACHE_DIR"] = cache
            start = time.perf_counter()
            pw.build(schedule, target="cpu", workers=1)
            cold = time.perf_counter() - start
            start = time.perf_counter()
            prog = pw.build(schedule, target="cpu", workers=1)
            cached = time.perf_counter() - start
        out = prog.run(**inputs)[wl.outputs[0]]
        expected = numpy_fn(inputs)
        scale = max(1.0, float(np.max(np.abs(expected))))
        ok = np.allclose(out, expected, rtol=1e-3, atol=1e-3 * scale)
        theirs, ours = side_by_side([lambda: numpy_fn(inputs), lambda: prog.run(**inputs)],  # noqa: B023
                                    args.repeat)
        rate = f"  {flops / ours / 1e9:.1f} vs {flops / theirs / 1e9:.1f} GFLOP/s" if flops else ""
        check = "" if ok else "  WRONG RESULT"
        print(f"{name:22} {theirs * 1e3:8.1f}ms {ours * 1e3:9.1f}ms {theirs / ours:8.2f}x {cold * 1e3:11.0f}ms "
              f"{cached * 1e3:6.1f}ms  {target}{rate}{check}")
    print("speed-up = numpy time / ptowsp time, one thread on each side")

if __name__ == "__main__":
    main()
