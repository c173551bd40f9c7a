"""The scheduler and worker loop compiled to native code, for tables whose every task is a compiled kernel.

Why: the Python executor's scheduler code costs 5-10 us per task, and the
GIL serialises it across workers: a kernel that returns waits for the other
worker's Python (docs/performance.md and its git history).  When every instance of a table is a
compiled kernel with a uniform entry point (a *thunk*: `void thunk(i64*
pointers, i64* arguments)`, emitted by the backend beside each kernel), the
same work-stealing scheduler runs as a loop in native code: the worker
processes of executor.py each call it once, through ctypes, with the GIL
released for the whole run.

The loop is the Python scheduler's `work_stealing` policy on lock-protected
arrays (the table's instances are each made ready once, so a queue is an
array with a head and a tail that never wraps):

- every worker has a ready queue: it takes its newest task (depth first)
  and an idle worker steals the oldest task of another's;
- completing a task decrements its successors' dependency counts
  (atomically); a successor made ready goes to the completing worker's
  queue (it reads what that worker just wrote);
- the task window: instances are admitted in table order, at most
  `window` of them not yet retired.  An instance past the first window
  counts its admission as one more dependency, which the retirement that
  lets it in takes (the r-th admits instance window + r);
- an idle worker spins (`pause`) for 0.2 ms, then yields its core for up to
  2 ms, then polls every 0.1 ms (oversubscribed machines get their cores
  back; OpenMP's active wait, bounded);
- each worker records its tasks' start and end and its idle spans
  (CLOCK_MONOTONIC, the clock of `time.perf_counter` on Linux) into arrays
  the executor turns into the Trace;
- a stop flag (Ctrl-C, a timeout) is checked between tasks, and a call
  given a deadline returns at the first task boundary past it, so the
  caller's thread gets back to Python to see Ctrl-C; where the caller
  watches a word that signals write (stops.signal_word), only if the
  word is nonzero, else the deadline moves on.

The loop is compiled once per process (llvmlite), on first use.
"""

from __future__ import annotations

import ctypes
import sys
import time
from collections.abc import Callable

import numpy as np

from ptowsp.once import once
from ptowsp.runtime.native_ir import (
    COMPLETED, EXITED, IDLE_SINCE, LINE, RECORDED, SIGNALS, SLICE, SLOTS, STOP, TAIL, WAITED,
    compile_ir, loop_ir,
)
from ptowsp.runtime.table import TaskTable

@once
def supported() -> str | None:
    """Why this host cannot run the native loop, or None."""
    if not sys.platform.startswith("linux"):
        return f"the native loop reads CLOCK_MONOTONIC through Linux's clock id, this host is {sys.platform}"
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        return "the native loop stores addresses in 64-bit slots"
    return None


class _Loop:
    """The compiled loop, and the engine that keeps its code alive."""

    def __init__(self) -> None:
        self.engine = compile_ir(lambda triple: loop_ir(x86=triple.startswith(("x86_64", "i686", "i386"))))
        self.address = self.engine.get_function_address("ptowsp_native_worker")
        self.worker = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(self.address)
        self.lead = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)(
            self.engine.get_function_address("ptowsp_native_lead"))
        self.skip = self.engine.get_function_address("ptowsp_skip")


@once
def _loop() -> _Loop:
    return _Loop()


def worker_address() -> int:
    """The address of the compiled `ptowsp_native_worker(state, w, deadline_ns)`, for crew.py's threads."""
    return _loop().address


class NativeTasks:
    """What a backend gives for a native run of one table: per instance the address of its kernel's
    thunk and where its arguments start in `arguments` (a thunk reads its pointer arguments as
    indices into the run's pointer table of `slots` addresses, its integers as they are).  It keeps
    a finished run's buffer, pointer table included, for the next run, so a run allocates nothing
    and rewrites only the addresses that changed (a `Fill`)."""

    def __init__(self, thunks: np.ndarray, offsets: np.ndarray, arguments: np.ndarray, slots: int):
        self.thunks, self.offsets, self.arguments, self.slots = thunks, offsets, arguments, max(1, slots)
        self._kept: dict[tuple[int, int], _Buffer] = {}  # per worker count and window

    def acquire(self, table: TaskTable, workers: int, window: int) -> _Buffer:
        """A buffer set for a run's start (the instances the table's run skips calling the empty
        thunk): the kept one, unless a run holds it (then a new one)."""
        key = (workers, window)
        buffer = self._kept.pop(key, None) or _Buffer(table, self, workers, window)  # pop: atomic under the GIL
        buffer.reset(table.skipped, _loop().skip)
        return buffer

    def release(self, buffer: _Buffer) -> None:
        self._kept[buffer.workers, buffer.window] = buffer


# fill(table, filled): write a run's addresses into the pointer table of its buffer, where `filled`
# (a dict kept with the buffer, empty when the buffer is new) remembers what earlier runs wrote there
Fill = Callable[[np.ndarray, dict], None]


