"""The task table's bookkeeping both clocks share: window, dependency counts, ready queues, dispatch.

The orchestrator's turn (`orchestrate`: admit the next batch of instances
into the bounded task window, counting each one's unfinished producers), the
scheduler's placement of ready tasks by the dispatch policy (`place`), a
worker's next task (`take`, stealing where the policy does) and a task's
completion (`retire`, which places the successors it made ready).  The
processes that call them, and when, are the clock's: executor.py (real
clock) and device.py (device clock).  Every method runs under `lock`.
"""

from __future__ import annotations

import heapq
import numbers
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ptowsp.errors import BuildError
from ptowsp.runtime.csp import DepQueue
from ptowsp.runtime.dispatch import Placer, Policy, TaskTimes
from ptowsp.runtime.doorbell import Doorbell
from ptowsp.runtime.native import NativeTasks
from ptowsp.runtime.table import TaskTable


DEFAULT_WINDOW = 1024
ADMIT_BATCH = 64  # instances admitted before the workers start, so they start before a big table is in


class Bell(Protocol):
    """What wakes a parked worker: a doorbell on the real clock, the schedulers' bells on the device clock."""

    def notify(self) -> None:
        """There may be work: look again."""

    def close(self) -> None:
        """The run is over: a worker parked on it returns (or is ended where it waits)."""


class Launcher(Protocol):
    """What a backend gives the runtime: code for each stage of an instance (load and store may be None)."""

    compute: Callable[[int], None]  # called with the instance's index in the table
    load: Callable[[int], None] | None
    store: Callable[[int], None] | None
    # every instance as the native loop runs it (native.py), with the run's tensor addresses; None: in Python
    native: tuple[NativeTasks, np.ndarray] | None


@dataclass
class Options:
    """How a table runs: worker core classes, dispatch policy, window, prefetch depth and timeout."""

    workers: tuple[str | None, ...] = ()
    policy: Policy | str = "work_stealing"
    window: int = DEFAULT_WINDOW
    prefetch: int = 0
    timeout: float | None = None
    title: str = "ptowsp"
    debug: bool = False  # backends check what kernels cannot afford to (gather indices) before each instance
    task_times: TaskTimes | None = None  # heft's kernel time estimates, learned from the runs of one program
    # how the table's instances reach the schedulers (a device model charges each its cost): "generate"
    # (the orchestrator makes each as the run goes), "record" (and records it), "replay" (the recorded
    # table launched at once: a Recording's replays)
    orchestration: str = "generate"


def worker_classes(workers: int | Sequence[str | None] | None) -> tuple[str | None, ...]:
    """One entry per worker: its core class (None runs any task).  Default: one per CPU core."""
    if workers is None:
        workers = os.cpu_count() or 1
    if isinstance(workers, numbers.Integral) and not isinstance(workers, bool):
        if workers < 1:
            raise BuildError(f"workers must be >= 1, got {workers}")
        return (None,) * int(workers)
    if isinstance(workers, (str, bytes)) or not isinstance(workers, Iterable):
        raise BuildError(f"workers is a count (an int >= 1) or a list of core classes, got "
                         f"{type(workers).__name__} {workers!r:.40}")
    classes = tuple(workers)
    if not classes:
        raise BuildError("workers must name at least one core class")
    stray = [c for c in classes if c is not None and not isinstance(c, str)]
    if stray:
        raise BuildError(f"workers lists core classes (strings, or None for any), got {stray[0]!r:.40}")
    return classes


@dataclass
class Worker:
    index: int
    core: str | None
    wakeup: Bell
    queue: deque | list = field(default_factory=deque)  # ready tasks (a heap for ranked policies)
    idle: bool = False  # parked with nothing to run
    records: list = field(default_factory=list)  # (instance, start, end, stage)
    waits: list = field(default_factory=list)  # (start, end)
    tokens: dict[str, DepQueue] = field(default_factory=dict)
    running: int | None = None  # the instance whose task code runs now (named if the run is abandoned)
    inbox: deque = field(default_factory=deque)  # committed tasks while one runs: the pending slot(s)


