"""The thread binding a kernel gets on the cuda target when its schedule binds no loop.

A kernel whose loops are all serial would run on one GPU thread.  So, for
each task that becomes a kernel and binds nothing, its leading serial
spatial loops (after the task grid, before the first reduction loop) are
fused into one loop of extent E, split by T threads, and bound: the outer
part to `blockIdx.x`, the inner to `threadIdx.x`.  Each thread then runs
the rest of the nest (inner spatial loops, the reduction) for its point.

T is the largest divisor of E up to 256 when that is at least 64, or when
the task stages shared memory (every thread must reach the barrier, so no
guarded tail); otherwise 256 with a guarded tail.  E <= 256 runs as one
block of E threads.  A loop another task is computed at, or a cache is
filled at, cannot be fused away: the run stops before it, and when it is
the first leading loop it is bound to `blockIdx.x` alone.  A task that calls a warp-level intrinsic
(mma.py) has its fused loop bound to `blockIdx.x` alone: its threads on x are the warp's lanes.

The steps are added to the schedule after fusion (`Schedule.fusion_plan`), so they
land on the task that owns the kernel's loops; `prog.source(task)` shows them.
"""

from __future__ import annotations

from ptowsp.backends.cuda.mma import is_warp_intrinsic
from ptowsp.errors import ScheduleError
from ptowsp.lower.ir import SHARED
from ptowsp.schedules import Schedule
from ptowsp.schedules.loopnest import PARALLEL, SERIAL, fused_of, inner_of, outer_of
from ptowsp.schedules.passes import fold
from ptowsp.schedules.steps import THREAD_AXES
from ptowsp.workloads import ComputeTask

THREADS_PER_BLOCK = 256
MIN_EVEN_BLOCK = 64  # a dividing block at least this big beats a guarded 256


def kernel_tasks(schedule: Schedule) -> list[str]:
    """The tasks of a fusion-planned schedule that become kernels, in order."""
    wl = schedule.workload
    folded = fold.foldable(wl)
    placed = schedule.compute_at_locations
    return [t for t in wl.tasks if isinstance(wl.task(t), ComputeTask)
            and t not in schedule.inlined and t not in placed and t not in folded]


def _threads(extent: int, even_only: bool) -> int:
    divisor = max(d for d in range(1, THREADS_PER_BLOCK + 1) if extent % d == 0)
    return divisor if divisor >= MIN_EVEN_BLOCK or even_only else THREADS_PER_BLOCK


def _bind(s: Schedule, task: str) -> None:
    nest = s.nest(task)
    anchors = {loop for consumer, loop in s.compute_at_locations.values() if consumer == task}
    anchors |= {loop for t, _, _, loop in s.cache_reads if t == task}
    lead = []
    for lp in nest.loops:
        if lp.annotation == PARALLEL:
            continue
        if lp.reduce or lp.annotation != SERIAL:
            break
        lead.append(lp)
    if not lead:
        return
    run = []
    for lp in lead:
        if lp.name in anchors:
            break
        run.append(lp)
    if not run:
        s.bind(task, lead[0].name, "blockIdx.x")
        return
    loop, extent = run[0].name, run[0].extent
    for lp in run[1:]:
        s.fuse(task, loop, lp.name)
        loop, extent = fused_of(loop, lp.name), extent * lp.extent
    if task in s.tensorized and is_warp_intrinsic(s.tensorized[task][1]):
        s.bind(task, loop, "blockIdx.x")
        return
    if extent <= THREADS_PER_BLOCK:
        s.bind(task, loop, "threadIdx.x")
        return
    shared = any(t == task and scope == SHARED for t, _, scope, _ in s.cache_reads)
    s.split(task, loop, _threads(extent, shared))
    s.bind(task, outer_of(loop), "blockIdx.x").bind(task, inner_of(loop), "threadIdx.x")


def with_default_binding(planned: Schedule) -> Schedule:
    """The schedule after fusion (`planned`), with a default binding on every kernel that binds no loop."""
    for task in kernel_tasks(planned):
        if any(lp.annotation in THREAD_AXES for lp in planned.nest(task).loops):
            continue
        trial = planned.copy()
        try:
            _bind(trial, task)
        except ScheduleError:
            continue  # a nest the default cannot reshape runs on one thread per launch
        planned = trial
    return planned
