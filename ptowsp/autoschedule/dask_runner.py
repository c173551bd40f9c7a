"""Measuring candidates on a dask.distributed cluster: the search stays here, the trials go out.

    client (the search)          scheduler                 workers (one trial at a time each)
    cost model, annealing  ──►   places each trial   ──►   a measure.Runner of their own, kept:
    measure_batch, the log  ◄──  on a worker with the  ◄── set the workload up once, build,
    (results as they come)       resources asked           check against the reference, time

`DaskRunner` is a `measure.Runner` for a cluster: a batch is submitted at once and its results are
yielded as they complete (as `distributed.as_completed` would, from the futures' done callbacks).
The tuner logs each as it arrives and learns from the batch in its own order, so a search makes the
same choices on a cluster as on one machine.  On the worker, each trial runs in the
worker's own `Runner`, kept between trials, so a candidate that crashes or hangs costs a fresh
measuring process and one trial, as on one machine, and the dask worker itself lives on.  A
trial whose measuring process died or hung, or whose dask worker died (the scheduler first moves
it by itself), is tried once more on another worker; a second failure is recorded.

`distributed` is an optional dependency (`pip install 'ptowsp[distributed]'`), imported when a
DaskRunner is made, never by `import ptowsp`.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from ptowsp.autoschedule.measure import (
    KEPT_WORKLOADS,
    MIN_TIME,
    Evaluate,
    Measurement,
    Runner,
    serialize,
    time_program,
)
from ptowsp.errors import BuildError, InputError, PtowspError
from ptowsp.schedules import Schedule
from ptowsp.workloads import Workload

INSTALL = "pip install 'ptowsp[distributed]'"
CONNECT_GRACE = 2.0  # seconds past connect_timeout that making a client may take before it counts as hung
CHECK_EVERY = 5.0  # seconds between looks for retries whose workers have all left, while none completes
SCATTER_GRACE = 10.0  # seconds past twice the try's timeout a workload's scatter may take before a worker is
# looked for that holds it (a frozen one)
SILENT_BEATS = 20  # heartbeats a worker may miss (at the scheduler's rate for the cluster's size) before it is
SILENT_FLOOR = 10.0  # ... counted as frozen, and at least this many seconds: its tries are moved to the others
KEPT_RUNNERS = 4  # measuring set-ups (target, timing, evaluate) a worker keeps, each with its process


@dataclass(frozen=True)
class ClusterStatistics:
    """What a DaskRunner has done so far (`DaskRunner.statistics()`)."""

    trials: int  # measurements handed back (each schedule of each batch once)
    attempts: int  # tries submitted: trials plus retries
    retried: int  # trials tried a second time on another worker
    failed_twice: int  # of those, failed again: recorded as failed
    by_worker: dict[str, int] = field(default_factory=dict)  # worker address -> attempts it answered
    worker_seconds: float = 0.0  # trial time on the workers (set-up, build, check, timing)
    turnaround_seconds: float = 0.0  # submit to result, summed: worker time plus queueing and transfer


@dataclass(frozen=True)
class _Try:
    """One submitted try of a batch's schedule."""

    index: int  # the schedule's place in the batch
    submitted: float  # perf_counter when it was submitted
    first: str | None = None  # a retry: why the first try was lost
    allowed: tuple[str, ...] = ()  # a retry: the workers it may run on (all but the one that failed)


