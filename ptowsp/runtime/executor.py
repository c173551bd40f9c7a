"""Run a task table on the real clock: orchestrator, scheduler and workers (DESIGN.md section 5).

The roles of DESIGN.md section 5, each a sequential process over shared
state guarded by one lock (`Scheduler`):

- one **worker** per core owns an OS thread for the whole run, so compiled
  kernels run in parallel outside the GIL.  Worker 0 is the caller's own
  thread; the others are pool threads that live on between runs
  (service.py).  A worker's inbox has two slots, the running task and a
  pending one it is committed to next (with `prefetch(n)`: n pending tasks,
  whose inputs a load stage fetches ahead).  Without prefetch an idle worker
  that finds every ready queue empty steals a busy worker's pending task;
- the **orchestrator** enumerates instances in table order into a bounded
  task window, admitting an instance by counting its unfinished producers.
  When the window is full it waits until workers retire a quarter of it
  (backpressure, resumed once per batch rather than per task);
- the **scheduler** (the AICPU role) is the policy and the ready queues.

On the real clock the orchestrator and scheduler run no thread of their
own: a worker that visits the scheduler (to complete a task and take the
next) plays both roles there, a direct handoff.  Every hop between threads
costs a wake-up (0.05-0.1 ms on this VM, more than a small tile), so a run
pays one at its start (waking the pool threads; the caller starts work at
once) and at most one at its end (polled for briefly first: `_settle`), and
none per task; a table of one instance wakes no pool thread at all.  The device clock
(device.py) runs the same roles as pw.csp processes on discrete-event time.

Stops (a task's exception, `timeout`, Ctrl-C in the caller) set a flag the
workers check between tasks; `execute` returns once no worker can run task
code any more.  With a timeout the run executes on a thread of its own
(worker 0 included) while the caller waits with a deadline, so task code
stuck in the host cannot hold the caller: it is abandoned (watchdog.py).

With `prefetch(n)` a worker runs load -> compute -> store as a pipeline whose
stages exchange tokens over `csp.DepQueue`s, popped without waiting (`pop_dep_nowait`): load
pops a `free` credit (n at the start) before it loads a task and pushes
`loaded`; compute pops `loaded`, hands the prefetch slot back (`free`), and
pushes `computed` for store.  One OS thread runs the stages in pipeline order;
on the device clock they are separate virtual threads and overlap.
"""

from __future__ import annotations

import functools
import heapq
import numbers
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ptowsp.errors import BuildError, RunTimeout
from ptowsp.runtime.csp import DepQueue
from ptowsp.runtime.dispatch import Placer, Policy, TaskTimes, placer
from ptowsp.runtime.service import pinned, pool
from ptowsp.runtime.stops import describe, interrupts, raise_failure
from ptowsp.runtime.table import TaskTable
from ptowsp.runtime.trace import Edges, Event, Trace, Wait
from ptowsp.runtime.watchdog import bounded

DEFAULT_WINDOW = 1024
ADMIT_BATCH = 64  # instances the orchestrator admits per turn, so workers start before a big table is in


class Launcher(Protocol):
    """What a backend gives the runtime: code for each stage of an instance (load and store may be None)."""

    compute: Callable[[int], None]  # called with the instance's index in the table
    load: Callable[[int], None] | None
    store: Callable[[int], None] | None


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
class _Worker:
    index: int
    core: str | None
    wakeup: threading.Condition
    queue: deque | list = field(default_factory=deque)  # ready tasks (a heap for ranked policies)
    idle: bool = False  # parked with nothing to run
    returned: bool = False
    records: list = field(default_factory=list)  # (instance, start, end, stage)
    waits: list = field(default_factory=list)  # (start, end)
    tokens: dict[str, DepQueue] = field(default_factory=dict)
    running: int | None = None  # the instance whose task code runs now (named if the run is abandoned)
    inbox: deque = field(default_factory=deque)  # committed tasks while one runs: the pending slot(s)


_POLL = 0.1  # seconds: how long an idle worker 0 sleeps before it checks for Ctrl-C again


class _Stop(Exception):
    """The timeout stopped the run (reported as RunTimeout, with the run's progress)."""


