"""`once`: functools.cache made safe for threads, for what must exist once per process.

functools.cache lets two threads that call a cached function at the same time both compute the
value and keep only one: for a compiled LLVM engine the other is dropped, and its `__del__` frees
machine code a thread may already be running (a SIGSEGV seen when two threads made the first runs
of a fresh program).  A `once` function computes each argument tuple's value under a lock, so
every caller gets the same object; later calls read it without the lock.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def once(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn`, computed once per hashable set of arguments and shared by all threads; `.cache_clear()`
    forgets the values (tests)."""
    values: dict[object, T] = {}
    lock = threading.RLock()  # a value's computation may call another `once` function, or this one

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        key = (args, tuple(sorted(kwargs.items()))) if kwargs else args
        try:
            return values[key]
        except KeyError:
            pass
        with lock:
            if key not in values:
                values[key] = fn(*args, **kwargs)
            return values[key]

    wrapper.cache_clear = values.clear  # type: ignore[attr-defined]
    return wrapper


__all__ = ["once"]
