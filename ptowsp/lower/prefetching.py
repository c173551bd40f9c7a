"""prefetch_tensor: software prefetches of what the next iteration of a loop will read.

A register-tiled matmul re-reads each k block of B once per row tile.  The
first of those passes meets the block in memory and waits on it: its loads
come faster than memory delivers them, and the row tiles after it find it in
the cache.  `prefetch_tensor(task, Bp, "k.outer")` fetches the next block
while the current one is used, a line every few k steps, so no pass waits
(B stored as 32-column panels Bp: a 256-row block is 512 lines, one per
eighth step of the 16 x 256):

    for k.outer in 0..3:                        for k.outer in 0..3:
      for i.outer in 0..16:                       for i.outer in 0..16:
        for k.inner in 0..256:                      for k.inner in 0..256:
          ... Bp[j, k.outer * 256 + k.inner, ..]      if (i.outer * 256 + k.inner) % 8 == 0:
                                                        prefetch Bp[j, k.outer * 256 + 256, (i.outer * 256 + k.inner) // 8 * 16]
                                                      ... Bp[j, k.outer * 256 + k.inner, ..]

At every occurrence of the loop that reads the tensor, the box its body reads
(regions.py, not clipped) is taken at iteration v + ahead and cut into cache
lines: one contiguous run per row of the box (the run covers the trailing
dimensions the box spans whole).  The lines are spread evenly over the
iterations of the first serial loop inside (reached through blocks,
allocations and lets) and of the serial loops nested directly in it: a
line every 2^n iterations (a mask, not a division) or several an iteration;
all at the top of the body where there is no serial loop.  Past the loop's
last iteration the addresses continue in memory: for B stored as panels
(schedules/passes/panels.py) that is the next panel's first block; past the
tensor's end a prefetch is harmless.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from ptowsp.errors import BuildError
from ptowsp.lower.ir import (Allocate, Block, Buffer, For, IfThen, Let, Prefetch, Stmt, block, bound_loops, var,
                             walk_stmts)
from ptowsp.lower.placement import global_reads
from ptowsp.lower.regions import read_box
from ptowsp.schedules.schedule import Schedule
from ptowsp.te import Expr, Op, const, substitute_vars, walk

LINE_BYTES = 64  # a cache line on every cpu this targets


def place_prefetches(schedule: Schedule, name: str, stmt: Stmt, buffer: Callable[[str], Buffer]) -> Stmt:
    """Kernel `name`'s body with the prefetches of its task and of the producers computed inside it,
    placed once the kernel is whole: a producer's box then starts where its consumer's iteration
    does, so the lines fetched are exactly those read (inside the producer's own region the start
    is unknown).  `buffer`: the global buffer of a tensor name."""
    placed = schedule.compute_at_locations
    for task, tensor, loop, ahead in schedule.prefetched:
        chain = [task]  # task, the consumer it is computed at, ... up to this kernel's task
        while chain[-1] != name and chain[-1] in placed:
            chain.append(placed[chain[-1]][0])
        if chain[-1] == name:  # its loops are named `Q.P.loop` for P computed at Q computed here
            prefix = "".join(f"{t}." for t in reversed(chain[:-1]))
            stmt = _prefetch_at(stmt, task, buffer(tensor), prefix + loop, ahead)
    return stmt


def _prefetch_at(stmt: Stmt, task: str, tensor: Buffer, loop: str, ahead: int) -> Stmt:
    """`stmt` with the prefetches of `tensor` at every occurrence of loop `loop` (module docstring)."""
    found: list[For] = []  # the occurrences of the loop that read the tensor (not, say, an accumulator's zeroing)

    def visit(s: Stmt) -> Stmt:
        if isinstance(s, For) and s.var == loop:
            if s.kind not in ("serial", "unrolled"):
                raise BuildError(f"task {task!r}: prefetch_tensor at loop {loop}, which is {s.kind}; it needs a "
                                 "serial loop, whose next iteration comes after this one")
            if global_reads(s.body, tensor.name):
                found.append(s)
                return replace(s, body=_with_prefetches(s, task, tensor, ahead))
        return s.with_children([visit(c) for c in s.children()])

    placed = visit(stmt)
    if not found:
        grid = not any(isinstance(s, For) and s.var == loop for s in walk_stmts(stmt))
        raise BuildError(f"task {task!r}: prefetch_tensor at loop {loop}, which is a loop of the task grid (each of "
                         "its iterations is a task instance of its own); choose a loop inside the task" if grid else
                         f"task {task!r} does not read {tensor.name!r} inside loop {loop} (a cache_read at an outer "
                         "loop reads it there), so prefetch_tensor has nothing to fetch")
    return placed


def _with_prefetches(anchor: For, task: str, tensor: Buffer, ahead: int) -> Stmt:
    """The body of loop `anchor` with the prefetches of `tensor` `ahead` iterations on."""
    if not tensor.shape:  # a 0-d tensor: one element, fetched by its first read
        return anchor.body
    reads = global_reads(anchor.body, tensor.name)
    shape = tensor.shape
    box = read_box([r.src for r in reads], bound_loops(anchor.body), shape, shift=False)
    if not all(isinstance(n, int) for n in box.extents):
        raise BuildError(f"task {task!r}: prefetch_tensor of {tensor.name!r} at loop {anchor.var}: the part read "
                         f"there, {list(box.extents)}, has a symbolic size; prefetch at a loop inside the symbolic one")
    if any(n.op is Op.LOAD for start in box.starts for n in walk(start)):
        raise BuildError(f"task {task!r}: prefetch_tensor of {tensor.name!r} at loop {anchor.var}: the part read "
                         "there depends on the values of another tensor (a gather), so it is not known ahead")
    at = var(anchor.var, anchor.extent)
    starts = [substitute_vars(s, {anchor.var: at + ahead}, (Op.VAR,)) for s in box.starts]
    whole = len(shape) - 1  # the run: the first dimension the box does not span whole, and all after it
    while whole > 0 and isinstance(shape[whole], int) and box.extents[whole] == shape[whole]:
        whole -= 1
    run = box.extents[whole] * math.prod(shape[whole + 1:])
    per_line = max(1, LINE_BYTES // np.dtype(tensor.dtype).itemsize)
    row_lines = -(-run // per_line)
    rows = box.extents[:whole]
    total = math.prod(rows) * row_lines

    def line(index: Expr) -> Stmt:
        """The prefetch of line `index` of the box: its row, then its line in the row's run."""
        row, within = index // row_lines, index % row_lines
        indices = [start + (row // math.prod(rows[d + 1:])) % extent for d, (start, extent)
                   in enumerate(zip(starts, rows, strict=False))]
        indices += starts[whole:]
        indices[-1] = indices[-1] + within * per_line  # the flat address runs on along the row
        return Prefetch(tensor, tuple(indices))

    name = f"{anchor.var}.prefetch"
    nest = _spread_over(anchor.body)
    if not nest:
        return block(For(name, total, "unrolled", line(var(name, total))), anchor.body)
    iterations, step = math.prod(f.extent for f in nest), const(0, "int64")
    for f in nest:  # the iteration number across the nest, outermost first
        step = step * f.extent + var(f.var, f.extent)
    if iterations > total:  # one line every `stride` iterations, a power of two (a mask, not a division)
        stride = 1 << (iterations // total).bit_length() - 1
        share, index = 1, step // stride + var(name, 1)
        fetch = IfThen((step % stride == 0) & (index < const(total, "int64")), line(index))
    else:  # `share` lines an iteration
        share = -(-total // iterations)
        index = step * share + var(name, share)
        fetch = line(index) if share * iterations == total else IfThen(index < const(total, "int64"), line(index))
    deepest = nest[-1]
    return _replace_loop(anchor.body, deepest, replace(deepest, body=block(For(name, share, "unrolled", fetch),
                                                                             deepest.body)))


def _spread_over(body: Stmt) -> list[For]:
    """The loops the lines are spread over: the first serial loop and the serial loops nested
    directly in it, as finely as they go (a burst of prefetches queues behind the core's few
    outstanding misses: BERT's layer ran 1.05x faster with one line per k step than with 32 per
    row tile)."""
    first = _first_serial(body)
    nest = [first] if first is not None and isinstance(first.extent, int) else []
    while nest and isinstance(inner := nest[-1].body, For) and inner.kind == "serial" and \
            isinstance(inner.extent, int):
        nest.append(inner)
    return nest


def _first_serial(s: Stmt) -> For | None:
    """The first serial loop met going down through blocks, allocations and lets."""
    if isinstance(s, For):
        return s if s.kind == "serial" else None
    if isinstance(s, (Block, Allocate, Let)):
        return next((f for c in s.children() if (f := _first_serial(c)) is not None), None)
    return None


def _replace_loop(s: Stmt, old: For, new: For) -> Stmt:
    if s is old:
        return new
    return s.with_children([_replace_loop(c, old, new) for c in s.children()])
