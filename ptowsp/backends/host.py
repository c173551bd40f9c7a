"""Task instances for the runtime: whole tasks (opaque tasks on every target, every task on the
numpy target) and the instances of a compiled kernel's task grid."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from ptowsp.lower.access import KernelAccess
from ptowsp.runtime import Instance
from ptowsp.workloads.task import ComputeTask, OpaqueTask


def _whole(tensor) -> tuple[tuple[int, int], ...]:
    return tuple((0, n) for n in tensor.shape)


def host_instance(task: ComputeTask | OpaqueTask) -> Instance:
    """One instance that reads every input and writes every output of `task` whole."""
    outputs = task.outputs
    moved = sum(int(np.prod(t.shape)) * np.dtype(t.dtype).itemsize for t in (*task.inputs, *outputs))
    return Instance(task.name, (), tuple((t.name, _whole(t)) for t in task.inputs),
                    tuple((t.name, _whole(t)) for t in outputs), bytes=moved)


def kernel_instances(name: str, grid: tuple[int, ...], access: KernelAccess, core: str | None) -> Iterator[Instance]:
    """One instance per point of a kernel's task grid, with the regions it reads and writes there."""
    for coords in itertools.product(*(range(extent) for extent in grid)):
        reads, writes = access.regions(*coords)
        yield Instance(name, coords, reads, writes, core, access.grid, access.bytes, access.flops)
