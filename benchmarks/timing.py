"""Timing shared by the benchmarks: medians of repeated runs after a warm-up."""

from __future__ import annotations

import statistics
import time


def median_seconds(fn, repeat: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)



def side_by_side(fns, repeat: int, rounds: int = 3) -> list[float]:
    """Median seconds of each function over `rounds` alternating blocks of `repeat` runs.

    Within a block a function runs back to back (its steady state: warm caches,
    the allocator reusing the last run's buffers); blocks alternate so that a
    noisy spell on this shared machine hits every side alike.
    """
    blocks: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, out in zip(fns, blocks):
            out.append(median_seconds(fn, repeat))
    return [statistics.median(b) for b in blocks]
