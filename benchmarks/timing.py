"""Timing shared by the benchmarks: the package's own side-by-side timing (ptowsp/timing.py)."""

from ptowsp.timing import median_seconds, side_by_side

# seconds of back-to-back runs per block at least, for every side: after side_by_side's idle settle this
# VM's cores take ~60 ms to come back up to speed (batch_matmul: 0.49 ms for its first 120 runs, then
# 0.30-0.33 ms), which would otherwise decide the figure of anything shorter than a few milliseconds
MIN_BLOCK = 0.2

__all__ = ["MIN_BLOCK", "median_seconds", "side_by_side"]
