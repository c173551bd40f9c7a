"""What a backend is: a name, whether this machine can run it, and how it compiles a program.

A compiled backend lowers the schedule (`ptowsp.lower.lower_program`) and
works from kernels of loop IR and the task table, never the user's lambdas.
The registry is an explicit table: a backend is added by `register(...)` in
ptowsp/backends/__init__.py, not found by file name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from ptowsp.errors import BuildError
from ptowsp.lower import Program
from ptowsp.runtime import Options, TaskTable, Trace, worker_classes
from ptowsp.schedules import Schedule
from ptowsp.schedules.resolved import ResolvedSchedule
from ptowsp.schedules.steps import CORE_CLASSES
from ptowsp.schedules.passes.cube import CubeTiler
from ptowsp.schedules.passes.default import Choose
from ptowsp.schedules.passes.memory import MemoryPlan
from ptowsp.workloads import Workload


class Executable(Protocol):
    table: TaskTable  # every task instance with its regions, in launch order
    schedule: Schedule  # the schedule it runs (a target's default may have adapted the one it was given)
    program: Program  # the lowered program (a target that does not compile lowers it when asked)
    memory_plan: MemoryPlan | None  # where stored intermediates live; None: each tensor in its own array
    source_kinds: tuple[str, ...]  # what `source` shows besides the lowered loops ("llvm", "asm", "ptx")

    def run(self, inputs: Mapping[str, np.ndarray], options: Options) -> tuple[dict[str, np.ndarray], Trace]:
        """Run on validated, read-only inputs through the runtime; the workload's outputs and the trace."""
        ...

    def source(self, task: str, kind: str) -> str:
        """A task's generated code of one of `source_kinds`."""
        ...


class Backend(Protocol):
    name: str
    vector_bytes: int  # SIMD width the default schedule tiles for

    def unavailable_reason(self) -> str | None:
        """None when this machine can run the target, else why not."""
        ...

    def cores(self, workers: int | Sequence[str | None] | None, device: object | None) -> tuple[str | None, ...]:
        """The core class of each worker a build runs with (BuildError for a device it cannot take)."""
        ...

    def compile(self, resolved: ResolvedSchedule, device: object | None = None) -> Executable:
        """The schedule as `pw.build` resolved it once (schedules/resolved.py), compiled."""
        ...

    def compile_default(self, resolved: ResolvedSchedule, device: object | None = None) -> Executable:
        """`compile` for the default schedule, which a target may adapt to fit (aicore: streamed
        reductions, narrower tiles); the executable's `schedule` is the one it runs."""
        ...

    def schedule_choices(self, device: object | None) -> Choose:
        """How this target answers the default schedule's decisions (schedules/passes/default.py)."""
        ...

    def cube_tiler(self, device: object | None) -> CubeTiler | None:
        """How the default tiles a contraction for this target's matrix cores (schedules/passes/cube.py);
        None: it has none."""
        ...

    def default_workload(self, wl: Workload) -> Workload:
        """The workload the default schedule is made for: `wl`, or `wl` after this target's graph
        passes (same inputs and outputs, e.g. the cpu's convolutions blocked by channels)."""
        ...


def host_cores(target: str, workers: int | Sequence[str | None] | None, device: object | None
               ) -> tuple[str | None, ...]:
    """Workers of a target that runs on this machine's cores: `workers` as given, no device model."""
    if device is not None:
        raise BuildError(f"target {target!r} runs on this machine and takes no device model "
                         f"(device= is for the aicore target)")
    classes = worker_classes(workers)
    unknown = [c for c in classes if c is not None and c not in CORE_CLASSES]
    if unknown:
        raise BuildError(f"workers: unknown core class {unknown[0]!r}; classes are {', '.join(CORE_CLASSES)} "
                         "(or None: any task)")
    return classes


_REGISTRY: dict[str, Backend] = {}


def register(backend: Backend) -> None:
    if backend.name in _REGISTRY:
        raise ValueError(f"target {backend.name!r} is registered twice")
    _REGISTRY[backend.name] = backend


def targets() -> list[str]:
    """Names of the targets usable on this machine, in registration order."""
    return [name for name, b in _REGISTRY.items() if b.unavailable_reason() is None]


def backend(name: str) -> Backend:
    """The backend for a target name, or BuildError saying why it cannot be used here."""
    if name not in _REGISTRY:
        raise BuildError(f"unknown target {name!r}; targets on this machine: {', '.join(targets())}")
    found = _REGISTRY[name]
    reason = found.unavailable_reason()
    if reason is not None:
        raise BuildError(f"target {name!r} is unavailable here: {reason}")
    return found
