"""What a schedule may do to a scan (workloads/scan.py) without changing its result.

A scan's steps run in order, so the scan axis stays one whole serial loop.  Every loop outside
it, and every loop that runs in parallel (the task grid, a GPU thread axis), must iterate only
*independent* axes: axes that each of update's reads of the scan's own tensor indexes with that
axis's own variable (`C[t - 1, i]` in `C[t, i]`), so their iterations are separate chains that
never read one another.  An RNN's `H[t - 1, k]` under a sum over k makes no axis independent:
its steps run one after the other over all of `j`, which may still be vectorized or unrolled
inside the step.  `scan_loops` is the default schedule's answer for a scan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ptowsp.schedules.loopnest import (
    PARALLEL, SERIAL, FuseRelation, LoopNest, SplitRelation, StepError, inner_of, outer_of,
)
from ptowsp.schedules.passes.decisions import decision
from ptowsp.te import Op, walk
from ptowsp.workloads import ComputeTask

if TYPE_CHECKING:
    from ptowsp.schedules.schedule import Schedule


def independent_axes(task: ComputeTask) -> set[str]:
    """The task's axes (not the scan axis) that every read of its own tensor indexes by themselves."""
    assert task.scan is not None
    free = set(task.loop_names) - {task.scan.axis}
    for node in walk(task.body):
        if node.op is Op.LOAD and node.arg.name == task.name:
            free = {a for a in free
                    if (i := node.src[task.loop_names.index(a)]).op is Op.VAR and i.arg[0] == a}
    return free


def _roots(nest: LoopNest, loop: str) -> set[str]:
    """The original axes a (split or fused) loop iterates."""
    for rel in nest.relations:
        if isinstance(rel, SplitRelation) and loop in (rel.outer, rel.inner):
            return _roots(nest, rel.parent)
        if isinstance(rel, FuseRelation) and loop == rel.fused:
            return _roots(nest, rel.outer) | _roots(nest, rel.inner)
    return {loop}


def check_scan_nest(task: ComputeTask, nest: LoopNest) -> None:
    """StepError when `nest` would run scan `task`'s steps out of order or chains into each other."""
    assert task.scan is not None
    axis = task.scan.axis
    if axis not in nest.names:
        raise StepError(f"the scan axis {axis} must stay one whole loop (it is split or fused); the loops are "
                        f"{', '.join(nest.names)}")
    k = nest.index(axis)
    if nest.loops[k].annotation != SERIAL:
        raise StepError(f"the scan axis {axis} runs its steps in order; it cannot be {nest.loops[k].annotation}")
    free = independent_axes(task)
    for n, lp in enumerate(nest.loops):
        outside = n < k or lp.annotation == PARALLEL or "Idx." in lp.annotation
        shared = sorted(_roots(nest, lp.name) - free)
        if outside and shared:
            where = f"outside the scan axis {axis}" if n < k else f"{lp.annotation}"
            raise StepError(f"loop {lp.name} runs {where}, but update reads its own earlier steps across "
                            f"{', '.join(shared)} (not at {shared[0]} itself), so those iterations depend on "
                            f"each other; keep {lp.name} serial inside {axis}")


def scan_loops(s: Schedule, task: str, lanes: int, strips: int, choose) -> None:
    """A scan: its independent axes outside the scan axis (the grid's candidates), the rest inside,
    and the innermost axis in vectors.  An independent innermost axis is cut into strips whose
    outer part goes outside too, so each strip runs every step with vector loads and stores
    (Halide's iir_blur schedule); a strip is as many vectors as still leave a few strips per
    worker (`strips` in all), since a task instance holds its strip over every step.  The
    decision `task.vectors` (the default schedule's `choose`) picks the strip width."""
    scan = s.workload.task(task)
    free, axis = independent_axes(scan), scan.scan.axis
    names = s.loops(task)
    last = s.nest(task).loop(names[-1])
    fits = [n for n in (1, 2, 4) if isinstance(last.extent, int) and last.extent % (n * lanes) == 0
            and last.extent > n * lanes and last.name != axis]
    enough = [n for n in fits if last.name not in free or last.extent // (n * lanes) >= strips]
    vectors = choose(decision(task, "vectors"), (0, *fits), max(enough or fits[:1], default=0)) if lanes > 1 else 0
    outer = [n for n in names if n in free and n != last.name]
    inner = [n for n in names if n not in free and n not in (axis, last.name)]
    if not vectors:
        s.reorder(task, *outer, *([last.name] if last.name in free else []), axis, *inner,
                  *([] if last.name in free or last.name == axis else [last.name]))
        return
    s.split(task, last.name, vectors * lanes)
    strip, lane = outer_of(last.name), inner_of(last.name)
    s.reorder(task, *outer, *([strip] if last.name in free else []), axis, *inner,
              *([] if last.name in free else [strip]), lane)
    if vectors > 1:
        s.split(task, lane, lanes).unroll(task, outer_of(lane))
        lane = inner_of(lane)
    s.vectorize(task, lane)