_META_AT = -(-SLOTS // LINE) * LINE  # the workers' lines start on a cache line of their own


class _Buffer:
    """The int64 buffer the loop reads and writes: the state slots, a line per worker, the
    dependency counts, the queues, the task records, the idle spans and the pointer table; and its
    head as every run starts (the queues hold the instances of the first window ready at the start,
    dealt round robin as the Python scheduler deals them).  A run resets the head and rewrites what changed in the
    pointer table, which lies past the head."""

    def __init__(self, table: TaskTable, tasks: NativeTasks, workers: int, window: int):
        n = len(table)
        starts, successors, counts = table.successor_arrays
        remaining_at = _META_AT + workers * LINE
        queues_at = remaining_at + n
        self.records_at = queues_at + workers * n
        self.waits_at = self.records_at + workers * n * 3
        thunks_at = self.waits_at + workers * (n + 1) * 2
        pointers_at = self.pointers_at = thunks_at + n
        self.array = np.zeros(pointers_at + tasks.slots, np.int64)
        base = self.array.ctypes.data
        # what each instance calls in this run: its kernel's thunk, or the loop's empty one for an
        # instance the run skips (outside the kept head, rewritten only when the mask changes)
        self.thunks = self.array[thunks_at:pointers_at]
        self.thunks[:] = tasks.thunks
        self.masked = False
        self.pointers = self.array[pointers_at:]  # the run's pointer table: outside the head, kept between runs
        self.filled: dict = {}  # what the runs' Fill wrote into it
        head = self.head = np.zeros(queues_at + workers * n, np.int64)
        head[:SLOTS] = [n, workers, 0, 0, base + 8 * thunks_at, tasks.offsets.ctypes.data,
                        tasks.arguments.ctypes.data, base + 8 * pointers_at, starts.ctypes.data, successors.ctypes.data,
                        base + 8 * remaining_at, base + 8 * queues_at, base + 8 * _META_AT,
                        base + 8 * self.records_at, base + 8 * self.waits_at, 0, window, 0, 0]
        meta = head[_META_AT:remaining_at].reshape(workers, LINE)
        meta[:, IDLE_SINCE] = -1
        head[remaining_at:queues_at] = counts
        head[remaining_at + window:queues_at] += 1  # admitted later, when retirements make room
        ready = np.flatnonzero(head[remaining_at:queues_at] == 0)
        for w in range(workers):
            mine = ready[w::workers]
            head[queues_at + w * n:queues_at + w * n + len(mine)] = mine
            meta[w, TAIL] = len(mine)
        self.state = self.array[:SLOTS]
        self.n, self.workers, self.window, self.address = n, workers, window, base
        self._thunks = tasks.thunks
        self._keep = (tasks.offsets, tasks.arguments, starts, successors)  # what the loop reads

    def reset(self, skipped: np.ndarray | None, skip: int) -> None:
        """The head as every run starts, and the run's thunks: `skip` (the empty thunk's address) for
        the instances `skipped` marks."""
        self.array[:len(self.head)] = self.head
        if skipped is not None:
            np.copyto(self.thunks, self._thunks)
            self.thunks[skipped] = skip
        elif self.masked:
            np.copyto(self.thunks, self._thunks)
        self.masked = skipped is not None


class NativeRun:
    """One run of a table on the native loop."""

    def __init__(self, table: TaskTable, tasks: NativeTasks, fill: Fill, workers: int, window: int):
        self.tasks = tasks
        self.buffer = buffer = tasks.acquire(table, workers, window)
        fill(buffer.pointers, buffer.filled)
        self.workers = workers
        loop = _loop()
        self._worker, self._lead = loop.worker, loop.lead

    def work(self, w: int, deadline_ns: int = 0) -> bool:
        """Worker w runs tasks (GIL released) until the table is done or stopped (False), or until
        a task ends past `deadline_ns` on the monotonic clock (True: call again)."""
        return bool(self._worker(self.buffer.address, w, deadline_ns))

    def lead(self, deadline_ns: int) -> bool:
        """work(0, deadline_ns) with the calling thread pinned to the first CPU it may use meanwhile
        (its affinity given back before this returns): worker 0 beside helper threads."""
        return bool(self._lead(self.buffer.address, deadline_ns))

    def watch(self, address: int, slice_ns: int) -> None:
        """Past a deadline, worker 0's loop comes back only if the int64 at `address` is nonzero (a
        signal arrived: stops.SignalWord); else its next deadline is `slice_ns` later."""
        self.buffer.state[SIGNALS], self.buffer.state[SLICE] = address, slice_ns

    def stop(self) -> None:
        """Workers stop at their next task boundary."""
        self.buffer.state[STOP] = 1

    def wait_exited(self, helpers: int) -> None:
        """Until `helpers` threads (crew.py's, which count themselves out) have left the loop: they
        see the table done or stopped within a task, so this spins, then sleeps in short naps."""
        state, spun = self.buffer.state, 0
        while state[EXITED] < helpers:
            spun += 1
            if spun > 1000:
                time.sleep(1e-5)

    def release(self) -> None:
        """The run is over (no worker is in the loop): its buffer serves the next run."""
        self.tasks.release(self.buffer)

    @property
    def completed(self) -> int:
        return int(self.buffer.state[COMPLETED])

    def records(self) -> Records:
        """Every worker's task records and idle spans, copied out of the run's buffer in one piece
        (the next run reuses the buffer)."""
        b = self.buffer
        return Records(b.n, b.workers, b.array[_META_AT:b.pointers_at].copy(), b.records_at - _META_AT,
                       b.waits_at - _META_AT)


class Records:
    """The records of a finished native run (NativeRun.records): a copy of the buffer from the
    workers' lines to the idle spans, read per worker when its trace is made."""

    def __init__(self, n: int, workers: int, region: np.ndarray, records_at: int, waits_at: int):
        self.n, self.workers, self.region = n, workers, region
        self.records_at, self.waits_at = records_at, waits_at

    def runs(self, w: int) -> np.ndarray:
        """Worker w's tasks: rows of (instance, start ns, end ns)."""
        at = self.records_at + w * self.n * 3
        return self.region[at:at + int(self.region[w * LINE + RECORDED]) * 3].reshape(-1, 3)

    def idle(self, w: int) -> np.ndarray:
        """Worker w's idle spans: rows of (start ns, end ns)."""
        at = self.waits_at + w * (self.n + 1) * 2
        return self.region[at:at + int(self.region[w * LINE + WAITED]) * 2].reshape(-1, 2)
