"""`pw.csp`: communicating sequential processes on trio, for custom pipelines.

A *virtual thread* is a trio task with a name and a role, started by `run`.
Virtual threads talk over two primitives:

- `Channel(capacity, name)`: a bounded FIFO.  `await send(x)` blocks while
  `capacity` values wait unreceived (backpressure); `await receive()` blocks
  while it is empty.  `close()` ends it: later sends raise
  `trio.ClosedResourceError`, and receives drain what is left, then raise
  `trio.EndOfChannel` (`async for x in ch` stops there).
- `DepQueue(name, credits)`: a dependency-token queue, the RAW/WAR protocol
  TVM uses to lower virtual threads onto decoupled access-execute hardware.
  `await pop_dep()` blocks until a token is there and takes it; `push_dep()`
  adds one and never blocks.  `credits` tokens are there at the start (a
  consumer-to-producer "buffer free" queue starts with one per buffer).

Every blocking call is a cancellation point.  `run` knows which virtual
threads are blocked on which primitive: when every live one is, no event
can wake any of them, so it raises `DeadlockError` listing each and what it
waits on, instead of hanging.  The waits are recorded in the run's Trace,
with any `span(...)` a virtual thread marks.

Two clocks: `clock="real"` is wall time; `clock="device"` runs under trio's
`MockClock(autojump_threshold=0)`, where time passes only when a virtual
thread sleeps (`await trio.sleep(seconds)` models work) and jumps straight
to the next wake-up, so a run's timing is deterministic.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import trio
import trio.testing
from trio.lowlevel import ParkingLot, RunVar, Task, cancel_shielded_checkpoint, checkpoint_if_cancelled, current_task

from ptowsp.errors import DeadlockError, InputError, PtowspError, RunTimeout
from ptowsp.runtime.trace import Event, Trace, Wait
from ptowsp.runtime.watchdog import TrioStop, bounded, check_timeout

__all__ = ["Channel", "DepQueue", "Process", "Results", "process", "run", "span", "now",
           "ChannelStatistics", "DepQueueStatistics"]


@dataclass(frozen=True)
class ChannelStatistics:
    name: str
    capacity: int
    buffered: int
    sent: int
    received: int
    max_buffered: int
    waiting_senders: int
    waiting_receivers: int
    closed: bool


@dataclass(frozen=True)
class DepQueueStatistics:
    name: str
    credits: int  # tokens at the start
    tokens: int  # tokens now
    pushes: int
    pops: int
    max_tokens: int
    waiting: int


class _Run:
    """Bookkeeping of one `run`: live virtual threads, who is blocked on what, the trace."""

    def __init__(self, clock: str):
        self.clock = clock
        self.origin = trio.current_time()
        self.threads: dict[Task, int] = {}  # trio task -> row
        self.names: list[tuple[str, str | None]] = []
        self.live = 0
        self.blocked: dict[Task, str] = {}  # trio task -> what it waits on
        self.cut: dict[Task, str | None] = {}  # threads ended by cancellation -> what they waited on
        self.trace = Trace(clock=clock, title="ptowsp csp")

    def now(self) -> float:
        return trio.current_time() - self.origin

    def unfinished(self) -> str:
        """The virtual threads a cancellation cut short, each with what it waited on (a timeout's message)."""
        cut = sorted((self.threads[t], what) for t, what in self.cut.items())
        return "; ".join(f"{self.names[row][0]!r} " + (f"waits {what}" if what else "(running or asleep)")
                         for row, what in cut) or "(none)"

    def check_deadlock(self) -> None:
        if self.live and len(self.blocked) >= self.live:
            waits = [(self.names[self.threads[t]][0], what) for t, what in self.blocked.items()]
            lines = "; ".join(f"{thread!r} waits {what}" for thread, what in waits)
            error = DeadlockError(f"no virtual thread can make progress: {lines}")
            error.blocked = waits  # type: ignore[attr-defined]
            raise error


_CURRENT: RunVar[_Run] = RunVar("ptowsp_csp_run")


def _current_run() -> _Run | None:
    try:
        return _CURRENT.get()
    except LookupError:
        return None


async def _block(lot: ParkingLot, kind: str, name: str, what: str) -> None:
    """Park the calling virtual thread on `lot` until a peer wakes it (see `_wake`), recording the wait."""
    state = _current_run()
    if state is None or current_task() not in state.threads:
        await lot.park()
        return
    task = current_task()
    state.blocked[task] = what
    start = state.now()
    try:
        state.check_deadlock()
        await lot.park()
    except trio.Cancelled:
        state.cut[task] = what
        raise
    finally:
        state.blocked.pop(task, None)
        state.trace.waits.append(Wait(state.threads[task], kind, name, start, state.now()))


def _wake(lot: ParkingLot, count: float = 1) -> None:
    """Unpark waiters and mark them runnable at once, so a deadlock check never counts them as blocked."""
    woken = lot.unpark(count=count)
    state = _current_run()
    if state is not None:
        for task in woken:
            state.blocked.pop(task, None)


class Channel:
    """A bounded FIFO between virtual threads; see the module docstring for blocking and closing."""

    def __init__(self, capacity: int = 1, name: str | None = None):
        if not isinstance(capacity, int) or capacity < 1:
            raise PtowspError(f"channel {name!r}: capacity must be an integer >= 1, got {capacity!r}")
        self.capacity = capacity
        self.name = name or f"channel{id(self):x}"
        self._items: deque[Any] = deque()
        self._not_full = ParkingLot()
        self._not_empty = ParkingLot()
        self._closed = False
        self._sent = self._received = self._max = 0

    async def send(self, value: Any) -> None:
        """Append value; blocks while the channel is full.  Raises trio.ClosedResourceError once closed."""
        await checkpoint_if_cancelled()
        while True:
            if self._closed:
                raise trio.ClosedResourceError(f"channel {self.name!r} is closed")
            if len(self._items) < self.capacity:
                break
            await _block(self._not_full, "channel", self.name,
                         f"to send on channel {self.name!r} (full, {len(self._items)}/{self.capacity})")
        self._items.append(value)
        self._sent += 1
        self._max = max(self._max, len(self._items))
        _wake(self._not_empty)
        await cancel_shielded_checkpoint()

    async def receive(self) -> Any:
        """The oldest value; blocks while empty.  Raises trio.EndOfChannel when closed and drained."""
        await checkpoint_if_cancelled()
        while not self._items:
            if self._closed:
                raise trio.EndOfChannel
            await _block(self._not_empty, "channel", self.name, f"to receive from channel {self.name!r} (empty)")
        value = self._items.popleft()
        self._received += 1
        _wake(self._not_full)
        await cancel_shielded_checkpoint()
        return value

    def close(self) -> None:
        """No more sends; receivers drain what is buffered, then see EndOfChannel.  Idempotent."""
        self._closed = True
        _wake(self._not_empty, math.inf)
        _wake(self._not_full, math.inf)

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __aiter__(self) -> Channel:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    def statistics(self) -> ChannelStatistics:
        return ChannelStatistics(self.name, self.capacity, len(self._items), self._sent, self._received, self._max,
                                 self._not_full.statistics().tasks_waiting,
                                 self._not_empty.statistics().tasks_waiting, self._closed)

    def __repr__(self) -> str:
        return f"Channel({self.capacity}, name={self.name!r})"


class DepQueue:
    """Dependency tokens: `pop_dep` takes one (blocking while none), `push_dep` gives one back."""

    def __init__(self, name: str, credits: int = 0):
        if not isinstance(credits, int) or credits < 0:
            raise PtowspError(f"dependency queue {name!r}: credits must be an integer >= 0, got {credits!r}")
        self.name = name
        self.credits = credits
        self._tokens = credits
        self._lot = ParkingLot()
        self._pushes = self._pops = 0
        self._max = credits

    async def pop_dep(self) -> None:
        """Take a token; blocks while there is none."""
        await checkpoint_if_cancelled()
        while self._tokens == 0:
            await _block(self._lot, "token", self.name, f"to pop a token from {self.name!r} (0 tokens)")
        self._tokens -= 1
        self._pops += 1
        await cancel_shielded_checkpoint()

    def push_dep(self) -> None:
        """Give a token, waking one waiter; never blocks."""
        self._tokens += 1
        self._pushes += 1
        self._max = max(self._max, self._tokens)
        _wake(self._lot)

    def statistics(self) -> DepQueueStatistics:
        return DepQueueStatistics(self.name, self.credits, self._tokens, self._pushes, self._pops, self._max,
                                  self._lot.statistics().tasks_waiting)

    def __repr__(self) -> str:
        return f"DepQueue({self.name!r}, credits={self.credits})"


@dataclass(frozen=True)
class Process:
    """An async function with its arguments, to run as a named virtual thread."""

    fn: Callable[..., Awaitable[Any]]
    args: tuple[Any, ...] = ()
    name: str | None = None
    role: str | None = None


def process(fn: Callable[..., Awaitable[Any]], *args: Any, name: str | None = None,
            role: str | None = None) -> Process:
    """Describe a virtual thread: `run` calls `await fn(*args)`; name and role label its trace row."""
    return Process(fn, args, name, role)


class Results(list):
    """The return values of a run's virtual threads, in the order given, with the run's `trace`."""

    trace: Trace


def now() -> float:
    """Seconds since the current run started, on its clock."""
    state = _current_run()
    return 0.0 if state is None else state.now()


@contextlib.contextmanager
def span(name: str, *, bytes: int = 0, flops: int = 0) -> Iterator[None]:  # noqa: A002 - the trace's field
    """Record the enclosed work of the current virtual thread as an event of the run's trace."""
    state = _current_run()
    task = current_task()
    if state is None or task not in state.threads:
        yield
        return
    start = state.now()
    try:
        yield
    finally:
        row = state.threads[task]
        state.trace.events.append(Event(name, (), row, state.names[row][1], start, state.now(), bytes, flops))


def run(processes: Sequence[Process | Callable[[], Awaitable[Any]]], clock: str = "real",
        timeout: float | None = None) -> Results:
    """Run each process as a virtual thread until all return; their results, with a Trace.

    Raises DeadlockError when every live virtual thread is blocked on a channel or token
    queue, the first exception a virtual thread raises (the others are cancelled),
    InputError for a process that is not an async function, and RunTimeout after
    `timeout` seconds of the run's clock, or of host time on either clock: a virtual
    thread stuck in host code (no `await`) is named and its thread abandoned (watchdog.py).
    """
    if clock not in ("real", "device"):
        raise PtowspError(f"clock must be 'real' or 'device', got {clock!r}")
    timeout = check_timeout(timeout)
    specs = [_spec(k, p) for k, p in enumerate(processes)]
    results: list[Any] = [None] * len(specs)
    holder: dict[str, _Run] = {}
    stopper, stepping = TrioStop(), _Stepping()

    async def thread(index: int, spec: Process, state: _Run) -> None:
        task = current_task()
        state.threads[task] = index
        try:
            call = spec.fn(*spec.args)
            if not inspect.isawaitable(call):
                raise InputError(f"csp process {state.names[index][0]!r} is not async: calling it returned "
                                 f"{type(call).__name__}, not an awaitable; define it with `async def`")
            results[index] = await call
        except trio.Cancelled:
            state.cut.setdefault(task, None)
            raise
        finally:
            state.live -= 1
            state.blocked.pop(task, None)
        state.check_deadlock()  # the threads left may now wait on someone who is gone

    async def main() -> None:
        state = holder["run"] = _Run(clock)
        _CURRENT.set(state)
        for i, spec in enumerate(specs):
            state.names.append((spec.name or getattr(spec.fn, "__name__", f"thread{i}"), spec.role))
        state.trace.workers = list(state.names)
        state.live = len(specs)
        try:
            with trio.move_on_after(math.inf if timeout is None else timeout) as deadline:
                stopper.enter(deadline)
                async with trio.open_nursery() as nursery:
                    for i, spec in enumerate(specs):
                        nursery.start_soon(thread, i, spec, state, name=state.names[i][0])
        finally:
            state.trace.duration = state.now()
        if deadline.cancelled_caught:
            limit = str(stopper.reason) + " of host time" if stopper.reason is not None else \
                f"the csp run did not finish within {timeout:g} s of its {clock} clock"
            raise RunTimeout(f"{limit}; still running: {state.unfinished()}")

    def body() -> Results:
        trio_clock = trio.testing.MockClock(autojump_threshold=0) if clock == "device" else None
        try:
            with deterministic_order() if clock == "device" else contextlib.nullcontext():
                trio.run(main, clock=trio_clock, instruments=[stepping] if timeout is not None else [])
        except BaseExceptionGroup as group:
            raise_first(group)
        out = Results(results)
        out.trace = holder["run"].trace
        return out

    def stuck() -> list[str]:
        state, task = holder.get("run"), stepping.task
        if state is None or task not in state.threads:
            return []
        return [f"virtual thread {state.names[state.threads[task]][0]!r}"]

    return bounded(body, timeout, stopper.stop, stuck, "the csp run")


def _spec(index: int, p: object) -> Process:
    """A Process for what `run` was given; InputError for what cannot start a virtual thread."""
    spec = p if isinstance(p, Process) else Process(p)  # type: ignore[arg-type]
    name = spec.name or getattr(spec.fn, "__name__", f"thread{index}")
    if inspect.iscoroutine(spec.fn) or inspect.isawaitable(spec.fn):
        raise InputError(f"csp process {index} ({name!r}) is a coroutine object, already called: pass the "
                         "async function itself, or csp.process(fn, *args)")
    if not callable(spec.fn):
        raise InputError(f"csp process {index} is {spec.fn!r} ({type(spec.fn).__name__}), not an async "
                         "function; pass `async def` functions or csp.process(fn, *args)")
    return spec


class _Stepping(trio.abc.Instrument):
    """Which trio task runs right now: the one to name when the run's thread must be abandoned."""

    task: Task | None = None

    def before_task_step(self, task: Task) -> None:
        self.task = task

    def after_task_step(self, task: Task) -> None:
        self.task = None


@contextlib.contextmanager
def deterministic_order(seed: int = 0) -> Iterator[None]:
    """Fix the order in which trio runs virtual threads woken at the same instant.

    trio draws that order at random, to shake out code that relies on it.  On
    the device clock ties are common (identical tasks end together), so for a
    deterministic trace the draw is seeded for the run and trio's generator
    restored afterwards.  trio has no public switch for this: if its private
    generator ever moves, runs stay correct but lose byte-for-byte repeatability
    (tests/backends/test_aicore.py would say so).
    """
    from trio._core import _run

    rng = getattr(_run, "_r", None)
    if rng is None:
        yield
        return
    state = rng.getstate()
    rng.seed(seed)
    try:
        yield
    finally:
        rng.setstate(state)


def raise_first(group: BaseExceptionGroup) -> None:
    """Re-raise the exception that started a nursery's unwinding, not trio's group around it.

    KeyboardInterrupt wins over everything; then the first exception that is not a
    Cancelled.  The group stays reachable as the exception's context.
    """
    flat = list(_leaves(group))
    for wanted in (KeyboardInterrupt, BaseException):
        for e in flat:
            if isinstance(e, wanted) and not isinstance(e, trio.Cancelled):
                raise e from e.__cause__
    raise group


def _leaves(group: BaseExceptionGroup) -> Iterator[BaseException]:
    for e in group.exceptions:
        if isinstance(e, BaseExceptionGroup):
            yield from _leaves(e)
        else:
            yield e
