"""Dispatch policies: which worker's ready queue a ready task joins, and who may take it from there.

`pw.dispatch.round_robin`, `work_stealing`, `locality` and `affinity(*loops)`
are plain specifications (a policy name and a key); `Schedule.dispatch`
accepts them as well as the bare names.  Each run makes a fresh `Placer`
from the specification, which the scheduler calls under its lock:

- round_robin: ready tasks go to the eligible workers in turn; a worker takes
  only from its own queue, oldest first.
- work_stealing: a ready task joins the queue of the worker that made it
  ready (so a consumer tile follows its producer); a worker takes its newest
  task first (depth first), and an idle worker steals the oldest task of the
  longest queue it may run.
- affinity(*loops): the task's coordinates on the key loops, as one linear
  index, modulo the eligible workers: the same key always lands on the same
  worker (a cache, a pinned buffer).  Never stolen.  Tasks whose grid lacks a
  key loop fall back to round robin.
- locality: the worker that ran most of the task's producers; idle workers
  steal, so locality is a preference, not a promise.
- heft (StarPU's dmda): the eligible worker with the earliest expected
  finish: the estimated work already placed on it, plus the time to move
  the inputs its producers left on other workers, plus the task's own
  estimate.  Estimates come per kernel (task label) and core class from
  `TaskTimes`: learned from earlier runs on the real clock, the device
  model's compute time on aicore.  Ready queues are ordered by upward rank
  (the estimated critical path from the task to the end of the table), so
  the longest remaining chain starts first.  Idle workers steal, in rank
  order, when estimates were wrong.

Eligible workers are those whose core class matches the task's (a worker of
class None runs anything).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ptowsp.runtime.table import Instance


@dataclass(frozen=True)
class Policy:
    """A dispatch policy by name (and, for affinity, the grid loops it keys on)."""

    policy: str
    key: tuple[str, ...] | None = None

    def __str__(self) -> str:
        return self.policy if self.key is None else f"{self.policy}({', '.join(self.key)})"


round_robin = Policy("round_robin")
work_stealing = Policy("work_stealing")
locality = Policy("locality")
heft = Policy("heft")


def affinity(*key: str) -> Policy:
    """Tasks with the same coordinates on these grid loops always run on the same worker."""
    return Policy("affinity", tuple(key))


class Placer:
    """Per-run state of a policy: `place` picks a worker; `steals`, `lifo` and `ranked` shape taking."""

    steals = False
    lifo = False
    ranked = False  # ready queues ordered by `ranks` (highest first) instead of arrival
    needs_producers = False  # `place` is given the workers that ran the task's producers
    tracks_work = False  # `retired` is called for every finished instance
    native = False  # the native loop (native.py) implements this policy

    def __init__(self, key: tuple[str, ...] | None = None):
        self.key = key
        self._turn = itertools.count()

    def place(self, inst: Instance, eligible: list[int], maker: int | None, producers: list[int]) -> int:
        """The worker for a ready task; `maker` completed its last producer, `producers` ran each one."""
        return eligible[next(self._turn) % len(eligible)]

    def retired(self, inst: Instance) -> None:
        """Instance inst has finished (policies that track expected work let go of it here)."""

    def ranks(self, instances: Sequence[Instance], preds: Sequence[Sequence[int]]) -> list[float]:
        """Priorities of the instances, for a ranked policy."""
        return [0.0] * len(instances)


class RoundRobin(Placer):
    pass


class WorkStealing(Placer):
    steals = True
    lifo = True
    native = True

    def place(self, inst, eligible, maker, producers):
        if maker is not None and maker in eligible:
            return maker
        return super().place(inst, eligible, maker, producers)


class Affinity(Placer):
    def place(self, inst, eligible, maker, producers):
        assert self.key is not None
        if not all(k in inst.grid for k in self.key):
            return super().place(inst, eligible, maker, producers)
        linear = 0
        for k in self.key:
            linear = linear * 1_000_003 + inst.coords[inst.grid.index(k)]
        return eligible[linear % len(eligible)]


class Locality(Placer):
    steals = True
    needs_producers = True

    def place(self, inst, eligible, maker, producers):
        counts = Counter(w for w in producers if w in eligible)
        if counts:
            best = max(counts.values())
            if maker in counts and counts[maker] == best:
                return maker
            return next(w for w, c in counts.items() if c == best)
        return super().place(inst, eligible, maker, producers)


class TaskTimes:
    """Seconds per kernel (task label) and core class: StarPU's history-based performance model.

    `learn` folds a measured duration into a running mean (the newer run weighs a quarter);
    `estimate` answers None for a kernel never seen, which HEFT then costs as the mean of
    those it knows (or one unit when it knows none: it balances task counts)."""

    def __init__(self) -> None:
        self.seconds: dict[tuple[str, str | None], float] = {}

    def learn(self, label: str, core: str | None, seconds: float) -> None:
        key = (label, core)
        before = self.seconds.get(key)
        self.seconds[key] = seconds if before is None else 0.75 * before + 0.25 * seconds

    def estimate(self, label: str, core: str | None) -> float | None:
        return self.seconds.get((label, core))


TRANSFER_BYTES_PER_SECOND = 20e9  # moving a producer's output to another core's caches (a cpu's L3)


class Heft(Placer):
    steals = True
    ranked = True
    needs_producers = True
    tracks_work = True

    def __init__(self, key=None, times: TaskTimes | None = None, workers: Sequence[str | None] = (),
                 bytes_per_second: float = TRANSFER_BYTES_PER_SECOND):
        super().__init__(key)
        self.times = times or TaskTimes()
        self.workers = list(workers)
        self.bytes_per_second = bytes_per_second
        self.queued = [0.0] * len(self.workers)  # estimated seconds placed on each worker, not yet retired
        self.placed: dict[int, tuple[int, float]] = {}  # id(instance) -> (worker, estimate)
        known = list(self.times.seconds.values())
        self.unknown = sum(known) / len(known) if known else 1.0

    def cost(self, inst: Instance, worker: int) -> float:
        seconds = self.times.estimate(inst.label, self.workers[worker] if self.workers else None)
        if seconds is None and self.workers:
            seconds = self.times.estimate(inst.label, None)
        return self.unknown if seconds is None else seconds

    def ranks(self, instances: Sequence[Instance], preds: Sequence[Sequence[int]]) -> list[float]:
        """Upward ranks: an instance's estimate (on the cheapest worker it may use) plus the largest rank
        among its successors.  Table order is a topological order (producers come first)."""
        best = [0.0] * len(instances)
        rank = [0.0] * len(instances)
        for i in reversed(range(len(instances))):
            inst = instances[i]
            mine = [k for k, c in enumerate(self.workers) if c is None or inst.core is None or c == inst.core]
            rank[i] = min(self.cost(inst, k) for k in mine or [0]) + best[i]
            for p in preds[i]:
                if best[p] < rank[i]:
                    best[p] = rank[i]
        return rank

    def place(self, inst, eligible, maker, producers):
        elsewhere = {w: sum(1 for p in producers if p != w) for w in eligible}
        share = inst.bytes / 2 / max(1, len(producers))  # a producer's part of the inputs, roughly
        best = min(eligible, key=lambda w: (self.queued[w] + elsewhere[w] * share / self.bytes_per_second
                                            + self.cost(inst, w), w))
        seconds = self.cost(inst, best)
        self.queued[best] += seconds
        self.placed[id(inst)] = (best, seconds)
        return best

    def retired(self, inst):
        placed = self.placed.pop(id(inst), None)
        if placed is not None:
            self.queued[placed[0]] -= placed[1]


_PLACERS = {"round_robin": RoundRobin, "work_stealing": WorkStealing, "affinity": Affinity, "locality": Locality,
            "heft": Heft}
POLICIES = tuple(_PLACERS)


def placer(policy: Policy | str, times: TaskTimes | None = None, workers: Sequence[str | None] = ()) -> Placer:
    """A fresh placer for one run (heft: with the kernels' time estimates and the workers' core classes)."""
    spec = Policy(policy) if isinstance(policy, str) else policy
    if spec.policy not in _PLACERS:
        raise ValueError(f"unknown dispatch policy {spec.policy!r}; policies are {', '.join(POLICIES)}")
    if spec.policy == "heft":
        return Heft(spec.key, times, workers)
    return _PLACERS[spec.policy](spec.key)
