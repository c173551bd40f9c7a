"""`pw.reference`: evaluate a workload with numpy.  The golden model for every backend."""

from __future__ import annotations

import numpy as np

from ptowsp.errors import BoundsError, TaskError
from ptowsp.te import evaluate
from ptowsp.workloads.inputs import input_sizes, read_only, validate_inputs
from ptowsp.workloads.task import ComputeTask, OpaqueTask
from ptowsp.workloads.workload import Workload


def reference(wl: Workload, **inputs: np.ndarray) -> dict[str, np.ndarray]:
    """Run every task in order with numpy; return {output name: new array}.

    Inputs are validated (InputError) and never modified.  Intermediates are
    dropped after their last reader so memory stays near the live set.
    """
    arrays = validate_inputs(wl, inputs)
    return run_tasks(wl.bind(input_sizes(wl, arrays)), arrays)


def matches(got: np.ndarray, want: np.ndarray, rtol: float = 1e-3) -> bool:
    """Whether a result agrees with the reference: relative `rtol`, absolute `rtol` x the largest
    reference magnitude (at least 1), NaN where the reference has NaN."""
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    return bool(np.allclose(got, want, rtol=rtol, atol=rtol * scale, equal_nan=True))


def run_tasks(wl: Workload, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The reference on already validated, read-only inputs; the workload's constants are added here."""
    values = {**wl.constants, **values}
    last_reader = {t.name: task for task in wl.tasks for t in wl.task(task).inputs}
    for name in wl.tasks:
        task = wl.task(name)
        if isinstance(task, ComputeTask):
            try:
                values[name] = read_only(evaluate(task.value, task.loop_names, task.tensor.shape, values))
            except BoundsError as e:  # a gather's index out of its tensor
                raise BoundsError(f"task {name!r}: {e}") from None
        else:
            values.update(run_opaque(task, values))
        for t in task.inputs:
            if last_reader[t.name] == name and t.name not in wl.outputs and t.name not in wl.inputs:
                del values[t.name]
    return {name: np.array(values[name]) for name in wl.outputs}


def run_opaque(task: OpaqueTask, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Call an opaque task's function and check it returned what it declared."""
    try:
        result = task.fn(*(values[t.name] for t in task.inputs))
    except Exception as e:
        raise TaskError(f"opaque task {task.name!r} raised {type(e).__name__}: {e}") from e
    results = result if isinstance(result, tuple) else (result,)
    if len(results) != len(task.outputs):
        raise TaskError(f"opaque task {task.name!r} returned {len(results)} array(s), declared {len(task.outputs)}")
    out = {}
    for t, r in zip(task.outputs, results):
        r = np.asarray(r)
        if r.shape != t.shape:
            raise TaskError(f"opaque task {task.name!r}: output {t.name} has shape {r.shape}, declared {t.shape}")
        if not np.can_cast(r.dtype, t.dtype, casting="same_kind"):
            raise TaskError(f"opaque task {task.name!r}: output {t.name} has dtype {r.dtype}, declared {t.dtype}")
        out[t.name] = read_only(r.astype(t.dtype))
    return out
