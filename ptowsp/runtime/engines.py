"""The two clocks that drive `pw.csp` processes: one set of process semantics, two engines.

A process is a coroutine.  It gives control back only where it must wait: a
channel or token-queue operation that cannot complete at once, or a sleep.
The primitives (csp.py) decide that under the engine's lock; to wait they
`park` the process, naming what it waits on, and it yields `PARK`.  A peer
that completes the wait calls `wake(proc, value)`, and the engine resumes
the coroutine with that value (or throws an exception into it: a closed
channel, a cancellation).  So the engines know nothing of channels, and the
primitives nothing of threads or time.

- `DeviceEngine`: one thread, discrete-event time.  Runnable processes run in
  the order they became runnable (FIFO); when none is, time jumps to the
  earliest sleeper's wake-up, ties broken by the order the sleeps began.
  Nothing depends on addresses or hashing, so a program gives the same
  trace in every process on every machine.
- `RealEngine`: wall time, OS threads (the caller's and lent pool threads),
  so task code a process calls (a compiled kernel) runs outside the GIL in
  parallel.  A process may be pinned to one thread (the executor's workers
  are); others run on whichever thread is free.  A process woken while it
  is still between its park and its yield is resumed by the thread that
  runs it, never by two threads at once.

Both detect deadlock the same way: when every live process is parked on a
primitive, nothing can wake any of them; the run fails with DeadlockError
listing each process and what it waits on.  The first exception a process
raises cancels the others (`Cancelled` is thrown at their wait points; a
process that is running host code sees it at its next wait), and is raised
from `run` once every process has ended.
"""

from __future__ import annotations

import abc
import contextlib
import heapq
import os
import itertools
import threading
import time
import types
from collections import deque
from collections.abc import Coroutine, Sequence
from typing import Any, Protocol

from ptowsp.errors import DeadlockError, InputError, RunTimeout
from ptowsp.runtime.service import pinned, pool


class Cancelled(BaseException):
    """Thrown into a process that must stop because the run is ending (another process failed,
    a deadlock, a timeout, Ctrl-C).  A BaseException, so `except Exception` does not swallow it."""


PARK = object()  # what a parked process yields to its engine


@types.coroutine
def park_here() -> Any:
    """Yield to the engine after `Engine.park`; returns the value a waker hands over."""
    return (yield PARK)


RUNNABLE, RUNNING, WOKEN, PARKED, DONE = range(5)


class Proc:
    """One process of a run: its coroutine, where it stands, and what it waits on."""

    __slots__ = ("index", "name", "role", "coro", "pin", "state", "value", "error", "waits_on", "since",
                 "withdraw", "cancelled", "result")

    def __init__(self, index: int, name: str, role: str | None, coro: Coroutine, pin: int | None):
        self.index, self.name, self.role, self.coro, self.pin = index, name, role, coro, pin
        self.state = RUNNABLE
        self.value: Any = None
        self.error: BaseException | None = None
        self.waits_on: tuple[Waitable, str] | None = None  # the primitive it is parked on, and the operation
        self.since: float | None = None  # when the current wait on a primitive began (if waits are recorded)
        self.withdraw: tuple[deque, tuple] | None = None  # the primitive's waiters, and its entry there
        self.cancelled = False
        self.result: Any = None


this_thread = threading.local()  # .here: (engine, process) while a process runs on this thread


def current() -> tuple[Engine, Proc] | None:
    """The engine and process running on this thread, or None outside a run."""
    return getattr(this_thread, "here", None)


class Waitable(Protocol):
    """A primitive a process can park on: it names itself and says what a waiter waits for."""

    kind: str  # "channel" or "token" (the trace's wait kinds)
    name: str

    def waiting(self, op: str) -> str:
        """What a process parked in `op` waits for, e.g. "to receive from channel 'a' (empty)"."""


