"""Run generated GPU kernels on the host, thread by thread: the cuda target's semantics without a GPU.

Each thread of a block is a Python generator over the SPMD statements
(spmd.py) that stops at every barrier; the block advances when all its
threads have stopped at the same barrier, so a thread that reads shared
memory before the others finish filling it, or a barrier some threads
never reach, shows up here as a wrong number or an error.  Shared buffers
start as NaN (or a sentinel integer), so reading an element nobody wrote is
visible.  Every access is bounds-checked (lower/interpret.py).  It is slow
by design: tests run it on small workloads.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping

import numpy as np

from ptowsp.backends.cuda import CudaCode
from ptowsp.backends.cuda.accumulators import WarpAccumulators
from ptowsp.backends.cuda.spmd import BLOCK_AXES, LANE_AXES, GpuKernel
from ptowsp.errors import TaskError
from ptowsp.lower.interpret import Interpreter, run_instances
from ptowsp.te import dtypes
from ptowsp.lower.ir import SHARED, Allocate, Barrier, Block, For, IfThen, Let, Stmt, Store, Tensorized


def _poisoned(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    array = np.empty(shape, dtype)
    kind = dtypes.kind(dtypes.name_of(array.dtype))  # bfloat16 is a float here (numpy says "V")
    array.fill(np.nan if kind == "f" else -123 if kind == "i" else np.iinfo(array.dtype).max if kind == "u" else True)
    return array


class _Thread(Interpreter):
    """One thread: its own local buffers, the block's shared ones and global memory."""

    def steps(self, s: Stmt, env: dict[str, int]) -> Iterator[None]:
        """Run s, yielding at each barrier."""
        if isinstance(s, Barrier):
            yield
        elif isinstance(s, Block):
            for c in s.stmts:
                yield from self.steps(c, env)
        elif isinstance(s, For):
            for v in range(s.extent):
                yield from self.steps(s.body, {**env, s.var: v})
        elif isinstance(s, IfThen):
            if bool(self.value(s.cond, env)):
                yield from self.steps(s.then, env)
        elif isinstance(s, Allocate) and s.buffer.scope == SHARED:
            yield from self.steps(s.body, env)  # the block's array, made when the block started
        elif isinstance(s, Allocate):
            self.arrays[s.buffer.name] = _poisoned(s.buffer.shape, s.buffer.dtype)
            yield from self.steps(s.body, env)
        elif isinstance(s, Let):
            with self.bound(s, env):
                yield from self.steps(s.body, env)
        elif isinstance(s, (Tensorized, WarpAccumulators)):  # the loops a call stands for (one lane's)
            yield from self.steps(s.body, env)
        elif isinstance(s, Store):
            self.run(s, env)
        else:
            raise TypeError(f"unknown statement {s!r}")


def run_block(kernel: GpuKernel, arrays: dict[str, np.ndarray], env: dict[str, int]) -> None:
    """All threads of one block, in lockstep from barrier to barrier."""
    shared = {b.name: _poisoned(b.shape, b.dtype) for b in kernel.shared}
    threads = []
    for ids in itertools.product(*(range(n) for n in reversed(kernel.threads))):  # x varies fastest
        here = {**env, **dict(zip(reversed(LANE_AXES), ids, strict=True))}
        threads.append(_Thread({**arrays, **shared}).steps(kernel.body, here))
    barrier = 0
    while threads:
        arrived = []
        for t in threads:
            try:
                next(t)
                arrived.append(t)
            except StopIteration:
                pass
        if arrived and len(arrived) != len(threads):
            raise TaskError(f"kernel {kernel.name}: {len(arrived)} of {len(threads)} threads reached barrier "
                            f"{barrier}, the others finished: a barrier under divergent control")
        threads, barrier = arrived, barrier + 1


def emulate(code: CudaCode, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run every task instance of the generated program on the host, as the GPU would; the outputs."""
    def run_kernel(task: str, arrays: dict[str, np.ndarray], grid: dict[str, int]) -> None:
        kernel = code.kernels[task]
        for ids in itertools.product(*(range(n) for n in kernel.blocks)):
            run_block(kernel, arrays, {**grid, **dict(zip(BLOCK_AXES, ids, strict=True))})

    return run_instances(code.program, inputs, _poisoned, run_kernel)