class Scheduler:
    """Window, dependency counts and ready queues: every method runs under `lock`."""

    def __init__(self, table: TaskTable, options: Options, placer: Placer, clock: Callable[[], float],
                 wakeup: Callable[[int], Bell]):
        self.instances, self.preds = table.instances, table.predecessors
        self.skip = table.skip  # instances whose work turns out empty once their inputs exist
        self.masked = table.skipped  # those known to be empty before the run
        self.skipped = 0
        self.clock = clock
        self.lock = threading.Lock()
        self.workers = [Worker(i, c, wakeup(i)) for i, c in enumerate(options.workers)]
        self.window_bell: Doorbell | None = None  # rung when a quarter of a full window has retired
        self.placer = placer
        self.needs_producers, self.tracks_work = placer.needs_producers, placer.tracks_work
        n = len(self.instances)
        self.rank = placer.ranks(self.instances, self.preds) if placer.ranked else None
        if self.rank is not None:
            for w in self.workers:
                w.queue = []
        self.remaining = [0] * n
        self.successors: list[list[int] | None] = [None] * n
        self.done = bytearray(n)
        self.ran_on = [-1] * n
        self.completed = 0
        self.stopped = False
        self.interrupted = False  # Ctrl-C arrived (set by the signal handler, without the lock)
        self.error: tuple[int, BaseException] | None = None
        self.window, self.free = options.window, options.window
        self.pipelined = options.prefetch > 0  # pending tasks may be loaded ahead: never stolen
        self.next = 0  # the next instance the orchestrator admits
        self.peak = 0  # most instances in the window at once
        self.full_since: float | None = None  # when the orchestrator found the window full
        self.window_waits: list[tuple[float, float]] = []
        self.admitted: float | None = None  # when the orchestrator had admitted every instance
        self.eligible = self._eligibility()

    def _eligibility(self) -> dict[str | None, list[int]]:
        out: dict[str | None, list[int]] = {}
        for core in {inst.core for inst in self.instances}:
            out[core] = [w.index for w in self.workers if w.core is None or core is None or w.core == core]
            if not out[core]:
                name = next(i.name for i in self.instances if i.core == core)
                classes = ", ".join(str(w.core) for w in self.workers)
                raise BuildError(f"task {name!r} is bound to core class {core!r}, but no worker has it "
                                 f"(worker classes: {classes})")
        return out

    # -- orchestrator ---------------------------------------------------------------------
    def orchestrate(self, batch: int = ADMIT_BATCH) -> None:
        """The orchestrator's turn: admit up to `batch` more instances (as many as the window takes
        once a quarter of it is free), or keep waiting for a quarter of the window."""
        n = len(self.instances)
        if self.next == n:
            return
        if self.full_since is not None:
            if self.free * 4 < self.window:
                return
            self.window_waits.append((self.full_since, self.clock()))
            self.full_since = None
        stop = self.next + min(self.free, n - self.next, batch)
        for i in range(self.next, stop):
            self.admit(i)
        self.next = stop
        if stop == n:
            self.admitted = self.clock()
        if self.free == 0 and stop < n:
            self.full_since = self.clock()

    def admit(self, i: int) -> None:
        waiting = 0
        for p in self.preds[i]:
            if not self.done[p]:
                succ = self.successors[p]
                if succ is None:
                    self.successors[p] = [i]
                else:
                    succ.append(i)
                waiting += 1
        self.free -= 1
        self.peak = max(self.peak, self.window - self.free)
        self.remaining[i] = waiting
        if not waiting:
            self.place(i, None)

    # -- scheduler ------------------------------------------------------------------------
    def place(self, i: int, maker: int | None) -> None:
        if (self.masked is not None and self.masked[i]) or (self.skip is not None and self.skip(i, self.done)):
            # ready, but nothing to compute: retire it unrun
            self.skipped += 1
            self.retire(i, -1)
            return
        inst = self.instances[i]
        eligible = self.eligible[inst.core]
        producers = [self.ran_on[p] for p in self.preds[i] if self.ran_on[p] >= 0] if self.needs_producers else []
        w = self.workers[self.placer.place(inst, eligible, maker, producers)]
        if self.rank is None:
            w.queue.append(i)
        else:  # a heap: the highest upward rank first
            heapq.heappush(w.queue, (-self.rank[i], i))
        if w.idle:
            w.wakeup.notify()
        elif self.placer.steals:
            for v in eligible:
                if self.workers[v].idle:
                    self.workers[v].wakeup.notify()
                    break

    def take(self, w: Worker, idle: bool = True) -> int | None:
        """The next task for worker w: from its own queue, or stolen (policies that steal) when w is
        idle.  A worker filling a pending slot never steals: the task's own worker may be about to
        take it, and another idle worker may want it more."""
        if w.queue:
            if self.rank is not None:
                return heapq.heappop(w.queue)[1]
            return w.queue.pop() if self.placer.lifo else w.queue.popleft()
        if not (self.placer.steals and idle):
            return None
        victims = sorted((v for v in self.workers if v is not w and v.queue), key=lambda v: -len(v.queue))
        for v in victims:
            entries = sorted(v.queue) if self.rank is not None else v.queue
            for entry in entries:
                i = entry if self.rank is None else entry[1]
                if w.index in self.eligible[self.instances[i].core]:
                    v.queue.remove(entry)
                    if self.rank is not None:
                        heapq.heapify(v.queue)
                    return i
        if self.pipelined:
            return None
        # nothing queued: a busy worker's pending task, not yet started (nothing loaded ahead without
        # prefetch).  Else the last tile of a layer waits in a pending slot while a worker idles: a
        # layer of 8 equal tiles would run 5 and 3.
        for v in self.workers:
            if v is not w and v.inbox and w.index in self.eligible[self.instances[v.inbox[-1]].core]:
                return v.inbox.pop()
        return None

    def retire(self, i: int, worker: int) -> None:
        """Instance i is done (run by `worker`, or skipped: -1); its ready successors are placed."""
        self.done[i] = 1
        self.ran_on[i] = worker
        if self.tracks_work:
            self.placer.retired(self.instances[i])
        succ = self.successors[i]
        if succ is not None:
            self.successors[i] = None
            for s in succ:
                self.remaining[s] -= 1
                if not self.remaining[s]:
                    self.place(s, None if worker < 0 else worker)
        self.completed += 1
        self.free += 1
        if self.completed == len(self.instances):
            self._end_waits()
        elif self.full_since is not None and self.window_bell is not None and \
                (self.free - 1) * 4 < self.window <= self.free * 4:  # a quarter of the window is free now
            self.window_bell.ring()

    def finished(self) -> bool:
        return self.stopped or self.completed == len(self.instances)

    def stop(self, error: tuple[int, BaseException] | None = None) -> None:
        if error is not None and self.error is None:
            self.error = error
        self.stopped = True
        self._end_waits()

    def _end_waits(self) -> None:
        """The run is over: end the waits of the parked (a busy worker sees it at its next look)."""
        for w in self.workers:
            if w.idle:
                w.wakeup.close()
        if self.window_bell is not None and self.full_since is not None:
            self.window_bell.ring()

    def active(self) -> list[Worker]:
        """The workers a run starts: all, or worker 0 alone for a table of one instance it may run
        (a pool thread would only cost a wake-up and a word back, 0.1-0.2 ms on this VM; every
        placement then goes to worker 0)."""
        if len(self.instances) > 1 or not all(0 in self.eligible[i.core] for i in self.instances):
            return self.workers
        self.eligible = {core: [0] for core in self.eligible}
        return self.workers[:1]
