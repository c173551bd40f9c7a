"""Measurement functions for the worker process that misbehave on purpose (module level: the worker
imports them by name)."""

from __future__ import annotations

import ctypes
import os
import signal
import time
import zlib
from pathlib import Path


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


def lucky_first_cost(built, inputs, repeat, min_time, budget, *, seen: str) -> float:
    """A made-up cost within 10% of 1 ms, halved the first time a schedule is measured (a lucky run,
    noted by a file in the directory `seen`: measuring processes come and go): measured again,
    every schedule falls back to its true cost, slower than any other's lucky first one."""
    crc = zlib.crc32(built.schedule.to_json().encode())
    mark = Path(seen) / str(crc)
    lucky = not mark.exists()
    mark.touch()
    return 1e-3 * (1 + crc % 100 / 1000) * (0.5 if lucky else 1.0)


def kill_worker_once(built, inputs, repeat, min_time, budget, *, marker: str) -> float:
    """The made-up cost; but the first call of all (no `marker` file yet) kills the dask worker that
    started this measuring process (its parent), as a machine lost mid-trial, and exits."""
    if not os.path.exists(marker):
        Path(marker).write_text(str(os.getppid()))
        os.kill(os.getppid(), signal.SIGKILL)
        os._exit(1)
    return made_up_cost(built, inputs, repeat, min_time, budget)


def crash_on_first_worker(built, inputs, repeat, min_time, budget, *, marker: str) -> float:
    """Segfault when the schedule prefetches 1 (on every worker); when it prefetches 2, segfault on the
    first dask worker that tries it (noted in `marker`) and measure on any other; else the made-up cost."""
    depth = built.schedule.prefetch_depth
    if depth == 2 and not os.path.exists(marker):
        Path(marker).write_text(str(os.getppid()))
    if depth == 1 or (depth == 2 and Path(marker).read_text() == str(os.getppid())):
        ctypes.string_at(0)  # SIGSEGV
    return made_up_cost(built, inputs, repeat, min_time, budget)



def freeze_worker_once(built, inputs, repeat, min_time, budget, *, marker: str) -> float:
    """The made-up cost; but the first call of all (no `marker` file yet) stops the dask worker that started
    this measuring process (SIGSTOP to its parent, whose pid goes in `marker` for the test to resume it): a
    machine that froze mid-trial, whose try never comes back."""
    if not os.path.exists(marker):
        Path(marker).write_text(str(os.getppid()))
        os.kill(os.getppid(), signal.SIGSTOP)
    return made_up_cost(built, inputs, repeat, min_time, budget)
