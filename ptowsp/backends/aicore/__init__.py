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
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ptowsp.backends.aicore.cost import (DEFAULT_MAX_BLOCKS, MAX_BLOCKS, BufferOverflow, KernelShape, ModelCosts,
                                        TooManyBlocks, check_blocks, check_buffers, itemsizes, kernel_shape)
from ptowsp.backends.aicore.fitting import Fitting
from ptowsp.backends.aicore.model import DeviceModel
from ptowsp.backends.aicore.tiling import CubeTiles
from ptowsp.backends.cpu import CpuBackend, CpuExecutable
from ptowsp.backends.cpu.executable import KEPT_SETUPS
from ptowsp.backends.cpu.setup import RunSetup
from ptowsp.workloads.intrinsic import lookup
from ptowsp.errors import BuildError
from ptowsp.lower import lower_program
from ptowsp.runtime import Options, TaskTable, Trace
from ptowsp.runtime.clocks import DeviceClock
from ptowsp.schedules.resolved import ResolvedSchedule
from ptowsp.schedules.passes.cube import CubeTiler
from ptowsp.schedules.passes.decisions import Decision
from ptowsp.schedules.passes.default import Choose
from ptowsp.workloads import Category, Workload

__all__ = ["AicoreBackend", "AicoreExecutable", "DeviceModel"]


