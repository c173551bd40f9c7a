"""Run a task table on the real clock: orchestrator, scheduler and workers (DESIGN.md section 5).

Virtual threads (trio tasks) with their roles:

- the **orchestrator** enumerates instances in table order into a bounded
  task window: it admits an instance by counting its unfinished producers and
  waits, when the window is full, until workers retire a quarter of it
  (backpressure, woken once per batch rather than per task);
- one **worker** per core owns an OS thread for the whole run, so compiled
  kernels run in parallel outside the GIL (the trio loop and the threads
  live on between runs: service.py).  Its inbox has two slots, the
  running task and a pending one it is committed to next (with `prefetch(n)`:
  n pending tasks, whose inputs a load stage fetches ahead);
- the **scheduler** (the AICPU role) is the policy and the ready queues.  On
  the real clock its code runs in the worker thread that completes a task, a
  direct handoff: a hop to a trio thread and back costs more than a small
  tile (docs/runtime.md has the figures), so none happens per task;
- a **watchdog** turns trio cancellation (an error elsewhere, `timeout`,
  Ctrl-C) into a stop flag the worker threads check between tasks, so every
  thread has returned when `execute` does.

With `prefetch(n)` a worker runs load -> compute -> store as a pipeline whose
stages exchange tokens (`Tokens`, the counters behind `csp.DepQueue`): load
pops a `free` credit (n at the start) before it loads a task and pushes
`loaded`; compute pops `loaded`, hands the prefetch slot back (`free`), and
pushes `computed` for store.  One OS thread runs the stages in pipeline order;
on the device clock they are separate virtual threads and overlap.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import trio

from ptowsp.errors import BuildError, PtowspError, RunTimeout, TaskError
from ptowsp.runtime.csp import raise_first
from ptowsp.runtime.dispatch import Locality, Placer, Policy, placer
from ptowsp.runtime.service import PoolThread, service
from ptowsp.runtime.table import TaskTable
from ptowsp.runtime.trace import Event, Trace, Wait

DEFAULT_WINDOW = 1024


class Launcher(Protocol):
    """What a backend gives the runtime: code for each stage of an instance (load and store may be None)."""

    compute: Callable[[int], None]  # called with the instance's index in the table
    load: Callable[[int], None] | None
    store: Callable[[int], None] | None


@dataclass
class Tokens:
    """A dependency-token counter for stages that share one thread; pops must find a token."""

    name: str
    credits: int
    tokens: int = -1
    pushes: int = 0
    pops: int = 0
    max_tokens: int = 0

    def __post_init__(self) -> None:
        self.tokens = self.max_tokens = self.credits

    def pop_dep(self) -> None:
        if self.tokens == 0:
            raise PtowspError(f"pipeline token queue {self.name!r} popped while empty (a stage ran out of order)")
        self.tokens -= 1
        self.pops += 1

    def push_dep(self) -> None:
        self.tokens += 1
        self.pushes += 1
        self.max_tokens = max(self.max_tokens, self.tokens)


@dataclass
class Options:
    """How a table runs: worker core classes, dispatch policy, window, prefetch depth and timeout."""

    workers: tuple[str | None, ...] = ()
    policy: Policy | str = "round_robin"
    window: int = DEFAULT_WINDOW
    prefetch: int = 0
    timeout: float | None = None
    title: str = "ptowsp"


def worker_classes(workers: int | Sequence[str | None] | None) -> tuple[str | None, ...]:
    """One entry per worker: its core class (None runs any task).  Default: one per CPU core."""
    if workers is None:
        workers = os.cpu_count() or 1
    if isinstance(workers, int):
        if workers < 1:
            raise BuildError(f"workers must be >= 1, got {workers}")
        return (None,) * workers
    classes = tuple(workers)
    if not classes:
        raise BuildError("workers must name at least one core class")
    return classes


@dataclass
class _Worker:
    index: int
    core: str | None
    wakeup: threading.Condition
    queue: deque = field(default_factory=deque)
    idle: bool = False
    records: list = field(default_factory=list)  # (instance, start, end, stage)
    waits: list = field(default_factory=list)  # (start, end)
    tokens: dict[str, Tokens] = field(default_factory=dict)


class _Scheduler:
    """Ready queues, dependency counts and the window: every method runs under `lock`."""

    def __init__(self, table: TaskTable, options: Options, placer: Placer, token: trio.lowlevel.TrioToken):
        self.table, self.instances, self.preds = table, table.instances, table.predecessors
        self.lock = threading.Lock()
        self.workers = [_Worker(i, c, threading.Condition(self.lock)) for i, c in enumerate(options.workers)]
        self.placer = placer
        self.needs_producers = isinstance(placer, Locality)
        n = len(self.instances)
        self.remaining = [0] * n
        self.successors: list[list[int] | None] = [None] * n
        self.done = bytearray(n)
        self.ran_on = [-1] * n
        self.completed = 0
        self.stopped = False
        self.error: tuple[int, BaseException] | None = None
        self.window, self.free = options.window, options.window
        self.peak = 0  # most instances in the window at once
        self.orchestrator_waiting = False
        self.window_room = trio.Event()
        self.token = token
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

    # -- orchestrator side ------------------------------------------------------------
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

    # -- worker side --------------------------------------------------------------------
    def place(self, i: int, maker: int | None) -> None:
        inst = self.instances[i]
        eligible = self.eligible[inst.core]
        producers = [self.ran_on[p] for p in self.preds[i]] if self.needs_producers else []
        w = self.workers[self.placer.place(inst, eligible, maker, producers)]
        w.queue.append(i)
        if w.idle:
            w.wakeup.notify()
        elif self.placer.steals:
            for v in eligible:
                if self.workers[v].idle:
                    self.workers[v].wakeup.notify()
                    break

    def take(self, w: _Worker) -> int | None:
        if w.queue:
            return w.queue.pop() if self.placer.lifo else w.queue.popleft()
        if not self.placer.steals:
            return None
        victims = sorted((v for v in self.workers if v is not w and v.queue), key=lambda v: -len(v.queue))
        for v in victims:
            for k, i in enumerate(v.queue):
                if w.index in self.eligible[self.instances[i].core]:
                    del v.queue[k]
                    return i
        return None

    def complete(self, i: int, w: _Worker) -> None:
        self.done[i] = 1
        self.ran_on[i] = w.index
        succ = self.successors[i]
        if succ is not None:
            self.successors[i] = None
            for s in succ:
                self.remaining[s] -= 1
                if not self.remaining[s]:
                    self.place(s, w.index)
        self.completed += 1
        self.free += 1
        if self.completed == len(self.instances):
            self._wake_all()
        if self.orchestrator_waiting and self.free * 4 >= self.window:
            self.orchestrator_waiting = False
            self.token.run_sync_soon(self.window_room.set)

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


def _work(sched: _Scheduler, w: _Worker, launcher: Launcher, prefetch: int, clock: Callable[[], float]) -> None:
    """A worker's OS thread: take tasks into the inbox, run their stages, complete them."""
    lock, records = sched.lock, w.records
    compute, load, store = launcher.compute, launcher.load, launcher.store
    pipelined = prefetch > 0
    slots = 1 + max(1, prefetch)  # running + pending (with prefetch(n): n pending, loaded ahead)
    if pipelined:
        w.tokens = {name: Tokens(f"{name}@worker{w.index}", credits)
                    for name, credits in (("free", prefetch), ("loaded", 0), ("computed", 0))}
        free, loaded, computed = w.tokens["free"], w.tokens["loaded"], w.tokens["computed"]
    inbox: deque[int] = deque()  # committed tasks: the head runs next, the rest are pending
    prefetched = 0  # how many tasks at the head of the inbox are loaded
    finished: int | None = None
    while True:
        with lock:
            if finished is not None:
                sched.complete(finished, w)
                finished = None
            while not sched.stopped:
                while len(inbox) < slots:
                    i = sched.take(w)
                    if i is None:
                        break
                    inbox.append(i)
                if inbox or sched.finished():
                    break
                w.idle = True
                start = clock()
                w.wakeup.wait()
                w.waits.append((start, clock()))
                w.idle = False
            if sched.stopped or not inbox:
                return
        running = i = inbox.popleft()
        try:
            if pipelined:
                if not prefetched:  # nothing loaded ahead (the first task, or after a dry spell)
                    _load(running, load, free, loaded, records, clock)
                    prefetched = 1
                loaded.pop_dep()  # compute takes the loaded task, handing its prefetch slot back
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
                computed.pop_dep()
                if store is not None:
                    start = clock()
                    store(running)
                    records.append((running, start, clock(), "store"))
        except BaseException as e:  # noqa: BLE001 - any failure of task code stops the run
            with lock:
                sched.stop((i, e))
            return
        finished = running


