"""Timing shared by the benchmarks: medians of repeated runs after a warm-up."""

from __future__ import annotations

import math
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



def side_by_side(fns, repeat: int, rounds: int = 3, min_block: float = 0.0) -> list[float]:
    """Median seconds of each function over `rounds` alternating blocks of `repeat` runs
    (more for a fast function: a block runs at least `min_block` seconds).

    Within a block a function runs back to back (its steady state: warm caches,
    the allocator reusing the last run's buffers); blocks alternate so that a
    noisy spell on this shared machine hits every side alike.
    """
    blocks: list[list[float]] = [[] for _ in fns]
    repeats = [max(repeat, math.ceil(min_block / max(median_seconds(fn, 1), 1e-6))) for fn in fns]
    for _ in range(rounds):
        for fn, n, out in zip(fns, repeats, blocks):
            out.append(median_seconds(fn, n))
    return [statistics.median(b) for b in blocks]
