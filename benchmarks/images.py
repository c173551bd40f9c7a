"""Image pipelines and int8 (issue 29): blur on uint8/uint16 and the int8 quantized conv.

Prints one table: per kernel and contender the median time (timing.side_by_side:
warm runs in alternating blocks, every contender in this one process) and the
speed relative to Halide's published apps/blur schedule (blur) or to numpy
(conv).  Every result is checked exactly against numpy or pw.reference first.
Contenders:

- ptowsp default: `pw.build(wl, target="cpu")`, one worker per core.
- ptowsp hand: blur_y split into row blocks (parallel) and vectorized along x;
  blur_x computed inside each row block (Halide's compute_at), vectorized too.
- numpy: the straightforward vectorized version with the same integer rules
  (edge padding, sums widened, floor division by 3, narrowed back).
- Halide (the `halide` wheel, when importable): the same algorithm with
  Halide's apps/blur CPU schedule (halide_blur_generator.cpp:
  `blur_y.split(y, y, yi, 32).parallel(y).vectorize(x, 16)`,
  `blur_x.store_at(blur_y, y).compute_at(blur_y, x).vectorize(x, 16)`), JIT
  compiled for the host, realized into a preallocated output.  Halide's app
  sums in uint16 and trims the border; here it widens and uses repeat_edge
  like pw.zoo.blur so that the outputs agree bit for bit.
- int8 matmul 512^3: the cpu default (the built-in `gemm_i8` intrinsic, VNNI's vpdpbusd, where
  the host has it), the same default schedule without the intrinsic, numpy's int32 matmul.
- conv: numpy (im2col + an int32 matmul, which numpy does without BLAS) and
  torch (int32 conv2d is not offered; it runs the int8 values as float32 and
  the result is exact, since every sum is below 2**24) when importable.

ptowsp never imports halide; this script does, only if it is installed.  The
peers live in a separate benchmark venv beside this repo:

    sh benchmarks/peers.sh   # the benchmark venv, .bench-venv/
    .bench-venv/bin/python benchmarks/images.py [--repeat 7]

Target (issue 29): blur >= 1.0x Halide's published schedule.
"""

from __future__ import annotations

import argparse
from importlib import metadata

import numpy as np
from timing import side_by_side

import ptowsp as pw
from ptowsp.backends.base import backend
from ptowsp.schedules.passes.default import default_schedule

try:
    import halide as hl
except ImportError:  # the package never needs it; the comparison is skipped
    hl = None
try:
    import torch
except ImportError:
    torch = None

HEIGHT, WIDTH = 1536, 2560
WIDER = {"uint8": "uint16", "uint16": "uint32"}  # the sum of three values fits the next width


