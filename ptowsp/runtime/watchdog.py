"""Bound a run in wall time, even when task code never returns.

A run's own stop (the executor's flag, a csp engine's cancellation) acts only where
the runtime gets control back: between tasks, at an `await`.  Host code
stuck inside a task (an opaque task in `time.sleep`, a csp process in a busy
loop) never gives it back, and Python cannot interrupt another thread.  So a
run with a timeout executes on a thread of its own while the caller waits
with a deadline: at `timeout` it asks the run to stop, gives it `GRACE`
seconds to unwind, and otherwise abandons the thread (a daemon: it finishes
whenever the stuck code returns, and never blocks the caller or the
interpreter's exit) and raises RunTimeout naming what is still running.
"""

from __future__ import annotations

import math
import numbers
import threading
import warnings
from collections.abc import Callable
from typing import TypeVar

from ptowsp.errors import InputError, RunTimeout

T = TypeVar("T")

GRACE = 0.25  # seconds a stopped run gets to unwind before its thread is abandoned


def check_timeout(timeout: object) -> float | None:
    """A timeout in seconds: None or inf is no limit; anything but a positive number is an InputError."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise InputError(f"timeout must be a positive number of seconds (or None for no limit), "
                         f"got {timeout!r} of type {type(timeout).__name__}")
    seconds = float(timeout)
    if math.isnan(seconds) or seconds <= 0:
        raise InputError(f"timeout must be a positive number of seconds (or None for no limit), got {timeout!r}")
    return None if math.isinf(seconds) else seconds


def bounded(body: Callable[[], T], timeout: float | None, stop: Callable[[BaseException], None],
            running: Callable[[], list[str]], what: str) -> T:
    """body(), returning within `timeout` + GRACE seconds whatever body's task code does.

    Without a timeout body runs in the caller's thread.  With one it runs on a
    daemon thread; at the deadline (or on Ctrl-C) `stop(reason)` asks it to
    stop, and if it has not returned GRACE seconds later the thread is
    abandoned: RunTimeout names `running()` (what is still executing) and a
    RuntimeWarning reports the thread.  Whatever body raises or returns is
    passed on.
    """
    timeout = check_timeout(timeout)
    if timeout is None:
        return body()
    outcome: dict[str, object] = {}
    done = threading.Event()

    def target() -> None:
        try:
            outcome["value"] = body()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = e
        finally:
            done.set()

    thread = threading.Thread(target=target, name=f"ptowsp {what}", daemon=True)
    thread.start()
    try:
        if not done.wait(timeout):
            stop(RunTimeout(f"{what} did not finish within {timeout:g} s"))
            done.wait(GRACE)
    except BaseException as e:  # Ctrl-C while waiting: stop the run, give it the same grace, re-raise
        stop(e)
        done.wait(GRACE)
        raise
    if not done.is_set():
        stuck = "; ".join(running()) or "host code of the run"
        warnings.warn(f"ptowsp abandoned thread {thread.name!r}: {stuck} is still running in host code "
                      "and keeps its thread until it returns", RuntimeWarning, stacklevel=3)
        raise RunTimeout(f"{what} did not finish within {timeout:g} s: {stuck} was still running in host code "
                         f"{GRACE:g} s after the run was stopped; its thread is abandoned (a daemon thread that "
                         "ends when that code returns)")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
