"""The default schedule over symbolic sizes: a typical binding's schedule, replayed over the symbols.

default.py writes the schedule of the workload bound at a typical size; here its steps are applied
to the workload with its sizes.  A step that needs a number where a size stands (vectorizing a whole
symbolic loop) is refused and left out; so is one that would give a local buffer a symbolic size
(a producer computed inside a loop of symbolic extent, an accumulator tile spanning one), and a
staged read (cache_read, prefetch_tensor) whose box spans a loop of symbolic extent (a matmul's
panel of B, read over rows `seq`, stays: its box is a block of k by a block of columns).  A
producer whose placement is left out is stored on its own, with a task grid of its own over its
loops of fixed extent (`regrid`: a decoder's projections, placed in their epilogues at the typical
size, ran as one task each, the other worker idle); so is a task whose grid at the typical size
cut only symbolic loops into blocks (attention over a prompt's rows: one task at 128 tokens, where
its 16 heads make a grid at any length).  Lowering runs the guarded last tile
of a symbolic loop apart from the whole ones, as it does for fixed extents (lower/partition.py).

Some decisions the typical binding would answer from a size's value are answered for every value
(`over_any_size`): which loops of a contraction go outermost, and whether a producer is placed per
block of a symbolic loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ptowsp.errors import ScheduleError
from ptowsp.schedules.passes.decisions import Choose, Decision
from ptowsp.schedules.loopnest import PARALLEL, roots_of
from ptowsp.schedules.schedule import Schedule
from ptowsp.te import Op, walk
from ptowsp.te.reducer import accumulator_dtype
from ptowsp.workloads import ComputeTask, Workload


def over_any_size(wl: Workload, choose: Choose) -> Choose:
    """`choose` for the typical binding, with the decisions whose right answer there would not hold at
    other values of a size answered for every value:

    - a contraction over a symbolic number of rows puts its column tiles outermost (`tile_order`):
      its task grid then splits the columns, whatever the rows, and each task packs its panels of B
      once (rows outermost, a 128-token prefill's projections made one task where 1,024 made 8);
    - a contraction computed per block of its reader's rows (`at` "outer") stays stored when it has a
      symbolic size: the block, part of a symbolic loop, would be refused below, and the producer
      left without a task grid; stored, it gets one."""
    def answer(name: Decision, candidates: Sequence[Any], default: Any) -> Any:
        if name.task is not None and name.kind in ("tile_order", "at"):
            shape = wl.task(name.task).tensor.shape
            if name.kind == "tile_order" and "columns" in candidates and _symbolic_rows(shape):
                default = "columns"
            elif name.kind == "at" and default == "outer" and "root" in candidates and not all(
                    isinstance(d, int) for d in shape):
                default = "root"
        return choose(name, candidates, default)

    return answer


def _symbolic_rows(shape: tuple) -> bool:
    """Whether a contraction's rows (the last dimension before its columns longer than 1) are symbolic
    and its columns are not."""
    rows = [d for d in shape[:-1] if not isinstance(d, int) or d > 1]
    return bool(shape) and isinstance(shape[-1], int) and bool(rows) and not isinstance(rows[-1], int)


def over_sizes(wl: Workload, typical: Schedule, regrid: Callable[[Schedule, str], None]) -> Schedule:
    """`typical`'s steps (made for `wl` bound at a typical size) applied to `wl` where they keep every
    buffer of fixed size (see the module docstring); `regrid(s, task)` gives a task grid to each
    producer whose placement was left out (an epilogue's anchor had its grid moved to the epilogue)."""
    s, regridded = Schedule(wl), set()
    for step in typical.steps:
        if step.kind == "parallel" and _symbolic_only(s, step.task, step.loops):
            regridded.add(step.task)  # blocks of a symbolic loop, as many as at the typical size only
            continue
        before = s.copy()  # shares the frozen state: a step that gives a buffer a symbolic size is undone
        try:
            s.apply(step)  # a refused step leaves the schedule as it was (handlers validate first)
        except ScheduleError:
            continue
        if not fixed_size_buffers(s):
            s = before
    placed = {step.task for step in typical.steps if step.kind == "compute_at"}
    for task in sorted(placed - set(s.compute_at_locations) | regridded):
        regrid(s, task)
    return s


def _symbolic_only(s: Schedule, task: str, loops: list[str]) -> bool:
    """Whether every loop of a grid is of symbolic extent (a prefill's rows cut in blocks of 128: one
    task at 128 tokens, the other worker idle)."""
    nest = s.nest(task)
    return all(name in nest.names and not isinstance(nest.loop(name).extent, int) for name in loops)


def fixed_size_buffers(s: Schedule) -> bool:
    """Whether every local buffer lowering will make has a fixed size: no accumulator tile spans a
    spatial loop of symbolic extent inside a reduction loop, and no producer is computed at a loop
    that has a loop of symbolic extent inside it, or at (or inside) a part of a symbolic loop."""
    for consumer, loop in s.compute_at_locations.values():
        loops = s.nest(consumer).loops
        names = [lp.name for lp in loops]
        if loop in names and any(not isinstance(lp.extent, int) for lp in loops[names.index(loop) + 1:]):
            return False
        task = s.workload.task(consumer)
        symbolic = {n for n, extent in zip(task.loop_names, task.tensor.shape, strict=True) if not isinstance(extent, int)}
        if loop in names and any(set(roots_of(lp.name)) & symbolic for lp in loops[:names.index(loop) + 1]):
            return False  # at a part of a symbolic loop: the part read there may span the size
    staged = [(task, tensor, loop) for task, tensor, _, loop in s.cache_reads]
    staged += [(task, tensor, loop) for task, tensor, loop, _ in s.prefetched]
    if not all(_fixed_box(s, *read) for read in staged):
        return False
    for task in s.workload.tasks:
        if not isinstance(s.workload.task(task), ComputeTask) or task in s.inlined or _accumulates_in_place(s, task):
            continue
        loops = [lp for lp in s.nest(task).loops if lp.annotation != PARALLEL]
        first = next((k for k, lp in enumerate(loops) if lp.reduce), len(loops))
        if any(not lp.reduce and not isinstance(lp.extent, int) for lp in loops[first:]):
            return False
    return True


def _fixed_box(s: Schedule, task: str, tensor: str, loop: str | None) -> bool:
    """Whether the box of `tensor` that one iteration of `loop` (or one instance) reads has a fixed
    size: no loop inside it of symbolic extent derives from an axis the reads' indices use, and no
    index is read from data."""
    loops = s.nest(task).loops
    names = [lp.name for lp in loops]
    inside = loops[names.index(loop) + 1:] if loop is not None else loops
    reads = [n for n in walk(s.workload.task(task).value) if n.op is Op.LOAD and n.arg.name == tensor]
    used = {v.arg[0] for n in reads for i in n.src for v in walk(i) if v.op in (Op.VAR, Op.RVAR)}
    if not reads or any(v.op is Op.LOAD for n in reads for i in n.src for v in walk(i)):
        return False
    return all(isinstance(lp.extent, int) or not set(roots_of(lp.name)) & used for lp in inside)


def _accumulates_in_place(s: Schedule, task: str) -> bool:
    """Whether lowering sums `task` straight into its output (lower/loops.py: the whole value is one
    sum, max or min in the output's dtype, not cache-written), so no accumulator tile is made."""
    t = s.workload.task(task)
    body = t.value
    return (body.op is Op.REDUCE and body.arg in ("sum", "max", "min") and t.scan is None
            and accumulator_dtype(body.arg, body.dtype) == t.tensor.dtype and task not in s.cache_writes)
