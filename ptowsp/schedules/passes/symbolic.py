"""The default schedule over symbolic sizes: a typical binding's schedule, replayed over the symbols.

default.py writes the schedule of the workload bound at a typical size; here its steps are applied
to the workload with its sizes.  A step that needs a number where a size stands (vectorizing a whole
symbolic loop) is refused and left out; so is one that would give a local buffer a symbolic size
(a producer computed inside a loop of symbolic extent, an accumulator tile spanning one), and every
staged read (cache_read, prefetch_tensor), whose box may span a size.  A producer whose placement is
left out is stored on its own, without a task grid of its own (a decoder's projections, grouped
inside their product at the typical size, run as one task each; making their leading loops a grid
made a 128-token prefill 40x slower in wall time: thousands of small tasks, each costing the host
tens of microseconds).
"""

from __future__ import annotations

from ptowsp.errors import ScheduleError
from ptowsp.schedules.loopnest import PARALLEL, roots_of
from ptowsp.schedules.schedule import Schedule
from ptowsp.workloads import ComputeTask, Workload

STAGING = ("cache_read", "prefetch_tensor")


def over_sizes(wl: Workload, typical: Schedule) -> Schedule:
    """`typical`'s steps (made for `wl` bound at a typical size) applied to `wl` where they keep every
    buffer of fixed size (see the module docstring)."""
    s, kept = Schedule(wl), []
    for step in typical.steps:
        if step.kind in STAGING:
            continue
        try:
            s.apply(step)  # a refused step leaves the schedule as it was (handlers validate first)
        except ScheduleError:
            continue
        if fixed_size_buffers(s):
            kept.append(step)
        else:  # rare: replay without it, rather than copying the schedule before every step
            s = Schedule(wl)
            for good in kept:
                s.apply(good)
    return s


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
    for task in s.workload.tasks:
        if not isinstance(s.workload.task(task), ComputeTask) or task in s.inlined:
            continue
        loops = [lp for lp in s.nest(task).loops if lp.annotation != PARALLEL]
        first = next((k for k, lp in enumerate(loops) if lp.reduce), len(loops))
        if any(not lp.reduce and not isinstance(lp.extent, int) for lp in loops[first:]):
            return False
    return True
