"""Measuring candidates in a separate process, so a crash or a hang costs one trial, not the search.

A `Runner` keeps one worker process (a fresh interpreter: nothing forked
from a process running threads, and unlike multiprocessing's spawn it
never re-imports the user's main script) that builds a schedule, runs it once against the
reference (a wrong result is a failed trial), then times it.  The workload travels to it with
cloudpickle, so opaque tasks whose functions are lambdas or closures are measured too; one that
cannot travel (a function holding a lock or an open file), or that the worker cannot set up, is a
BuildError before the first trial, not a run of failed trials.  The parent
waits on a pipe with a deadline: past it the worker is killed and the
trial recorded as a timeout; a worker that dies (segfault, abort) is
recorded as a crash.  Either way a fresh worker takes the next trial.
A search hands a runner a batch (`measure_batch`): a Runner measures it one
by one; a DaskRunner (dask_runner.py) all at once on a cluster's workers,
each of which measures with a Runner of its own.

The timing is the target's real clock: the fastest of at least `repeat`
runs and MIN_TIME seconds after the checking run, cut short when runs are
long so a bad candidate costs about `budget` seconds.  The fastest run, not
the median (Halide's benchmark takes the minimum too): a neighbour on a
shared machine only ever adds time, in spells that can cover most of a
block, so the median of a block moves by 10-50% between blocks while its
minimum stays within a few per cent (docs/autoschedule.md, "Measurement").
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Protocol

import cloudpickle
import numpy as np

from ptowsp.autoschedule.records import usable_seconds
from ptowsp.backends import build
from ptowsp.backends.buffers import aligned_copy
from ptowsp.errors import BuildError
from ptowsp.schedules import Schedule
from ptowsp.workloads import OpaqueTask, Workload, matches, random_inputs, reference


@dataclass(frozen=True)
class Measurement:
    seconds: float | None  # fastest run time; None when the trial failed
    error: str | None = None
    elapsed: float = 0.0  # wall time the trial took, build and IPC included

    @property
    def lost(self) -> bool:
        """The measuring process died or hung (see Runner.measure): the machine may be at fault rather
        than the candidate, so a runner with other machines tries it once more elsewhere."""
        return self.error is not None and self.error.startswith(("crash:", "timeout:"))


class Measurer(Protocol):
    """What a search measures with: a `Runner` here, or a `DaskRunner` on a cluster (dask_runner.py)."""

    target: str

    def measure(self, schedule: Schedule) -> Measurement: ...

    def measure_batch(self, schedules: Sequence[Schedule]) -> Iterator[tuple[int, Measurement]]:
        """Each schedule's index and measurement, in the order they complete; each index once."""
        ...

    def close(self) -> None: ...


def one_by_one(measure: Callable[[Schedule], Measurement],
               schedules: Sequence[Schedule]) -> Iterator[tuple[int, Measurement]]:
    """`measure_batch` for a runner that measures one schedule at a time, in order."""
    for n, schedule in enumerate(schedules):
        yield n, measure(schedule)


def arrivals(runner: Measurer, schedules: Sequence[Schedule]) -> Iterator[tuple[int, Measurement, float]]:
    """`runner.measure_batch(schedules)` with the seconds the caller waited for each result: the
    runner's share of the search's wall time (on a cluster, trials overlap: their own times add up
    to more than that)."""
    results = runner.measure_batch(schedules)
    while True:
        start = time.perf_counter()
        item = next(results, None)
        waited = time.perf_counter() - start
        if item is None:
            return
        yield item[0], item[1], waited


MIN_TIME = 0.3  # seconds of timed runs per trial, at least (by default)
MAX_RUNS = 200


def time_program(built, inputs: dict[str, np.ndarray], repeat: int, min_time: float, budget: float) -> float:
    """Seconds of the fastest of at least `repeat` runs and `min_time` of running (so a short program
    gets many tries at an undisturbed run), fewer when runs would exceed `budget`."""
    times: list[float] = []
    begin = time.perf_counter()
    while True:
        start = time.perf_counter()
        built.run(**inputs)
        end = time.perf_counter()
        times.append(end - start)
        enough = len(times) >= repeat and end - begin >= min_time
        if enough or end - begin >= budget or len(times) >= MAX_RUNS:
            return min(times)


