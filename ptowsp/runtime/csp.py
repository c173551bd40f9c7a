"""`pw.csp`: communicating sequential processes on two clocks, for custom pipelines and the executor.

A *virtual thread* (a process) is an `async def` function started by `run`.
Processes talk over two primitives:

- `Channel(capacity, name)`: a FIFO.  `capacity=0` is a rendezvous (Hoare's
  CSP, Go's default): `send` waits until a receiver takes the value.  With
  `capacity=n`, `send` blocks while n values wait unreceived (backpressure).
  `receive` blocks while nothing is there.  `close()` ends it: later and
  waiting sends raise `ChannelClosed`; receives drain what is left, then
  raise `EndOfChannel` (`async for x in ch` stops there).
- `DepQueue(name, credits)`: a dependency-token queue, the RAW/WAR protocol
  TVM uses to lower virtual threads onto decoupled access-execute hardware.
  `await pop_dep()` blocks until a token is there and takes it; `push_dep()`
  adds one and never blocks.  `credits` tokens are there at the start (a
  consumer-to-producer "buffer free" queue starts with one per buffer).

`await sleep(seconds)` models work: on the device clock time passes only
there.  A process waits only on these (awaiting trio or asyncio is an
InputError naming it).  Every wait is a cancellation point.  When every live
process is blocked on a primitive nothing can wake any of them: `run` raises
`DeadlockError` listing each and what it waits on, instead of hanging.  Waits
and any `span(...)` a process marks are recorded in the run's Trace.

Two clocks (engines.py): `clock="real"` is wall time, processes spread over
OS threads (one per process, at most one per CPU), so host code they call
outside the GIL runs in parallel; `clock="device"` is discrete-event time on
one thread, where a run's timing and order are deterministic.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import numbers
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from ptowsp.errors import InputError, PtowspError, RunTimeout
from ptowsp.runtime.engines import RUNNING, WOKEN, Cancelled, DeviceEngine, Engine, Proc, RealEngine, \
    current, park_here, this_thread, threads_for
from ptowsp.runtime.trace import Event, Flow, Trace, Wait
from ptowsp.runtime.watchdog import bounded, check_timeout

__all__ = ["Channel", "DepQueue", "Process", "Results", "process", "run", "span", "now", "sleep", "sleep_until",
           "ChannelStatistics", "DepQueueStatistics", "Cancelled", "ChannelClosed", "EndOfChannel", "WouldBlock"]


class ChannelClosed(PtowspError, trio.ClosedResourceError):
    """A send on a closed channel (also `trio.ClosedResourceError`, which earlier versions raised)."""


class EndOfChannel(trio.EndOfChannel):
    """A receive on a closed, drained channel (also `trio.EndOfChannel`)."""


class WouldBlock(trio.WouldBlock):
    """`receive_nowait` found nothing to take (also `trio.WouldBlock`)."""


_NOTHING = object()


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


def _running(primitive: object, op: str) -> tuple[Engine, Proc]:
    """The engine and process awaiting `op` on `primitive`; Cancelled if the run is ending."""
    here = getattr(this_thread, "here", None)
    if here is None:
        raise PtowspError(f"{op} on {primitive!r} was awaited outside a process of pw.csp.run")
    if here[1].cancelled:
        raise Cancelled()
    return here


def _lock_for(waiters: deque) -> contextlib.AbstractContextManager:
    """The lock guarding a primitive for a synchronous call (push_dep, close): its run's, if any."""
    here = current()
    if here is not None:
        return here[0].lock
    return waiters[0][0].lock if waiters else contextlib.nullcontext()


