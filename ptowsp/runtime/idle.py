"""Why cores sat idle: the PTO runtime's scheduler-overhead analysis, on both clocks.

The device executor samples, at every change, how many ready tasks wait in
the schedulers' queues per core class and whether the orchestrator is still
generating instances.  Every instant a core does nothing (no load, compute
or store of its own) is then charged to one cause:

- **dispatch**: a ready task this core could run was waiting in a queue: the
  AICPU had not handed it over yet (scheduler work, dispatch latency, slots);
- **starvation**: nothing was ready and the orchestrator was still generating
  instances: the core waited for the task generator;
- **dependencies**: nothing was ready and everything was generated: the core
  waited for running producers (or for the run's last tasks to end).

The real clock cannot afford a sample per change (a microsecond per task),
so `parked_causes` works from what its run records anyway: the stretches a
worker was parked on its doorbell (nothing ready for it) and when the
orchestrator was generating.  Parked while generating is starvation, parked
otherwise dependencies, and idle but not parked is dispatch: the runtime's
own work between two tasks (the scheduler's code, the launcher, a wake-up).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from ptowsp.runtime.trace import Event

CAUSES = ("dependencies", "dispatch", "starvation")


class Readiness:
    """The sampled state: (time, orchestrator generating, ready tasks per task class) at each change."""

    def __init__(self, classes: Sequence[str | None]):
        self.classes = list(classes)
        self.times: list[float] = []
        self.generating: list[bool] = []
        self.ready: list[tuple[int, ...]] = []

    def sample(self, now: float, generating: bool, ready: dict[str | None, int]) -> None:
        state = (generating, tuple(ready.get(c, 0) for c in self.classes))
        if self.times and (self.generating[-1], self.ready[-1]) == state:
            return
        if self.times and self.times[-1] == now:  # a later change at the same instant replaces the sample
            self.times.pop(), self.generating.pop(), self.ready.pop()
        self.times.append(now)
        self.generating.append(state[0])
        self.ready.append(state[1])

    def causes(self, events: Sequence[Event], cores: Sequence[str | None], makespan: float) -> dict[str, float]:
        """Core-seconds of idle time per cause, over the cores (rows 0..len(cores)-1 of `events`) of every
        class some task may use."""
        totals = dict.fromkeys(CAUSES, 0.0)
        if not self.times or makespan <= 0:
            return totals
        times = np.append(np.asarray(self.times), makespan)
        spans = np.diff(times).clip(min=0.0)
        ready = np.asarray(self.ready).reshape(len(self.times), len(self.classes))
        generating = np.asarray(self.generating)
        rows: dict[int, list[tuple[float, float]]] = {}
        for e in events:
            rows.setdefault(e.worker, []).append((e.start, e.end))
        for kind in set(cores):
            mine = [k for k, c in enumerate(self.classes) if kind is None or c is None or c == kind]
            if not mine:  # no task of the run may use a core of this class: its idle time has no cause
                continue
            runnable = ready[:, mine].sum(axis=1)
            cause = np.where(runnable > 0, 1, np.where(generating, 2, 0))
            curves = [np.concatenate(([0.0], np.cumsum(np.where(cause == k, spans, 0.0)))) for k in range(3)]
            for row, core in enumerate(cores):
                if core != kind:
                    continue
                for start, end in _idle(rows.get(row, []), makespan):
                    for k, curve in enumerate(curves):
                        totals[CAUSES[k]] += float(np.interp(end, times, curve) - np.interp(start, times, curve))
        return totals


def _idle(busy: list[tuple[float, float]], makespan: float) -> list[tuple[float, float]]:
    """The stretches of [0, makespan] that no (start, end) of `busy` covers."""
    gaps, at = [], 0.0
    for start, end in sorted(busy):
        if start > at:
            gaps.append((at, start))
        at = max(at, end)
    if at < makespan:
        gaps.append((at, makespan))
    return gaps


Spans = list[tuple[float, float]]


class ParkedCauses(Mapping):
    """`parked_causes` of a real-clock run, worked out when first read (the summary, a test): a run
    should not pay ~20 us of Python for an analysis nobody may ask for."""

    def __init__(self, events: Sequence[Event], parked: dict[int, Spans], rows: int, makespan: float,
                 generating: Spans):
        self._arguments: tuple | None = (events, parked, rows, makespan, generating)
        self._totals: dict[str, float] = {}

    def _worked_out(self) -> dict[str, float]:
        if self._arguments is not None:
            self._totals, self._arguments = parked_causes(*self._arguments), None
        return self._totals

    def __getitem__(self, cause: str) -> float:
        return self._worked_out()[cause]

    def __iter__(self) -> Iterator[str]:
        return iter(self._worked_out())

    def __len__(self) -> int:
        return len(self._worked_out())

    def __repr__(self) -> str:
        return repr(self._worked_out())


def parked_causes(events: Sequence[Event], parked: dict[int, Spans], rows: int, makespan: float,
                  generating: Spans) -> dict[str, float]:
    """Core-seconds of idle time per cause on the real clock: `parked` holds each worker row's parked
    stretches, `generating` the stretches the orchestrator was admitting instances (both sorted)."""
    totals = dict.fromkeys(CAUSES, 0.0)
    busy: dict[int, Spans] = {}
    for e in events:
        if e.worker < rows:
            busy.setdefault(e.worker, []).append((e.start, e.end))
    for row in range(rows):
        gaps = _idle(busy.get(row, []), makespan)
        waiting = _intersect(gaps, sorted(parked.get(row, [])))
        starving = _length(_intersect(waiting, generating))
        totals["starvation"] += starving
        totals["dependencies"] += _length(waiting) - starving
        totals["dispatch"] += _length(gaps) - _length(waiting)
    return totals


def _intersect(xs: Spans, ys: Spans) -> Spans:
    """Where two sorted lists of disjoint (start, end) stretches overlap."""
    out, i, j = [], 0, 0
    while i < len(xs) and j < len(ys):
        start, end = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if start < end:
            out.append((start, end))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def _length(spans: Spans) -> float:
    return sum(end - start for start, end in spans)
