"""The `aicore` target: the cpu backend's kernels for the numbers, a device model for the time.

A build compiles the schedule with the cpu backend (the results must match
the reference exactly as on cpu), reads each kernel's shape from its loop IR
(cost.py), assigns every instance a core class, and refuses a task that does
not fit its core's buffers.  A run executes the task table on the device
clock (ptowsp/runtime/device.py), so the trace and the makespan are device
estimates, the same on every machine.  docs/aicore.md describes the model.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ptowsp.backends.aicore.cost import (BufferOverflow, KernelShape, ModelCosts, TooManyBlocks, check_blocks,
                                        check_buffers, itemsizes, kernel_shape)
from ptowsp.backends.aicore.model import DeviceModel
from ptowsp.backends.cpu import CpuBackend, CpuExecutable
from ptowsp.workloads.intrinsic import lookup
from ptowsp.errors import BuildError
from ptowsp.lower import lower_program
from ptowsp.runtime import Options, TaskTable, Trace, execute_device
from ptowsp.schedules import Schedule
from ptowsp.schedules.schedule import schedulable_reduce_axes
from ptowsp.schedules.loopnest import PARALLEL, SERIAL
from ptowsp.schedules.passes.default import Choose
from ptowsp.te import Op, walk
from ptowsp.workloads import Category, Workload

__all__ = ["AicoreBackend", "AicoreExecutable", "DeviceModel"]


class AicoreExecutable:
    """A cpu executable for the numbers, plus the device's view of its task table."""

    source_kinds = CpuExecutable.source_kinds  # the host code that computes the numbers

    def __init__(self, schedule: Schedule, device: DeviceModel):
        self.schedule, self.device = schedule, device
        if schedule.workload.sizes:
            raise BuildError(f"workload {schedule.workload.name!r} has symbolic sizes "
                             f"({', '.join(schedule.workload.sizes)}), which the aicore target does not take yet; "
                             "build Workload.bind(...) for one binding")
        if schedule.prefetched:
            task, tensor, _, _ = schedule.prefetched[0]
            raise BuildError(f"task {task!r}: prefetch_tensor({tensor!r}) is a cpu cache hint, and an AICore has no "
                             "data cache to fetch into (its inputs move by DMA); drop the step for this target")
        # lowered first: the buffers are checked before anything is compiled (the default refits and retries)
        wl, program = schedule.workload, lower_program(schedule.workload, schedule)
        self.program = program
        unknown = {c for c in schedule.cores.values() if c not in ("cube", "vector")}
        if unknown:
            raise BuildError(f"the aicore target has cube and vector cores; bind(..., core=) named {sorted(unknown)}")
        resolved = program.schedule  # fusion applied: epilogue anchors are computed at their consumers
        self.shapes: dict[str, KernelShape] = {}
        calls = {t: lookup(i) for t, (_, i) in resolved.tensorized.items()}
        for task, found in calls.items():
            if "aicore" not in found.implementations:
                raise BuildError(f"task {task!r}: intrinsic {found.name!r} has no aicore implementation (a core "
                                 "class: pw.intrinsic(..., implementations={'aicore': 'cube'}))")
        for name, kernel in program.kernels.items():
            members = self._members(name)
            cube = any(wl.category(t) is Category.COMPLEX_OUT_FUSABLE for t in members)
            called = [calls[t].implementations["aicore"] for t in members if t in calls]  # tensorized: its class
            core = schedule.cores.get(name) or (called[0] if called else "cube" if cube else "vector")
            reduce = {prefix + r for task, prefix in members.items() for r in resolved.reduce_loops(task)}
            self.shapes[name] = kernel_shape(kernel, core, reduce, set(resolved.reduce_loops(name)))
            for (_, nest), (_, variant) in zip(resolved.variants.get(name, ()), program.variants.get(name, ())):
                own = {lp.name for lp in nest.loops if lp.reduce}  # a variant's loops: its own reduce loops
                self.shapes[variant.name] = kernel_shape(variant, core, reduce | own, own)
        self.classes = {name: shape.core for name, shape in self.shapes.items()}
        names = {t for shape in self.shapes.values() for access in (shape.tile, shape.stream) if access is not None
                 for t, _ in (*access.reads, *access.writes)}
        self.itemsize = itemsizes({t: wl.tensor(t).dtype for t in names})
        check_buffers(device, self.shapes, self.itemsize, schedule.prefetch_depth)
        check_blocks(self.shapes)
        self.cpu = CpuExecutable(schedule, program=program)
        self.table = self._on_cores(self.cpu.table)
        table_names = {t for inst in self.table.instances for t, _ in (*inst.reads, *inst.writes)}
        self.itemsize |= itemsizes({t: wl.tensor(t).dtype for t in table_names - names})

    def _on_cores(self, table: TaskTable) -> TaskTable:
        """The cpu's table with each instance on its core class."""
        return TaskTable([dataclasses.replace(inst, core=self.classes.get(inst.name, "vector"))
                          for inst in table.instances], after=table.after, skip=table.skip)

    def _members(self, kernel: str) -> dict[str, str]:
        """The tasks lowered into `kernel`, each with the prefix lowering gave its loops: the kernel's
        own task, and those computed at it, at any depth (fusion's epilogue anchors among them).
        A kernel with a complex-out-fusable (matrix-multiply-shaped) member runs on a cube core."""
        placed = self.program.schedule.compute_at_locations
        members = {kernel: ""}
        for task in placed:
            chain = [task]
            while chain[-1] in placed:
                chain.append(placed[chain[-1]][0])
            if chain[-1] == kernel:
                members[task] = "".join(f"{t}." for t in reversed(chain[:-1]))
        return members

    @property
    def memory_plan(self):
        return self.cpu.memory_plan

    def source(self, task: str, kind: str) -> str:
        return self.cpu.source(task, kind)

    def run(self, inputs: Mapping[str, np.ndarray], options: Options) -> tuple[dict[str, np.ndarray], Trace]:
        statistics = {}

        def on_device(table: TaskTable, launcher, opts: Options) -> Trace:
            table = self._on_cores(table)  # the run's table: domains may have left tiles out
            costs = ModelCosts(self.device, table, self.shapes, self.itemsize)  # fresh L2 and HBM queue
            trace = execute_device(table, launcher, opts, costs)
            statistics.update(costs.statistics())
            return trace

        outputs, trace = self.cpu.run(inputs, options, execute_table=on_device)
        trace.statistics["memory"] = statistics
        return outputs, trace


