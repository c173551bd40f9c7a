"""`pw.build`: schedule -> lowered program -> a backend's executable, behind one object."""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Iterator, Sequence

import numpy as np

from ptowsp.backends.base import Executable, backend
from ptowsp.backends.recording import Recording
from ptowsp.errors import BuildError, InputError
from ptowsp.progress import Progress
from ptowsp.lower import Program
from ptowsp.runtime import Options, Trace
from ptowsp.runtime.dispatch import Policy, TaskTimes
from ptowsp.runtime.scheduler import DEFAULT_WINDOW
from ptowsp.runtime.watchdog import check_timeout
from ptowsp.schedules import Schedule
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.schedules.passes.memory import MemoryPlan
from ptowsp.schedules.resolved import ResolvedSchedule
from ptowsp.workloads import Workload
from ptowsp.workloads.empties import Emptied, without_empties
from ptowsp.workloads.inputs import InputCheck


class Built:
    """A workload compiled for one target: call `run(**inputs)` (or the object itself).

    Every run goes through the runtime and leaves its Trace in `trace`.
    """

    last_run: Built | None = None  # the program that ran last in this process (`ptowsp trace` reads it)

    def __init__(self, schedule: Schedule | None, target: str, executable: Executable | None, options: Options,
                 emptied: Emptied | None = None, workload: Workload | None = None):
        self.schedule = schedule  # None when every output is empty: nothing is compiled
        self.workload = workload or schedule.workload  # as the user wrote it, empty tensors included
        self.target = target
        self.options = options
        self._executable = executable
        self._emptied = emptied  # the empty tensors left out of the schedule (workloads/empties.py)
        self.trace: Trace | None = None
        self.runs = 0  # runs so far: the first pays one-off costs (thread start, first touch of buffers)
        self._check_inputs = InputCheck(self.workload)
        if executable is not None:
            _check_affinity_key(options.policy, executable)

    @functools.cached_property
    def program(self) -> Program:
        """The lowered program (kernels and task table); the numpy target lowers only when asked."""
        if self.schedule is None:
            raise BuildError(f"workload {self.workload.name!r} has nothing to compute: every output is empty")
        return self._executable.program

    @property
    def memory_plan(self) -> MemoryPlan | None:
        """Where the stored intermediates live (offsets in one arena, peak before and after
        sharing); None on targets that keep every tensor in its own array (numpy)."""
        return None if self._executable is None else self._executable.memory_plan

    def run(self, *args: np.ndarray, timeout: float | None = None, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        """Validate inputs (InputError), run, and return {output name: new array}.

        Inputs are given by name, or positionally in the order the workload declares them
        (`wl.inputs`).  `timeout` (seconds) stops the run with RunTimeout, even one whose
        task code is stuck in the host (runtime/watchdog.py); a workload input named
        "timeout" is passed as an input instead.
        """
        if "timeout" in self.workload.inputs and timeout is not None:
            inputs["timeout"], timeout = timeout, None  # type: ignore[assignment]
        if args:
            inputs = {**_positional(self.workload, args, inputs), **inputs}
        timeout = check_timeout(timeout)
        options = self.options if timeout is None else Options(**{**vars(self.options), "timeout": timeout})
        checked = self._check_inputs(inputs)
        if self._emptied is None:
            outputs, self.trace = self._executable.run(checked, options)
        else:
            kept = {name: a for name, a in checked.items() if name not in self._emptied.empty_inputs}
            computed, self.trace = self._executable.run(kept, options) if self._executable is not None \
                else ({}, Trace(title=options.title))
            outputs = self._emptied.outputs(self.workload, computed)
        self.trace.cold = self.runs == 0
        self.runs += 1
        Built.last_run = self
        return outputs

    __call__ = run

    def capture(self, *args: np.ndarray, **inputs: np.ndarray) -> Recording:
        """Run one step and record its task table at the binding of the sizes its inputs give: the
        Recording's `replay(**inputs)` runs it again on new data of the same shapes without working
        the table out again (backends/recording.py; docs/llm.md)."""
        if self._executable is None or self._emptied is not None:
            raise BuildError(f"workload {self.workload.name!r} has empty tensors: capture records a workload "
                             "whose every task computes something")
        if args:
            inputs = {**_positional(self.workload, args, inputs), **inputs}
        recording = Recording(self.workload, self.target, self._executable, self.options, inputs)
        self.trace = recording.trace
        self.runs += 1
        Built.last_run = self
        return recording

    def source(self, task: str, kind: str = "loops") -> str:
        """A task's code: its lowered loop nest as pseudo-code ("loops"), or what the target
        generates from it: "llvm" (IR after optimisation) and "asm" on cpu and aicore (whose numbers
        are computed by host code), "llvm" and "ptx" on cuda.  Works for cached builds too."""
        kinds = ("loops", *(() if self._executable is None else self._executable.source_kinds))
        if kind not in kinds:
            raise BuildError(f"source({task!r}, {kind!r}): the {self.target} target shows "
                             f"{', '.join(map(repr, kinds))}")
        if task in self.workload.tasks and (self.schedule is None or task not in self.schedule.workload.tasks):
            raise BuildError(f"task {task!r} is empty (shape {self.workload.tensor(task).shape}): it computes "
                             "nothing, so it has no code")
        if kind == "loops":
            return self.program.source(task)
        return self._executable.source(task, kind)  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"Built({self.workload.name!r}, target={self.target!r}, workers={len(self.options.workers)})"


def _positional(wl: Workload, args: tuple[object, ...], named: dict[str, object]) -> dict[str, object]:
    """Positional run inputs by name, in declared order; InputError for too many or a name given twice."""
    if len(args) > len(wl.inputs):
        raise InputError(f"{len(args)} positional inputs given, but workload {wl.name!r} has {len(wl.inputs)}: "
                         f"{', '.join(wl.inputs) or '(none)'}")
    twice = [name for name in wl.inputs[:len(args)] if name in named]
    if twice:
        raise InputError(f"input {twice[0]!r} of workload {wl.name!r} is given both positionally (argument "
                         f"{wl.inputs.index(twice[0]) + 1}) and by keyword")
    return dict(zip(wl.inputs, args))


def _check_affinity_key(policy: Policy | str, executable: Executable) -> None:
    if isinstance(policy, str) or not policy.key:
        return
    grids = {loop for inst in executable.table.instances for loop in inst.grid}
    missing = [k for k in policy.key if k not in grids]
    if missing:
        raise BuildError(f"dispatch affinity key {missing[0]!r} is not a grid (parallel) loop of any task; "
                         f"grid loops: {', '.join(sorted(grids)) or '(none)'}")


def computed_schedule(schedule: Schedule, emptied: Emptied | None = None) -> Schedule:
    """`schedule` on the part of its workload that computes something (workloads/empties.py): itself when
    nothing is empty, else its steps replayed there without those on empty tasks (Schedule.onto)."""
    original = schedule.workload
    emptied = emptied or without_empties(original)
    if emptied.computed is original:
        return schedule
    if emptied.computed is None:
        raise BuildError(f"workload {original.name!r} has nothing to compute: every output is empty")
    left_out = set(original.tasks) - set(emptied.computed.tasks) | set(emptied.empty_inputs)
    return schedule.onto(emptied.computed, left_out)


@contextlib.contextmanager
def _collector_spares_what_exists() -> Iterator[None]:
    """Python's garbage collector leaves the objects that exist before a build alone while it runs
    (gc.freeze): a build makes enough objects to set off full collections, and each would scan the
    imported model and every module again (ViT-B/16's cold build 9.7 -> 8.2 s, the same peak
    memory; docs/performance.md).  Not where the process froze objects itself: unfreezing would
    undo that."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def build(what: Workload | Schedule, target: str = "numpy", *, workers: int | Sequence[str | None] | None = None,
          window: int = DEFAULT_WINDOW, device: object | None = None, debug: bool = False) -> Built:
    """Compile a schedule, or a workload with its default schedule (schedules/passes/default.py:
    fusion, grouping, tiling and a task grid for this target and number of workers).

    `workers`: how many worker threads (default: one per CPU core), or one core class
    per worker (None runs any task; `bind(task, core=...)` restricts a task to its
    class).  `window`: how many task instances the orchestrator keeps in flight.
    `device`: the aicore target's `pw.DeviceModel` (its cores replace `workers`).
    `debug`: check every gather's index values before each task instance runs, and raise
    BoundsError naming the task, the index tensor and the value (without it, a bad index
    reads the nearest edge element of the tensor).
    """
    found = backend(target)
    cores = found.cores(workers, device)
    if not isinstance(window, int) or window < 1:
        raise BuildError(f"window must be an integer >= 1, got {window!r}")
    if not isinstance(what, (Workload, Schedule)):
        raise BuildError(f"pw.build takes a Workload or a Schedule, got {type(what).__name__}")
    original = what if isinstance(what, Workload) else what.workload
    name = original.name
    emptied = without_empties(original)  # tasks over empty tensors compute nothing (workloads/empties.py)
    if emptied.computed is None:
        return Built(None, target, None, Options(workers=cores, window=window, title=f"ptowsp {name} on {target}"),
                     emptied, original)
    with Progress(f"building {name} for {target}") as progress, _collector_spares_what_exists():
        if isinstance(what, Workload):
            progress.phase("the default schedule")
            schedule = default_schedule(found.default_workload(emptied.computed), vector_bytes=found.vector_bytes,
                                        workers=len(cores), choose=found.schedule_choices(device),
                                        cube=found.cube_tiler(device))
        else:
            schedule = computed_schedule(what, emptied)
        step = schedule.dispatch_policy
        policy = Policy(step.policy, None if step.key is None else tuple(step.key))
        options = Options(workers=cores, policy=policy, window=window, prefetch=schedule.prefetch_depth,
                          title=f"ptowsp {schedule.workload.name} on {target}", debug=bool(debug),
                          task_times=TaskTimes() if policy.policy == "heft" else None)
        progress.phase(f"lowering and compiling {len(schedule.workload.tasks)} tasks")
        resolved = ResolvedSchedule(schedule)  # fusion planned and constants folded once, for every part
        if isinstance(what, Workload):  # a target may adapt its default to fit (aicore: streamed reductions)
            executable = found.compile_default(resolved, device)
            schedule = executable.schedule
        else:
            executable = found.compile(resolved, device)
    if emptied.computed is original:
        return Built(schedule, target, executable, options)  # nothing was empty
    return Built(schedule, target, executable, options, emptied, original)
