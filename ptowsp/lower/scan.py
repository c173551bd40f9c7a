"""Lower a scan (workloads/scan.py): its initial steps and its update steps as two nests.

The task's body is `where(t < steps, init, update)`.  Rather than test the step at every point,
the scan axis is cut in two: the nest of init runs t over [0, steps), the nest of update over
[steps, extent), each with the task's loop schedule (the scan axis is never split, so only
its extent changes).  update reads the scan's own tensor at t - d, d <= steps: always a step the
kernel stored before, since the scan axis is serial and every loop outside it or parallel
iterates independent axes (schedules/scan_rules.py).
"""

from __future__ import annotations

from ptowsp.lower.ir import Stmt, block
from ptowsp.schedules import Schedule
from ptowsp.te import sizes
from ptowsp.workloads import Workload


def lower_scan(lowering, wl: Workload, schedule: Schedule) -> Stmt:
    """The scan's two nests (the second absent when init covers every step); `lowering` is the
    task's lowering (lower/kernel.py), narrowed to each part's steps by its `over_steps`."""
    task = lowering.task
    axis, steps = task.scan.axis, task.scan.steps
    extent = task.tensor.shape[task.loop_names.index(axis)]
    first = min(steps, extent) if isinstance(extent, int) else steps
    _, init, update = task.body.src
    parts = []
    for value, start, count in ((init, 0, first), (update, steps, sizes.sub(extent, steps))):
        if isinstance(count, int) and count <= 0:
            continue
        part = lowering.over_steps(wl, schedule, axis, start, count, value)
        at = tuple(part.at_axes(a) for a in task.axes)  # the stored element: the step's own, not the nest's
        parts.append(part.nest_over(part.inner, part.store(part.out, at, part.at_axes(part.body))))
    return block(*parts)