class Scheduler:
    """Window, dependency counts and ready queues: every method runs under `lock`."""

    def __init__(self, table: TaskTable, options: Options, placer: Placer, clock: Callable[[], float],
                 wakeup: Callable[[], threading.Condition] | None = None):
        self.instances, self.preds = table.instances, table.predecessors
        self.skip = table.skip  # instances whose work turns out empty once their inputs exist
        self.skipped = 0
        self.clock = clock
        self.lock = threading.Lock()
        wakeup = wakeup or (lambda: threading.Condition(self.lock))  # the device clock wakes trio tasks instead
        self.workers = [_Worker(i, c, wakeup()) for i, c in enumerate(options.workers)]
        self.settled = threading.Condition(self.lock)  # a helper parked or returned
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
    def orchestrate(self) -> None:
        """The orchestrator's turn: admit the next batch, or keep waiting for a quarter of the window."""
        n = len(self.instances)
        if self.next == n:
            return
        if self.full_since is not None:
            if self.free * 4 < self.window:
                return
            self.window_waits.append((self.full_since, self.clock()))
            self.full_since = None
        stop = self.next + min(self.free, n - self.next, ADMIT_BATCH)
        for i in range(self.next, stop):
            self.admit(i)
        self.next = stop
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
        if self.skip is not None and self.skip(i, self.done):  # ready, but nothing to compute: retire it unrun
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

    def take(self, w: _Worker, idle: bool = True) -> int | None:
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
            self._wake_all()

    def finished(self) -> bool:
        return self.stopped or self.completed == len(self.instances)

    def stop(self, error: tuple[int, BaseException] | None = None) -> None:
        if error is not None and self.error is None:
            self.error = error
        self.stopped = True
        self._wake_all()

    def _wake_all(self) -> None:
        for w in self.workers:
            w.wakeup.notify()

    def helpers(self) -> list[_Worker]:
        """The workers a run starts on pool threads: all but worker 0, or none for a table of one
        instance worker 0 may run (a helper would only cost a wake-up and a word back, 0.1-0.2 ms on
        this VM; every placement then goes to worker 0)."""
        if len(self.instances) > 1 or not all(0 in self.eligible[i.core] for i in self.instances):
            return self.workers[1:]
        self.eligible = {core: [0] for core in self.eligible}
        for w in self.workers[1:]:
            w.returned = True
        return []

    def quiet(self) -> bool:
        """No helper can run task code any more: each has returned or is parked idle."""
        return all(w.returned or w.idle for w in self.workers[1:])


def _work(sched: Scheduler, w: _Worker, launcher: Launcher, prefetch: int) -> None:
    """A worker: take tasks into the inbox, run their stages, complete them (and orchestrate on the way)."""
    lock, records, clock = sched.lock, w.records, sched.clock
    compute, load, store = launcher.compute, launcher.load, launcher.store
    pipelined = prefetch > 0
    slots = 1 + max(1, prefetch)  # running + pending (with prefetch(n): n pending, loaded ahead)
    if pipelined:
        w.tokens = {name: DepQueue(f"{name}@worker{w.index}", credits)
                    for name, credits in (("free", prefetch), ("loaded", 0), ("computed", 0))}
        free, loaded, computed = w.tokens["free"], w.tokens["loaded"], w.tokens["computed"]
    inbox = w.inbox  # committed tasks: the head runs next, the rest are pending (stolen under the lock)
    prefetched = 0  # how many tasks at the head of the inbox are loaded
    finished: int | None = None
    total, retire, take, orchestrate = len(sched.instances), sched.retire, sched.take, sched.orchestrate
    while True:
        with lock:
            if finished is not None:
                retire(finished, w.index)
                finished = None
            while not sched.stopped:
                if sched.interrupted and w.index == 0:
                    sched.stop((-1, KeyboardInterrupt()))
                    break
                if sched.next < total:
                    orchestrate()
                while len(inbox) < slots:
                    i = take(w, not inbox)
                    if i is None:
                        break
                    inbox.append(i)
                if inbox or sched.finished():
                    break
                w.idle = True
                sched.settled.notify()
                start = clock()
                w.wakeup.wait(None if w.index else _POLL)  # worker 0 looks at the Ctrl-C flag now and then
                w.idle = False
                if sched.finished():
                    break
                w.waits.append((start, clock()))
            if sched.stopped or not inbox:
                return
            running = i = w.running = inbox.popleft()
        try:
            if pipelined:
                if not prefetched:  # nothing loaded ahead (the first task, or after a dry spell)
                    _load(running, load, free, loaded, records, clock)
                    prefetched = 1
                loaded.pop_dep_nowait()  # compute takes the loaded task, handing its prefetch slot back
                free.push_dep()
                prefetched -= 1
                for i in list(inbox)[prefetched:]:  # the load stage runs ahead while this one computes
                    _load(i, load, free, loaded, records, clock)
                    prefetched += 1
                i = running
            start = clock()
            compute(running)
            records.append((running, start, clock(), None))
            if pipelined:
                computed.push_dep()
                computed.pop_dep_nowait()
                if store is not None:
                    start = clock()
                    store(running)
                    records.append((running, start, clock(), "store"))
        except BaseException as e:  # noqa: BLE001 - any failure of task code stops the run
            w.running = None
            with lock:
                sched.stop((i, e))
            return
        finished, w.running = running, None


def _load(i: int, load, free: DepQueue, loaded: DepQueue, records: list, clock) -> None:
    free.pop_dep_nowait()  # WAR: a prefetch slot must be free
    if load is not None:
        start = clock()
        load(i)
        records.append((i, start, clock(), "load"))
    loaded.push_dep()  # RAW: compute may use it