def _load(i: int, load, free: Tokens, loaded: Tokens, records: list, clock) -> None:
    free.pop_dep()  # WAR: a prefetch slot must be free
    if load is not None:
        start = clock()
        load(i)
        records.append((i, start, clock(), "load"))
    loaded.push_dep()  # RAW: compute may use it


async def _run(table: TaskTable, launcher: Launcher, options: Options, trace: Trace) -> _Scheduler:
    clock = time.perf_counter
    sched = _Scheduler(table, options, placer(options.policy), trio.lowlevel.current_trio_token())
    origin = clock()
    orchestrator_waits: list[tuple[float, float]] = []

    async def orchestrator() -> None:
        n, batch = len(table), 64
        i = 0
        while i < n:
            with sched.lock:
                if sched.stopped:
                    return
                room = min(sched.free, n - i, batch)
                if room == 0:
                    sched.orchestrator_waiting = True
                    sched.window_room = trio.Event()
                for _ in range(room):
                    sched.admit(i)
                    i += 1
                event = sched.window_room
            if room == 0:
                start = clock()
                await event.wait()
                orchestrator_waits.append((start, clock()))
            else:
                await trio.lowlevel.checkpoint()

    async def worker(w: _Worker, thread: PoolThread) -> None:
        await thread.run(functools.partial(_work, sched, w, launcher, options.prefetch, clock))

    async def watchdog() -> None:
        try:
            await trio.sleep_forever()
        finally:
            with sched.lock:
                sched.stop()

    async def workers(nursery: trio.Nursery) -> None:
        with service().threads(len(sched.workers)) as threads:
            async with trio.open_nursery() as inner:
                for w, thread in zip(sched.workers, threads, strict=True):
                    inner.start_soon(worker, w, thread, name=f"worker{w.index}")
        nursery.cancel_scope.cancel()  # all workers returned: stop the orchestrator and watchdog

    try:
        with trio.fail_after(options.timeout) if options.timeout is not None else contextlib.nullcontext():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watchdog, name="watchdog")
                nursery.start_soon(orchestrator, name="orchestrator")
                nursery.start_soon(workers, nursery, name="workers")
    finally:
        trace.duration = clock() - origin
        _fill_trace(trace, sched, origin, orchestrator_waits)
    return sched


