"""`pw.reference`: evaluate a workload with numpy.  The golden model for every backend."""

from __future__ import annotations

import reprlib

import numpy as np

from ptowsp.errors import BoundsError, TaskError
from ptowsp.te import Tensor
from ptowsp.workloads.empties import without_empties
from ptowsp.workloads.inputs import input_sizes, read_only, validate_inputs
from ptowsp.workloads.task import ComputeTask, OpaqueTask
from ptowsp.workloads.workload import Workload


def reference(wl: Workload, **inputs: np.ndarray) -> dict[str, np.ndarray]:
    """Run every task in order with numpy; return {output name: new array}.

    Inputs are validated (InputError) and never modified.  Intermediates are
    dropped after their last reader so memory stays near the live set.
    """
    arrays = validate_inputs(wl, inputs)
    emptied = without_empties(wl)  # tasks over empty tensors compute nothing (workloads/empties.py)
    if emptied.computed is None:
        return emptied.outputs(wl, {})
    computed = emptied.computed
    arrays = {name: a for name, a in arrays.items() if name not in emptied.empty_inputs}
    return emptied.outputs(wl, run_tasks(computed.bind(input_sizes(computed, arrays)), arrays))


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
                values[name] = read_only(task.evaluate(values))
            except BoundsError as e:  # a gather's index out of its tensor
                raise BoundsError(f"task {name!r}: {e}") from None
        else:
            values.update(run_opaque(task, values))
        for t in task.inputs:
            if last_reader[t.name] == name and t.name not in wl.outputs and t.name not in wl.inputs:
                del values[t.name]
    return {name: np.array(values[name]) for name in wl.outputs}


def run_opaque(task: OpaqueTask, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Call an opaque task's function and check it returned what it declared.

    The function gets read-only private copies of its inputs: a read-only view
    could be made writable again (`flags.writeable = True`, or through `.base`)
    and reach the caller's array or a buffer other tasks read.  A copy costs a
    memcpy of the inputs, small beside the Python call it feeds (docs/security.md).
    Each result is checked (an array of the declared shape, with values the
    declared dtype holds) and copied, so the function keeps no handle on it.
    """
    try:
        result = task.fn(*(_private(_declared_shape(values[t.name], t)) for t in task.inputs))
    except Exception as e:
        raise TaskError(f"opaque task {task.name!r} raised {type(e).__name__}: {e}") from e
    declared = len(task.outputs)
    results = result if isinstance(result, tuple) else (result,)
    if len(results) != declared:
        got = f"{len(results)} array(s)"
        if not isinstance(result, tuple):
            got += f" (a {type(result).__name__}, not a tuple)"
        raise TaskError(f"opaque task {task.name!r} returned {got}, declared {declared} output(s) "
                        f"({', '.join(t.name for t in task.outputs)}): return "
                        + ("one array" if declared == 1 else f"a tuple of {declared} arrays"))
    return {t.name: read_only(_checked(task.name, t, r)) for t, r in zip(task.outputs, results)}


def _declared_shape(array: np.ndarray, tensor: Tensor) -> np.ndarray:
    """`array` in its tensor's static shape: a target may hold a 0-d tensor in a buffer of shape (1,)."""
    static = all(isinstance(d, int) for d in tensor.shape)
    return array.reshape(tensor.shape) if static and array.shape != tuple(tensor.shape) else array


def _private(array: np.ndarray) -> np.ndarray:
    """A read-only copy: nothing done to it (writeable back on, .base) reaches `array`."""
    copy = np.array(array)
    copy.flags.writeable = False
    return copy


def _checked(task: str, tensor: Tensor, value: object) -> np.ndarray:
    """An opaque task's result as a new array of its output's dtype; TaskError for anything that is not
    an array of the declared shape, or whose values that dtype cannot hold (no silent wrap-around)."""
    where = f"opaque task {task!r}: output {tensor.name!r}"
    try:
        r = None if value is None else np.asarray(value)
    except Exception:  # noqa: BLE001 - a ragged list, an object whose __array__ fails: not an array
        r = None
    if r is None or r.dtype.kind in "OUSMm" or r.dtype.names is not None:
        raise TaskError(f"{where} is {reprlib.repr(value)} ({type(value).__name__}), not an array: return an "
                        f"array of shape {tensor.shape} and dtype {tensor.dtype}")
    if r.shape != tensor.shape:
        raise TaskError(f"{where} has shape {r.shape}, declared {tensor.shape}")
    want = np.dtype(tensor.dtype)
    integers = r.dtype.kind in "iub" and want.kind in "iu"  # any integer type, if the values fit
    if not integers and not np.can_cast(r.dtype, want, casting="same_kind"):  # floats into integers, ...
        raise TaskError(f"{where} has dtype {r.dtype}, declared {tensor.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported below, as a TaskError
        out = r.astype(want)
    if integers and r.size:
        info, low, high = np.iinfo(want), int(r.min()), int(r.max())
        if low < info.min or high > info.max:
            bad = low if low < info.min else high
            raise TaskError(f"{where} holds {bad}, outside {tensor.dtype}'s range [{info.min}, {info.max}]; "
                            f"the task declared {tensor.dtype}: declare a wider dtype or clip the values")
    elif want.kind not in "iub":  # a float type (numpy's or ml_dtypes'): finite values must stay finite
        overflow = np.isfinite(r) & ~np.isfinite(out)
        if overflow.any():
            raise TaskError(f"{where} holds {r[overflow].flat[0].item()!r}, beyond the range of {tensor.dtype} "
                            "(it would become inf)")
    return out
