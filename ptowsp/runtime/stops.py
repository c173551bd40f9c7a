"""How a run stops: Ctrl-C's flag for the worker that checks it, and the error a failed task becomes
(shared by the real-clock executor and the device clock)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Protocol

from ptowsp.errors import TaskError
from ptowsp.runtime.table import Instance, TaskTable


class Interruptible(Protocol):
    interrupted: bool


def describe(inst: Instance) -> str:
    """How errors name a task instance: its task, and its grid coordinates if it has any."""
    return f"task {inst.name!r}" + (f" at grid coordinates {inst.coords}" if inst.coords else "")


@contextlib.contextmanager
def interrupts(run: Interruptible) -> Iterator[None]:
    """Ctrl-C also sets a flag worker 0 checks between tasks.

    Python raises KeyboardInterrupt at whatever bytecode the main thread runs;
    inside a finalizer (a __del__ run by the garbage collector) it is printed
    and lost, and the run would go on.  The flag makes the stop certain.
    """
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield  # not ours to handle: another thread, or the program installed its own handler
        return

    def handler(signum, frame):
        run.interrupted = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def raise_failure(table: TaskTable, failure: tuple[int, BaseException]) -> None:
    i, error = failure
    if isinstance(error, TaskError) or not isinstance(error, Exception) or i < 0:
        raise error  # names its task already (an opaque task's own checks), Ctrl-C, or a runtime bug
    raise TaskError(f"{describe(table.instances[i])} failed: {type(error).__name__}: {error}") from error
