"""What a run leaves behind: one event per task instance, the waits between them, and the edges.

Times are seconds of the run's clock (wall seconds on the real clock, device
seconds on the device clock), measured from the run's start.  A `Wait` is an
interval a virtual thread spent blocked: on a dependency (nothing ready), on
a channel, a token queue or the task window.  `deps` holds the (producer,
consumer) event ids that the runtime resolved, so viewers draw flow arrows
and `summary()` finds the critical path.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ptowsp.runtime.report import output_path, task_of, time_unit, writing


# Not frozen: a frozen dataclass sets each field through object.__setattr__, 0.97 us per event
# against 0.18, and a run makes one per task.  Treat events as read-only; they stay hashable.
@dataclass(slots=True, unsafe_hash=True)
class Event:
    """One task instance (or a user `span`) on one worker."""

    name: str
    coords: tuple[int, ...]
    worker: int
    core: str | None
    start: float
    end: float
    bytes: int = 0
    flops: int = 0
    id: int = -1  # task instance id (-1: not a task instance)
    active: float | None = None  # seconds of real work inside [start, end] when it had stalls (device clock)

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def work(self) -> float:
        return self.duration if self.active is None else self.active


@dataclass(frozen=True, slots=True)
class Wait:
    """A virtual thread blocked from start to end; `kind` says on what, `on` names it."""

    worker: int
    kind: str  # "dependency", "channel", "token", "window", "pipeline"
    on: str
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Flow:
    """A hand-over between two virtual threads: `source` at `sent` woke `target`, which had waited on
    the channel or token queue `on`, at `received` (a send to a waiting receiver, a receive that
    frees a blocked sender, a token pushed to a waiting popper)."""

    source: int
    sent: float
    target: int
    received: float
    kind: str  # "channel" or "token"
    on: str


@dataclass(frozen=True)
class Summary:
    """The figures a user reads first; `str()` prints them as a small table."""

    makespan: float
    tasks: int
    busy: dict[str, float]  # worker -> busy fraction of the makespan
    critical_path: float  # longest chain of dependent task durations
    overhead: float  # worker time neither in a task nor waiting for one to become ready
    clock: str
    memory: dict[str, int] | None = None  # intermediate bytes: "planned" (the arena) and "unshared"
    classes: dict[str, float] = field(default_factory=dict)  # core class -> mean share of its cores computing
    control: dict[str, float] = field(default_factory=dict)  # control thread (AICPU) -> busy fraction
    cold: bool | None = None  # the first run after build (None: not known)
    idle: dict[str, float] | None = None  # core-seconds idle per cause (device clock: runtime/idle.py)
    ends: float = 0.0  # the part of `overhead` before each worker's first task and after its last
    bounds: dict[str, float] | None = None  # device clock: busy share of each resource that can bind the run

    @property
    def bound(self) -> str | None:
        """The resource the run is bound by: the busiest of `bounds` (None off the device clock)."""
        return max(self.bounds, key=self.bounds.get) if self.bounds else None

    @property
    def overhead_per_task(self) -> float:
        """Worker time between tasks per task: what the runtime costs each task (start-up and wind-down,
        paid once per run, apart)."""
        return (self.overhead - self.ends) / self.tasks if self.tasks else 0.0

    def __str__(self) -> str:
        clock = " (device clock)" if self.clock == "device" else ""
        lines = [f"makespan        {_time(self.makespan)}{clock}"]
        if self.cold is not None:  # a cold run pays one-off costs (page faults, caches): not the steady state
            lines.append("cold run: the first after build, includes one-off costs" if self.cold else "warm run")
        lines += [f"tasks           {self.tasks}",
                 f"critical path   {_time(self.critical_path)}"
                 + (f"  ({self.critical_path / self.makespan:.0%} of makespan)" if self.makespan else ""),
                 f"overhead        {_time(self.overhead)} worker time: {_time(self.overhead_per_task)} per task "
                 f"between tasks, {_time(self.ends)} before the first and after the last"]
        lines += [f"class {name:<9} {fraction:6.1%} computing" for name, fraction in self.classes.items()]
        lines += [f"control {name:<7} {fraction:6.1%} busy" for name, fraction in self.control.items()]
        if self.bounds:
            lines.append(f"bound by        {self.bound} ({self.bounds[self.bound]:.1%} busy); "
                         + ", ".join(f"{name} {share:.1%}" for name, share in self.bounds.items() if name != self.bound))
        if self.idle:
            lines.append("idle cores      " + ", ".join(f"{_time(seconds)} {cause}" for cause, seconds in self.idle.items())
                         + " (core time)")
        lines += [f"busy {name:<10} {fraction:6.1%}" for name, fraction in self.busy.items()]
        if self.memory is not None:
            lines.append(f"intermediates   {self.memory['planned'] / 2**20:.2f} MiB planned, "
                         f"{self.memory['unshared'] / 2**20:.2f} MiB unshared")
        return "\n".join(lines)


def _covered(spans: list[tuple[float, float]]) -> float:
    """Length of the union of the intervals `spans`."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def _time(seconds: float) -> str:
    scale, unit = time_unit(seconds)
    return f"{seconds / scale:.0f} ns" if unit == "ns" else f"{seconds / scale:.3f} {unit}"


