"""What a schedule may do to a scan (workloads/scan.py) without changing its result.

A scan's steps run in order, so the scan axis stays one whole serial loop.  Every loop outside
it, and every loop that runs in parallel (the task grid, a GPU thread axis), must iterate only
*independent* axes: axes that each of update's reads of the scan's own tensor indexes with that
axis's own variable (`C[t - 1, i]` in `C[t, i]`), so their iterations are separate chains that
never read one another.  An RNN's `H[t - 1, k]` under a sum over k makes no axis independent:
its steps run one after the other over all of `j`, which may still be vectorized or unrolled
inside the step.
"""

from __future__ import annotations

from ptowsp.schedules.loopnest import PARALLEL, SERIAL, FuseRelation, LoopNest, SplitRelation, StepError
from ptowsp.te import Op, walk
from ptowsp.workloads import ComputeTask


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