class AicoreBackend:
    name = "aicore"

    @property
    def vector_bytes(self) -> int:
        return DeviceModel().vector_bytes_per_cycle

    def unavailable_reason(self) -> str | None:
        return CpuBackend().unavailable_reason()  # the numbers come from the cpu backend

    def cores(self, workers, device: DeviceModel | None) -> tuple[str | None, ...]:
        if device is not None and not isinstance(device, DeviceModel):
            raise BuildError(f"device must be a pw.DeviceModel, got {type(device).__name__}")
        if workers is not None:
            raise BuildError("the aicore target's cores come from its device model: pass "
                             "device=pw.DeviceModel(clusters=..., ...) instead of workers=")
        return (device or DeviceModel()).core_classes()

    def compile(self, schedule: Schedule, device: DeviceModel | None = None) -> AicoreExecutable:
        return AicoreExecutable(schedule, device or DeviceModel())

    def compile_default(self, schedule: Schedule, device: DeviceModel | None = None) -> AicoreExecutable:
        """The default schedule, with each task whose input blocks overflow a core buffer made to stream
        its outermost reduction loop in blocks (halved until they fit): a convolution's channels, a
        contraction's k; then its tile narrowed; then, for a sum computed inside its consumer's loops
        (a convolution inside its requantization), that sum stored on its own and fitted the same way.
        A user's own schedule is compiled as given (`compile`) and refused if it does not fit."""
        blocks: dict[str, int] = {}
        narrowed: dict[str, list[tuple[str, int]]] = {}  # task -> (loop, width) splits into its grid (narrow_tile)
        while True:
            streamed = schedule
            for task, splits in narrowed.items():
                for loop, width in splits:
                    streamed = narrow_tile(streamed, task, loop, width)
            for task, block in blocks.items():
                streamed = stream_reduction_blocks(streamed, task, block)
            try:
                return self.compile(streamed, device)
            except BufferOverflow as e:
                summing = _summing(schedule, e.task)
                extent = _streamable(streamed, summing) if summing else None
                piece = _stream_piece(schedule, summing) if extent is not None else None
                block = blocks.get(summing) or extent
                if e.buffer != "L0C" and extent is not None and piece is not None and block // 2 >= piece[1]:
                    blocks[summing] = block // 2
                elif (narrowing := _narrowing(streamed, e.task, e.tensor)) is not None:
                    # the reduction streams no further (or there is none), or the accumulators overflow: a
                    # narrower tile
                    narrowed.setdefault(e.task, []).append(narrowing)
                elif summing is not None and summing != e.task:
                    # a sum computed inside its consumer's loops overflows however those go: store it, and
                    # stream and narrow it as a task of its own
                    schedule = schedule.without_compute_at(summing)
                    blocks.pop(summing, None)
                elif (narrowing := _narrowing(streamed, e.task, e.tensor, thinner=True)) is not None:
                    narrowed.setdefault(e.task, []).append(narrowing)
                else:
                    raise
            except TooManyBlocks as e:
                # a reduction walked inside a tile's element loops (a vectorized 1x1 convolution's channels
                # inside its pixels): streamed outside them instead, in one block to start with, so each block
                # is a whole tile's step; the buffers then halve it if it does not fit
                summing = _summing(schedule, e.task)
                extent = _streamable(streamed, summing) if summing else None
                if extent is not None and summing not in blocks and _stream_piece(schedule, summing) is not None:
                    blocks[summing] = extent
                elif summing is not None and summing != e.task:  # computed inside its consumer: store it
                    schedule = schedule.without_compute_at(summing)
                    blocks.pop(summing, None)
                else:
                    raise

    def default_workload(self, wl: Workload) -> Workload:
        return wl

    def schedule_choices(self, device: DeviceModel | None) -> Choose:
        """The default schedule on this target: a contraction's k block small enough that the panel
        block of its register tile (k rows of 2 vectors) fits half of L0B, the other half for the
        block loaded ahead, so the task streams along k instead of being refused; and at least one
        task per core (the cpu's minimum task size is for its runtime, ~10 us a task), which also
        keeps a vector task's rows within UB."""
        d = device or DeviceModel()
        largest = d.l0b_bytes // 2 // (2 * d.vector_bytes_per_cycle)
        cores = len(d.core_classes())

        def choose(name: str, candidates: Sequence[Any], default: Any) -> Any:
            if name.endswith(".k_block"):
                return max((c for c in candidates if c <= largest), default=min(candidates))
            if name.endswith(".tasks") and cores in candidates:
                return max(default, cores)
            return default

        return choose


