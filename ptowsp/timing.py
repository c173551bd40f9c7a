"""Timing side by side: medians of warm runs in alternating blocks.

Shared by `ptowsp bench`, the demo and benchmarks/: on a shared machine a
noisy spell can last seconds, so contenders are never timed one after the
other in one long stretch each.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence

from ptowsp.runtime.trace import time_unit


def median_seconds(fn: Callable[[], object], repeat: int, warmup: int = 1) -> float:
    """Median wall time of `repeat` calls after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def side_by_side(fns: Sequence[Callable[[], object]], repeat: int, rounds: int = 3,
                 min_block: float = 0.0) -> list[float]:
    """Median seconds of each function over `rounds` alternating blocks of `repeat` runs
    (more for a fast function: a block runs at least `min_block` seconds).

    Within a block a function runs back to back (its steady state: warm caches,
    the allocator reusing the last run's buffers); blocks alternate so that a
    noisy spell on this shared machine hits every side alike.
    """
    blocks: list[list[float]] = [[] for _ in fns]
    repeats = [max(repeat, math.ceil(min_block / max(median_seconds(fn, 1), 1e-6))) for fn in fns]
    for _ in range(rounds):
        for fn, n, out in zip(fns, repeats, blocks, strict=True):
            out.append(median_seconds(fn, n))
    return [statistics.median(b) for b in blocks]


def rotating_blocks(fns: Sequence[Callable[[], object]], rounds: int, runs: int,
                    warmup: int = 1) -> list[list[float]]:
    """Every timed run of each function, after `warmup` untimed ones: `rounds` rounds in which each
    function runs a block of `runs` back to back, the order rotating every round so that a noisy
    spell hits every function alike and none always follows the same neighbour."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    times: list[list[float]] = [[] for _ in fns]
    order = list(range(len(fns)))
    for i in range(rounds):
        for k in order[i % len(order):] + order[:i % len(order)]:
            for _ in range(runs):
                start = time.perf_counter()
                fns[k]()
                times[k].append(time.perf_counter() - start)
    return times


def readable_seconds(seconds: float) -> str:
    """A duration in the unit a person reads: 2.33 ms, 41.2 µs, 1.5 s (the trace's units)."""
    scale, unit = time_unit(seconds, micro="µs")
    return f"{seconds / scale:.3g} {unit}"
