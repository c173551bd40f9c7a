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

from ptowsp.runtime.report import time_unit

SETTLE_SECONDS = 0.2  # idle time before each block: peers' spinning threads go back to sleep


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
                 min_block: float = 0.0, settle: float = SETTLE_SECONDS) -> list[float]:
    """Median seconds of each function over `rounds` alternating blocks of `repeat` runs
    (more for a fast function: a block runs at least `min_block` seconds).

    Within a block a function runs back to back (its steady state: warm caches,
    the allocator reusing the last run's buffers); blocks alternate, in an order that
    rotates every round, so that a noisy spell on this shared machine hits every side
    alike and no side always follows the same neighbour.  Before each block the machine
    is left idle for `settle` seconds: a peer's thread pool (OpenBLAS, oneDNN, Halide)
    keeps spinning on the cores for a while after its call returns, and would otherwise
    slow whichever block comes next.
    """
    blocks: list[list[float]] = [[] for _ in fns]
    repeats = [max(repeat, math.ceil(min_block / max(median_seconds(fn, 1), 1e-6))) for fn in fns]
    order = list(range(len(fns)))
    for r in range(rounds):
        for k in order[r % len(order):] + order[:r % len(order)]:
            time.sleep(settle)
            blocks[k].append(median_seconds(fns[k], repeats[k]))
    return [statistics.median(b) for b in blocks]


def rotating_blocks(fns: Sequence[Callable[[], object]], rounds: int, runs: int,
                    warmup: int = 1, settle: float = SETTLE_SECONDS) -> list[list[float]]:
    """Every timed run of each function, after `warmup` untimed ones: `rounds` rounds in which each
    function runs a block of `runs` back to back, the order rotating every round so that a noisy
    spell hits every function alike and none always follows the same neighbour, each block after
    `settle` idle seconds (as in side_by_side)."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    times: list[list[float]] = [[] for _ in fns]
    order = list(range(len(fns)))
    for i in range(rounds):
        for k in order[i % len(order):] + order[:i % len(order)]:
            time.sleep(settle)
            for _ in range(runs):
                start = time.perf_counter()
                fns[k]()
                times[k].append(time.perf_counter() - start)
    return times


def readable_seconds(seconds: float) -> str:
    """A duration in the unit a person reads: 2.33 ms, 41.2 µs, 1.5 s (the trace's units)."""
    scale, unit = time_unit(seconds, micro="µs")
    return f"{seconds / scale:.3g} {unit}"
