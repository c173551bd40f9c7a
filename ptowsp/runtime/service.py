"""The real clock's threads: one trio loop (the AICPU) and a pool of worker threads (the AICores).

Starting trio and handing work to OS threads costs more than a small run
(on this 2-core VM: `trio.run` about 0.27 ms, `trio.to_thread.run_sync` about
0.18 ms per call, any thread wake-up 0.05-0.1 ms), so both are started once
per process, parked when idle, and reused:

- `Service.call(async_fn)` runs a coroutine as a job in the loop thread's
  nursery and blocks the caller until it finishes, returning its result or
  raising its exception.  Ctrl-C in the caller cancels the job, waits for it
  to unwind (so no virtual thread outlives the call), then propagates.
- `Service.threads(n)` lends n idle pool threads to one run (a task that
  runs another program from inside a worker gets threads of its own), and
  `await thread.run(fn)` runs `fn()` there without blocking the loop; the
  wait is shielded from cancellation, so a job never returns while its
  thread still runs (callers stop the thread's work by a flag it polls).

Pool thread k is pinned to the k-th CPU the process may use: a worker is a
core, and on this VM unpinned worker threads made the same kernels up to 2x
slower from run to run (docs/runtime.md).  All these threads are daemons:
an interpreter exit never waits on parked threads.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import queue
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import trio


SIGNAL_POLL_SECONDS = 0.05


class PoolThread:
    """An OS thread that runs the functions put in its inbox, one at a time."""

    def __init__(self, index: int, token: trio.lowlevel.TrioToken):
        self.index = index
        self.token = token
        self.inbox: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=f"ptowsp pool{index}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        if hasattr(os, "sched_setaffinity"):
            cores = sorted(os.sched_getaffinity(0))
            os.sched_setaffinity(0, {cores[self.index % len(cores)]})  # one worker per core
        while True:
            self.inbox.get()()

    async def run(self, fn: Callable[[], None]) -> None:
        """Run fn() on this thread; returns when it has (exceptions are fn's to handle)."""
        done = trio.Event()
        token = self.token

        def call() -> None:
            try:
                fn()
            finally:
                token.run_sync_soon(done.set)

        self.inbox.put(call)
        with trio.CancelScope(shield=True):
            await done.wait()


class Service:
    def __init__(self) -> None:
        started = threading.Event()
        self._idle: list[PoolThread] = []
        self._created = 0
        self._pool_lock = threading.Lock()

        async def serve() -> None:
            self.token = trio.lowlevel.current_trio_token()
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                started.set()
                await trio.sleep_forever()

        self.thread = threading.Thread(target=trio.run, args=(serve,), name="ptowsp runtime", daemon=True)
        self.thread.start()
        started.wait()

    def call(self, job: Callable[[], Awaitable[Any]]) -> Any:
        """Run `await job()` on the loop thread; its result, or its exception re-raised here."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        scope = trio.CancelScope()

        async def wrapper() -> None:
            try:
                with scope:
                    result = await job()
                    future.set_result(result)
                    return
                future.set_exception(KeyboardInterrupt())  # cancelled from `call` below
            except BaseException as e:  # noqa: BLE001 - every outcome goes back to the caller
                future.set_exception(e)

        self.token.run_sync_soon(self.nursery.start_soon, wrapper)
        try:
            # short waits: Python runs signal handlers (Ctrl-C) only between them
            while not concurrent.futures.wait([future], timeout=SIGNAL_POLL_SECONDS).done:
                pass
            return future.result()
        except KeyboardInterrupt:
            if not future.done():  # Ctrl-C arrived here, in the caller: cancel the job and let it unwind
                self.token.run_sync_soon(scope.cancel)
                concurrent.futures.wait([future])
            raise

    @contextlib.contextmanager
    def threads(self, count: int) -> Iterator[list[PoolThread]]:
        """Lend `count` idle pool threads (starting more if needed) for the duration of a run."""
        with self._pool_lock:
            lent = [self._idle.pop() for _ in range(min(count, len(self._idle)))]
            while len(lent) < count:
                lent.append(PoolThread(self._created, self.token))
                self._created += 1
        try:
            yield lent
        finally:
            with self._pool_lock:
                self._idle.extend(reversed(lent))


_SERVICE: Service | None = None
_SERVICE_LOCK = threading.Lock()


def service() -> Service:
    """The process's runtime service, started on first use."""
    global _SERVICE
    with _SERVICE_LOCK:
        if _SERVICE is None:
            _SERVICE = Service()
        return _SERVICE
