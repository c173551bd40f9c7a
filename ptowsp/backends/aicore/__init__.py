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
import functools
from collections.abc import Mapping

import numpy as np

from ptowsp.backends.aicore.cost import KernelShape, ModelCosts, check_buffers, itemsizes, kernel_shape
from ptowsp.backends.aicore.model import DeviceModel
from ptowsp.backends.cpu import CpuBackend, CpuExecutable
from ptowsp.errors import BuildError
from ptowsp.runtime import Options, TaskTable, Trace, execute_device
from ptowsp.schedules import Schedule

__all__ = ["AicoreBackend", "AicoreExecutable", "DeviceModel"]


class AicoreExecutable:
    """A cpu executable for the numbers, plus the device's view of its task table."""

    def __init__(self, schedule: Schedule, device: DeviceModel):
        self.schedule, self.device = schedule, device
        self.cpu = CpuExecutable(schedule)
        wl, program = schedule.workload, self.cpu.program
        self.shapes: dict[str, KernelShape] = {
            name: kernel_shape(kernel, wl.category(name), schedule.reduce_loops(name), schedule.cores.get(name))
            for name, kernel in program.kernels.items()}
        unknown = {c for c in schedule.cores.values() if c not in ("cube", "vector")}
        if unknown:
            raise BuildError(f"the aicore target has cube and vector cores; bind(..., core=) named {sorted(unknown)}")
        classes = {name: shape.core for name, shape in self.shapes.items()}
        self.table = TaskTable([dataclasses.replace(inst, core=classes.get(inst.name, "vector"))
                                for inst in self.cpu.table.instances], after=self.cpu.table.after)
        names = {t for inst in self.table.instances for t, _ in (*inst.reads, *inst.writes)}
        self.itemsize = itemsizes({t: wl.tensor(t).dtype for t in names})
        check_buffers(device, self.table.instances, self.shapes, self.itemsize, schedule.prefetch_depth)

    @functools.cached_property
    def program(self):
        return self.cpu.program

    @property
    def memory_plan(self):
        return self.cpu.memory_plan

    def run(self, inputs: Mapping[str, np.ndarray], options: Options) -> tuple[dict[str, np.ndarray], Trace]:
        costs = ModelCosts(self.device, self.table, self.shapes, self.itemsize)  # fresh L2 and HBM queue

        def on_device(launcher, opts: Options) -> Trace:
            return execute_device(self.table, launcher, opts, costs)

        outputs, trace = self.cpu.run(inputs, options, execute_table=on_device)
        trace.statistics["memory"] = costs.statistics()
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


