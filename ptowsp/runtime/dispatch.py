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

Eligible workers are those whose core class matches the task's (a worker of
class None runs anything).
"""

from __future__ import annotations

import itertools
from collections import Counter
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


def affinity(*key: str) -> Policy:
    """Tasks with the same coordinates on these grid loops always run on the same worker."""
    return Policy("affinity", tuple(key))


class Placer:
    """Per-run state of a policy: `place` picks a worker; `steals` and `lifo` shape taking."""

    steals = False
    lifo = False

    def __init__(self, key: tuple[str, ...] | None = None):
        self.key = key
        self._turn = itertools.count()

    def place(self, inst: Instance, eligible: list[int], maker: int | None, producers: list[int]) -> int:
        """The worker for a ready task; `maker` completed its last producer, `producers` ran each one."""
        return eligible[next(self._turn) % len(eligible)]


class RoundRobin(Placer):
    pass


class WorkStealing(Placer):
    steals = True
    lifo = True

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

    def place(self, inst, eligible, maker, producers):
        counts = Counter(w for w in producers if w in eligible)
        if counts:
            best = max(counts.values())
            if maker in counts and counts[maker] == best:
                return maker
            return next(w for w, c in counts.items() if c == best)
        return super().place(inst, eligible, maker, producers)


_PLACERS = {"round_robin": RoundRobin, "work_stealing": WorkStealing, "affinity": Affinity, "locality": Locality}
POLICIES = tuple(_PLACERS)


def placer(policy: Policy | str) -> Placer:
    """A fresh placer for one run."""
    spec = Policy(policy) if isinstance(policy, str) else policy
    if spec.policy not in _PLACERS:
        raise ValueError(f"unknown dispatch policy {spec.policy!r}; policies are {', '.join(POLICIES)}")
    return _PLACERS[spec.policy](spec.key)
