"""Cube tiles: the default schedule's loops for a contraction on a matrix (cube) core.

A cube core computes `C[.., i, j] = sum(A[.., i, k] * B[.., k, j], k)` in 16x16x16 fractals: a tile
of outputs stays in L0C, and its operands come in *blocks* of k from global memory into L1 (two of
them, one loading while the other computes) and from L1 into L0A/L0B in *k steps*.  So the loops are
row and column tiles, the block loop, the k steps of a block, then one k step's rows, depth and
columns (the PTO ISA's GEMM: a [128, 256, 64] base tile, four k steps per block).  Which tile fits is
the target's to say (a `CubeTiler`, from its buffers: backends/aicore/tiling.py); the cpu and cuda
defaults have no tiler and never take this path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ptowsp.schedules.loopnest import MAX_VECTOR_LANES, inner_of, outer_of
from ptowsp.schedules.schedule import Schedule
from ptowsp.schedules.passes.tiles import panel_operand, rows_and_columns
from ptowsp.te import Op, walk


@dataclass(frozen=True)
class CubeTile:
    """A cube core's tile: `rows` x `columns` outputs, blocks of `steps` k steps of `k_step` each."""

    rows: int
    columns: int
    k_step: int
    steps: int

    @property
    def block(self) -> int:
        return self.k_step * self.steps


class CubeTiler(Protocol):
    """A target's choice of cube tiles; `cores`: its cube cores, each of which a cube-tiled task's grid
    gives one task (a run of tiles), as a matmul kernel launches one block per core."""

    cores: int

    def __call__(self, rows: int, columns: int, depth: int, operand_bytes: int) -> CubeTile | None:
        """The tile of a contraction of `rows` x `columns` outputs over `depth`, or None: none fits."""
        ...


def cube_tile(s: Schedule, task: str, spatial: list, k, tiler: CubeTiler) -> bool:
    """Give `task` the cube loops the tiler chooses, when it is a contraction over a single reduction
    loop `k` whose rows, columns and depth are numbers; False (nothing changed) otherwise."""
    if len(spatial) < 2:
        return False
    i, j = rows_and_columns(spatial)
    if not all(isinstance(e, int) for e in (i.extent, j.extent, k.extent)):
        return False
    loads = [n for n in walk(s.workload.task(task).body) if n.op is Op.LOAD]
    if not any(panel_operand(n, k.name, j.name, i.name, flattened=False) for n in loads):
        return False
    operands = [n for n in loads if any(x.op is Op.RVAR and x.arg[0] == k.name for index in n.src for x in walk(index))]
    tile = tiler(i.extent, j.extent, k.extent, max(np.dtype(n.dtype).itemsize for n in operands))
    if tile is None:
        return False
    s.tile(task, {i.name: tile.rows, j.name: tile.columns})
    s.split(task, k.name, tile.block).split(task, inner_of(k.name), tile.k_step)
    outer = [lp.name for lp in spatial if lp is not i and lp is not j]
    columns = inner_of(j.name)
    s.reorder(task, *outer, outer_of(i.name), outer_of(j.name), outer_of(k.name), outer_of(inner_of(k.name)),
              inner_of(i.name), inner_of(inner_of(k.name)), columns)
    if tile.columns > MAX_VECTOR_LANES:  # the host computes the numbers: whole vectors of the columns
        lanes = next(w for w in range(MAX_VECTOR_LANES, 0, -1) if tile.columns % w == 0)
        s.split(task, columns, lanes)
        columns = inner_of(columns)
    s.vectorize(task, columns)
    s.fuse(task, outer_of(i.name), outer_of(j.name))  # one run of tiles: the grid cuts it into a run per core
    return True
