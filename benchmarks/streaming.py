"""Streaming kernels under the default schedule beside numba and Halide (issue 30).

Prints one table: per kernel and contender the median of warm runs (timing.side_by_side:
alternating blocks, every contender in this one process, 2 threads everywhere) and the speed
relative to the best peer.  Every result is checked against numpy (float64) first.  Kernels
(float32): layernorm 4096x1024, softmax 4096x1024, exp(x*a+b)*c over 16M floats.  Contenders:

- ptowsp default: `pw.build(wl, target="cpu")`, one worker per core;
- numba: one fused loop per row (layernorm, softmax) or element, `@njit(parallel=True,
  fastmath=True)` over `prange` with 2 threads, writing into a preallocated output;
- Halide (JIT for the host, 2 threads, preallocated output): `fast_exp` (Halide's polynomial
  exp, a few ulp) for the exps; per row a vectorized row reduction (16 lanes of partial sums,
  then across the lanes) computed at the row of the output, rows parallel;
- numpy: for the check, and as a row of the table.

ptowsp never imports numba or halide; this script does, only if installed.  The peers live in
a separate benchmark venv beside this repo:

    sh benchmarks/peers.sh   # the benchmark venv, .bench-venv/
    .bench-venv/bin/python benchmarks/streaming.py [--repeat 7] [--only softmax]

Targets (issue 30, default schedule): layernorm >= 1.0x numba's fused fastmath loop; the exp
chain >= 1.0x Halide with fast_exp; softmax >= 1.2x Halide with fast_exp.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "2")  # before numba loads
os.environ.setdefault("HL_NUM_THREADS", "2")  # Halide's thread pool
os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")

import argparse  # noqa: E402

import numpy as np  # noqa: E402
from timing import side_by_side  # noqa: E402

import ptowsp as pw  # noqa: E402

try:
    import numba  # noqa: E402
except ImportError:
    numba = None
try:
    import halide as hl  # noqa: E402
except ImportError:
    hl = None

ROWS, COLS, LENGTH = 4096, 1024, 16 << 20
A, B, C = 1.5, 0.25, 3.0  # exp(x * A + B) * C
EPS = 1e-5


def exp_chain() -> pw.Workload:
    wl = pw.Workload("exp_chain")
    x = wl.input("x", (LENGTH,))
    wl.output(wl.compute("y", (LENGTH,), lambda i: pw.exp(x[i] * A + B) * C))
    return wl


# -- numba -------------------------------------------------------------------------------------
def numba_kernels():
    f32 = np.float32

    @numba.njit(parallel=True, fastmath=True)
    def layernorm(x, gamma, beta, out):
        rows, cols = x.shape
        for i in numba.prange(rows):
            total = f32(0.0)
            for j in range(cols):
                total += x[i, j]
            mean = total / cols
            spread = f32(0.0)
            for j in range(cols):
                d = x[i, j] - mean
                spread += d * d
            scale = f32(1.0) / np.sqrt(spread / cols + f32(EPS))
            for j in range(cols):
                out[i, j] = (x[i, j] - mean) * scale * gamma[j] + beta[j]

    @numba.njit(parallel=True, fastmath=True)
    def softmax(x, out):
        rows, cols = x.shape
        for i in numba.prange(rows):
            top = x[i, 0]
            for j in range(cols):
                top = max(top, x[i, j])
            total = f32(0.0)
            for j in range(cols):
                e = np.exp(x[i, j] - top)
                out[i, j] = e
                total += e
            inverse = f32(1.0) / total
            for j in range(cols):
                out[i, j] *= inverse

    @numba.njit(parallel=True, fastmath=True)
    def chain(x, out):
        for i in numba.prange(x.shape[0]):
            out[i] = np.exp(x[i] * f32(A) + f32(B)) * f32(C)

    return {"layernorm": layernorm, "softmax": softmax, "exp": chain}


# -- Halide ------------------------------------------------------------------------------------
def _row_reduce(name, source, cols: int, combine, init):
    """row(i) = combine over j of source(j, i), as 16 lanes of partials then across the lanes."""
    i, lane = hl.Var("i"), hl.Var("lane")
    partial, row = hl.Func(f"{name}_partial"), hl.Func(name)
    strips = hl.RDom([(0, cols // 16)])
    partial[lane, i] = init
    partial[lane, i] = combine(partial[lane, i], source[strips.x * 16 + lane, i])
    lanes = hl.RDom([(0, 16)])
    row[i] = init
    row[i] = combine(row[i], partial[lanes.x, i])
    partial.update().vectorize(lane, 16)
    partial.vectorize(lane, 16)
    return partial, row


def halide_kernels(arrays):
    """{kernel: (realize function, output array)} with fast_exp, rows parallel, vectors of 16."""
    target = hl.get_jit_target_from_environment()
    j, i, ii = hl.Var("j"), hl.Var("i"), hl.Var("ii")
    x = hl.Buffer(arrays["X"])  # Halide's dim 0 is numpy's last axis: x[j, i]
    found = {}

    top_partial, top = _row_reduce("top", x, COLS, hl.max, hl.f32(-np.inf))
    shifted = hl.Func("shifted")
    shifted[j, i] = hl.fast_exp(x[j, i] - top[i])
    sum_partial, total = _row_reduce("total", shifted, COLS, lambda a, b: a + b, hl.f32(0.0))
    soft = hl.Func("softmax")
    soft[j, i] = shifted[j, i] / total[i]
    soft.split(i, i, ii, 16).parallel(i).vectorize(j, 16)
    for stage in (top, top_partial, total, sum_partial):
        stage.compute_at(soft, ii)
    shifted.compute_at(soft, ii).vectorize(j, 16)
    soft.compile_jit(target)
    found["softmax"] = soft

    mean_partial, mean_sum = _row_reduce("mean", x, COLS, lambda a, b: a + b, hl.f32(0.0))
    mean = hl.Func("mean_row")
    mean[i] = mean_sum[i] / COLS
    centred = hl.Func("centred")
    centred[j, i] = (x[j, i] - mean[i]) * (x[j, i] - mean[i])
    var_partial, var_sum = _row_reduce("var", centred, COLS, lambda a, b: a + b, hl.f32(0.0))
    gamma, beta = hl.Buffer(arrays["gamma"]), hl.Buffer(arrays["beta"])
    norm = hl.Func("layernorm")
    norm[j, i] = (x[j, i] - mean[i]) / hl.sqrt(var_sum[i] / COLS + hl.f32(EPS)) * gamma[j] + beta[j]
    norm.split(i, i, ii, 16).parallel(i).vectorize(j, 16)
    for stage in (mean, mean_sum, mean_partial, var_sum, var_partial):
        stage.compute_at(norm, ii)
    centred.compute_at(norm, ii).vectorize(j, 16)
    norm.compile_jit(target)
    found["layernorm"] = norm

    v = hl.Buffer(arrays["x"])
    chain = hl.Func("chain")
    k, ko, ki = hl.Var("k"), hl.Var("ko"), hl.Var("ki")
    chain[k] = hl.fast_exp(v[k] * A + B) * C
    chain.split(k, ko, ki, 1 << 16).parallel(ko).vectorize(ki, 16)
    chain.compile_jit(target)
    found["exp"] = chain
    return found


# -- the table ---------------------------------------------------------------------------------
def cases(rng):
    x = rng.standard_normal((ROWS, COLS), dtype=np.float32)
    gamma, beta = rng.standard_normal(COLS, dtype=np.float32), rng.standard_normal(COLS, dtype=np.float32)
    v = rng.standard_normal(LENGTH, dtype=np.float32)
    wide = x.astype(np.float64)
    mean = wide.mean(axis=1, keepdims=True)
    norm = (wide - mean) / np.sqrt(((wide - mean) ** 2).mean(axis=1, keepdims=True) + EPS) * gamma + beta
    e = np.exp(wide - wide.max(axis=1, keepdims=True))
    arrays = {"X": x, "gamma": gamma, "beta": beta, "x": v}
    yield ("layernorm 4096x1024", "layernorm", pw.zoo.layernorm(ROWS, COLS, EPS), {"X": x, "gamma": gamma, "beta": beta},
           norm, arrays, lambda: (x - x.mean(axis=1, keepdims=True)) / np.sqrt(x.var(axis=1, keepdims=True) + EPS)
           * gamma + beta)
    yield ("softmax 4096x1024", "softmax", pw.zoo.softmax(ROWS, COLS), {"X": x}, e / e.sum(axis=1, keepdims=True),
           arrays, lambda: (lambda t: t / t.sum(axis=1, keepdims=True))(np.exp(x - x.max(axis=1, keepdims=True))))
    yield ("exp(x*a+b)*c 16M", "exp", exp_chain(), {"x": v}, np.exp(v.astype(np.float64) * A + B) * C, arrays,
           lambda: np.exp(v * A + B) * C)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--only", help="run the kernels whose name contains this text")
    args = parser.parse_args()
    print(f"numba: {numba.__version__ if numba else 'not installed'}; halide: {'yes' if hl else 'not installed'}")
    print(f"{'kernel':22} {'contender':16} {'median':>10} {'vs best peer':>13}  check")
    rng = np.random.default_rng(0)
    peers_made = None
    for name, kind, wl, inputs, expected, arrays, numpy_fn in cases(rng):
        if args.only and args.only not in name:
            continue
        if peers_made is None:
            peers_made = (numba_kernels() if numba else {}, halide_kernels(arrays) if hl else {})
        nb, hal = peers_made
        prog = pw.build(wl, target="cpu")
        out = np.empty_like(expected, dtype=np.float32)
        fns, names = [lambda: prog.run(**inputs)], ["ptowsp default"]
        results = [lambda: prog.run(**inputs)[wl.outputs[0]]]
        if kind in nb:
            call = {"layernorm": lambda: nb["layernorm"](arrays["X"], arrays["gamma"], arrays["beta"], out),
                    "softmax": lambda: nb["softmax"](arrays["X"], out), "exp": lambda: nb["exp"](arrays["x"], out)}
            fns.append(call[kind])
            names.append("numba")
            results.append(lambda c=call[kind]: (c(), out)[1])
        if kind in hal:
            hl_out = np.empty_like(out)
            target = hl.Buffer(hl_out)
            fns.append(lambda f=hal[kind], t=target: f.realize(t))
            names.append("Halide fast_exp" if kind != "layernorm" else "Halide")
            results.append(lambda f=hal[kind], t=target, o=hl_out: (f.realize(t), o)[1])
        fns.append(numpy_fn)
        names.append("numpy")
        results.append(numpy_fn)
        checks = [np.allclose(r(), expected, rtol=2e-3, atol=1e-5 * float(np.abs(expected).max())) for r in results]
        times = side_by_side(fns, args.repeat)
        best = min(t for n, t in zip(names, times) if not n.startswith("ptowsp"))
        for label, seconds, ok in zip(names, times, checks):
            print(f"{name:22} {label:16} {seconds * 1e3:8.2f}ms {best / seconds:12.2f}x  {'ok' if ok else 'WRONG'}")
    print("vs best peer = the fastest of numba, Halide and numpy / this time; 2 threads on every side")


if __name__ == "__main__":
    main()