def _fill_trace(trace: Trace, sched: _Scheduler, origin: float, orchestrator_waits) -> None:
    instances = sched.instances
    trace.workers = [(f"worker{w.index}", w.core) for w in sched.workers] + [("orchestrator", "host")]
    trace.lanes = len(sched.workers)
    for w in sched.workers:
        for i, start, end, stage in w.records:
            inst = instances[i]
            name, ident = (inst.name, i) if stage is None else (f"{inst.name} {stage}", -1)
            trace.events.append(Event(name, inst.coords, w.index, w.core, start - origin, end - origin,
                                      inst.bytes, inst.flops, ident))
        trace.waits.extend(Wait(w.index, "dependency", "ready queue", s - origin, e - origin) for s, e in w.waits)
        trace.statistics.update({t.name: t for t in w.tokens.values()})
    row = len(sched.workers)
    trace.waits.extend(Wait(row, "window", "task window", s - origin, e - origin) for s, e in orchestrator_waits)
    trace.deps = [(p, i) for i, ps in enumerate(sched.preds) if sched.done[i] for p in ps]
    trace.statistics["window"] = {"capacity": sched.window, "peak": sched.peak, "waits": len(orchestrator_waits)}


def execute(table: TaskTable, launcher: Launcher, options: Options) -> Trace:
    """Run every instance of `table` once, in dependency order, and return the run's Trace.

    Raises TaskError (naming the task and its grid coordinates, the original exception
    chained) when task code raises, RunTimeout after `options.timeout` seconds, and
    KeyboardInterrupt on Ctrl-C; in each case every worker thread has returned.
    """
    trace = Trace(title=options.title)
    holder: list[_Scheduler] = []

    async def main() -> None:
        holder.append(await _run(table, launcher, options, trace))

    try:
        service().call(main)
    except BaseExceptionGroup as group:
        raise_first(group)
    except trio.TooSlowError:
        raise RunTimeout(f"the run did not finish within {options.timeout} s") from None
    sched = holder[0]
    if sched.error is not None:
        i, error = sched.error
        if isinstance(error, TaskError):  # already names its task (an opaque task's own checks)
            raise error
        inst = table.instances[i]
        where = f" at grid coordinates {inst.coords}" if inst.coords else ""
        raise TaskError(f"task {inst.name!r}{where} failed: {type(error).__name__}: {error}") from error
    return trace