def blur_workload(height: int, width: int, dtype: str) -> pw.Workload:
    """pw.zoo.blur for `dtype`: uint16 is the zoo's own; uint8 is the same algorithm with byte
    input and uint16 sums (Halide's usual 8-bit blur)."""
    if dtype == "uint16":
        return pw.zoo.blur(height, width)
    wl = pw.Workload(f"blur_{dtype}")
    edge = wl.input("input", (height, width), dtype).boundary("repeat_edge")

    def wide(v):
        return pw.cast(v, WIDER[dtype])

    bx = wl.compute("blur_x", (height, width), lambda y, x: pw.cast(
        (wide(edge[y, x - 1]) + wide(edge[y, x]) + wide(edge[y, x + 1])) // 3, dtype))
    bxe = bx.boundary("repeat_edge")
    wl.output(wl.compute("blur_y", (height, width), lambda y, x: pw.cast(
        (wide(bxe[y - 1, x]) + wide(bxe[y, x]) + wide(bxe[y + 1, x])) // 3, dtype)))
    return wl


def blur_hand_schedule(wl: pw.Workload, rows: int = 32, lanes: int = 64) -> pw.Schedule:
    """Row blocks of `rows` in parallel; blur_x's rows for a block (rows + 2) computed at the
    block, so they stay in L2; both stages vectorized `lanes` wide along x."""
    s = wl.schedule()
    s.split("blur_y", "y", rows).split("blur_y", "x", lanes).vectorize("blur_y", "x.inner")
    s.parallel("blur_y", "y.outer")
    s.compute_at("blur_x", "blur_y", "y.outer")
    s.split("blur_x", "x", lanes).vectorize("blur_x", "x.inner")
    return s


def numpy_blur(image: np.ndarray) -> np.ndarray:
    wide = np.dtype(WIDER[image.dtype.name])
    p = np.pad(image, ((0, 0), (1, 1)), mode="edge").astype(wide)
    bx = ((p[:, :-2] + p[:, 1:-1] + p[:, 2:]) // 3).astype(image.dtype)
    q = np.pad(bx, ((1, 1), (0, 0)), mode="edge").astype(wide)
    return ((q[:-2] + q[1:-1] + q[2:]) // 3).astype(image.dtype)


def halide_blur(image: np.ndarray):
    """Halide's apps/blur, CPU schedule, JIT-compiled; returns a function that realizes into a
    preallocated buffer and the numpy view of that buffer."""
    narrow = hl.UInt(8 * image.itemsize)
    wide = hl.UInt(16 * image.itemsize)
    x, y, yi = hl.Var("x"), hl.Var("y"), hl.Var("yi")
    source = hl.Buffer(image)  # Halide's dim 0 (x) is numpy's last axis
    edge = hl.BoundaryConditions.repeat_edge(source)
    blur_x, blur_y = hl.Func("blur_x"), hl.Func("blur_y")
    blur_x[x, y] = hl.cast(narrow, (hl.cast(wide, edge[x - 1, y]) + hl.cast(wide, edge[x, y])
                                    + hl.cast(wide, edge[x + 1, y])) // 3)
    blur_y[x, y] = hl.cast(narrow, (hl.cast(wide, blur_x[x, y - 1]) + hl.cast(wide, blur_x[x, y])
                                    + hl.cast(wide, blur_x[x, y + 1])) // 3)
    blur_y.split(y, y, yi, 32).parallel(y).vectorize(x, 16)
    blur_x.store_at(blur_y, y).compute_at(blur_y, x).vectorize(x, 16)
    blur_y.compile_jit(hl.get_jit_target_from_environment())
    out = np.empty_like(image)
    target = hl.Buffer(out)
    return (lambda: blur_y.realize(target)), out


def blur_rows(dtype: str, repeat: int) -> list[tuple[str, str, float, bool]]:
    info = np.iinfo(dtype)
    image = np.random.default_rng(0).integers(info.min, info.max, (HEIGHT, WIDTH), dtype=dtype, endpoint=True)
    wl = blur_workload(HEIGHT, WIDTH, dtype)
    expected = pw.reference(wl, input=image)["blur_y"]
    contenders = [("ptowsp default", pw.build(wl, target="cpu")),
                  ("ptowsp hand", pw.build(blur_hand_schedule(wl), target="cpu"))]
    names = [name for name, _ in contenders] + ["numpy"]
    fns = [lambda p=prog: p.run(input=image) for _, prog in contenders] + [lambda: numpy_blur(image)]
    checks = [np.array_equal(prog.run(input=image)["blur_y"], expected) for _, prog in contenders]
    checks.append(np.array_equal(numpy_blur(image), expected))
    if hl is not None:
        realize, out = halide_blur(image)
        realize()
        names.append("Halide apps/blur")
        fns.append(realize)
        checks.append(np.array_equal(out, expected))
    times = side_by_side(fns, repeat)
    return [(f"blur {dtype} {HEIGHT}x{WIDTH}", n, t, ok) for n, t, ok in zip(names, times, checks, strict=True)]


def numpy_conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """im2col (zero padding) and one int32 matmul."""
    n, c, h, wd = x.shape
    o, _, k, _ = w.shape
    pad = k // 2
    p = np.pad(x.astype(np.int32), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cols = np.lib.stride_tricks.sliding_window_view(p, (k, k), axis=(2, 3))  # n c h w r s
    cols = cols.transpose(0, 2, 3, 1, 4, 5).reshape(n * h * wd, c * k * k)
    y = cols @ w.reshape(o, c * k * k).astype(np.int32).T
    return y.reshape(n, h, wd, o).transpose(0, 3, 1, 2)


def conv_rows(repeat: int, shape=(1, 64, 56, 56, 64, 3)) -> list[tuple[str, str, float, bool]]:
    batch, cin, h, w, cout, k = shape
    wl = pw.zoo.quantized_conv2d(batch, cin, h, w, cout, k)
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (batch, cin, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (cout, cin, k, k), dtype=np.int8)
    expected = numpy_conv(x, wt)
    prog = pw.build(wl, target="cpu")
    names, fns = ["ptowsp default", "numpy im2col"], [lambda: prog.run(X=x, W=wt), lambda: numpy_conv(x, wt)]
    checks = [np.array_equal(prog.run(X=x, W=wt)["Y"], expected), True]
    if torch is not None:
        tx, tw = torch.from_numpy(x.astype(np.float32)), torch.from_numpy(wt.astype(np.float32))

        def torch_conv():
            return torch.nn.functional.conv2d(tx, tw, padding=k // 2)

        names.append("torch (f32 of int8)")
        fns.append(torch_conv)
        checks.append(np.array_equal(torch_conv().numpy().astype(np.int32), expected))
    times = side_by_side(fns, repeat)
    label = f"qconv int8 {cin}x{h}x{w}->{cout} {k}x{k}"
    return [(label, n, t, ok) for n, t, ok in zip(names, times, checks, strict=True)]


def int8_matmul_rows(repeat: int, n: int = 512) -> list[tuple[str, str, float, bool]]:
    """An int8 n^3 matmul with int32 sums: the cpu default (VNNI's vpdpbusd through the built-in
    gemm_i8 intrinsic where the host has it), the same schedule without it, numpy's int32 matmul."""
    wl = pw.Workload("matmul_int8")
    a, b = wl.input("A", (n, n), "int8"), wl.input("B", (n, n), "int8")
    r = pw.reduce_axis(n, "r")
    wl.output(wl.compute("C", (n, n), lambda i, j: pw.sum(pw.cast(a[i, r], "int32") * pw.cast(b[r, j], "int32"),
                                                           axis=r)))
    rng = np.random.default_rng(0)
    x, y = (rng.integers(-128, 128, (n, n), dtype=np.int8) for _ in range(2))
    wide = (x.astype(np.int32), y.astype(np.int32))
    expected = wide[0] @ wide[1]
    progs = [pw.build(wl, target="cpu"),
             pw.build(default_schedule(wl, vector_bytes=backend("cpu").vector_bytes), target="cpu")]
    names = ["ptowsp default", "ptowsp no intrinsic", "numpy int32 @"]
    fns = [lambda p=p: p.run(A=x, B=y) for p in progs] + [lambda: wide[0] @ wide[1]]
    checks = [np.array_equal(p.run(A=x, B=y)["C"], expected) for p in progs] + [True]
    times = side_by_side(fns, repeat)
    return [(f"matmul int8 {n}^3", name, t, ok) for name, t, ok in zip(names, times, checks, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(f"halide: {metadata.version('halide')}" if hl is not None
          else "halide: not installed (blur compared with numpy only)")
    print(f"torch: {torch.__version__}" if torch is not None else "torch: not installed")
    print(f"{'kernel':34} {'contender':22} {'median':>10} {'speed':>9}  check")
    for rows, base in [(blur_rows("uint8", args.repeat), "Halide apps/blur"),
                       (blur_rows("uint16", args.repeat), "Halide apps/blur"),
                       (conv_rows(args.repeat), "numpy im2col"), (int8_matmul_rows(args.repeat), "numpy int32 @")]:
        ref = {n: t for _, n, t, _ in rows}.get(base) or {n: t for _, n, t, _ in rows}["numpy"]
        for kernel, name, seconds, ok in rows:
            print(f"{kernel:34} {name:22} {seconds * 1e3:8.2f}ms {ref / seconds:8.2f}x  {'ok' if ok else 'WRONG'}")
    print("speed = reference time / this time (blur: vs Halide apps/blur, or numpy without halide;"
          " conv: vs numpy); all cores on every side")


if __name__ == "__main__":
    main()
