"""`pw.build`: schedule -> lowered program -> a backend's executable, behind one object."""

from __future__ import annotations

import functools

import numpy as np

from ptowsp.backends.base import Executable, backend
from ptowsp.errors import BuildError
from ptowsp.lower import Program, lower_program
from ptowsp.schedules import Schedule
from ptowsp.workloads import Workload, validate_inputs


class Built:
    """A workload compiled for one target: call `run(**inputs)` (or the object itself)."""

    def __init__(self, schedule: Schedule, target: str, executable: Executable):
        self.schedule = schedule
        self.workload = schedule.workload
        self.target = target
        self._executable = executable

    @functools.cached_property
    def program(self) -> Program:
        """The lowered program (kernels and task table); the numpy target lowers only when asked."""
        return getattr(self._executable, "program", None) or lower_program(self.workload, self.schedule)

    def run(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        """Validate inputs (InputError), run, and return {output name: new array}."""
        return self._executable.run(validate_inputs(self.workload, inputs))

    __call__ = run

    def source(self, task: str) -> str:
        """The task's lowered loop nest as pseudo-code."""
        return self.program.source(task)

    def __repr__(self) -> str:
        return f"Built({self.workload.name!r}, target={self.target!r})"


def build(what: Workload | Schedule, target: str = "numpy") -> Built:
    """Compile a schedule (or a workload with its default schedule) for a target."""
    if isinstance(what, Workload):
        schedule = what.schedule()
    elif isinstance(what, Schedule):
        schedule = what
    else:
        raise BuildError(f"pw.build takes a Workload or a Schedule, got {type(what).__name__}")
    return Built(schedule, target, backend(target).compile(schedule))
