"""Timing shared by the benchmarks: the package's own side-by-side timing (ptowsp/timing.py)."""

from ptowsp.timing import median_seconds, side_by_side

__all__ = ["median_seconds", "side_by_side"]
