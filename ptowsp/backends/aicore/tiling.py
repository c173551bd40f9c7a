"""The aicore default's cube tiles: for any contraction, the tile that fits a device's cube buffers.

Every edge is a whole number of fractals (16) that divides its extent (an extent below one fractal
is taken whole: the cube pads it).  A tile fits when its float32 sums fit L0C, one k step of each
operand fits half of L0A or L0B (the other half takes the next step: ping-pong), and two blocks of
both operands fit L1 (one computing, one loading: the default's `prefetch(1)`).  Of the tiles that
fit, the one that gives every cube core a tile if the contraction has that many, then reuses each
loaded byte most (rows x columns / (rows + columns): the cube's work per byte of a block), then
has the deepest block (fewer, larger transfers, each paying the DMA's start-up once), the deepest
k step, and the most columns.
On the 910B/A3 preset a large float16 GEMM gets the PTO ISA's own [128, 256, 64] base tile with
four k steps a block.
"""

from __future__ import annotations

from ptowsp.backends.aicore.model import DeviceModel
from ptowsp.schedules.passes.cube import CubeTile

LARGEST_EDGE = 256  # the longest tile edge or k step tried
STEPS_PER_BLOCK = (1, 2, 4, 8)


def _edges(extent: int, fractal: int) -> list[int]:
    """Tile edges for a loop of `extent`: fractal multiples that divide it, or the whole of a short one."""
    if extent <= fractal:
        return [extent]
    return [e for e in range(fractal, min(extent, LARGEST_EDGE) + 1, fractal) if extent % e == 0]


class CubeTiles:
    """The aicore default's `CubeTiler` for one device (see the module docstring)."""

    def __init__(self, device: DeviceModel):
        self.device, self.cores = device, device.cube_cores

    def __call__(self, rows: int, columns: int, depth: int, operand_bytes: int) -> CubeTile | None:
        d = self.device
        f, accumulator = d.cube_fractal, d.accumulator_bytes
        best, best_key = None, None
        for tm in _edges(rows, f):
            for tn in _edges(columns, f):
                if tm * tn * accumulator > d.l0c_bytes:
                    continue
                tiles = (rows // tm) * (columns // tn)
                for ks in _edges(depth, f):
                    if 2 * tm * ks * operand_bytes > d.l0a_bytes or 2 * ks * tn * operand_bytes > d.l0b_bytes:
                        continue
                    for steps in STEPS_PER_BLOCK:
                        block = ks * steps
                        if depth % block or 2 * (tm + tn) * block * operand_bytes > d.l1_bytes:
                            continue
                        key = (min(tiles, self.cores), tm * tn / (tm + tn), block, ks, tn)
                        if best_key is None or key > best_key:
                            best, best_key = CubeTile(tm, tn, ks, steps), key
        return best