class Engine(abc.ABC):
    """What both clocks share: process states, wake-ups, deadlock detection, failure and cancellation."""

    def __init__(self, record_waits: bool = False):
        self.lock = threading.Lock()
        self.procs: list[Proc] = []
        self.live = 0
        self.parked = 0  # live processes parked on a primitive (not asleep, not runnable)
        self.failure: BaseException | None = None
        self.record_waits = record_waits
        self.waits: list[tuple[Proc, Waitable, float, float]] = []  # (process, primitive, start, end)
        self.flows: list[tuple[Proc, float, Proc, Waitable]] = []  # (waker, when, woken, primitive)
        self.sleepers: list[tuple[float, int, Proc]] = []
        self.order = itertools.count()
        self.timed_out = False  # the run's own deadline failed it (the caller words the RunTimeout)
        self.unfinished = ""  # the processes still running when the run failed, with their waits
        self.culprit = ""  # the process whose exception failed the run

    # -- called by primitives, under the lock ------------------------------------------------
    def park(self, proc: Proc, primitive: Waitable, op: str, waiters: deque, entry: tuple) -> None:
        """Mark proc as waiting in `waiters` of a primitive (it yields PARK next); fails the run on deadlock."""
        proc.waits_on, proc.withdraw = (primitive, op), (waiters, entry)
        if self.record_waits:
            proc.since = self.now()
        self.parked += 1
        if self.parked >= self.live:
            self.check_deadlock()

    def wake(self, proc: Proc, value: Any = None, error: BaseException | None = None) -> None:
        """Resume a parked or sleeping process with `value` (or by throwing `error` into it)."""
        state = proc.state
        if state == DONE:
            return
        waits_on = proc.waits_on
        if waits_on is not None:
            self.parked -= 1
            proc.waits_on = proc.withdraw = None
            if proc.since is not None:
                end = self.now()
                self.waits.append((proc, waits_on[0], proc.since, end))
                proc.since = None
                waker = getattr(this_thread, "here", None)
                if waker is not None and error is None:
                    self.flows.append((waker[1], end, proc, waits_on[0]))
        proc.value, proc.error = value, error
        if state == PARKED:
            proc.state = RUNNABLE
            self.ready(proc)
        elif state == RUNNING:
            proc.state = WOKEN  # between its park and its yield: the thread running it resumes it

    def discard(self, proc: Proc) -> bool:
        """End `proc` without running it again, if it is parked on a primitive: its coroutine is
        closed on the calling thread (GeneratorExit at its wait; its `finally` blocks run here).
        For a waiter whose next wake-up would only tell it to return, when waking it would cost a
        thread wake-up.  False (nothing done) if it is not parked: it ends on its own."""
        with self.lock:
            if proc.state != PARKED or proc.withdraw is None:
                return False
            self._withdraw(proc)
            proc.waits_on = proc.withdraw = proc.since = None
            self.parked -= 1
            proc.state = RUNNING
        try:
            proc.coro.close()
        finally:
            self._end(proc, None, None)
        return True

    def sleep_until(self, proc: Proc, when: float) -> None:
        heapq.heappush(self.sleepers, (when, next(self.order), proc))

    def check_deadlock(self) -> None:
        if self.live and self.parked >= self.live and self.failure is None:
            waits = [(p.name, p.waits_on[0].waiting(p.waits_on[1])) for p in self.procs if p.waits_on is not None]
            error = DeadlockError("no virtual thread can make progress: " +
                                  "; ".join(f"{name!r} waits {what}" for name, what in waits))
            error.blocked = waits  # type: ignore[attr-defined]
            self.fail(error)

    def fail(self, error: BaseException) -> None:
        """Record the run's failure (Ctrl-C wins over anything earlier) and cancel every live process."""
        if self.failure is None:
            self.unfinished = self.still_running()
        if self.failure is None or (isinstance(error, KeyboardInterrupt)
                                    and not isinstance(self.failure, KeyboardInterrupt)):
            self.failure = error
        for p in self.procs:
            if p.state != DONE and not p.cancelled:
                p.cancelled = True
                if p.state in (PARKED, WOKEN) or p.waits_on is not None:
                    self._withdraw(p)
                    self._unsleep(p)
                    self.wake(p, error=Cancelled())

    @staticmethod
    def _withdraw(proc: Proc) -> None:
        """Take proc off the waiters of the primitive it is parked on (if it is)."""
        if proc.withdraw is not None:
            waiters, entry = proc.withdraw
            for k, other in enumerate(waiters):
                if other is entry:
                    del waiters[k]
                    break

    def _unsleep(self, proc: Proc) -> None:
        kept = [s for s in self.sleepers if s[2] is not proc]
        if len(kept) != len(self.sleepers):
            self.sleepers = kept
            heapq.heapify(kept)

    def still_running(self) -> str:
        """The processes that have not ended, each with what it waits on (for a timeout's message)."""
        return "; ".join(f"{p.name!r} " + (f"waits {p.waits_on[0].waiting(p.waits_on[1])}" if p.waits_on
                                           else "(running or asleep)")
                         for p in self.procs if p.state != DONE) or "(none)"

    # -- engine-specific -----------------------------------------------------------------------
    @abc.abstractmethod
    def now(self) -> float:
        """Seconds since the run started, on this engine's clock."""

    @abc.abstractmethod
    def ready(self, proc: Proc) -> None:
        """Queue a process that may run (under the lock)."""

    # -- stepping a process (outside the lock) -------------------------------------------------
    def start(self, specs: Sequence[tuple[str, str | None, Coroutine, int | None]]) -> None:
        for index, (name, role, coro, pin) in enumerate(specs):
            self.procs.append(Proc(index, name, role, coro, pin))
        self.live = len(self.procs)
        for proc in self.procs:
            self.ready(proc)

    def step(self, proc: Proc) -> None:
        """Run proc until it parks, sleeps or ends."""
        this_thread.here = (self, proc)
        coro, lock = proc.coro, self.lock
        try:
            while True:
                error = proc.error
                try:
                    if error is None:
                        value, proc.value = proc.value, None
                        yielded = coro.send(value)
                    else:
                        proc.error = None
                        yielded = coro.throw(error)
                except StopIteration as stop:
                    self._end(proc, stop.value, None)
                    return
                except BaseException as e:  # noqa: BLE001 - a process's failure ends the run
                    self._end(proc, None, e)
                    return
                with lock:
                    if yielded is not PARK:
                        proc.error = InputError(
                            f"csp process {proc.name!r} awaited {yielded!r:.60}, which is not a pw.csp primitive: "
                            "processes wait only on pw.csp channels, token queues and pw.csp.sleep "
                            "(not on trio or asyncio)")
                        continue
                    if proc.state == WOKEN:
                        proc.state = RUNNING
                        continue
                    proc.state = PARKED
                    return
        finally:
            this_thread.here = None

    def _end(self, proc: Proc, result: Any, error: BaseException | None) -> None:
        with self.lock:
            proc.state, proc.result = DONE, result
            self.live -= 1
            if proc.waits_on is not None:
                self.parked -= 1
                proc.waits_on = None
            if error is not None and not isinstance(error, Cancelled):
                if self.failure is None:
                    self.culprit = proc.name
                self.fail(error)
            self.check_deadlock()  # the processes left may wait on one that is gone
            self.ended(proc)

    def ended(self, proc: Proc) -> None:
        """Hook: a process has ended (under the lock)."""


