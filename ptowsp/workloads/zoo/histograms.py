"""Workloads built on combining scatters: one pass over an image into bins (Halide's apps)."""

from __future__ import annotations

from ptowsp.te import cast, clamp, maximum, where
from ptowsp.workloads.workload import Workload


def bilateral_grid(h: int = 48, w: int = 64, s: int = 8, bins: int = 8) -> Workload:
    """Halide's bilateral_grid with nearest-cell slicing: img in [0, 1) -> out.

    z(y, x) = clamp(int(img[y, x] * bins), 0, bins - 1); the grid sums the pixels and counts them
    per (y // s, x // s, z) in one pass (combining scatters, no dense masked sum);
    blurred = the [1, 2, 1] blur of both along z (zero beyond the ends);
    out[y, x] = blurred_sum / max(blurred_count, 1) at the pixel's own cell."""
    wl = Workload("bilateral_grid")
    img = wl.input("img", (h, w))
    gh, gw = -(-h // s), -(-w // s)

    def cell(y, x):
        return y // s, x // s, clamp(cast(img[y, x] * float(bins), "int32"), 0, bins - 1)

    total = wl.scatter("grid_sum", (gh, gw, bins), over=(h, w), index=cell, value=lambda y, x: img[y, x],
                       combine="add")
    count = wl.scatter("grid_count", (gh, gw, bins), over=(h, w), index=cell, value=lambda y, x: cast(1, "float32"),
                       combine="add")

    def blur(grid):
        return lambda i, j, z: (where(z > 0, grid[i, j, z - 1], 0.0) + grid[i, j, z] * 2.0
                                + where(z < bins - 1, grid[i, j, z + 1], 0.0))

    bsum = wl.compute("blur_sum", (gh, gw, bins), blur(total))
    bcount = wl.compute("blur_count", (gh, gw, bins), blur(count))
    wl.output(wl.compute("out", (h, w), lambda y, x: bsum[cell(y, x)] / maximum(bcount[cell(y, x)], 1.0)))
    return wl
