"""Empty tensors: a dimension of 0 (legal in ONNX: a split into a part of length 0, a reduction's
keepdims over an empty axis, a shape computed to nothing).

A task over an empty shape has nothing to compute, and a task that reads an empty tensor reads
nothing from it: a reduction over an empty set is its identity (0 for a sum, the lowest value for
a max), and any other read of it sits in a branch that never runs (a concatenation's part of
length 0).  So a build and the reference run the workload without them (`without_empties`): the
empty tasks, inputs and constants left out, those reductions replaced by their identity, those
reads by a zero that is never used; the caller still passes each empty input (checked against
its declared shape) and gets each empty output back as an empty array.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ptowsp.errors import WorkloadError
from ptowsp.te import Expr, Op, const, substitute
from ptowsp.te.reducer import reduction_identity
from ptowsp.workloads.copying import compute_as, retarget
from ptowsp.workloads.task import ComputeTask
from ptowsp.workloads.workload import Workload


@dataclass(frozen=True)
class Emptied:
    """A workload split at its empty tensors: `computed` (None when every output is empty) and
    each empty output's array, by name."""

    computed: Workload | None
    empty_outputs: dict[str, np.ndarray]
    empty_inputs: frozenset[str]

    def outputs(self, original: Workload, computed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The run's outputs in `original`'s order: the computed ones, and a new empty array for each empty one."""
        return {name: computed[name] if name in computed else self.empty_outputs[name].copy()
                for name in original.outputs}


def is_empty(shape: tuple) -> bool:
    return any(isinstance(d, int) and d == 0 for d in shape)


def without_empties(wl: Workload) -> Emptied:
    """`wl` without its empty tensors (the module docstring); `wl` itself when it has none."""
    tensors = [*map(wl.tensor, (*wl.inputs, *wl.constants)), *(t for task in wl.tasks for t in wl.task(task).outputs)]
    empty = {t.name for t in tensors if is_empty(t.shape)}
    if not empty:
        return Emptied(wl, {}, frozenset())
    outputs = {name: np.zeros(wl.tensor(name).shape, np.dtype(wl.tensor(name).dtype))
               for name in wl.outputs if name in empty}
    kept_outputs = [name for name in wl.outputs if name not in empty]
    inputs = frozenset(name for name in wl.inputs if name in empty)
    if not kept_outputs:
        return Emptied(None, outputs, inputs)
    out = Workload(wl.name)
    for name in wl.inputs:
        if name not in empty:
            out.input(name, wl.tensor(name).shape, wl.tensor(name).dtype)
    for name, array in wl.constants.items():
        if name not in empty:
            out.constant(name, array, wl.tensor(name).dtype)
    for name in wl.tasks:
        if name in empty:
            continue
        task = wl.task(name)
        if not isinstance(task, ComputeTask) or task.domain is not None or task.scan is not None:
            raise WorkloadError(f"task {name!r}: workload {wl.name!r} has empty tensors "
                                f"({', '.join(sorted(empty)[:3])}: a dimension of 0), which only plain compute "
                                "tasks take beside them (not opaque tasks, scans or tasks over a domain)")
        body = _filled(task.body, empty, name)
        compute_as(out, name, task.tensor.shape, task.loop_names, lambda *_, b=body: retarget(out, b))
    out.output(*(out.tensor(n) for n in kept_outputs))
    return Emptied(out, outputs, inputs)


def _filled(body: Expr, empty: set[str], task: str) -> Expr:
    """`body` with each reduction over an empty set replaced by its identity and each read of an
    empty tensor (in a branch that never runs) by a zero."""

    def replace(e: Expr) -> Expr | None:
        if e.op is Op.REDUCE and any(axis.arg[1] == 0 for axis in e.src[1:]):
            try:
                return reduction_identity(e.arg, e.dtype)
            except WorkloadError as err:
                raise WorkloadError(f"task {task!r}: {err}") from None
        if e.op is Op.LOAD and e.arg.name in empty:
            return const(0, e.dtype)
        return None

    return substitute(body, replace)