class DeviceEngine(Engine):
    """Discrete-event time on one thread; see the module docstring for the ordering rules."""

    def __init__(self, record_waits: bool = False) -> None:
        super().__init__(record_waits)
        self.clock = 0.0
        self.runnable: deque[Proc] = deque()
        self.stop_reason: BaseException | None = None  # set from another thread (the watchdog)

    def now(self) -> float:
        return self.clock

    def ready(self, proc: Proc) -> None:
        self.runnable.append(proc)

    def stop(self, reason: BaseException) -> None:
        self.stop_reason = reason

    def run(self, specs, limit: float | None) -> None:
        """Run until every process has ended; RunTimeout when time would pass `limit` (device seconds)."""
        self.start(specs)
        runnable, sleepers = self.runnable, self.sleepers
        while self.live:
            if self.stop_reason is not None and self.failure is None:
                with self.lock:
                    self.fail(self.stop_reason)
            if runnable:
                proc = runnable.popleft()
                proc.state = RUNNING
                self.step(proc)
            elif sleepers:
                when, _, proc = heapq.heappop(sleepers)
                if limit is not None and when > limit and self.failure is None:
                    heapq.heappush(sleepers, (when, 0, proc))
                    with self.lock:
                        self.timed_out = True
                        self.fail(RunTimeout("deadline"))
                    continue
                self.clock = max(self.clock, when)
                with self.lock:
                    self.wake(proc)
            else:  # every live process is parked: check_deadlock has failed the run and woken them
                raise AssertionError("csp device engine: live processes, none runnable or asleep")


SPIN = 5e-5  # seconds an idle thread polls for work before it sleeps (a wake-up costs 0.05-0.1 ms here)