STARTUP_GRACE = 30.0  # seconds a fresh worker may take to import ptowsp and compute the reference
Evaluate = Callable[..., float]  # (built, inputs, repeat, min_time, budget) -> seconds
KEPT_WORKLOADS = 16  # workloads a worker keeps set up (inputs, reference): a model's tuning tasks take turns
SETUP, MEASURE = b"S", b"M"  # the two requests: set a workload up, measure one of its schedules


def serve(read_fd: int, write_fd: int) -> None:
    """The worker process.  Requests: SETUP with a workload (answered None, or why it cannot be set
    up), MEASURE with a set-up workload's fingerprint and a schedule's JSON (answered (seconds,
    error)); until the pipe closes."""
    requests, conn = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    ready: dict[str, tuple] = {}  # fingerprint -> (workload, target, workers, timing, evaluate, inputs, expected)
    while True:
        try:
            request = requests.recv_bytes()
        except EOFError:
            return
        kind, payload = request[:1], request[1:]
        if kind == SETUP:
            try:
                # the parent's own pickle of its own workload (cloudpickle output loads with pickle), never a file
                wl, target, workers, timing, evaluate = pickle.loads(payload)  # noqa: S301
                # on a cache line, as a model's weights and intermediates are (a kernel measured on the
                # misaligned arrays numpy allocates split every vector load of its weights: 1.1x slower)
                inputs = {name: aligned_copy(a) for name, a in random_inputs(wl).items()}
                setup = (wl, target, workers, timing, evaluate, inputs, reference(wl, **inputs))
            except Exception as e:  # every trial would fail the same way: the parent raises instead
                conn.send(f"{type(e).__name__}: {e}")
                continue
            ready[wl.fingerprint] = setup
            while len(ready) > KEPT_WORKLOADS:
                ready.pop(next(iter(ready)))
            conn.send(None)
            continue
        fingerprint, text = pickle.loads(payload)  # noqa: S301 (the parent's pickle of two strings)
        wl, target, workers, timing, evaluate, inputs, expected = ready[fingerprint]
        try:
            built = build(Schedule.from_json(wl, text), target, workers=workers)
            out = built.run(**inputs)
            wrong = [name for name, want in expected.items() if not matches(out[name], want)]
            if wrong:
                conn.send((None, f"wrong result: {', '.join(wrong)} differ from the reference"))
                continue
            conn.send((evaluate(built, inputs, *timing), None))
        except Exception as e:  # a failed build or run is a failed trial, with its reason
            conn.send((None, f"{type(e).__name__}: {e}"))


