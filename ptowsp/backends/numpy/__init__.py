"""The `numpy` target: the reference model, ignoring loop steps (results never depend on them).

Each task runs whole, as one instance on the runtime, so independent tasks
overlap (numpy releases the GIL in most loops) and every run leaves a trace.
Folded tasks (constants only) are evaluated once at build time and get no instance.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np

from ptowsp.backends.base import host_cores
from ptowsp.backends.host import host_instance
from ptowsp.errors import BuildError
from ptowsp.lower import Program, lower_program
from ptowsp.runtime import Options, TaskTable, Trace, execute
from ptowsp.schedules.resolved import ResolvedSchedule
from ptowsp.schedules.passes.default import Choose, keep_default
from ptowsp.workloads import ComputeTask, Workload
from ptowsp.workloads.inputs import input_sizes, read_only
from ptowsp.workloads.reference import run_opaque


class NumpyExecutable:
    """Each task evaluated by numpy in table order (the reference's code under the runtime)."""

    source_kinds: tuple[str, ...] = ()  # no generated code: only the lowered loops (Built.source "loops")
    memory_plan = None  # every tensor in its own array

    def __init__(self, resolved: ResolvedSchedule):
        self.resolved, self.schedule = resolved, resolved.schedule
        self.workload = resolved.workload
        self.constants = resolved.constants

    def table_for(self, sizes: Mapping[str, int]) -> TaskTable:
        bound = self.workload.bind(sizes)
        return TaskTable([host_instance(bound.task(name)) for name in bound.tasks if name not in self.constants])

    @property
    def table(self) -> TaskTable:
        return self.table_for({})

    @functools.cached_property
    def program(self) -> Program:
        """The lowered program, made when asked for (numpy runs the tasks as written)."""
        return lower_program(self.workload, self.resolved)

    def source(self, task: str, kind: str) -> str:
        raise BuildError(f"source({task!r}, {kind!r}): the numpy target generates no code")

    def run(self, inputs: Mapping[str, np.ndarray], options: Options) -> tuple[dict[str, np.ndarray], Trace]:
        sizes = input_sizes(self.workload, inputs)
        bound = self.workload.bind(sizes)
        table = self.table_for(sizes)
        values = {**self.constants, **inputs}
        tasks = [bound.task(inst.name) for inst in table.instances]

        class Launch:
            load = store = native = None

            @staticmethod
            def compute(i: int) -> None:
                task = tasks[i]
                if isinstance(task, ComputeTask):
                    values[task.name] = read_only(task.evaluate(values))
                else:
                    values.update(run_opaque(task, values))

        trace = execute(table, Launch, options)
        return {name: np.array(values[name]) for name in self.workload.outputs}, trace


class NumpyBackend:
    name = "numpy"
    vector_bytes = 32  # unused: loop steps do not change how numpy runs

    def unavailable_reason(self) -> str | None:
        return None

    def cores(self, workers, device) -> tuple[str | None, ...]:
        return host_cores(self.name, workers, device)

    def compile_default(self, resolved: ResolvedSchedule, device: None = None) -> NumpyExecutable:
        return self.compile(resolved, device)

    def compile(self, resolved: ResolvedSchedule, device: None = None) -> NumpyExecutable:
        return NumpyExecutable(resolved)

    def default_workload(self, wl: Workload) -> Workload:
        return wl

    def cube_tiler(self, device: None) -> None:
        return None  # no matrix cores: contractions take register tiles

    def schedule_choices(self, device: None) -> Choose:
        return keep_default