class DaskRunner:
    """Builds and times schedules on the workers of a dask cluster; the search stays on the client.

    `client_or_address`: a scheduler address ("tcp://scheduler:8786"), a `distributed.Client` (left
    open on close) or a cluster object (LocalCluster).  `resources`: dask resources a worker must
    offer to take this search's trials, e.g. {"cpu-avx512": 1} for workers started with `dask worker
    ADDRESS --resources "cpu-avx512=1"`: tag workers by target and a search uses only its own.
    `workers`: threads each measured program runs with (None: one per core of the machine measuring
    it; give the search the same number, `search(..., workers=)`, so it plans for it).  `repeat`,
    `min_time`, `budget`, `timeout` and `evaluate` mean what they mean for `Runner`; `evaluate`
    travels to the workers with cloudpickle.  `wait_for_workers`: seconds a batch waits for a worker
    with the resources to join before BuildError.

    BuildError when `distributed` is missing, the scheduler cannot be reached, no worker offers the
    resources, or a worker cannot set a workload up (every trial would fail the same way).
    """

    def __init__(self, client_or_address: Any, resources: Mapping[str, float] | None = None, *,
                 target: str = "cpu", workers: int | None = None, repeat: int = 5, min_time: float = MIN_TIME,
                 budget: float = 2.0, timeout: float = 60.0, evaluate: Evaluate = time_program,
                 connect_timeout: float = 30.0, wait_for_workers: float = 10.0):
        distributed = _distributed()
        self.target, self.workers, self.timeout = target, workers, timeout
        self.resources = dict(resources) if resources else None
        self.wait_for_workers, self._evaluate = wait_for_workers, evaluate
        setup = {"target": target, "workers": workers, "repeat": repeat, "min_time": min_time, "budget": budget,
                 "timeout": timeout, "evaluate": evaluate}
        try:  # what the workers make their Runner from: sent with every trial (a few hundred bytes)
            self._config = cloudpickle.dumps(setup)
        except Exception as e:  # pickling raises PicklingError, TypeError, AttributeError, ...
            raise BuildError(f"the DaskRunner's evaluate function {getattr(evaluate, '__name__', evaluate)!r} "
                             f"cannot be sent to the workers: {type(e).__name__}: {e}") from None
        self._config_key = _digest(self._config)
        self.client, self._own_client = _client(distributed, client_or_address, connect_timeout)
        self.address = self.client.scheduler_info()["address"]
        self._payloads: dict[str, tuple[str, Any]] = {}  # fingerprint -> (key, the scattered pickle's future)
        self._attempts = self._retried = self._failed_twice = self._trials = 0
        self._by_worker: Counter[str] = Counter()
        self._worker_seconds = self._turnaround = 0.0
        self._stalled: set[str] = set()  # workers found frozen: no new tries go to them
        self._heard: dict[str, tuple[float, float]] = {}  # worker -> (its last heartbeat, when that changed here)
        self._heartbeat = _distributed().scheduler.heartbeat_interval  # seconds between a worker's heartbeats

    # -- measuring ------------------------------------------------------------------------------------
    def measure(self, schedule: Schedule) -> Measurement:
        return next(self.measure_batch([schedule]))[1]

    def measure_batch(self, schedules: Sequence[Schedule]) -> Iterator[tuple[int, Measurement]]:
        """Submit every schedule at once; yield (index, measurement) as results complete.  A lost try
        (its measuring process or its worker died, or it hung) is submitted once more, to the other
        workers with the resources; if all of those leave before it runs, to any of them again.  A lost
        scheduler is a BuildError (the log the search writes keeps every result so far)."""
        try:
            yield from self._measure_batch(schedules)
        except (OSError, TimeoutError) as e:  # distributed's lost connections and waits
            raise self._lost(f"{type(e).__name__}: {e}") from None

    def _lost(self, why: str) -> BuildError:
        return BuildError(f"the dask scheduler at {self.address} is gone ({why}); the search's log keeps every "
                          "result so far: start the cluster again and search with the same log_file to resume")

    def _measure_batch(self, schedules: Sequence[Schedule]) -> Iterator[tuple[int, Measurement]]:
        if not schedules:
            return
        self._matching()  # fail now, not hang, when no worker may take the trials
        arrived: queue.Queue = queue.Queue()  # futures, as they complete (their done callbacks)
        tries: dict[Any, _Try] = {}

        def submit(n: int, first: str | None = None, avoid: str | None = None) -> None:
            allowed = tuple(w for w in self._matching() if w != avoid) if avoid else ()
            future = self._submit(schedules[n], allowed)
            tries[future] = _Try(n, time.perf_counter(), first, allowed)
            future.add_done_callback(arrived.put)

        for n in range(len(schedules)):
            submit(n)
        checked = time.monotonic()
        while tries:
            # not distributed.as_completed: its iterator wakes for results only, and a retry bound to
            # workers that have all left, or a try on a frozen worker, would wait for ever
            try:
                future = arrived.get(timeout=CHECK_EVERY)
            except queue.Empty:
                future = None
            if time.monotonic() - checked >= CHECK_EVERY:
                checked = time.monotonic()
                for stuck in self._stranded(tries) + self._on_silent_workers(tries):
                    moved = tries.pop(stuck)
                    stuck.cancel()
                    submit(moved.index, moved.first)
            done = tries.pop(future, None) if future is not None else None
            if done is None:
                continue  # nothing arrived, or a try that was moved: cancelled and submitted again
            self._turnaround += time.perf_counter() - done.submitted
            m, worker = self._outcome(future)
            if (m is None or m.lost) and done.first is None:  # the machine may be at fault: once more, elsewhere
                self._retried += 1
                submit(done.index, m.error if m is not None else _failure(future), avoid=worker)
                continue
            if m is None:
                m = Measurement(None, _failure(future))
            if done.first is not None and m.seconds is None:
                self._failed_twice += 1
                m = Measurement(None, f"{m.error} (on a second worker; the first try: {done.first})", m.elapsed)
            self._trials += 1
            yield done.index, m

    def _submit(self, schedule: Schedule, allowed: tuple[str, ...]) -> Any:
        """One try of a schedule, on the `allowed` workers when given."""
        key, payload = self._payload(schedule.workload)
        self._attempts += 1
        if not allowed and self._stalled:
            allowed = tuple(self._responsive())
        return self.client.submit(_trial, self._config_key, self._config, key, payload, schedule.to_json(),
                                  key=f"ptowsp-trial-{uuid.uuid4().hex}", resources=self.resources,
                                  workers=list(allowed) or None, pure=False)

    def _responsive(self) -> list[str]:
        """The matching workers but those found frozen (they may come back; the scheduler keeps them)."""
        return [w for w in self._matching() if w not in self._stalled] or self._matching()

    def _deadline(self) -> float:
        """Seconds a workload's scatter may take before the workers are asked to answer: one try's
        `timeout`, as much again, and SCATTER_GRACE."""
        return 2 * self.timeout + SCATTER_GRACE

    def _stranded(self, tries: dict[Any, _Try]) -> list[Any]:
        """Retries bound to workers none of which is in the cluster any more."""
        bound = [f for f, t in tries.items() if t.allowed]
        if not bound:
            return []
        present = set(self._matching())
        return [f for f in bound if present.isdisjoint(tries[f].allowed)]

    def _on_silent_workers(self, tries: dict[Any, _Try]) -> list[Any]:
        """Tries on workers that stopped sending heartbeats or did not answer (frozen: the scheduler would
        drop them only after minutes, its worker-ttl), which are set aside until they are heard again."""
        workers = self.client.scheduler_info().get("workers", {})
        now, silent = time.monotonic(), set()
        quiet = max(SILENT_FLOOR, SILENT_BEATS * self._heartbeat(len(workers)))
        for address, info in workers.items():
            beat = info.get("last_seen")
            heard = self._heard.get(address)
            if heard is None or heard[0] != beat:
                self._heard[address] = (beat, now)
                if heard is not None:
                    self._stalled.discard(address)  # heard again: it answers
            elif now - heard[1] >= quiet:
                silent.add(address)
        if silent - self._stalled:
            self._stalled |= silent
            self._forget_held_only_by(self._stalled)
        answering = {a for a, info in workers.items() if _offers(info.get("resources") or {}, self.resources)}
        if not self._stalled or not answering - self._stalled:
            return []  # (all silent, a loaded machine's late heartbeats as likely: nowhere better to go)
        # every look, not only when a worker falls silent: a try submitted before (to any worker) may be
        # handed to the frozen one when the scheduler sees its slot free, once the try it held is cancelled
        keys = {key for held in self.client.processing(workers=sorted(self._stalled)).values() for key in held}
        return [f for f in tries if f.key in keys]

    def _forget_held_only_by(self, workers: set[str]) -> None:
        """Drop the scattered workloads that only `workers` hold (the scheduler keeps one copy of data no
        task waits for), so that the next try scatters them again to the others."""
        scattered = {fingerprint: p for fingerprint, (_, p) in self._payloads.items() if not isinstance(p, bytes)}
        holders = self.client.who_has(list(scattered.values()))
        for fingerprint, payload in scattered.items():
            if set(holders.get(payload.key, ())) <= workers:
                del self._payloads[fingerprint]
                payload.release()

    def _outcome(self, future: Any) -> tuple[Measurement | None, str | None]:
        """The try's measurement and the worker that made it; (None, None) when the try itself was lost
        (its worker died, the future was cancelled).  A ptowsp error from the worker is raised here."""
        if future.status != "finished":
            error = future.exception() if future.status == "error" else None
            if isinstance(error, PtowspError):
                raise error
            return None, None
        seconds, error, worker, elapsed = future.result()
        self._by_worker[worker] += 1
        self._worker_seconds += elapsed
        return Measurement(seconds, error, elapsed), worker

    def _payload(self, wl: Workload) -> tuple[str, Any]:
        """The workload's pickle, scattered to the workers once (each keeps it set up); scattered again
        when every worker holding it has gone.  BuildError naming what cannot travel."""
        known = self._payloads.get(wl.fingerprint)
        if known is None or not isinstance(known[1], bytes) and known[1].status != "finished":
            data = serialize(wl, wl, self._evaluate)
            known = (_digest(data), self._scatter(data))
            self._payloads[wl.fingerprint] = known
        return known

    def _scatter(self, data: bytes) -> Any:
        """`data` on every worker, once (a future of it), or, when that takes longer than `_deadline` (a
        frozen worker holds a scatter to it for ever), the data itself, sent with each try: each worker is
        then asked to answer, and those that do not are set aside."""
        workers = self._responsive()
        # a fresh key, not one hashed from the data: a copy scattered before may still be known to the
        # scheduler on a worker that froze, and the new one would only be pointed at it
        done, future = _bounded(lambda: self.client.scatter(data, workers=workers, broadcast=True, hash=False),
                                self._deadline())
        if done:
            return future
        for worker in workers:
            if not _bounded(lambda w=worker: self.client.run(os.getpid, workers=[w]), SCATTER_GRACE)[0]:
                self._stalled.add(worker)
        return data

    def _matching(self) -> list[str]:
        """Addresses of the workers offering `resources`, waiting up to `wait_for_workers` for one."""
        deadline = time.monotonic() + self.wait_for_workers
        while True:
            if self.client.status != "running":
                raise self._lost(f"the client is {self.client.status}")
            workers = self.client.scheduler_info().get("workers", {})
            found = [a for a, w in workers.items() if _offers(w.get("resources") or {}, self.resources)]
            if found or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        if not found:
            offered = sorted({name for w in workers.values() for name in (w.get("resources") or {})})
            raise BuildError(f"no worker of the dask cluster at {self.address} offers the "
                             f"resources {self.resources} (it has {len(workers)} workers; resources offered: "
                             f"{', '.join(offered) or 'none'}); start one with `dask worker ADDRESS --resources "
                             f"\"NAME=1\"`")
        return found

    # -- reporting and closing ------------------------------------------------------------------------
    def statistics(self) -> ClusterStatistics:
        return ClusterStatistics(self._trials, self._attempts, self._retried, self._failed_twice,
                                 dict(self._by_worker), self._worker_seconds, self._turnaround)

    def close(self) -> None:
        """Release the scattered workloads; close the client if this runner made it."""
        for _, payload in self._payloads.values():
            if not isinstance(payload, bytes):  # (the data itself where a scatter could not be made)
                payload.release()
        self._payloads.clear()
        if self._own_client:
            self.client.close()

    def __enter__(self) -> DaskRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DaskRunner({self.address!r}, resources={self.resources}, target={self.target!r})"


