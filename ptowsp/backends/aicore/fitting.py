"""The aicore default's fit to the device's buffers: how `AicoreBackend.compile_default` changes the
default schedule, a step at a time, until every task's tiles and blocks fit its core (docs/aicore.md,
"The default fits the buffers").

Each refusal of the device model is answered by the cheapest change that can shrink what overflowed:
the task's reduction streamed in halving blocks, then its tile narrowed (the loops that index the
overflowing block first), then a sum computed inside its consumer's loops stored on its own, then
loops narrowed below _MIN_WIDTH; a tile whose reduction walks inside its element loops (too many
blocks) has the reduction streamed outside them.  The changes are kept as data (blocks, splits) and
replayed on the given schedule each time, so each is applied to the schedule as the others leave it.
"""

from __future__ import annotations

import math

from ptowsp.backends.aicore.cost import BufferOverflow, TooManyBlocks
from ptowsp.schedules import Schedule
from ptowsp.schedules.loopnest import PARALLEL, SERIAL, outer_of
from ptowsp.schedules.state import schedulable_reduce_axes
from ptowsp.te import Op, walk


class Fitting:
    """The changes made so far to fit `schedule` (the default's) to the device."""

    def __init__(self, schedule: Schedule):
        self.given = schedule
        self.blocks: dict[str, int] = {}  # task -> elements of its outermost reduction axis a block streams
        self.narrowed: dict[str, list[tuple[str, int]]] = {}  # task -> (loop, width) splits into its grid

    def schedule(self) -> Schedule:
        """The given schedule with every change so far."""
        fitted = self.given
        for task, splits in self.narrowed.items():
            for loop, width in splits:
                fitted = narrow_tile(fitted, task, loop, width)
        for task, block in self.blocks.items():
            fitted = stream_reduction_blocks(fitted, task, block)
        return fitted

    def overflowed(self, e: BufferOverflow) -> bool:
        """One more change for each task whose tile or blocks overflow a buffer (`e` and the others of the
        same build: a model's tasks are fitted side by side, not one build each); False when none is left."""
        current = self.schedule()
        changed = [self._refit(current, x) for x in (e, *e.others)]
        return any(changed)

    def _refit(self, current: Schedule, e: BufferOverflow) -> bool:
        summing = _summing(self.given, e.task, e.tensor)
        extent = _streamable(current, summing) if summing else None
        piece = _stream_piece(self.given, summing) if extent is not None else None
        block = self.blocks.get(summing) or extent
        if e.buffer != "L0C" and extent is not None and piece is not None and block // 2 >= piece[1]:
            self.blocks[summing] = block // 2
        elif (narrowing := _narrowing(current, e.task, e.tensor)) is not None:
            # the reduction streams no further (or there is none), or the accumulators overflow
            self.narrowed.setdefault(e.task, []).append(narrowing)
        elif summing is not None and summing != e.task:
            # a sum computed inside its consumer's loops overflows however those go: store it, and stream
            # and narrow it as a task of its own
            self._store(summing)
        elif (narrowing := _narrowing(current, e.task, e.tensor, thinner=True)) is not None:
            self.narrowed.setdefault(e.task, []).append(narrowing)
        else:
            return False
        return True

    def too_many_blocks(self, e: TooManyBlocks) -> bool:
        """Each task with too many blocks (`e` and the others of the same build) whose reduction walks
        inside its tile's element loops (a vectorized 1x1 convolution's channels inside its pixels) has
        it streamed outside them instead, in one block to start with (so each block is a whole tile's
        step; the buffers then halve it if it does not fit).  False when that was done already for all."""
        current = self.schedule()
        return any([self._stream_outside(current, x.task) for x in (e, *e.others)])

    def _stream_outside(self, current: Schedule, task: str) -> bool:
        summing = _summing(self.given, task)
        extent = _streamable(current, summing) if summing else None
        if extent is not None and summing not in self.blocks and _stream_piece(self.given, summing) is not None:
            self.blocks[summing] = extent
        elif summing is not None and summing != task:  # computed inside its consumer: store it
            self._store(summing)
        else:
            return False
        return True

    def _store(self, task: str) -> None:
        self.given = self.given.without_compute_at(task)
        self.blocks.pop(task, None)


def _reduce_axes(schedule: Schedule, task: str) -> list[tuple[str, int]]:
    """The axes of `task`'s one scheduled reduction (in an epilogue too: `sum(..) + b[o]`), outermost first."""
    if task not in schedule.workload.tasks:
        return []
    return schedulable_reduce_axes(schedule.workload.task(task).body)