def _reduce_axes(schedule: Schedule, task: str) -> list[tuple[str, int]]:
    """The axes of `task`'s one scheduled reduction (in an epilogue too: `sum(..) + b[o]`), outermost first."""
    if task not in schedule.workload.tasks:
        return []
    return schedulable_reduce_axes(schedule.workload.task(task).body)


def _summing(schedule: Schedule, task: str) -> str | None:
    """The task whose reduction an overflow of kernel `task` streams: the task itself, or the producer
    computed at it that sums (a convolution whose epilogue, its bias or its requantization, is the root)."""
    if _reduce_axes(schedule, task):
        return task
    inside = [t for t, (root, _) in schedule.compute_at_locations.items() if root == task and _reduce_axes(schedule, t)]
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
    pieces = [lp for lp in schedule.nest(task).loops if lp.name == axis or lp.name.startswith(axis + ".")]
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
    rest = [lp.name for lp in s.nest(task).loops if lp.name not in grid and lp.name != f"{loop}.outer"]
    return s.reorder(task, *grid, f"{loop}.outer", *rest).parallel(task, f"{loop}.outer")


def stream_reduction_blocks(schedule: Schedule, task: str, block: int) -> Schedule:
    """`task`'s outermost reduction axis streamed in blocks of `block` elements: its streaming piece is split and
    the block loop placed just inside the task grid (after any block loop already there), so each step
    of it loads one block of the inputs (the aicore cost model's stream)."""
    loop, span = _stream_piece(schedule, task)
    s = schedule.copy().split(task, loop, max(1, block // span))  # in place: leave the given one as it is
    loops = s.nest(task).loops
    grid = [lp.name for lp in loops if lp.annotation == PARALLEL]
    after = [lp for lp in loops if lp.annotation != PARALLEL and lp.name != f"{loop}.outer"]
    streaming = []  # block loops already just inside the grid
    for lp in after:
        if not lp.reduce:
            break
        streaming.append(lp.name)
    rest = [lp.name for lp in after if lp.name not in streaming]
    return s.reorder(task, *grid, *streaming, f"{loop}.outer", *rest)