class RealEngine(Engine):
    """Wall time on `threads` OS threads: thread 0 is the caller's, the rest are lent pool threads."""

    def __init__(self, threads: int, record_waits: bool = False) -> None:
        super().__init__(record_waits)
        self.origin = time.perf_counter()
        self.shared: deque[Proc] = deque()
        self.own: list[deque[Proc]] = [deque() for _ in range(threads)]
        # made when first needed: a Condition costs 1.5 us, and a short run often never waits
        self.wakeups: list[threading.Condition | None] = [None] * threads
        self.idle = [False] * threads

    def now(self) -> float:
        return time.perf_counter() - self.origin

    def ready(self, proc: Proc) -> None:
        if proc.pin is not None:
            self.own[proc.pin].append(proc)
            if self.idle[proc.pin]:
                self.wakeups[proc.pin].notify()  # type: ignore[union-attr]  # made before idle was set
            return
        self.shared.append(proc)
        me = getattr(this_thread, "thread", None)
        for k, idle in enumerate(self.idle):  # another thread may run it while this one goes on
            if idle and k != me:
                self.idle[k] = False
                self.wakeups[k].notify()  # type: ignore[union-attr]
                break

    def stop(self, reason: BaseException) -> None:
        with self.lock:
            self.fail(reason)

    def ended(self, proc: Proc) -> None:
        if not self.live:
            for wakeup in self.wakeups:
                if wakeup is not None:
                    wakeup.notify()

    def _next(self, k: int) -> Proc | None:
        """Under the lock: the next process thread k runs (an unpinned one first), waking due sleepers."""
        sleepers = self.sleepers
        if sleepers and sleepers[0][0] <= self.now():
            while sleepers and sleepers[0][0] <= self.now():
                proc = heapq.heappop(sleepers)[2]
                if proc is not _ALARM:
                    self.wake(proc)
                elif self.live and self.failure is None:  # the run's deadline has come
                    self.timed_out = True
                    self.fail(RunTimeout("deadline"))
        queue = self.shared if self.shared else self.own[k]  # a pinned process that yields lets others go first
        if not queue:
            return None
        proc = queue.popleft()
        proc.state = RUNNING
        return proc

    def serve(self, k: int) -> None:
        """Thread k's loop: run processes until none is live."""
        lock, perf = self.lock, time.perf_counter
        this_thread.thread = k
        while True:
            with lock:
                proc = self._next(k)
            if proc is None and self.live:
                deadline = perf() + SPIN
                while proc is None and self.live and perf() < deadline:
                    time.sleep(0)
                    if self.own[k] or self.shared or self.sleepers:
                        with lock:
                            proc = self._next(k)
            if proc is None:
                with lock:
                    while self.live and (proc := self._next(k)) is None:
                        wakeup = self.wakeups[k]
                        if wakeup is None:
                            wakeup = self.wakeups[k] = threading.Condition(lock)
                        self.idle[k] = True
                        due = self.sleepers[0][0] - self.now() if self.sleepers else None
                        wakeup.wait(due)
                        self.idle[k] = False
                    if proc is None:
                        return
            self.step(proc)

    def run(self, specs, deadline: float | None = None) -> None:
        """Run every process on this thread and the pool's; RunTimeout after `deadline` wall seconds."""
        helpers = len(self.own) - 1
        # pinning keeps two of the run's threads off one CPU; alone, the caller needs none (and the
        # two affinity calls cost ~15 us on this VM: a third of a one-task run)
        alone = contextlib.nullcontext(())
        with pool().threads(helpers) if helpers else alone as threads, pinned() if helpers else alone:
            with self.lock:
                self.start(specs)
                if deadline is not None:
                    heapq.heappush(self.sleepers, (deadline, -1, _ALARM))
            for k, thread in enumerate(threads, start=1):
                thread.start(lambda k=k: self.serve(k))
            try:
                self.serve(0)  # returns once no process is live
            except BaseException as e:  # noqa: BLE001 - Ctrl-C in the caller's thread between steps
                with self.lock:
                    self.fail(e)
                self.serve(0)


_ALARM = Proc(-1, "alarm", None, None, None)  # type: ignore[arg-type]
_ALARM.state = DONE


def threads_for(count: int) -> int:
    """How many OS threads a real-clock run of `count` processes uses: one per process, at most one per CPU."""
    return max(1, min(count, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else
                      (os.cpu_count() or 1)))