def _summing(schedule: Schedule, task: str, tensor: str | None = None) -> str | None:
    """The task whose reduction an overflow of kernel `task` streams: the task itself, or the producer
    computed at it that sums (a convolution whose epilogue, its bias or its requantization, is the root);
    of several (a SwiGLU's two projections inside its product), the one that reads `tensor`, the
    overflowing block's."""
    if _reduce_axes(schedule, task):
        return task
    inside = [t for t, (root, _) in schedule.compute_at_locations.items() if root == task and _reduce_axes(schedule, t)]
    if len(inside) > 1 and tensor is not None:
        inside = [t for t in inside if tensor in {x.name for x in schedule.workload.task(t).inputs}]
    return inside[0] if len(inside) == 1 else None


def _streamable(schedule: Schedule, task: str) -> int | None:
    """The extent of `task`'s outermost reduction loop in the schedule's workload, or None."""
    axes = _reduce_axes(schedule, task)
    return axes[0][1] if axes and isinstance(axes[0][1], int) else None


_MIN_WIDTH = 16  # the narrowest tile loop narrow_tile makes, but of loops that index the overflowing block


def _narrowing(schedule: Schedule, task: str, tensor: str | None, thinner: bool = False) -> tuple[str, int] | None:
    """The next split of `task`'s tile: its widest serial spatial loop halved (to at least _MIN_WIDTH), or,
    where that leaves `tensor`'s block as large (the loop does not index it), the widest loop that
    indexes `tensor` halved down to one; `thinner`: once no loop is that wide, the widest halved down to
    one.  None when nothing is left to narrow."""
    if task not in schedule.workload.tasks:
        return None
    nest = schedule.nest(task)
    hosting = {loop for root, loop in schedule.compute_at_locations.values() if root == task}  # split those: refused
    loops = [lp for lp in nest.loops if not lp.reduce and lp.annotation == SERIAL and isinstance(lp.extent, int)
             and lp.name not in hosting]
    wide = [lp for lp in loops if lp.extent // 2 >= _MIN_WIDTH]
    if tensor is not None:
        body = schedule.workload.task(task).body
        indexing = {v.arg[0] for load in walk(body) if load.op is Op.LOAD and load.arg.name == tensor
                    for index in load.src for v in walk(index) if v.op is Op.VAR}
        ours = [lp for lp in loops if nest.roots(lp.name) & indexing and lp.extent > 1]
        wide = [lp for lp in wide if lp in ours] or ours
    if not wide and thinner:
        wide = [lp for lp in loops if lp.extent > 1]
    if not wide:
        return None
    loop = max(wide, key=lambda lp: lp.extent)
    return loop.name, max(1, loop.extent // 2)


def _stream_piece(schedule: Schedule, task: str) -> tuple[str, int] | None:
    """The piece of `task`'s outermost reduction axis that streams (its last serial one: a vectorized or
    unrolled piece is a fixed block), and how many elements of the axis one of its iterations covers."""
    axis = _reduce_axes(schedule, task)[0][0]
    nest = schedule.nest(task)
    pieces = [lp for lp in nest.loops if nest.roots(lp.name) == {axis}]
    serial = [k for k, lp in enumerate(pieces) if lp.annotation == SERIAL]
    if not serial or not all(isinstance(lp.extent, int) for lp in pieces):
        return None
    last = serial[-1]
    return pieces[last].name, math.prod(lp.extent for lp in pieces[last + 1:])


def narrow_tile(schedule: Schedule, task: str, loop: str, width: int) -> Schedule:
    """`task`'s spatial loop `loop` split by `width`, its outer part added to the task grid: a smaller tile,
    so a smaller input block (or fewer accumulators), when streaming the reduction cannot shrink it."""
    grid = [lp.name for lp in schedule.nest(task).loops if lp.annotation == PARALLEL]
    s = schedule.copy().split(task, loop, width)
    rest = [lp.name for lp in s.nest(task).loops if lp.name not in grid and lp.name != outer_of(loop)]
    return s.reorder(task, *grid, outer_of(loop), *rest).parallel(task, outer_of(loop))


def stream_reduction_blocks(schedule: Schedule, task: str, block: int) -> Schedule:
    """`task`'s outermost reduction axis streamed in blocks of `block` elements: its streaming piece is split and
    the block loop placed just inside the task grid (after any block loop already there), so each step
    of it loads one block of the inputs (the aicore cost model's stream)."""
    loop, span = _stream_piece(schedule, task)
    axis = _reduce_axes(schedule, task)[0][0]
    s = schedule.copy().split(task, loop, max(1, block // span))  # in place: leave the given one as it is
    nest = s.nest(task)
    grid = [lp.name for lp in nest.loops if lp.annotation == PARALLEL]
    after = [lp for lp in nest.loops if lp.annotation != PARALLEL and lp.name != outer_of(loop)]
    streaming = []  # block loops of other reductions already just inside the grid
    for lp in after:
        if not lp.reduce or nest.roots(lp.name) == {axis}:
            break
        streaming.append(lp.name)
    rest = [lp.name for lp in after if lp.name not in streaming]
    return s.reorder(task, *grid, *streaming, outer_of(loop), *rest)