class Edges:
    """(producer id, consumer id) of every instance that ran, read lazily from the run's predecessor
    lists: a task that takes over a tensor's memory waits for thousands of instances, and a run
    should not pay for the pairs unless someone reads them."""

    def __init__(self, preds: Sequence[Sequence[int]] = (), ran: Sequence[bool] = ()):
        self._preds, self._ran = preds, ran

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return ((p, i) for i, ps in enumerate(self._preds) if self._ran[i] for p in ps)

    def __len__(self) -> int:
        return sum(len(ps) for ps, ran in zip(self._preds, self._ran) if ran)


_RECORDED = frozenset({"workers", "lanes", "events", "waits", "deps", "flows", "statistics"})


@dataclass
class Trace:
    """Events, waits and dependency edges of one run, with the workers they ran on."""

    workers: list[tuple[str, str | None]] = field(default_factory=list)  # (name, core class) per row
    lanes: int | None = None  # rows that are workers (the rest: orchestrator, ...); None: all
    events: list[Event] = field(default_factory=list)
    waits: list[Wait] = field(default_factory=list)
    deps: Iterable[tuple[int, int]] = field(default_factory=list)  # (producer id, consumer id): a list or Edges
    flows: list[Flow] = field(default_factory=list)  # hand-overs between virtual threads (pw.csp runs)
    duration: float = 0.0  # run start to run end
    clock: str = "real"
    title: str = "ptowsp"
    statistics: dict = field(default_factory=dict)  # the primitives' own reports (token queues, window)
    memory: dict[str, int] | None = None  # the backend's memory plan: "planned" and "unshared" bytes
    cold: bool | None = None  # the first run after build (one-off costs included); None: not known
    # fills the fields above when one is first read (`defer`): a run does not pay for its trace
    # unless someone reads it
    _fill: Callable[[Trace], None] | None = field(default=None, repr=False, compare=False)

    def defer(self, fill: Callable[[Trace], None]) -> None:
        """Run `fill(self)` when a field the run records (events, waits, ...) is first read."""
        self._fill = fill

    def __getattribute__(self, name: str):
        if name in _RECORDED:
            fill = object.__getattribute__(self, "_fill")
            if fill is not None:
                object.__setattr__(self, "_fill", None)
                fill(self)
        return object.__getattribute__(self, name)

    @property
    def makespan(self) -> float:
        return self.duration

    def summary(self) -> Summary:
        makespan = self.duration or max((e.end for e in self.events), default=0.0)
        rows = len(self.workers) if self.lanes is None else self.lanes
        idle = [0.0] * rows
        spans: list[list[tuple[float, float]]] = [[] for _ in range(rows)]
        control: dict[int, float] = {}
        computing = [0.0] * rows  # task (compute) events only: what "cube busy" means
        for e in self.events:
            if e.worker < rows:
                spans[e.worker].append((e.start, e.end))
                computing[e.worker] += e.work if e.id >= 0 else 0.0
            else:
                control[e.worker] = control.get(e.worker, 0.0) + e.work
        # a core's DMA and compute units overlap on the device clock: busy is when any of them works
        busy = [_covered(row) for row in spans]
        for w in self.waits:
            if w.kind == "dependency" and w.worker < rows:
                idle[w.worker] += w.end - w.start
        tasks = [e for e in self.events if e.id >= 0]
        used = [row for row in range(rows) if spans[row]]  # a core that ran nothing had nothing to run
        overhead = sum(max(0.0, makespan - busy[r] - idle[r]) for r in used)  # bookkeeping, start-up
        ends = sum(self._ends(r, spans[r], makespan, busy[r], idle[r]) for r in used)
        share = (lambda seconds, count=1: seconds / (count * makespan)) if makespan else (lambda *_: 0.0)
        fractions = {name: share(b) for (name, _), b in zip(self.workers, busy)}
        by_class: dict[str, list[float]] = defaultdict(list)
        for (_, core), b in zip(self.workers, computing):
            if core is not None:
                by_class[core].append(b)
        classes = {core: share(sum(bs), len(bs)) for core, bs in by_class.items()}
        controls = {self.workers[row][0]: share(seconds) for row, seconds in sorted(control.items())}
        bounds = self._bounds(rows, classes, controls, share) if self.clock == "device" and makespan else None
        return Summary(makespan, len(tasks), fractions, self.critical_path(), overhead, self.clock, self.memory,
                       classes, controls, self.cold, self.statistics.get("idle"), ends, bounds)

    def _bounds(self, rows: int, classes: dict[str, float], controls: dict[str, float], share) -> dict[str, float]:
        """Busy share of each resource a device run can be bound by: each core class's compute and its
        loads (mean over the class's cores), the shared HBM, the orchestrator, the busiest scheduler."""
        loads: dict[str, float] = defaultdict(float)
        for e in self.events:
            if e.id < 0 and e.worker < rows and task_of(e.name)[1] == "load":
                loads[self.workers[e.worker][1]] += e.work
        counts = defaultdict(int)
        for _, core in self.workers[:rows]:
            counts[core] += 1
        found = {name: fraction for name, fraction in classes.items() if fraction}
        found |= {f"{core} loads": share(seconds, counts[core]) for core, seconds in loads.items()}
        hbm = self.statistics.get("memory", {}).get("hbm_busy_seconds")
        if hbm is not None:
            found["HBM"] = share(hbm)
        schedulers = [f for name, f in controls.items() if name.startswith("scheduler")]
        found |= {"orchestrator": controls.get("orchestrator", 0.0), "schedulers": max(schedulers, default=0.0)}
        return dict(sorted(found.items(), key=lambda kv: -kv[1]))

    def _ends(self, row: int, spans: list[tuple[float, float]], makespan: float, busy: float, idle: float) -> float:
        """Worker `row`'s overhead outside its first task's start and its last task's end (`spans`: its events)."""
        first, last = min(a for a, _ in spans), max(b for _, b in spans)
        inside = sum(max(0.0, min(w.end, last) - max(w.start, first)) for w in self.waits
                     if w.kind == "dependency" and w.worker == row)
        between = max(0.0, (last - first) - busy - inside)
        return max(0.0, makespan - busy - idle - between)

    def critical_path(self) -> float:
        """Length of the longest chain of task durations along dependency edges."""
        by_id = {e.id: e for e in self.events if e.id >= 0}
        preds: dict[int, list[int]] = defaultdict(list)
        for a, b in self.deps:
            preds[b].append(a)
        finish: dict[int, float] = {}
        for i in sorted(by_id):  # ids follow the task table, which is in dependency order
            finish[i] = by_id[i].duration + max((finish.get(p, 0.0) for p in preds[i]), default=0.0)
        return max(finish.values(), default=0.0)

    def to_chrome(self, path: str | Path) -> Path:
        """Chrome trace-event JSON (Perfetto, chrome://tracing): a row per worker, arrows for dependencies.

        InputError names the path when it cannot be written."""
        path = output_path(path, "to_chrome")
        with writing(path, "to_chrome"):
            path.write_text(json.dumps(chrome_events(self)))
        return path

    def plot(self, path: str | Path, **options) -> Path:
        """A Gantt chart PNG: one lane per worker that did something, one colour per task (see
        `gantt.py`); a path without a suffix gets ".png".  InputError names the path when it cannot
        be written, or when its suffix is no image format."""
        from ptowsp.runtime.gantt import plot  # matplotlib loads only when a chart is drawn

        return plot(self, output_path(path, "plot"), **options)


