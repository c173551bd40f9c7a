"""Arrays a program allocates per run, taken back once nobody holds them.

A run's outputs and the arena of its intermediates are fresh arrays.  Fresh
memory is expensive on first touch: on this VM a 4 KB page fault costs about
3 us, so a 16 MB array costs ~12 ms of faults, and whether a run pays them
depends on malloc's history (big blocks go back to the OS and come back as
new pages).  The same softmax ran at 1.2 ms or 2.5 ms from process to
process for that reason alone (docs/cpu.md).  So, like the caching
allocators of array libraries, an executable keeps the last array it handed
out under each name and reuses it when the caller has let go of it.

"Let go" is exact: an array is reused only when the recycler's own reference
is the only one left.  A view, a slice or an exported buffer keeps its base
alive, so an array the caller can still reach in any way is never written
again; the next run gets a fresh one instead, and the recycler forgets the
old one (the caller owns it).
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from ptowsp.workloads.arrays import ALIGN, aligned_empty


def aligned_copy(array: np.ndarray) -> np.ndarray:
    """`array` itself if its data starts on an ALIGN-byte boundary and is contiguous, else an aligned copy."""
    if array.flags.c_contiguous and array.ctypes.data % ALIGN == 0:
        return array
    copy = aligned_empty(array.shape, array.dtype)
    copy[...] = array
    return copy


class Recycler:
    """One array per name, reused by a later run when no one else holds it; thread-safe."""

    def __init__(self) -> None:
        self._kept: dict[str, np.ndarray] = {}
        self._addresses: dict[str, int] = {}  # where each kept array's data starts (asking numpy costs ~1 us)
        # reference counts of a kept array, and of the block under it, that only the recycler holds
        self._alone: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def _holders(self, name: str) -> tuple[int, int]:
        """References to the kept array and to its memory block (aligned_empty's: a view of a view
        names the block as its base, so a slice the caller keeps holds the block, not the array)."""
        return sys.getrefcount(self._kept[name]), sys.getrefcount(self._kept[name].base)

    def empty(self, name: str, shape: tuple[int, ...], dtype: np.dtype | str) -> np.ndarray:
        """An uninitialised array: the one last handed out under `name` if it is unreferenced and fits."""
        dtype = np.dtype(dtype)
        with self._lock:
            kept = self._kept.get(name)
            if kept is not None and kept.shape == tuple(shape) and kept.dtype == dtype:
                del kept  # our local reference would count as a holder
                if self._holders(name) == self._alone:
                    return self._kept[name]
            self._kept[name] = aligned_empty(shape, dtype)
            self._addresses[name] = self._kept[name].ctypes.data
            if self._alone is None:  # measured, not assumed: reference counting differs between Pythons
                self._alone = self._holders(name)
            return self._kept[name]

    def address(self, name: str) -> int:
        """Where the data of the array `empty` last handed out under `name` starts."""
        return self._addresses[name]