def _helper(sched: Scheduler, w: _Worker, launcher: Launcher, prefetch: int) -> None:
    """A pool thread's part of the run: worker w, then a word to the caller that it is done."""
    try:
        _work(sched, w, launcher, prefetch)
    except BaseException as e:  # noqa: BLE001 - a bug in the runtime itself: stop the run, report it
        with sched.lock:
            sched.stop((-1, e))
    finally:
        with sched.lock:
            w.returned = True
            sched.settled.notify()


def execute(table: TaskTable, launcher: Launcher, options: Options) -> Trace:
    """Run every instance of `table` once, in dependency order, and return the run's Trace.

    Raises TaskError (naming the task and its grid coordinates, the original exception
    chained) when task code raises, RunTimeout after `options.timeout` seconds, and
    KeyboardInterrupt on Ctrl-C; in each case no worker runs task code any more, except
    task code stuck past the timeout, whose threads are abandoned (watchdog.py): then the
    RunTimeout names the tasks still running.
    """
    clock = time.perf_counter
    sched = Scheduler(table, options, placer(options.policy, options.task_times, options.workers), clock)
    trace = Trace(title=options.title)

    def run() -> Trace:
        origin = clock()
        helpers = sched.helpers()
        with pool().threads(len(helpers)) as threads, pinned(), interrupts(sched):
            with sched.lock:
                sched.orchestrate()  # the first batch is in before the helpers wake
            for w, thread in zip(helpers, threads, strict=True):
                thread.start(functools.partial(_helper, sched, w, launcher, options.prefetch))
            try:
                _work(sched, sched.workers[0], launcher, options.prefetch)
            except BaseException as e:  # noqa: BLE001 - Ctrl-C in the caller's thread, between tasks
                with sched.lock:
                    sched.stop((-1, e))
            finally:
                _settle(sched, clock)
        trace.duration = clock() - origin
        _fill_trace(trace, sched, origin)
        if options.task_times is not None and sched.error is None:
            _learn(options.task_times, sched)
        if sched.error is not None and isinstance(sched.error[1], _Stop):
            raise RunTimeout(f"the run did not finish within {options.timeout:g} s ({sched.completed} of "
                             f"{len(table.instances)} task instances done)")
        if sched.error is not None:
            raise_failure(table, sched.error)
        return trace

    def stop(reason: BaseException) -> None:
        with sched.lock:
            sched.stop((-1, _Stop("timeout") if isinstance(reason, RunTimeout) else reason))

    def running() -> list[str]:
        return [f"{describe(table.instances[w.running])} on worker {w.index}"
                for w in sched.workers if w.running is not None]

    return bounded(run, options.timeout, stop, running, "the run")


SETTLE_SPIN = 2e-4  # seconds the caller polls for the helpers' last word before sleeping on it


def _settle(sched: Scheduler, clock: Callable[[], float]) -> None:
    """Wait until no helper can run task code.  A helper's last task usually ends within a few
    microseconds of the caller's, and a sleeping thread takes 0.05-0.1 ms to wake on this VM: so
    poll first (`sleep(0)` hands the GIL to a helper that needs it), then sleep on the condition."""
    deadline = clock() + SETTLE_SPIN
    while not sched.quiet() and clock() < deadline:
        time.sleep(0)
    with sched.lock:
        while not sched.quiet():
            sched.settled.wait()


def _learn(times: TaskTimes, sched: Scheduler) -> None:
    """Fold this run's kernel durations into the estimates the next run's heft placement uses."""
    for w in sched.workers:
        for i, start, end, stage in w.records:
            if stage is None:
                times.learn(sched.instances[i].label, w.core, end - start)


def _fill_trace(trace: Trace, sched: Scheduler, origin: float) -> None:
    instances = sched.instances
    trace.workers = [(f"worker{w.index}", w.core) for w in sched.workers] + [("orchestrator", "host")]
    trace.lanes = len(sched.workers)
    for w in sched.workers:
        for i, start, end, stage in w.records:
            inst = instances[i]
            name, ident = (inst.label, i) if stage is None else (f"{inst.label} {stage}", -1)
            trace.events.append(Event(name, inst.coords, w.index, w.core, start - origin, end - origin,
                                      inst.bytes, inst.flops, ident))
        trace.waits.extend(Wait(w.index, "dependency", "ready queue", s - origin, e - origin) for s, e in w.waits)
        trace.statistics.update({t.name: t.statistics() for t in w.tokens.values()})
    row = len(sched.workers)
    trace.waits.extend(Wait(row, "window", "task window", s - origin, e - origin) for s, e in sched.window_waits)
    trace.deps = Edges(sched.preds, list(sched.done))
    trace.statistics["window"] = {"capacity": sched.window, "peak": sched.peak, "waits": len(sched.window_waits)}
    trace.statistics["skipped"] = sched.skipped
