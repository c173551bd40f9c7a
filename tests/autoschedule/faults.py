"""Measurement functions for the worker process that misbehave on purpose (module level: the worker
imports them by name)."""

from __future__ import annotations

import ctypes
import time
import zlib


def crash_or_hang(built, inputs, repeat, min_time, budget) -> float:
    """Segfault when the schedule prefetches 1, hang when 2, else a cost made up from the steps."""
    depth = built.schedule.prefetch_depth
    if depth == 1:
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    if depth == 2:
        time.sleep(3600)
    return made_up_cost(built, inputs, repeat, min_time, budget)


def made_up_cost(built, inputs, repeat, min_time, budget) -> float:
    """A deterministic cost of the schedule's steps: the search's choices then depend on the seed alone."""
    return 1e-3 * (1 + zlib.crc32(built.schedule.to_json().encode()) % 1000)


_calls = [0]


def noisy_cost(built, inputs, repeat, min_time, budget) -> float:
    """The made-up cost, 1.0x, 1.5x or 0.8x in turn: a schedule measured again (a finalist) gets
    another figure, as on a shared machine, so its median differs from its first measurement."""
    _calls[0] += 1
    return made_up_cost(built, inputs, repeat, min_time, budget) * (1.0, 1.5, 0.8)[_calls[0] % 3]