def chrome_events(trace: Trace) -> dict:
    """The trace as a Chrome trace-event document (times in microseconds)."""
    us = 1e6
    pid = 1
    out: list[dict] = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": trace.title}}]
    for tid, (name, core) in enumerate(trace.workers):
        label = name if core is None else f"{name} ({core})"
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    by_id = {}
    for e in trace.events:
        args = {"coords": list(e.coords), "bytes": e.bytes, "flops": e.flops}
        out.append({"ph": "X", "name": e.name, "cat": "task", "pid": pid, "tid": e.worker,
                    "ts": e.start * us, "dur": max(e.duration * us, 0.001), "args": args})
        if e.id >= 0:
            by_id[e.id] = e
    for w in trace.waits:
        out.append({"ph": "X", "name": f"wait {w.kind}: {w.on}", "cat": f"wait.{w.kind}", "pid": pid,
                    "tid": w.worker, "ts": w.start * us, "dur": max((w.end - w.start) * us, 0.001)})
    flow = -1
    for flow, (a, b) in enumerate(trace.deps):  # noqa: B007 - the flow ids go on below
        src, dst = by_id.get(a), by_id.get(b)
        if src is None or dst is None:
            continue
        # flow v1: the start binds to the producer's slice, the finish to the slice enclosing its time
        out.append({"ph": "s", "name": "dependency", "cat": "dependency", "id": flow, "pid": pid,
                    "tid": src.worker, "ts": (src.start + src.end) / 2 * us})
        out.append({"ph": "f", "bp": "e", "name": "dependency", "cat": "dependency", "id": flow, "pid": pid,
                    "tid": dst.worker, "ts": (dst.start + dst.end) / 2 * us})
    for k, f in enumerate(trace.flows, start=flow + 1):  # arrows from the waker to the woken
        for tid, ts, what, phase in ((f.source, f.sent, "wakes", "s"), (f.target, f.received, "woken", "f")):
            out.append({"ph": "X", "name": f"{what}: {f.on}", "cat": f.kind, "pid": pid, "tid": tid,
                        "ts": ts * us, "dur": 0.001})  # a mark for the arrow's end to bind to
            out.append({"ph": phase, "name": f.on, "cat": f.kind, "id": k, "pid": pid, "tid": tid, "ts": ts * us,
                        **({"bp": "e"} if phase == "f" else {})})
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"clock": trace.clock, "makespan_seconds": trace.duration}}
