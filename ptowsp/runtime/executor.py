"""Run a task table on the real clock: orchestrator and workers as pw.csp processes (DESIGN.md section 5).

The run is a `RealEngine` run (engines.py, the engine `pw.csp.run(...,
clock="real")` uses) of these processes over the shared `Scheduler`
(scheduler.py):

- one **worker** process per core, pinned to its own OS thread, so compiled
  kernels run in parallel outside the GIL.  Worker 0 runs on the caller's
  thread, the others on pool threads that live on between runs
  (service.py).  A worker's inbox has two slots, the running task and a
  pending one it is committed to next (with `prefetch(n)`: n pending tasks,
  whose inputs a load stage fetches ahead).  Without prefetch an idle worker
  that finds every ready queue empty steals a busy worker's pending task.
  A worker with nothing ready parks on its doorbell (doorbell.py, a token
  queue): a placement rings it;
- the **orchestrator** process enumerates instances in table order into a
  bounded task window, admitting an instance by counting its unfinished
  producers.  The first batch is in before the workers start (a table that
  fits one starts no orchestrator); then it admits what the window takes
  and parks on the window's doorbell until workers retire a quarter of it
  (backpressure, once per quarter window).  It has no thread of its own:
  the worker that rang it hands it its thread before its next task;
- the **scheduler** (the AICPU role: the policy and the ready queues) is
  code a worker runs when it completes a task and takes the next, under the
  scheduler's lock: a direct handoff, as Go's scheduler runs on whichever
  thread needs it.  On the device clock (device.py) the schedulers are
  processes of their own, paying the device model's latencies; here a hop
  to a scheduler process and back would cost two process switches per task
  (docs/runtime.md measures them), and a thread wake-up costs 0.05-0.1 ms
  on this VM.

When every instance is a compiled kernel (the launcher's `native`) and the
run asks for nothing the Python scheduler alone implements, the workers are
instead the scheduler's loop compiled to native code (native.py), GIL
released for the whole run: the same work-stealing policy, without 5-10 us
of Python per task that the GIL serialises across workers.  Worker 0 runs
it on the caller's thread, the others on pool threads that wait for the
next native run in native code (crew.py), so no engine runs them.

So a run pays one wake-up at its start (the pool threads; the caller starts
work at once) and at most one at its end (the caller's, when a helper runs
the last task while the caller sleeps: a worker parked then is ended where
it waits, not woken), none per task; a table of one instance wakes no pool
thread at all.

Stops (a task's exception, `timeout`, Ctrl-C in the caller) set a flag the
workers check between tasks and ring the parked; `execute` returns once no
worker can run task code any more.  With a timeout the run executes on a
thread of its own (worker 0 included) while the caller waits with a
deadline, so task code stuck in the host cannot hold the caller: it is
abandoned (watchdog.py).

With `prefetch(n)` a worker runs load -> compute -> store as a pipeline whose
stages exchange tokens over `csp.DepQueue`s, popped without waiting (`pop_dep_nowait`): load
pops a `free` credit (n at the start) before it loads a task and pushes
`loaded`; compute pops `loaded`, hands the prefetch slot back (`free`), and
pushes `computed` for store.  One OS thread runs the stages in pipeline order;
on the device clock they are separate virtual threads and overlap.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from ptowsp.errors import RunTimeout
from ptowsp.runtime.csp import DepQueue, sleep
from ptowsp.runtime.dispatch import TaskTimes, placer
from ptowsp.runtime.doorbell import Doorbell
from ptowsp.runtime.engines import Proc, RealEngine, current
from ptowsp.runtime.idle import ParkedCauses
from ptowsp.runtime import crew
from ptowsp.runtime.native import NativeRun, Records
from ptowsp.runtime.scheduler import Launcher, Options, Scheduler, Worker
from ptowsp.runtime.service import pool
from ptowsp.runtime.stops import describe, interrupts, raise_failure, signal_word
from ptowsp.runtime.table import TaskTable
from ptowsp.runtime.trace import Edges, Event, Trace, Wait
from ptowsp.runtime.watchdog import bounded


SLICE_NS = 100_000_000  # a native worker comes back to Python this often to see stops (each return costs
# 40-60 us of cold Python after kernels that streamed megabytes: 0.05% of a long run)
WATCH_NS = 10_000_000  # ... or, where it watches the word signals write (stops.signal_word), looks at it this often


class _Stop(Exception):
    """The timeout stopped the run (reported as RunTimeout, with the run's progress)."""


class _Bell(Doorbell):
    """A worker's doorbell.  At the end of the run a worker parked on it is ended where it waits
    (`Engine.discard`) instead of rung: waking its thread only to return would cost the run's end
    a thread wake-up (0.05-0.1 ms on this VM)."""

    waiter: tuple[RealEngine, Proc] | None = None  # the engine and the worker process that waits here

    def close(self) -> None:
        if self.waiter is None or not self.waiter[0].discard(self.waiter[1]):
            self.ring()


async def _worker(sched: Scheduler, w: Worker, launcher: Launcher, prefetch: int, turns: _Turns | None) -> None:
    """A worker process: take tasks into the inbox, run their stages, complete them; park on its
    doorbell when nothing is ready.  Completing a task runs the scheduler's code here, under the
    scheduler's lock (the direct handoff); between two tasks it lets the orchestrator take a turn."""
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
    retire, take, bell = sched.retire, sched.take, w.wakeup
    if isinstance(bell, _Bell):
        bell.waiter = current()  # type: ignore[assignment]
    while True:
        with lock:
            w.idle = False
            if finished is not None:
                retire(finished, w.index)
                finished = None
            if sched.interrupted and w.index == 0 and not sched.stopped:
                sched.stop((-1, KeyboardInterrupt()))
            if sched.stopped:
                return
            while len(inbox) < slots:
                i = take(w, not inbox)
                if i is None:
                    break
                inbox.append(i)
            if not inbox:
                if sched.finished():
                    return
                w.idle = True
            else:
                running = i = w.running = inbox.popleft()
        if w.idle:
            start = clock()
            try:
                await bell.wait()
            finally:  # also when the run's end discards this process where it waits
                w.waits.append((start, clock()))
            continue
        if turns is not None and turns.due():
            await turns.give()
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


class _Turns:
    """The orchestrator process has no thread of its own.  It admits what the window takes, then
    parks on the window's doorbell until a quarter of the window has retired; the worker whose
    completion rang it hands it its thread before its next task (a process runs until it waits:
    the worker yields, the orchestrator admits and parks again), or a thread with nothing else to
    run runs it (the engine runs an unpinned process before a pinned one)."""

    def __init__(self, sched: Scheduler):
        self.sched = sched
        self.bell = sched.window_bell = Doorbell("task window")

    def due(self) -> bool:
        """Rung, and not yet done (a ring during its last turn leaves a token nobody will take)."""
        return self.bell.rung and self.sched.next < len(self.sched.instances)

    async def give(self) -> None:
        await sleep(0)  # the engine runs the orchestrator (unpinned, woken) before this worker again

    async def orchestrator(self) -> None:
        sched, n = self.sched, len(self.sched.instances)
        while True:
            with sched.lock:
                sched.orchestrate(batch=n)
                if sched.next == n or sched.stopped:
                    return
            await self.bell.wait()


class _Engine(RealEngine):
    """The real engine of one run: a failure of the engine's own (Ctrl-C in the caller's thread, a
    deadlock) also stops the scheduler, so workers busy in task code stop at their next task."""

    def __init__(self, sched: Scheduler, threads: int):
        super().__init__(threads)
        self.sched = sched

    def fail(self, error: BaseException) -> None:
        super().fail(error)
        self.sched.stopped = True


def _serve_native(run: NativeRun) -> None:
    """Worker 0 of a native run on the caller's thread, the others on pool threads that wait for it in
    native code (crew.py).  The caller's loop comes back to Python every SLICE_NS; a run still going
    after the first then watches a word signals write (so a short run sets nothing up) and comes back
    only when it is nonzero (looked at every WATCH_NS) or, without one, every SLICE_NS, so that Ctrl-C
    (Python raises KeyboardInterrupt in the caller's thread) stops the run within a slice; a timeout
    sets the loop's stop flag from the watchdog's thread.  It returns once every helper that claimed
    its worker has left the loop (one that had not claimed it yet never will)."""
    with pool().threads(run.workers - 1) as threads, contextlib.ExitStack() as watching:
        for w, thread in enumerate(threads, start=1):
            thread.offer(run.buffer.address, w)
        slice_ns, signals = SLICE_NS, None
        try:  # beside helpers the caller is pinned while it works (run.lead)
            while run.lead(time.monotonic_ns() + slice_ns) if threads else run.work(0, time.monotonic_ns() + slice_ns):
                if signals is None:  # a long run: from now on come back only for a signal, if one can be watched
                    signals = watching.enter_context(signal_word()) or False
                    if signals:
                        slice_ns = WATCH_NS
                        run.watch(signals.address, slice_ns)
                elif signals:  # a handler that did not raise has run: watch for the next signal
                    signals.rearm()
        except BaseException:  # Ctrl-C between two slices: the helpers stop at their next task boundary
            run.stop()
            raise
        finally:
            run.wait_exited(sum(not thread.withdraw() for thread in threads))


def rouse(options: Options) -> None:
    """A real-clock run with these options is being set up: the pool threads it will lend start
    waking now (crew.py), so that their wake-up overlaps the set-up."""
    if len(options.workers) > 1:
        pool().rouse(len(options.workers) - 1)


def _native_run(table: TaskTable, launcher: Launcher, options: Options) -> NativeRun | None:
    """A native run of the table, where the Python scheduler's work is the loop's: every instance a
    compiled kernel (the launcher's `native`), the work_stealing policy, no core classes, no
    prefetch pipeline and no instance whose skipping is decided during the run (`table.skip`;
    those `table.skipped` marks before it are the loop's)."""
    found = getattr(launcher, "native", None)
    if found is None or crew.supported() is not None:
        return None
    policy = options.policy if isinstance(options.policy, str) else options.policy.policy
    if policy != "work_stealing" or options.prefetch or table.skip is not None \
            or any(core is not None and any(w not in (None, core) for w in options.workers) for core in table.cores):
        return None
    tasks, pointers = found
    # a table of one instance runs on the caller alone, as in Python (Scheduler.active)
    return NativeRun(table, tasks, pointers, 1 if len(table) == 1 else len(options.workers), options.window)


def _execute_native(table: TaskTable, run: NativeRun, options: Options) -> Trace:
    """execute() on the native loop.  The Python scheduler's state exists only for the trace: it is
    made when the trace is first read, with the loop's records in it."""
    clock = time.perf_counter
    trace = Trace(title=options.title)
    stopped: list[BaseException] = []

    def body() -> Trace:
        origin = clock()
        _serve_native(run)
        trace.duration = clock() - origin
        records = run.records()
        completed = run.completed
        run.release()  # every worker has left the loop

        def fill(trace: Trace) -> None:  # when the trace is first read
            sched = Scheduler(table, options, placer(options.policy, options.task_times, options.workers), clock,
                              wakeup=lambda index: _Bell(f"ready@worker{index}"))
            sched.admitted = origin  # the first window was in at the start
            _native_records(records, sched)
            _fill_trace(trace, sched, origin)

        trace.defer(fill)
        if stopped:
            raise RunTimeout(f"the run did not finish within {options.timeout:g} s ({completed} of "
                             f"{len(table.instances)} task instances done)")
        return trace

    def stop(reason: BaseException) -> None:
        stopped.append(reason)
        run.stop()

    return bounded(body, options.timeout, stop, list, "the run")


def _native_records(records: Records, sched: Scheduler) -> None:
    """The native loop's records (per worker: its tasks' (instance, start, end) and its idle spans, in
    nanoseconds) as the Python workers keep theirs: seconds on perf_counter's clock."""
    done, skipped = sched.done, sched.masked
    for k, w in enumerate(sched.workers[:records.workers]):  # a table of one instance ran on the caller alone
        rows = records.runs(k).tolist()
        w.records = [(i, start * 1e-9, end * 1e-9, None) for i, start, end in rows
                     if skipped is None or not skipped[i]]  # a skipped one called the empty thunk
        w.waits = [(start * 1e-9, end * 1e-9) for start, end in records.idle(k).tolist()]
        for i, _, _ in rows:
            done[i] = 1
    sched.skipped = 0 if skipped is None else int(np.count_nonzero(skipped))
    sched.next = len(sched.instances)
    sched.peak = min(sched.next, sched.window)


def execute(table: TaskTable, launcher: Launcher, options: Options) -> Trace:
    """Run every instance of `table` once, in dependency order, and return the run's Trace.

    Raises TaskError (naming the task and its grid coordinates, the original exception
    chained) when task code raises, RunTimeout after `options.timeout` seconds, and
    KeyboardInterrupt on Ctrl-C; in each case no worker runs task code any more, except
    task code stuck past the timeout, whose threads are abandoned (watchdog.py): then the
    RunTimeout names the tasks still running.
    """
    fast = _native_run(table, launcher, options)
    if fast is not None:
        return _execute_native(table, fast, options)
    clock = time.perf_counter
    sched = Scheduler(table, options, placer(options.policy, options.task_times, options.workers), clock,
                      wakeup=lambda index: _Bell(f"ready@worker{index}"))
    trace = Trace(title=options.title)
    workers = sched.active()
    engine = _Engine(sched, len(workers))

    def run() -> Trace:
        origin = clock()
        sched.orchestrate()  # the first batch is in before the workers start
        # more than one batch: an orchestrator process admits the rest, taking turns with worker 0
        turns = _Turns(sched) if sched.next < len(table.instances) else None
        processes = [(f"worker{w.index}", w.core, _worker(sched, w, launcher, options.prefetch, turns), k)
                     for k, w in enumerate(workers)]
        if turns is not None:
            processes.append(("orchestrator", "host", turns.orchestrator(), None))
        with interrupts(sched):
            engine.run(processes)
        trace.duration = clock() - origin
        trace.defer(lambda trace: _fill_trace(trace, sched, origin))
        if options.task_times is not None and sched.error is None:
            _learn(options.task_times, sched)
        error = sched.error
        if error is None and engine.failure is not None:
            error = (-1, engine.failure)
        if error is not None and isinstance(error[1], _Stop):
            raise RunTimeout(f"the run did not finish within {options.timeout:g} s ({sched.completed} of "
                             f"{len(table.instances)} task instances done)")
        if error is not None:
            raise_failure(table, error)
        return trace

    def stop(reason: BaseException) -> None:
        with sched.lock:
            if sched.error is None:
                sched.error = (-1, _Stop("timeout") if isinstance(reason, RunTimeout) else reason)
        engine.stop(reason)

    def running() -> list[str]:
        return [f"{describe(table.instances[w.running])} on worker {w.index}"
                for w in sched.workers if w.running is not None]

    return bounded(run, options.timeout, stop, running, "the run")


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
    window_waits = [(s - origin, e - origin) for s, e in sched.window_waits]
    trace.waits.extend(Wait(row, "window", "task window", s, e) for s, e in window_waits)
    generating, at = [], 0.0  # the orchestrator admitting instances: until all were in, but for its window waits
    for start, end in window_waits:
        generating.append((at, start))
        at = end
    generating.append((at, (sched.admitted if sched.admitted is not None else origin + trace.duration) - origin))
    parked = {w.index: [(s - origin, e - origin) for s, e in w.waits] for w in sched.workers}
    trace.statistics["idle"] = ParkedCauses(trace.events, parked, len(sched.workers), trace.duration, generating)
    trace.deps = Edges(sched.preds, list(sched.done))
    trace.statistics["window"] = {"capacity": sched.window, "peak": sched.peak, "waits": len(sched.window_waits)}
    trace.statistics["skipped"] = sched.skipped