class AicoreExecutable:
    """A cpu executable for the numbers, plus the device's view of its task table."""

    source_kinds = CpuExecutable.source_kinds  # the host code that computes the numbers

    def __init__(self, resolved: ResolvedSchedule, device: DeviceModel, max_blocks: int = MAX_BLOCKS):
        schedule = self.schedule = resolved.schedule
        self.device = device
        if schedule.workload.sizes:
            raise BuildError(f"workload {schedule.workload.name!r} has symbolic sizes "
                             f"({', '.join(schedule.workload.sizes)}), which the aicore target does not take yet; "
                             "build Workload.bind(...) for one binding")
        if schedule.prefetched:
            task, tensor, _, _ = schedule.prefetched[0]
            raise BuildError(f"task {task!r}: prefetch_tensor({tensor!r}) is a cpu cache hint, and an AICore has no "
                             "data cache to fetch into (its inputs move by DMA); drop the step for this target")
        # lowered first: the buffers are checked before anything is compiled (the default refits and retries)
        wl, program = schedule.workload, lower_program(schedule.workload, resolved)
        self.program = program
        unknown = {c for c in schedule.cores.values() if c not in ("cube", "vector")}
        if unknown:
            raise BuildError(f"the aicore target has cube and vector cores; bind(..., core=) named {sorted(unknown)}")
        planned = resolved.planned  # fusion applied: epilogue anchors are computed at their consumers
        self.shapes: dict[str, KernelShape] = {}
        calls = {t: lookup(i) for t, (_, i) in planned.tensorized.items()}
        for task, found in calls.items():
            if "aicore" not in found.implementations:
                raise BuildError(f"task {task!r}: intrinsic {found.name!r} has no aicore implementation (a core "
                                 "class: pw.intrinsic(..., implementations={'aicore': 'cube'}))")
        for name, kernel in program.kernels.items():
            members = self._members(name)
            cube = any(wl.category(t) is Category.COMPLEX_OUT_FUSABLE for t in members)
            called = [calls[t].implementations["aicore"] for t in members if t in calls]  # tensorized: its class
            core = schedule.cores.get(name) or (called[0] if called else "cube" if cube else "vector")
            reduce = {prefix + r for task, prefix in members.items() for r in planned.reduce_loops(task)}
            self.shapes[name] = kernel_shape(kernel, core, reduce, set(planned.reduce_loops(name)))
            for (_, nest), (_, variant) in zip(planned.variants.get(name, ()), program.variants.get(name, ())):
                own = {lp.name for lp in nest.loops if lp.reduce}  # a variant's loops: its own reduce loops
                self.shapes[variant.name] = kernel_shape(variant, core, reduce | own, own)
        self.classes = {name: shape.core for name, shape in self.shapes.items()}
        names = {t for shape in self.shapes.values() for access in (shape.tile, shape.stream) if access is not None
                 for t, _ in (*access.reads, *access.writes)}
        self.itemsize = itemsizes({t: wl.tensor(t).dtype for t in names})
        check_buffers(device, self.shapes, self.itemsize, schedule.prefetch_depth)
        check_blocks(self.shapes, max_blocks)
        self.cpu = CpuExecutable(resolved, program=program)
        self._cored: dict[int, tuple] = {}  # id of a cpu table's instances -> (them, the table on core classes)
        self.table = self._on_cores(self.cpu.table)
        table_names = {t for inst in self.table.instances for t, _ in (*inst.reads, *inst.writes)}
        self.itemsize |= itemsizes({t: wl.tensor(t).dtype for t in table_names - names})

    def _on_cores(self, table: TaskTable) -> TaskTable:
        """The cpu's table with each instance on its core class (made once per table of a binding; a
        run's skipped tiles and skip test carried over)."""
        found = self._cored.get(id(table.instances))
        if found is None or found[0] is not table.instances:
            if len(self._cored) >= KEPT_SETUPS:
                self._cored.pop(next(iter(self._cored)))
            cored = TaskTable([dataclasses.replace(inst, core=self.classes.get(inst.name, "vector"))
                               for inst in table.instances], after=table.after)
            found = self._cored[id(table.instances)] = (table.instances, cored)
        return found[1].for_run(table.skipped, table.skip)

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

    def setup_for(self, sizes: Mapping[str, int]) -> RunSetup:
        return self.cpu.setup_for(sizes)

    def run(self, inputs: Mapping[str, np.ndarray], options: Options) -> tuple[dict[str, np.ndarray], Trace]:
        return self.run_at(self.cpu.setup_of(inputs), inputs, options)

    def run_at(self, setup: RunSetup, inputs: Mapping[str, np.ndarray],
               options: Options) -> tuple[dict[str, np.ndarray], Trace]:
        """A run at the binding of `setup` on the device clock (a Recording replays through this)."""
        def on_cores(table: TaskTable) -> tuple[TaskTable, ModelCosts]:
            table = self._on_cores(table)  # the run's table: domains may have left tiles out
            return table, ModelCosts(self.device, table, self.shapes, self.itemsize)  # fresh L2 and HBM queue

        clock = DeviceClock(on_cores)
        outputs, trace = self.cpu.run_at(setup, inputs, options, clock)
        trace.statistics["memory"] = {} if clock.costs is None else clock.costs.statistics()
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

    def compile(self, resolved: ResolvedSchedule, device: DeviceModel | None = None) -> AicoreExecutable:
        return AicoreExecutable(resolved, device or DeviceModel())

    def compile_default(self, resolved: ResolvedSchedule, device: DeviceModel | None = None) -> AicoreExecutable:
        """The default schedule, changed until it fits the device's buffers (fitting.py): a task's
        reduction streamed in blocks, its tile narrowed, a sum computed inside its consumer stored on
        its own; and until no instance streams more than DEFAULT_MAX_BLOCKS blocks where streaming its
        reduction outside its tile can make them fewer.  A user's own schedule is compiled as given
        (`compile`) and refused if it does not fit."""
        fitting, limit = Fitting(resolved.schedule), DEFAULT_MAX_BLOCKS
        while True:
            fitted = fitting.schedule()
            try:
                return AicoreExecutable(resolved if fitted is resolved.schedule else ResolvedSchedule(fitted),
                                        device or DeviceModel(), limit)
            except BufferOverflow as e:
                if not fitting.overflowed(e):
                    raise
            except TooManyBlocks as e:
                if fitting.too_many_blocks(e):
                    continue
                if limit == MAX_BLOCKS or max(x.blocks for x in (e, *e.others)) > MAX_BLOCKS:
                    raise
                limit = MAX_BLOCKS  # the default's own limit could not be met: the device's is enough

    def default_workload(self, wl: Workload) -> Workload:
        return wl

    def cube_tiler(self, device: DeviceModel | None) -> CubeTiler:
        return CubeTiles(device or DeviceModel())

    def schedule_choices(self, device: DeviceModel | None) -> Choose:
        """The default schedule on this target: a contraction's k block small enough that the panel
        block of its register tile (k rows of 2 vectors) fits half of L0B, the other half for the
        block loaded ahead, so the task streams along k instead of being refused; and at least one
        task per core (the cpu's minimum task size is for its runtime, ~10 us a task), which also
        keeps a vector task's rows within UB; one vector of a row per task step (the cpu's several
        accumulators under a reduction are for its register file)."""
        d = device or DeviceModel()
        largest = d.l0b_bytes // 2 // (2 * d.vector_bytes_per_cycle)
        cores = len(d.core_classes())

        def choose(name: str, candidates: Sequence[Any], default: Any) -> Any:
            kind = Decision.parse(name).kind
            if kind == "k_block":
                return max((c for c in candidates if c <= largest), default=min(candidates))
            if kind == "tasks" and cores in candidates:
                return max(default, cores)
            if kind == "prefetch" and 1 in candidates:
                return 1  # double buffering: a block loads while the one before computes (the tiles fit two)
            if kind == "vectors" and 1 in candidates:
                # a vector core computes from UB, not registers: more vectors along a row under a
                # reduction only make its blocks larger (replayed decode 25.1 -> 29.9 ms with them)
                return 1
            return default

        return choose