# -- the client's side ----------------------------------------------------------------------------------
def _distributed():
    try:
        import distributed
    except ImportError:
        raise BuildError(f"DaskRunner needs the dask.distributed package: {INSTALL}") from None
    return distributed


def _client(distributed, given: Any, connect_timeout: float) -> tuple[Any, bool]:
    """A client for `given` (an address, a Client, or a cluster), and whether this runner owns it."""
    if isinstance(given, distributed.Client):
        return given, False
    if not isinstance(given, (str, distributed.deploy.Cluster)):
        raise BuildError(f"DaskRunner takes a scheduler address ('tcp://host:8786'), a distributed.Client or a "
                         f"cluster, got {type(given).__name__} {given!r:.60}")
    try:
        return _connected(distributed, given, connect_timeout), True
    except ValueError as e:  # distributed's parse of the address
        raise InputError(f"dask scheduler address {given!r} does not parse ({e}); expected 'tcp://host:port'") from None
    except (OSError, TimeoutError) as e:
        raise BuildError(f"cannot reach the dask scheduler at {given!r} within {connect_timeout:g} s ({e}); "
                         "start one with `dask scheduler` and workers with `dask worker ADDRESS`") from None


def _connected(distributed, given: Any, timeout: float) -> Any:
    """distributed.Client(given), waited for `timeout` (and CONNECT_GRACE) at most: a peer that accepts the
    connection but never answers the handshake holds distributed's own wait for ever."""
    done, client = _bounded(lambda: distributed.Client(given, timeout=timeout, set_as_default=False),
                            timeout + CONNECT_GRACE)
    if not done:
        raise TimeoutError(f"the address accepted a connection but nothing answered as a dask scheduler in "
                           f"{timeout + CONNECT_GRACE:g} s")
    return client


