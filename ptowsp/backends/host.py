"""Whole tasks as runtime instances: opaque tasks on every target, and every task on the numpy target."""

from __future__ import annotations

import numpy as np

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