class Runner:
    """Builds and times schedules on one target, one worker process at a time.

    A runner measures a schedule of any workload: the worker sets each workload up once (random
    inputs, the reference's outputs) and keeps the last KEPT_WORKLOADS of them, so a whole-model
    search's tuning tasks share one worker.  `wl` is the first workload, set up before the first
    measurement (None: the first one measured; a cluster's worker makes its Runner so).  `timeout`
    bounds a whole trial (build, check, timing); `evaluate` replaces the timing function (it runs in
    the worker process, sent with cloudpickle like the workload: tests use it to crash or hang on
    purpose).  BuildError here when the workload cannot be sent to the
    worker, and from `measure` when the worker cannot set a workload up.
    """

    def __init__(self, wl: Workload | None, target: str = "cpu", *, workers: int = 2, repeat: int = 5,
                 min_time: float = MIN_TIME, budget: float = 2.0, timeout: float = 60.0,
                 evaluate: Evaluate = time_program):
        self.workload, self.target, self.workers = wl, target, workers
        self.timing = (repeat, min_time, budget)
        self.timeout, self.evaluate = timeout, evaluate
        self._setups: dict[str, bytes] = {}  # fingerprint -> the SETUP request
        self._ready: dict[str, None] = {}  # workloads the worker keeps, oldest first (its own order)
        if wl is not None:
            self._setup(wl)
        self._process: subprocess.Popen | None = None
        self._requests: Connection | None = None
        self._conn: Connection | None = None
        self.restarts = 0

    def _setup(self, wl: Workload) -> bytes:
        if wl.fingerprint not in self._setups:
            self._setups[wl.fingerprint] = SETUP + serialize(
                wl, (wl, self.target, self.workers, self.timing, self.evaluate), self.evaluate)
        return self._setups[wl.fingerprint]

    def _start(self) -> None:
        """A fresh worker; EOFError or OSError when it cannot start."""
        from_parent, to_child = os.pipe()  # (read end, write end)
        from_child, to_parent = os.pipe()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        code = f"from ptowsp.autoschedule.measure import serve; serve({from_parent}, {to_parent})"
        self._process = subprocess.Popen([sys.executable, "-c", code], pass_fds=(from_parent, to_parent),
                                         env=env, stdin=subprocess.DEVNULL)
        os.close(from_parent)
        os.close(to_parent)
        self._requests = Connection(to_child, readable=False)
        self._conn = Connection(from_child, writable=False)
        self._ready = {}

    def _set_up(self, wl: Workload) -> bool:
        """The worker holds `wl` set up; False when setting it up outlasts STARTUP_GRACE.  BuildError
        when it reports that it cannot; EOFError or OSError when it dies first."""
        if wl.fingerprint in self._ready:
            return True
        assert self._conn is not None and self._requests is not None
        self._requests.send_bytes(self._setup(wl))
        if not self._conn.poll(STARTUP_GRACE):
            return False
        failure = self._conn.recv()
        if failure is not None:
            self._stop()
            raise BuildError(f"the measuring process cannot set up workload {wl.name!r} for "
                             f"{self.target!r}: {failure}; every trial would fail the same way")
        self._ready[wl.fingerprint] = None
        while len(self._ready) > KEPT_WORKLOADS:  # the worker forgets the oldest the same way
            self._ready.pop(next(iter(self._ready)))
        return True

    def measure(self, schedule: Schedule) -> Measurement:
        start = time.perf_counter()
        wl = schedule.workload
        try:
            if self._process is None:
                self._start()
            if not self._set_up(wl):
                error = f"timeout: the measuring process did not set up within {STARTUP_GRACE:g} s (it was killed)"
            else:
                assert self._conn is not None and self._requests is not None
                self._requests.send_bytes(MEASURE + pickle.dumps((wl.fingerprint, schedule.to_json())))
                if self._conn.poll(self.timeout):
                    seconds, error = self._conn.recv()
                    if seconds is not None and not usable_seconds(seconds):  # a custom evaluate may return anything
                        seconds, error = None, f"invalid measurement: {seconds!r} s (expected a positive finite number)"
                    seconds = None if seconds is None else float(seconds)
                    return Measurement(seconds, error, time.perf_counter() - start)
                error = f"timeout: no result within {self.timeout:g} s (the worker was killed)"
        except (EOFError, OSError):
            assert self._process is not None
            try:
                code = self._process.wait(5.0)
            except subprocess.TimeoutExpired:
                code = None
            error = f"crash: the measuring process died ({_describe(code)})"
        self._stop()
        self.restarts += 1
        return Measurement(None, error, time.perf_counter() - start)

    def measure_batch(self, schedules: Sequence[Schedule]) -> Iterator[tuple[int, Measurement]]:
        """One by one, in order: one machine, one measurement at a time."""
        return one_by_one(self.measure, schedules)

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
        for conn in (self._requests, self._conn):
            if conn is not None:
                conn.close()
        self._process = self._requests = self._conn = None

    def close(self) -> None:
        self._stop()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def serialize(wl: Workload, setup: object, evaluate: Evaluate) -> bytes:
    """The worker's set-up as bytes (cloudpickle: lambdas and closures travel by value); BuildError
    naming what cannot travel: an opaque task's function, the evaluate function, or the workload."""
    try:
        return cloudpickle.dumps(setup)
    except Exception as e:  # pickling raises PicklingError, TypeError, AttributeError, RecursionError...
        reason = f"{type(e).__name__}: {e}"
    suspects = [(f"opaque task {t.name!r}", t.fn) for t in map(wl.task, wl.tasks) if isinstance(t, OpaqueTask)]
    for what, fn in [*suspects, ("the runner's evaluate", evaluate)]:
        try:
            cloudpickle.dumps(fn)
        except Exception as e:
            reason = (f"the function of {what} ({getattr(fn, '__name__', type(fn).__name__)}) cannot be "
                      f"serialized ({type(e).__name__}: {e}); it must not hold locks, open files, sockets or "
                      "threads (create them inside the call)")
            break
    raise BuildError(f"workload {wl.name!r} cannot be measured out of process: {reason}. The AutoScheduler "
                     "sends the workload to a worker process with cloudpickle")


def _describe(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