class Channel:
    """A FIFO between processes: rendezvous (capacity 0) or bounded; see the module docstring."""

    kind = "channel"

    def __init__(self, capacity: int = 1, name: str | None = None):
        if not (capacity == math.inf or (isinstance(capacity, numbers.Integral) and not isinstance(capacity, bool)
                                         and capacity >= 0)):
            raise PtowspError(f"channel {name!r}: capacity must be an integer >= 0 (0 is a rendezvous) or math.inf, "
                              f"got {capacity!r}")
        self.capacity = capacity if capacity == math.inf else int(capacity)
        self.name = name or f"channel{id(self):x}"
        self._items: deque[Any] = deque()
        self._receivers: deque[tuple[Engine, Proc]] = deque()
        self._senders: deque[tuple[Engine, Proc, Any]] = deque()
        self._closed = False
        self._sent = self._received = self._max = 0

    async def send(self, value: Any) -> None:
        """Hand value over (rendezvous) or buffer it; blocks while full.  ChannelClosed once closed."""
        engine, me = _running(self, "send")
        with engine.lock:
            if self._closed:
                raise ChannelClosed(f"channel {self.name!r} is closed")
            if self._receivers:
                peer, receiver = self._receivers.popleft()
                self._sent += 1
                self._received += 1
                peer.wake(receiver, value)
                return
            if len(self._items) < self.capacity:
                self._items.append(value)
                self._sent += 1
                self._max = max(self._max, len(self._items))
                return
            entry = (engine, me, value)
            self._senders.append(entry)
            engine.park(me, self, "send", self._senders, entry)
        await park_here()

    def _take(self) -> Any:
        """Under the lock: the next value if one is there (a blocked sender moves up), else _NOTHING."""
        if self._items:
            value = self._items.popleft()
            self._received += 1
            if self._senders:  # a blocked sender's value takes the freed place
                peer, sender, waiting = self._senders.popleft()
                self._items.append(waiting)
                self._sent += 1
                peer.wake(sender)
            return value
        if self._senders:  # rendezvous: take the value straight from the sender
            peer, sender, value = self._senders.popleft()
            self._sent += 1
            self._received += 1
            peer.wake(sender)
            return value
        if self._closed:
            raise EndOfChannel(f"channel {self.name!r} is closed and drained")
        return _NOTHING

    async def receive(self) -> Any:
        """The oldest value; blocks while there is none.  EndOfChannel when closed and drained."""
        engine, me = _running(self, "receive")
        with engine.lock:
            value = self._take()
            if value is not _NOTHING:
                return value
            entry = (engine, me)
            self._receivers.append(entry)
            engine.park(me, self, "receive", self._receivers, entry)
        return await park_here()

    def receive_nowait(self) -> Any:
        """The oldest value if one is there (or a sender waits); else WouldBlock.  EndOfChannel when drained."""
        with _lock_for(self._senders):
            value = self._take()
        if value is _NOTHING:
            raise WouldBlock(f"channel {self.name!r} is empty")
        return value

    def close(self) -> None:
        """No more sends; receivers drain what is buffered, then see EndOfChannel.  Idempotent."""
        with _lock_for(self._receivers or self._senders):
            self._closed = True
            while self._receivers:
                peer, receiver = self._receivers.popleft()
                peer.wake(receiver, error=EndOfChannel(f"channel {self.name!r} is closed and drained"))
            while self._senders:
                peer, sender, _ = self._senders.popleft()
                peer.wake(sender, error=ChannelClosed(f"channel {self.name!r} was closed while a send waited"))

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __aiter__(self) -> Channel:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except EndOfChannel:
            raise StopAsyncIteration from None

    def waiting(self, op: str) -> str:
        if op == "receive":
            return f"to receive from channel {self.name!r} (empty)"
        state = f"full, {len(self._items)}/{self.capacity}" if self.capacity else "no receiver waiting"
        return f"to send on channel {self.name!r} ({state})"

    def statistics(self) -> ChannelStatistics:
        return ChannelStatistics(self.name, self.capacity, len(self._items), self._sent, self._received, self._max,
                                 len(self._senders), len(self._receivers), self._closed)

    def __repr__(self) -> str:
        return f"Channel({self.capacity}, name={self.name!r})"


class DepQueue:
    """Dependency tokens: `pop_dep` takes one (blocking while none), `push_dep` gives one back."""

    kind = "token"

    def __init__(self, name: str, credits: int = 0):
        if isinstance(credits, bool) or not isinstance(credits, numbers.Integral) or credits < 0:
            raise PtowspError(f"dependency queue {name!r}: credits must be an integer >= 0, got {credits!r}")
        self.name = name
        self.credits = int(credits)
        self._tokens = self._max = self.credits
        self._waiters: deque[tuple[Engine, Proc]] = deque()
        self._pushes = self._pops = 0

    async def pop_dep(self) -> None:
        """Take a token; blocks while there is none."""
        engine, me = _running(self, "pop")
        with engine.lock:
            if self._tokens:
                self._tokens -= 1
                self._pops += 1
                return
            entry = (engine, me)
            self._waiters.append(entry)
            engine.park(me, self, "pop", self._waiters, entry)
        await park_here()

    def pop_dep_nowait(self) -> None:
        """Take a token that must be there (stages sharing one thread pop in pipeline order);
        WouldBlock, naming the queue, if none is."""
        with _lock_for(self._waiters):
            if not self._tokens:
                raise WouldBlock(f"token queue {self.name!r} popped while empty (a stage ran out of order)")
            self._tokens -= 1
            self._pops += 1

    def push_dep(self, count: int = 1) -> None:
        """Give `count` tokens (straight to the oldest waiters, if any); never blocks."""
        with _lock_for(self._waiters):
            self._pushes += count
            while count and self._waiters:
                peer, waiter = self._waiters.popleft()
                self._pops += 1
                count -= 1
                peer.wake(waiter)
            self._tokens += count
            self._max = max(self._max, self._tokens)

    def waiting(self, op: str) -> str:
        return f"to pop a token from {self.name!r} (0 tokens)"

    def statistics(self) -> DepQueueStatistics:
        return DepQueueStatistics(self.name, self.credits, self._tokens, self._pushes, self._pops, self._max,
                                  len(self._waiters))

    def __repr__(self) -> str:
        return f"DepQueue({self.name!r}, credits={self.credits})"


async def sleep(seconds: float) -> None:
    """Let `seconds` pass on the run's clock (device: the only way time passes)."""
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or not seconds >= 0:
        raise InputError(f"pw.csp.sleep takes a number of seconds >= 0, got {seconds!r}")
    engine, me = _running("pw.csp", "sleep")
    with engine.lock:
        engine.sleep_until(me, engine.now() + float(seconds))
    await park_here()


