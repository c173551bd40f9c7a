"""How a run stops: Ctrl-C's flag for the worker that checks it, the word native code watches for
signals, and the error a failed task becomes (shared by the real-clock executor and the device
clock)."""

from __future__ import annotations

import contextlib
import mmap
import os
import signal
import threading
from collections.abc import Iterator
from typing import Protocol

import numpy as np

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


class SignalWord:
    """One int64 of memory that a signal with a Python handler makes nonzero: the wakeup descriptor
    (`signal.set_wakeup_fd`) is a one-page memory file mapped here, into which CPython's C handler
    writes the signal's number.

    Why: native code that runs for seconds on the caller's thread must come back to Python for a
    handler to run (Ctrl-C's).  Coming back on a timer costs 40-60 us each time after kernels that
    streamed megabytes (the interpreter's state is out of every cache), a read of a pipe 10 us (a
    cold system call); a load of this word costs what a load costs."""

    def __init__(self) -> None:
        self.descriptor = os.memfd_create("ptowsp-signals", os.MFD_CLOEXEC)
        os.ftruncate(self.descriptor, mmap.PAGESIZE)
        os.set_blocking(self.descriptor, False)  # set_wakeup_fd's condition (a memory file never blocks)
        self._page = mmap.mmap(self.descriptor, mmap.PAGESIZE)
        self.word = np.frombuffer(self._page, np.int64, 1)
        self.address = self.word.ctypes.data

    def rearm(self) -> None:
        """Zero, and the next signal's byte written over it."""
        os.lseek(self.descriptor, 0, os.SEEK_SET)
        self.word[0] = 0


_words: dict[int, SignalWord] = {}  # per process (a forked child makes its own)


@contextlib.contextmanager
def signal_word() -> Iterator[SignalWord | None]:
    """The SignalWord, armed, while this runs; None where it cannot be had: another thread than the
    main one, a platform without memory files, or a wakeup descriptor already set (an event loop's,
    given back at once)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(os, "memfd_create"):
        yield None
        return
    found = _words.get(os.getpid())
    if found is None:
        found = _words[os.getpid()] = SignalWord()
    found.rearm()
    try:
        earlier = signal.set_wakeup_fd(found.descriptor, warn_on_full_buffer=False)
    except ValueError:  # not the main interpreter
        yield None
        return
    if earlier != -1:
        signal.set_wakeup_fd(earlier)
        yield None
        return
    try:
        yield found
    finally:
        signal.set_wakeup_fd(-1)


def raise_failure(table: TaskTable, failure: tuple[int, BaseException]) -> None:
    i, error = failure
    if isinstance(error, TaskError) or not isinstance(error, Exception) or i < 0:
        raise error  # names its task already (an opaque task's own checks), Ctrl-C, or a runtime bug
    raise TaskError(f"{describe(table.instances[i])} failed: {type(error).__name__}: {error}") from error
