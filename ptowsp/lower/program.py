"""Lower a whole workload: one kernel per compute task plus the task table.

The task table lists every task instance (a kernel and its grid coordinates)
with the region of each tensor it reads and writes (access.py: bounds
inference over the instance's inner loops, clamped to the tensor).  Regions
over-approximate (guards are ignored), which keeps dependencies safe: a task
waits for every task whose written region overlaps one of its read regions.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ptowsp.errors import BuildError
from ptowsp.lower.access import KernelAccess, kernel_access
from ptowsp.lower.kernel import Kernel, lower_task
from ptowsp.lower.printer import to_source
from ptowsp.schedules import Schedule
from ptowsp.schedules.resolved import ResolvedSchedule
from ptowsp.te import Expr
from ptowsp.workloads import ComputeTask, Workload

Region = tuple[tuple[int, int], ...]  # [start, stop) per dimension


@dataclass(frozen=True)
class TaskInstance:
    task: str
    coords: tuple[int, ...]
    reads: tuple[tuple[str, Region], ...]
    writes: tuple[tuple[str, Region], ...]


@dataclass(frozen=True)
class Program:
    """Kernels, host (opaque) tasks and the task table of a scheduled workload."""

    workload: Workload
    schedule: Schedule
    kernels: dict[str, Kernel]
    order: tuple[str, ...]  # tasks to run, in topological order (inlined and folded tasks vanish)
    # tensors known at build time: the workload's constants and the results of folded tasks
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    # task -> (condition, kernel `task@k`) per specialize step: the same grid, other loops inside
    variants: dict[str, tuple[tuple[Expr, Kernel], ...]] = field(default_factory=dict)

    def launches(self) -> Iterator[tuple[str, tuple[int, ...]]]:
        """(task, grid coordinates) of every task instance, in table order; cheap."""
        for name in self.order:
            kernel = self.kernels.get(name)
            grid = () if kernel is None else kernel.grid
            for coords in itertools.product(*(range(extent) for _, extent in grid)):
                yield name, coords

    @functools.cached_property
    def instances(self) -> tuple[TaskInstance, ...]:
        """The task table with read and write regions (computed on first use: the runtime needs it)."""
        table = []
        for name, coords in self.launches():
            kernel = self.kernels.get(name)
            if kernel is None:
                task = self.workload.task(name)
                reads = tuple((t.name, _whole(t)) for t in task.inputs)
                table.append(TaskInstance(name, (), reads, tuple((t.name, _whole(t)) for t in task.outputs)))
            else:
                reads, writes = self.access[name].regions(*coords)
                table.append(TaskInstance(name, coords, reads, writes))
        return tuple(table)

    @functools.cached_property
    def access(self) -> dict[str, KernelAccess]:
        """Per kernel: the boxes an instance reads and writes (functions of its grid coordinates), its flops."""
        return {name: kernel_access(kernel) for name, kernel in self.kernels.items()}

    def source(self, task: str) -> str:
        """The lowered loop nest of a task as pseudo-code (grid loops first)."""
        if task not in self.kernels:
            if task not in self.workload.tasks and task not in self.workload.constants:
                raise BuildError(f"workload {self.workload.name!r} has no task {task!r}; tasks with a loop nest: "
                                 f"{', '.join(self.kernels) or '(none)'}")
            if task in self.workload.constants:
                raise BuildError(f"{task!r} is a constant of the workload, not a task: it has no loop nest")
            if task in self.constants:
                raise BuildError(f"task {task!r} has no kernel: it depends only on constants and was folded "
                                 "at build time (its result is in program.constants)")
            placed = self.schedule.compute_at_locations.get(task)
            kind = ("inlined into its consumers" if task in self.schedule.inlined else
                    f"computed inside {placed[0]!r} at loop {placed[1]}" if placed else "opaque host code")
            raise BuildError(f"task {task!r} has no kernel: it is {kind}")
        kernel = self.kernels[task]
        if not kernel.grid:
            return to_source(kernel.body)
        grid = ", ".join(f"{name} in 0..{extent}" for name, extent in kernel.grid)
        return f"parallel for {grid}:  # task grid\n{to_source(kernel.body, 1)}"


def _whole(tensor) -> Region:
    return tuple((0, n) for n in tensor.shape)


def _check_unstored(wl: Workload, program_order: tuple[str, ...], kernels: dict[str, Kernel], placed: dict,
                    known: dict[str, np.ndarray]) -> None:
    """A task computed at a consumer's loop is never stored: nothing else may read it (unless its value
    is known at build time: a folded task is available whatever the schedule does with it)."""
    for name in program_order:
        task = wl.task(name)
        reads = [b.name for b in kernels[name].inputs] if name in kernels else [t.name for t in task.inputs]
        for tensor in reads:
            if tensor in placed and tensor not in known:
                consumer, loop = placed[tensor]
                raise BuildError(f"task {name!r} reads {tensor!r}, which is computed at {consumer!r} loop {loop} "
                                 "and never stored; compute it at the root or at a loop of each reader")


def task_key(wl: Workload, schedule: Schedule, name: str) -> tuple:
    """Everything of a (fusion-planned) schedule that lowering task `name` reads: its loop nest, its
    read and write caches, the producers inlined into it (transitively) and, recursively, the
    producers computed at its loops.  Equal keys lower to the same kernel, so a search that visits
    hundreds of schedules differing in one task lowers the others once (`lower_program(kernels=)`)."""
    inlined, stack = set(), [name]
    while stack:
        for tensor in wl.task(stack.pop()).inputs:
            if tensor.name in schedule.inlined and tensor.name not in inlined:
                inlined.add(tensor.name)
                stack.append(tensor.name)
    placed = sorted((p, loop) for p, (c, loop) in schedule.compute_at_locations.items() if c == name)
    return (name, schedule.nest(name), schedule.cache_writes.get(name),
            tuple(read for read in schedule.cache_reads if read[0] == name),
            tuple(fetch for fetch in schedule.prefetched if fetch[0] == name), frozenset(inlined),
            tuple((p, loop, task_key(wl, schedule, p)) for p, loop in placed))


def lower_program(wl: Workload, schedule: Schedule | ResolvedSchedule,
                  kernels: dict[tuple, Kernel] | None = None) -> Program:
    """Kernels for every compute task that is not inlined, computed at another or folded, and the task table.

    schedule: as written, or as a build resolved it (schedules/resolved.py: fusion planned, constants folded).
    kernels: a cache of kernels by `task_key`, kept by the caller across calls (one workload's).
    """
    resolved = ResolvedSchedule.of(schedule)
    if resolved.workload is not wl and resolved.workload.fingerprint != wl.fingerprint:
        raise BuildError(f"the schedule belongs to workload {resolved.workload.name!r}, not {wl.name!r}")
    schedule = resolved.planned  # fusion as compute_inline / compute_at steps
    known = resolved.constants
    placed = schedule.compute_at_locations
    order = tuple(t for t in wl.tasks if t not in schedule.inlined and t not in placed and t not in known)
    lowered = {name: _lower_task(wl, schedule, name, kernels) for name in order
               if isinstance(wl.task(name), ComputeTask)}
    _check_unstored(wl, order, lowered, placed, known)
    variants = {name: _variants(wl, schedule, name, lowered[name]) for name in schedule.variants if name in lowered}
    return Program(wl, schedule, lowered, order, known, variants)


def _lower_task(wl: Workload, schedule: Schedule, name: str, cache: dict[tuple, Kernel] | None) -> Kernel:
    if cache is None:
        return lower_task(wl, schedule, name)
    key = task_key(wl, schedule, name)
    if key not in cache:
        cache[key] = lower_task(wl, schedule, name)
    return cache[key]


def _variants(wl: Workload, schedule: Schedule, name: str, base: Kernel) -> tuple[tuple[Expr, Kernel], ...]:
    """The kernels of a task's specialize steps, `name@k`, each with the task grid of its own kernel
    (an instance is the same tile whichever version computes it)."""
    found = []
    for k, (condition, nest) in enumerate(schedule.variants[name], 1):
        kernel = dataclasses.replace(lower_task(wl, schedule.with_loops(name, nest), name), name=f"{name}@{k}")
        grids = [", ".join(f"{g} in 0..{e}" for g, e in kern.grid) for kern in (base, kernel)]
        if grids[0] != grids[1]:
            raise BuildError(f"task {name!r}: variant {k} (when {condition}) has the task grid [{grids[1]}], the "
                             f"task's own loops [{grids[0]}]; a variant keeps the grid and changes the loops inside")
        found.append((condition, kernel))
    return tuple(found)