async def sleep_until(when: float) -> None:
    """Sleep until `when` (seconds since the run started); returns at once if that has passed."""
    engine, me = _running("pw.csp", "sleep_until")
    if when > engine.now():
        with engine.lock:
            engine.sleep_until(me, when)
        await park_here()


@dataclass(frozen=True)
class Process:
    """An async function with its arguments, to run as a named virtual thread."""

    fn: Callable[..., Awaitable[Any]]
    args: tuple[Any, ...] = ()
    name: str | None = None
    role: str | None = None
    pin: int | None = None  # real clock: the thread that runs it (0 is the caller's; modulo the threads there are)


def process(fn: Callable[..., Awaitable[Any]], *args: Any, name: str | None = None,
            role: str | None = None) -> Process:
    """Describe a virtual thread: `run` calls `await fn(*args)`; name and role label its trace row."""
    return Process(fn, args, name, role)


class Results(list):
    """The return values of a run's virtual threads, in the order given, with the run's `trace`."""

    trace: Trace


def now() -> float:
    """Seconds since the current run started, on its clock (0 outside a run)."""
    here = current()
    return 0.0 if here is None else here[0].now()


@contextlib.contextmanager
def span(name: str, *, bytes: int = 0, flops: int = 0) -> Iterator[None]:  # noqa: A002 - the trace's field
    """Record the enclosed work of the current virtual thread as an event of the run's trace."""
    here = current()
    if here is None or not isinstance(getattr(here[0], "trace", None), Trace):
        yield
        return
    engine, proc = here
    start = engine.now()
    try:
        yield
    finally:
        engine.trace.events.append(Event(name, (), proc.index, proc.role, start, engine.now(), bytes, flops))


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
    names = [spec.name or getattr(spec.fn, "__name__", f"thread{k}") for k, spec in enumerate(specs)]
    trace = Trace(clock=clock, title="ptowsp csp")
    trace.workers = [(name, spec.role) for name, spec in zip(names, specs, strict=True)]

    threads = threads_for(len(specs))  # on the device clock: pins are ignored
    engine: DeviceEngine | RealEngine = DeviceEngine(record_waits=True) if clock == "device" else \
        RealEngine(threads, record_waits=True)
    engine.trace = trace  # type: ignore[attr-defined]  # where span() records
    coroutines = _start(specs, names)

    def body() -> Results:
        engine.run([(n, s.role, c, None if s.pin is None else s.pin % threads)
                    for n, s, c in zip(names, specs, coroutines, strict=True)], timeout)
        trace.duration = engine.now()
        trace.waits.extend(Wait(proc.index, on.kind, on.name, start, end) for proc, on, start, end in engine.waits)
        trace.flows.extend(Flow(waker.index, when, woken.index, when, on.kind, on.name)
                           for waker, when, woken, on in engine.flows)
        if engine.failure is not None:
            if engine.timed_out:
                raise RunTimeout(f"the csp run did not finish within {timeout:g} s of its {clock} clock; "
                                 f"still running: {engine.unfinished}")
            if isinstance(engine.failure, RunTimeout):  # the watchdog's stop: host time ran out
                raise RunTimeout(f"{engine.failure} of host time; still running: {engine.unfinished}")
            _explain_foreign_wait(engine.failure, engine.culprit)
            raise engine.failure
        out = Results(p.result for p in engine.procs)
        out.trace = trace
        return out

    def stuck() -> list[str]:
        return [f"virtual thread {p.name!r}" for p in engine.procs if p.state in (RUNNING, WOKEN)]

    return bounded(body, timeout, engine.stop, stuck, "the csp run")


def _explain_foreign_wait(error: BaseException, culprit: str) -> None:
    """trio's sleep and friends fail outside trio's loop with a RuntimeError, its nurseries with an
    AttributeError raised inside trio (no runner): say what to use instead."""
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_globals.get("__name__", ""))
        tb = tb.tb_next
    foreign = ("trio", "asyncio")
    if (isinstance(error, RuntimeError) and any(f.split(".")[0] in foreign for f in frames)) or (
            isinstance(error, AttributeError) and frames and frames[-1].split(".")[0] in foreign):
        raise InputError(f"csp process {culprit!r} called {frames[-1].split('.')[0]}, which pw.csp does not run: "
                         "processes wait with `await pw.csp.sleep(seconds)` and on pw.csp channels and token queues, "
                         f"and pw.csp.run([...]) starts them (no nurseries) ({type(error).__name__}: {error})"
                         ) from error


def _start(specs: list[Process], names: list[str]) -> list[Any]:
    """Each process's coroutine; InputError (closing those made) for a function that is not async."""
    made: list[Any] = []
    for spec, name in zip(specs, names, strict=True):
        call = spec.fn(*spec.args)
        if not inspect.iscoroutine(call):
            for c in made:
                c.close()
            raise InputError(f"csp process {name!r} is not async: calling it returned {type(call).__name__}, "
                             "not an awaitable; define it with `async def`")
        made.append(call)
    return made


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

