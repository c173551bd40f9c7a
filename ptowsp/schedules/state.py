"""What a schedule's steps have made: a frozen `ScheduleState`, each step a new one.

A step handler (handlers.py) is a function `(schedule, step) -> ScheduleState` that validates the
step against the state it reads and returns the state after it, never changing the one it was
given; so a failed step leaves nothing half done, a copy of a schedule is its state (shared, not
replayed), and a pass may keep an earlier state and go on from it.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from ptowsp.schedules import steps as st
from ptowsp.schedules.layouts import Layout
from ptowsp.schedules.loopnest import LoopNest
from ptowsp.te import Expr, outermost_reductions
from ptowsp.te.reducer import is_several
from ptowsp.workloads import ComputeTask, Workload


def schedulable_reduce_axes(body: Expr) -> list[tuple[str, int]]:
    """The reduce loops a task's nest exposes: those of its one outermost reduction.

    Reductions nested inside it, or several side by side, stay inner serial
    loops of the lowered code and are not scheduled (docs/schedules.md); so
    does a value of a several-value reducer, whose values fold together.
    """
    found = outermost_reductions(body)
    if len(found) != 1 or is_several(found[0][0]):
        return []
    return [(a.arg[0], a.arg[1]) for a in found[0][0].src[1:]]


def original_loops(wl: Workload, name: str) -> tuple[list[tuple[str, int]], list]:
    """A compute task's loops before any step: its spatial axes and its schedulable reduce axes."""
    task = wl.task(name)
    # a scan's reductions stay inside its update (lower/scan.py): they run once per step
    reduce_axes = schedulable_reduce_axes(task.body) if task.scan is None else []
    return list(zip(task.loop_names, task.tensor.shape, strict=True)), reduce_axes


_COMPUTE_TASKS: weakref.WeakKeyDictionary[Workload, tuple[int, frozenset[str]]] = weakref.WeakKeyDictionary()


def _compute_tasks(workload: Workload) -> frozenset[str]:
    """The workload's compute tasks, found again only when it has gained tasks (tasks are only added)."""
    tasks = workload.tasks
    count, found = _COMPUTE_TASKS.get(workload, (-1, frozenset()))
    if count != len(tasks):
        found = frozenset(n for n in tasks if isinstance(workload.task(n), ComputeTask))
        _COMPUTE_TASKS[workload] = (len(tasks), found)
    return found


class Nests(Mapping[str, LoopNest]):
    """Each compute task's loop nest: the one steps made, or its original, made from the workload when
    first asked for (a step touches one task's loops, and a model's fusion plan replays hundreds of
    schedules) and shared by every later state."""

    def __init__(self, workload: Workload, changed: Mapping[str, LoopNest] | None = None,
                 originals: dict[str, LoopNest] | None = None, compute: frozenset[str] | None = None):
        self._workload = workload
        self._compute = _compute_tasks(workload) if compute is None else compute
        self._changed = dict(changed or {})
        self._originals = {} if originals is None else originals  # a cache: the same for every state

    def __getitem__(self, name: str) -> LoopNest:
        found = self._changed.get(name)
        found = self._originals.get(name) if found is None else found
        if found is None:
            if name not in self._compute:
                raise KeyError(name)
            found = self._originals[name] = LoopNest.of(*original_loops(self._workload, name))
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._compute

    def __iter__(self) -> Iterator[str]:  # every compute task, in task order
        return (name for name in self._workload.tasks if name in self._compute)

    def __len__(self) -> int:
        return len(self._compute)

    def changed(self, name: str, nest: LoopNest) -> Nests:
        """These nests with `name`'s replaced by `nest`."""
        return Nests(self._workload, {**self._changed, name: nest}, self._originals, self._compute)


def _frozen(mapping: Mapping | None = None) -> Mapping:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class ScheduleState:
    """Each compute task's loop nest and every placement, fusion request and runtime choice the steps
    made.  Frozen: `with_` gives the state with some fields changed."""

    nests: Nests
    inlined: frozenset[str] = frozenset()
    compute_at: Mapping[str, tuple[str, str]] = field(default_factory=_frozen)  # task -> (consumer, loop)
    cache_reads: tuple[tuple[str, str, str, str | None], ...] = ()  # task, tensor, scope, loop
    cache_writes: Mapping[str, str] = field(default_factory=_frozen)
    prefetched: tuple[tuple[str, str, str, int], ...] = ()  # task, tensor, loop, ahead
    fused_tasks: tuple[tuple[str, str], ...] = ()
    fuse_by_category: bool = False
    dispatch: st.Dispatch | None = None
    prefetch: int = 0
    cores: Mapping[str, str] = field(default_factory=_frozen)
    tensorized: Mapping[str, tuple[str | None, str]] = field(default_factory=_frozen)  # task -> (loop, intrinsic)
    layouts: Mapping[str, Layout] = field(default_factory=_frozen)  # tensor -> its stored layout
    variants: Mapping[str, tuple[tuple[Expr, LoopNest], ...]] = field(default_factory=_frozen)  # task -> (when, loops)

    @classmethod
    def of(cls, workload: Workload) -> ScheduleState:
        """The state before any step."""
        return cls(Nests(workload))

    def with_(self, **changes: object) -> ScheduleState:
        return replace(self, **changes)

    def with_nest(self, task: str, nest: LoopNest) -> ScheduleState:
        return replace(self, nests=self.nests.changed(task, nest))

    def with_entry(self, field_name: str, key: str, value: object) -> ScheduleState:
        """The state with `key` of the mapping `field_name` set to `value`."""
        return replace(self, **{field_name: _frozen({**getattr(self, field_name), key: value})})
