"""The real clock's worker threads: a pool of pinned OS threads (the AICores) that runs reuse.

Starting an OS thread, or handing work to trio and back, costs more than a
small run: on this 2-core VM a thread wake-up takes 0.05-0.1 ms, `trio.run`
0.27 ms, `trio.to_thread.run_sync` 0.18 ms per call.  So the threads are
started once per process, parked when idle, and lent to one run at a time:

- `threads(n)` lends n idle pool threads (starting more if needed), so a
  task that runs another program from inside a worker gets threads of its
  own; `thread.start(fn)` runs `fn()` there.  A lent thread runs the
  functions it is given one after another, so lending a thread whose last
  function is still returning only queues the next one behind it.
- a lent thread can also *sit* in native code between native runs
  (crew.py): `offer(buffer, w)` seats it and offers it worker w of a
  run, `withdraw()` takes the offer back if it was not claimed; `start`
  sends a sitting thread back to Python first, and so does the
  interpreter's exit (whose teardown frees the native code it runs).
- `pinned()` pins the calling thread (the run's worker 0) to the first CPU
  for the duration of a run (a native run's caller pins itself in native
  code: native.py `lead`); pool thread k is pinned to CPU k+1 (modulo the
  CPUs the process may use).  On this VM unpinned worker threads made the
  same kernels up to 2x slower from run to run (docs/runtime.md).

All pool threads are daemons: an interpreter exit never waits on parked threads.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
from collections.abc import Callable

from ptowsp.runtime.crew import Seat


def _cores() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


class PoolThread:
    """An OS thread that runs the functions it is given, one at a time."""

    def __init__(self, index: int):
        self.index = index
        self.inbox: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.seat = Seat()
        self.thread = threading.Thread(target=self._serve, name=f"ptowsp pool{index}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        cores = _cores()
        if cores:
            os.sched_setaffinity(0, {cores[(self.index + 1) % len(cores)]})
        while True:
            self.inbox.get()()

    def start(self, fn: Callable[[], None]) -> None:
        """Run fn() on this thread (after whatever it runs now); fn handles its own exceptions."""
        self.seat.stand()
        self.inbox.put(fn)

    def offer(self, buffer: int, w: int) -> None:
        """Offer the thread worker w of the native run whose buffer is at `buffer` (crew.py)."""
        self.seat.offer(self.inbox.put, buffer, w)

    def withdraw(self) -> bool:
        """Take the offer back: True if the thread had not claimed it."""
        return self.seat.withdraw()


class Pool:
    def __init__(self) -> None:
        self._idle: list[PoolThread] = []
        self._created = 0
        self._lock = threading.Lock()
        atexit.register(self._stand_all)

    def _stand_all(self) -> None:
        """Every idle thread back to Python before the interpreter frees the native code it may sit in."""
        with self._lock:
            for thread in self._idle:
                thread.seat.stand(wait=True)

    def rouse(self, count: int) -> None:
        """Wake the idle threads the next `threads(count)` lends, if they sit asleep in native code."""
        with self._lock:
            for thread in self._idle[max(0, len(self._idle) - count):]:
                thread.seat.rouse()

    def threads(self, count: int) -> _Lent:
        """Lend `count` idle pool threads (starting more if needed) for the duration of a run:
        `with pool.threads(n) as threads:`."""
        with self._lock:
            lent = [self._idle.pop() for _ in range(min(count, len(self._idle)))]
            while len(lent) < count:
                lent.append(PoolThread(self._created))
                self._created += 1
        return _Lent(self, lent)

    def _give_back(self, lent: list[PoolThread]) -> None:
        with self._lock:
            self._idle.extend(reversed(lent))


class _Lent:
    """Pool threads lent to a run, given back when the `with` block ends (a class, not a generator
    context manager: a run enters it every time, and the generator's machinery cost 1-2 us)."""

    def __init__(self, pool: Pool, threads: list[PoolThread]):
        self.pool, self.lent = pool, threads

    def __enter__(self) -> list[PoolThread]:
        return self.lent

    def __exit__(self, *exc: object) -> None:
        self.pool._give_back(self.lent)


class pinned:  # noqa: N801 - used as a function: `with pinned():`
    """Pin the calling thread to the first CPU it may use, restoring its affinity afterwards
    (nothing to do on a thread bound to one CPU already)."""

    def __enter__(self) -> None:
        self.before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
        if len(self.before) > 1:
            os.sched_setaffinity(0, {min(self.before)})

    def __exit__(self, *exc: object) -> None:
        if len(self.before) > 1:
            os.sched_setaffinity(0, self.before)


_POOL: Pool | None = None
_POOL_LOCK = threading.Lock()


def pool() -> Pool:
    """The process's pool of worker threads, made on first use."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = Pool()
        return _POOL
