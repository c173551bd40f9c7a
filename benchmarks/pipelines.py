"""Image pipelines under the default schedule (issue 30, item 4): unsharp and camera_pipe.

Prints one table: per workload and contender the median time (timing.side_by_side: warm runs
in alternating blocks, every contender in this one process) and the speed relative to numpy.
Every ptowsp result is checked against the numpy version first (exactly for camera_pipe's
integers, to 1e-4 for unsharp).  Contenders:

- ptowsp default: `pw.build(wl, target="cpu")`: its inlining policy keeps stencil producers
  stored per block of rows (schedules/passes/inlining.py) and inlines the rest.
- ptowsp inline all: the default with every category fusion taken (the policy before it).
- ptowsp fusion off: `default_schedule(wl, fuse=False)`: every task stored on its own.
- numpy: the same algorithm, vectorised (np.pad for the boundary conditions).

Sizes: Halide's apps use a 1536x2560 image; camera_pipe here is the zoo's simplified pipeline
(docs/workloads.md) on a 10-bit 1536x2560 raw.  Needs only the package (numpy is a dependency):

    .venv/bin/python benchmarks/pipelines.py [--repeat 7]

Targets (issue 30): both >= 1.0x numpy with the default schedule.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from timing import side_by_side

import ptowsp as pw
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.workloads.zoo.camera import COLOR_MATRIX

HEIGHT, WIDTH = 1536, 2560


def numpy_unsharp(image: np.ndarray, sigma: float = 1.5) -> np.ndarray:
    taps = np.array([math.exp(-(i * i) / (2 * sigma * sigma)) for i in range(-3, 4)], np.float32)
    weights = taps / taps.sum()
    gray = image[0] * np.float32(0.299) + image[1] * np.float32(0.587) + image[2] * np.float32(0.114)
    h, w = gray.shape
    padded = np.pad(gray, ((3, 3), (0, 0)), mode="edge")
    blur_y = sum(weights[i] * padded[i:i + h] for i in range(7))
    padded = np.pad(blur_y, ((0, 0), (3, 3)), mode="edge")
    blur_x = sum(weights[i] * padded[:, i:i + w] for i in range(7))
    return ((gray * np.float32(2.0) - blur_x) / gray)[None] * image


def numpy_camera_pipe(raw: np.ndarray, curve: np.ndarray, black: int = 25, bits: int = 10) -> np.ndarray:
    scale = 2 ** (bits - 10)
    matrix = np.array([[round(v * 256) for v in row[:3]] + [round(row[3] * 256) * scale] for row in COLOR_MATRIX],
                      np.int32)
    lin = np.clip(raw.astype(np.int32) - black, 0, 65535)
    den = np.empty_like(lin)
    for dy in (0, 1):
        for dx in (0, 1):
            e = np.pad(lin[dy::2, dx::2], 1, mode="edge")
            near = np.stack([e[:-2, 1:-1], e[2:, 1:-1], e[1:-1, :-2], e[1:-1, 2:]])
            den[dy::2, dx::2] = np.clip(e[1:-1, 1:-1], near.min(0), near.max(0))
    e = np.pad(den, 1, mode="reflect")
    h, w = den.shape

    def nb(dy, dx):
        return e[1 + dy:1 + dy + h, 1 + dx:1 + dx + w]

    horiz, vert = (nb(0, -1) + nb(0, 1) + 1) // 2, (nb(-1, 0) + nb(1, 0) + 1) // 2
    cross = (nb(-1, 0) + nb(1, 0) + nb(0, -1) + nb(0, 1) + 2) // 4
    diag = (nb(-1, -1) + nb(-1, 1) + nb(1, -1) + nb(1, 1) + 2) // 4
    py, px = np.indices((h, w)) % 2
    gr, red, blue, gb = ((py == sy) & (px == sx) for sy, sx in ((0, 0), (0, 1), (1, 0), (1, 1)))
    r = np.select([red, gr, gb], [den, horiz, vert], diag)
    g = np.where(py == px, den, cross)
    b = np.select([blue, gr, gb], [den, vert, horiz], diag)
    mixed = np.einsum("ck,kyx->cyx", matrix[:, :3], np.stack([r, g, b])) + matrix[:, 3, None, None]
    return curve[np.clip(mixed // 256 // scale, 0, 1023)]


def contenders(wl: pw.Workload) -> list[tuple[str, pw.Schedule]]:
    every = default_schedule(wl, choose=lambda name, candidates, default: "all" if name == "inline" else default)
    return [("ptowsp default", default_schedule(wl)), ("ptowsp inline all", every),
            ("ptowsp fusion off", default_schedule(wl, fuse=False))]


def rows(name: str, wl: pw.Workload, inputs: dict, numpy_fn, exact: bool, repeat: int) -> list:
    expected = numpy_fn()
    built = [(label, pw.build(s, target="cpu")) for label, s in contenders(wl)]
    output = wl.outputs[0]
    checks = []
    for _, prog in built:
        got = prog.run(**inputs)[output]
        checks.append(np.array_equal(got, expected) if exact else np.allclose(got, expected, rtol=1e-4, atol=1e-4))
    checks.append(True)
    fns = [lambda p=prog: p.run(**inputs) for _, prog in built] + [numpy_fn]
    times = side_by_side(fns, repeat)
    return [(name, label, t, ok) for label, t, ok in zip([n for n, _ in built] + ["numpy"], times, checks, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    image = rng.uniform(0.1, 1.0, (3, HEIGHT, WIDTH)).astype(np.float32)
    raw = rng.integers(0, 1024, (HEIGHT, WIDTH), dtype=np.uint16)
    curve = rng.integers(0, 256, 1024, dtype=np.uint8)
    table = rows(f"unsharp 3x{HEIGHT}x{WIDTH}", pw.zoo.unsharp(HEIGHT, WIDTH), {"input": image},
                 lambda: numpy_unsharp(image), False, args.repeat)
    table += rows(f"camera_pipe {HEIGHT}x{WIDTH}", pw.zoo.camera_pipe(HEIGHT, WIDTH), {"raw": raw, "curve": curve},
                  lambda: numpy_camera_pipe(raw, curve), True, args.repeat)
    print(f"{'workload':28} {'contender':20} {'median':>10} {'vs numpy':>9}  check")
    base = {w: t for w, n, t, _ in table if n == "numpy"}
    for workload, label, seconds, ok in table:
        print(f"{workload:28} {label:20} {seconds * 1e3:8.2f}ms {base[workload] / seconds:8.2f}x  "
              f"{'ok' if ok else 'WRONG'}")
    print("vs numpy = numpy's time / this time; ptowsp with one worker per core, numpy single-threaded")


if __name__ == "__main__":
    main()
