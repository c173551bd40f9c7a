"""Seeded random *legal* schedules, for conformance fuzzing.

The generator proposes steps at random and keeps those the schedule accepts,
so every result is legal by construction (the schedule's own validation is
the judge) and the same seed always gives the same schedule.
"""

from __future__ import annotations

import random

from ptowsp.errors import ScheduleError
from ptowsp.schedules.loopnest import SERIAL
from ptowsp.schedules.schedule import Schedule
from ptowsp.workloads import Category, Workload


def _factor(rng: random.Random, extent: int) -> int:
    """A split factor: a divisor, a power of two, or any size (often non-dividing)."""
    divisors = [d for d in range(1, min(extent, 64) + 1) if extent % d == 0]
    choice = rng.random()
    if choice < 0.4:
        return rng.choice(divisors)
    if choice < 0.8:
        return 2 ** rng.randint(0, 6)
    return rng.randint(1, max(1, extent + 2))


def _propose(s: Schedule, task: str, rng: random.Random) -> None:
    """Try one random loop step on `task` (raises ScheduleError when it is illegal)."""
    nest = s.nest(task)
    loops = nest.loops
    serial = [lp for lp in loops if lp.annotation == SERIAL]
    kind = rng.choice(["split", "split", "tile", "reorder", "fuse", "vectorize", "unroll", "parallel"])
    if kind == "split" and serial:
        lp = rng.choice(serial)
        s.split(task, lp.name, _factor(rng, lp.extent))
    elif kind == "tile":
        chosen = rng.sample(serial, k=min(len(serial), rng.randint(1, 2)))
        s.tile(task, {lp.name: _factor(rng, lp.extent) for lp in chosen})
    elif kind == "reorder":
        s.reorder(task, *rng.sample(nest.names, k=len(nest.names)))
    elif kind == "fuse" and len(loops) > 1:
        p = rng.randrange(len(loops) - 1)
        s.fuse(task, loops[p].name, loops[p + 1].name)
    elif kind == "vectorize":
        s.vectorize(task, loops[-1].name)
    elif kind == "unroll" and serial:
        s.unroll(task, rng.choice(serial).name)
    elif kind == "parallel":
        s.parallel(task, *nest.names[: rng.randint(1, 2)])


def random_schedule(wl: Workload, seed: int, steps_per_task: int = 4, compute_at: bool = True) -> Schedule:
    """A legal schedule of random loop steps, inlining and (when asked) compute_at choices."""
    rng = random.Random(seed)
    s = wl.schedule()
    computes = [t for t in wl.tasks if wl.category(t) is not Category.OPAQUE]
    for task in computes:
        consumers = list(wl.graph.successors(task))
        try:
            if rng.random() < 0.2:
                s.compute_inline(task)
            elif compute_at and consumers and rng.random() < 0.2:
                consumer = rng.choice(consumers)
                s.compute_at(task, consumer, rng.choice(s.loops(consumer)))
        except ScheduleError:
            pass
    for task in computes:
        if task in s.inlined:
            continue
        for _ in range(rng.randint(0, steps_per_task)):
            try:
                _propose(s, task, rng)
            except ScheduleError:
                pass  # illegal proposal: the schedule is unchanged, try another
    return s
