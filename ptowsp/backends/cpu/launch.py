"""One run's launcher: instance i of the task table run by Python (a kernel at its grid coordinates
through ctypes, or an opaque task on the host), or the whole table handed to the native loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ptowsp.backends.host import tile_of
from ptowsp.runtime import TaskTable
from ptowsp.runtime.native import Fill, NativeTasks
from ptowsp.te.bounds import check_gathers, gather_indices
from ptowsp.workloads import Workload, inline_producers
from ptowsp.workloads.reference import run_opaque

if TYPE_CHECKING:
    from ptowsp.backends.cpu.executable import CpuExecutable  # which makes a Launch per run


class Launch:
    """Runs instance i of the table: its kernel at its grid coordinates, or an opaque task on the host.
    Its `native` hands the table to the runtime's native loop instead (None where Python calls the
    kernels one by one: debug checks before each kernel, the aicore target's device clock, opaque
    tasks).  The run's tensors become arrays (`arrays`) only when Python code needs them."""

    load = store = None

    def __init__(self, exe: CpuExecutable, table: TaskTable, workload: Workload, sizes: tuple[int, ...],
                 arrays: Callable[[], dict[str, np.ndarray]], native: tuple[NativeTasks, Fill] | None,
                 debug: bool = False):
        self.exe, self.instances = exe, table.instances
        self.workload = workload
        self.sizes = sizes
        self._make_arrays: Callable[[], dict[str, np.ndarray]] | None = arrays
        self._arrays: dict[str, np.ndarray] = {}
        # debug: the gathers of each kernel's task (inlined producers included), checked before it runs
        self.gathers = {name: value for name in exe.entries if gather_indices(
            value := inline_producers(workload.task(name).value, workload, exe.schedule.inlined))} if debug else {}
        self.bound: dict | None = None  # (task, version) -> (function, pointers), made when Python first calls one
        self.native = native  # the native loop's view of the run: its kernels' thunks, and what writes the tensors' addresses

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        if self._make_arrays is not None:
            self._arrays, self._make_arrays = self._make_arrays(), None
        return self._arrays

    def release(self) -> None:
        """Drop the run's arrays, so the Recycler sees only the caller's references."""
        self._arrays, self._make_arrays, self.bound, self.native = {}, None, {}, None

    def compute(self, i: int) -> None:
        inst = self.instances[i]
        if self.bound is None:  # arrays are fixed for the run, so each kernel's pointer arguments are too
            arrays = self.arrays
            pointers = {name: tuple(arrays[a].ctypes.data for a in entry.arguments)
                        for name, entry in self.exe.entries.items()}
            self.bound = {key: (function, pointers[key[0]]) for key, function in self.exe.functions.items()}
        bound = self.bound.get((inst.name, inst.variant))
        if bound is None:
            for name, value in run_opaque(self.workload.task(inst.name), self.arrays).items():
                np.copyto(self.arrays[name], value)
            return
        function, pointers = bound
        if inst.name in self.gathers:
            check_gathers(self.gathers[inst.name], tile_of(self.workload.task(inst.name), inst.writes), self.arrays)
        function(*pointers, *inst.coords, *self.sizes)