def _bounded(call: Callable[[], Any], seconds: float) -> tuple[bool, Any]:
    """(True, call()) when `call` returns within `seconds` (raising what it raises), else (False, None),
    the call left running in a daemon thread (a distributed call to a frozen worker never returns)."""
    made: list = []

    def run() -> None:
        try:
            made.append((True, call()))
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            made.append((False, e))

    thread = threading.Thread(target=run, name="ptowsp-dask-call", daemon=True)
    thread.start()
    thread.join(seconds)
    if not made:
        return False, None
    ok, value = made[0]
    if not ok:
        raise value
    return True, value


def _offers(offered: Mapping[str, float], asked: Mapping[str, float] | None) -> bool:
    return all(offered.get(name, 0) >= amount for name, amount in (asked or {}).items())


def _failure(future: Any) -> str:
    """Why a try was lost (not the candidate's doing): its worker died, or it was cancelled."""
    if future.status == "error":
        error = future.exception()
        return f"lost: {type(error).__name__}: {error}"
    return f"lost: the trial was {future.status} on the cluster"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:24]


# -- the worker's side --------------------------------------------------------------------------------------
_lock = threading.Lock()  # one measurement at a time on a worker, whatever its thread count
_runners: OrderedDict[str, Runner] = OrderedDict()  # config key -> this worker's measuring Runner
_workloads: OrderedDict[str, Workload] = OrderedDict()  # payload key -> the workload, unpickled once


