"""Contractions under the default schedule beside numpy (OpenBLAS) and torch (oneDNN), issue 30.

Prints one table: per workload and contender the median of warm runs (timing.side_by_side:
alternating blocks, every contender in this one process, 2 threads everywhere: ptowsp one
worker per core, OpenBLAS and torch 2 threads) and the speed relative to the best peer.
Every ptowsp result is checked against numpy first.  Contenders:

- ptowsp default: `pw.build(wl, target="cpu")`;
- ptowsp gemm: matmul only: the default's register tile with the nest under k.inner replaced by
  the built-in `gemm` intrinsic (docs/tensorize.md), the rest of the default unchanged;
- numpy: `a @ b` (OpenBLAS), convolutions as im2col + one GEMM;
- torch (CPU wheel, when importable): `torch.matmul`, `conv2d` (oneDNN).

torch is a benchmark-only peer in a separate venv, never imported by the package:

    sh benchmarks/peers.sh   # the benchmark venv, .bench-venv/
    .bench-venv/bin/python benchmarks/contractions.py [--repeat 7] [--only conv] [--tuned 64]

Targets (issue 30, default schedule): matmul 1024^3 >= 0.9x OpenBLAS; conv2d 3x3 64->64 56^2 and
1x1 256->64 56^2 >= 0.8x torch; depthwise 3x3 128 ch 112^2 >= 1.0x torch; dense 1x2048->1000 and
batch_matmul 12x128x64x128 >= 1.0x numpy.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")  # before numpy loads
os.environ.setdefault("OMP_NUM_THREADS", "2")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from timing import MIN_BLOCK, side_by_side  # noqa: E402

import ptowsp as pw  # noqa: E402
from ptowsp.schedules.passes.default import default_schedule  # noqa: E402

try:
    import torch  # noqa: E402
    torch.set_num_threads(2)
except ImportError:
    torch = None


def im2col_conv(x: np.ndarray, w: np.ndarray, pad: int, groups: int = 1) -> np.ndarray:
    """NCHW convolution (stride 1) as one GEMM per group over the unfolded input."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    cols = np.stack([xp[:, :, r:r + oh, s:s + ow] for r in range(kh) for s in range(kw)], axis=2)
    cols = cols.reshape(n, groups, cg * kh * kw, oh * ow)  # (n, g, c_g * taps, pixels)
    wg = w.reshape(groups, o // groups, cg, kh * kw).reshape(groups, o // groups, cg * kh * kw)
    return np.einsum("gok,ngkp->ngop", wg, cols).reshape(n, o, oh, ow) if groups > 1 else \
        (wg[0] @ cols[:, 0]).reshape(n, o, oh, ow)


def depthwise(channels: int, size: int) -> pw.Workload:
    wl = pw.Workload("depthwise")
    x, w = wl.input("X", (1, channels, size, size)), wl.input("W", (channels, 1, 3, 3))
    r, s = pw.reduce_axis(3, "r"), pw.reduce_axis(3, "s")
    xp = x.boundary("constant", 0.0)
    wl.output(wl.compute("Y", (1, channels, size, size), lambda n, c, y, xx: pw.sum(
        xp[n, c, y + r - 1, xx + s - 1] * w[c, 0, r, s], axis=(r, s))))
    return wl


def gemm_schedule(wl: pw.Workload) -> pw.Schedule | None:
    """The default with its register tile's k.inner nest as one gemm call (None if it has no tile)."""
    s = default_schedule(wl)
    try:
        return s.tensorize("C", "k.inner", "gemm")
    except pw.ScheduleError:
        return None


def cases(rng):
    def arr(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    a, b = arr(1024, 1024), arr(1024, 1024)
    yield "matmul 1024^3", pw.zoo.matmul(1024, 1024, 1024), {"A": a, "B": b}, lambda: a @ b, _torch(np.matmul, a, b)
    x, w = arr(1, 64, 56, 56), arr(64, 64, 3, 3)
    yield "conv2d 3x3 64->64 56^2", pw.zoo.conv2d(1, 64, 56, 56, 64, 3, 1, 1), {"X": x, "W": w}, \
        lambda: im2col_conv(x, w, 1), _torch("conv2d", x, w, padding=1)
    x1, w1 = arr(1, 256, 56, 56), arr(64, 256, 1, 1)
    yield "conv2d 1x1 256->64 56^2", pw.zoo.conv2d(1, 256, 56, 56, 64, 1, 1, 0), {"X": x1, "W": w1}, \
        lambda: im2col_conv(x1, w1, 0), _torch("conv2d", x1, w1, padding=0)
    xd, wd = arr(1, 128, 112, 112), arr(128, 1, 3, 3)
    yield "depthwise 3x3 128 ch 112^2", depthwise(128, 112), {"X": xd, "W": wd}, \
        lambda: im2col_conv(xd, wd, 1, groups=128), _torch("conv2d", xd, wd, padding=1, groups=128)
    v, m = arr(1, 2048), arr(2048, 1000)
    yield "dense 1x2048->1000", pw.zoo.matmul(1, 1000, 2048), {"A": v, "B": m}, lambda: v @ m, _torch(np.matmul, v, m)
    p, q = arr(12, 128, 64), arr(12, 64, 128)
    yield "batch_matmul 12x128x64x128", pw.zoo.batch_matmul(12, 128, 128, 64), {"A": p, "B": q}, \
        lambda: np.matmul(p, q), _torch(np.matmul, p, q)


def _torch(op, *arrays, **options):
    """torch's version of `op` (np.matmul or "conv2d") on these arrays, or None without torch."""
    if torch is None:
        return None
    tensors = [torch.from_numpy(x) for x in arrays]
    fn = torch.matmul if op is np.matmul else torch.nn.functional.conv2d
    return lambda: fn(*tensors, **options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--only", help="run the workloads whose name contains this text")
    parser.add_argument("--tuned", type=int, default=0, metavar="TRIALS",
                        help="also tune the convolutions with this many AutoScheduler trials (issue 30: 64)")
    args = parser.parse_args()
    print(f"torch: {torch.__version__}" if torch is not None else "torch: not installed")
    print(f"{'workload':28} {'contender':16} {'median':>10} {'vs best peer':>13}  check")
    for name, wl, inputs, numpy_fn, torch_fn in cases(np.random.default_rng(0)):
        if args.only and args.only not in name:
            continue
        expected = numpy_fn()
        contenders = [("ptowsp default", pw.build(wl, target="cpu"))]
        if name.startswith("matmul") and (tensorized := gemm_schedule(wl)) is not None:
            contenders.append(("ptowsp gemm", pw.build(tensorized, target="cpu")))
        if args.tuned and name.startswith("conv2d"):
            start = time.perf_counter()
            result = pw.AutoScheduler.search(wl, target="cpu", num_trials=args.tuned, seed=0, progress=False)
            print(f"{name}: tuned with {args.tuned} trials in {time.perf_counter() - start:.0f} s")
            contenders.append(("ptowsp tuned", pw.build(result.schedule, target="cpu")))
        output = wl.outputs[0]
        checks = [np.allclose(p.run(**inputs)[output], expected, rtol=1e-3, atol=1e-2) for _, p in contenders]
        fns = [lambda p=p: p.run(**inputs) for _, p in contenders] + [numpy_fn]
        names = [n for n, _ in contenders] + ["numpy"]
        if torch_fn is not None:
            fns.append(torch_fn)
            names.append("torch")
        times = side_by_side(fns, args.repeat, min_block=MIN_BLOCK)
        best = min(t for n, t in zip(names, times) if not n.startswith("ptowsp"))
        for label, seconds, ok in zip(names, times, checks + [True] * 2):
            print(f"{name:28} {label:16} {seconds * 1e3:8.2f}ms {best / seconds:12.2f}x  {'ok' if ok else 'WRONG'}")
    print("vs best peer = the fastest of numpy and torch / this time; 2 threads on every side")


if __name__ == "__main__":
    main()