def _trial(config_key: str, config: bytes, key: str, payload: bytes, text: str) -> tuple:
    """A dask task on a worker: measure one schedule with the worker's Runner for this configuration
    (made on first use and kept, as is each workload).  (seconds, error, worker address, elapsed)."""
    from distributed import get_worker

    with _lock:
        runner = _kept(_runners, config_key, lambda: _runner(config), KEPT_RUNNERS)
        # both pickles are the client's own, sent through the cluster, never a file
        wl = _kept(_workloads, key, lambda: cloudpickle.loads(payload), KEPT_WORKLOADS)
        m = runner.measure(Schedule.from_json(wl, text))
    return m.seconds, m.error, get_worker().address, m.elapsed


def _runner(config: bytes) -> Runner:
    options = cloudpickle.loads(config)
    target, workers = options.pop("target"), options.pop("workers") or os.cpu_count() or 1
    return Runner(None, target, workers=workers, **options)


def _kept(cache: OrderedDict, key: str, make: Callable[[], Any], limit: int) -> Any:
    """`cache[key]`, made on first use; the least recently used beyond `limit` are dropped (a Runner
    closed)."""
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    cache[key] = made = make()
    while len(cache) > limit:
        _, old = cache.popitem(last=False)
        if isinstance(old, Runner):
            old.close()
    return made
