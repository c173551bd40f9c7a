"""Scans (TVM's scan operator): a task whose value at step t reads its own values at earlier steps.

`wl.scan(name, shape, init=..., update=..., axis="t")` defines

    name[.., t, ..] = init(..)          for t < steps
    name[.., t, ..] = update(.., t, ..)  for t >= steps

where update may read `name` at `[.., t - d, ..]` for a constant d >= 1 (any index along the
other axes, so a step may read the whole previous step: an RNN's matmul), and `steps` is the
longest such delay: init covers the steps update cannot reach back from.  init takes the other
axes (the same value for every initial step) or all of them, scan axis included.

As a task a scan is a ComputeTask with body `where(t < steps, init, update)` and a `Scan`
record.  It is OPAQUE for fusion: nothing fuses into or out of it.  Its schedule keeps the scan
axis whole and serial; a loop outside it, or parallel, must run over an axis every self-read
indexes with that axis's own variable, so its iterations are independent chains (checked by
`check_scan_nest` in schedules/handlers.py).  The lowering runs init's steps and update's steps
as two nests, so neither tests the step per point (lower/scan.py).

Python binds the variable holding the returned tensor only after `wl.scan` returns, so update,
which names it, is called later: when the workload is next used (Workload settles pending scans
before any other definition, query, schedule or run).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from ptowsp.errors import DTypeError, ShapeError, WorkloadError
from ptowsp.te import Expr, Op, Tensor, cast, const, lift, walk, where
from ptowsp.te.bounds import shift_of
from ptowsp.workloads.task import Category, ComputeTask, Scan


def scan_axis(name: str, loops: tuple[str, ...], axis: str | None) -> int:
    """The position of the scan axis among update's loop variables (the first when not named)."""
    if axis is None:
        return 0
    if axis not in loops:
        raise WorkloadError(f"scan {name!r}: axis={axis!r} is not one of update's loop variables ({', '.join(loops)})")
    return loops.index(axis)


def initial_value(name: str, init: Callable[..., object], axes: tuple[Expr, ...], k: int,
                  dtype: str | None = None) -> Expr:
    """init at the initial steps: called with the axes other than the scan axis, or with all of them.

    Its dtype is the scan's: `dtype` when given (init is cast to it), else init's own, where a
    plain Python number is float32 or int32 (the workload's defaults, not numpy's 64-bit ones)."""
    if not callable(init):
        raise WorkloadError(f"scan {name!r}: init must be a function of the loop variables, got {init!r}")
    others = axes[:k] + axes[k + 1:]
    try:
        params = [p for p in inspect.signature(init).parameters.values() if p.default is inspect.Parameter.empty]
    except (TypeError, ValueError):
        params = list(others)
    if len(params) == len(others):
        value = init(*others)
    elif len(params) == len(axes):
        value = init(*axes)
    else:
        raise ShapeError(f"scan {name!r}: init takes {len(params)} loop variable(s); give it the {len(others)} "
                         f"axes other than the scan axis, or all {len(axes)}")
    if isinstance(value, Tensor):
        raise ShapeError(f"scan {name!r}: init returned tensor {value.name} itself; index it")
    if dtype is None and isinstance(value, (int, float)) and not isinstance(value, bool):
        dtype = "float32" if isinstance(value, float) else "int32"
    return lift(value) if dtype is None else cast(value, dtype)


def longest_delay(name: str, tensor: Tensor, update: Expr, axis: str, k: int) -> int:
    """The longest delay at which update reads its own scan (1 when it reads none), or WorkloadError for
    a read that is not at `axis - d`, d >= 1."""
    longest = 1
    for node in walk(update):
        if node.op is Op.LOAD and node.arg.name == tensor.name:
            shift = shift_of(node.src[k], axis)
            d = None if shift is None else -shift
            if d is None or d < 1:
                raise WorkloadError(f"scan {name!r}: update reads {node}, but a scan reads its own tensor only at "
                                    f"earlier steps: {tensor.name}[.., {axis} - d, ..] with a constant d >= 1")
            longest = max(longest, d)
    return longest


def scan_task(name: str, tensor: Tensor, axes: tuple[Expr, ...], k: int, init: Expr, update: Expr) -> ComputeTask:
    """The compute task of a scan, once update has been called; DTypeError when its values' types differ."""
    if update.dtype != init.dtype:
        raise DTypeError(f"scan {name!r}: init gives {init.dtype} and update gives {update.dtype}; a scan holds one "
                         f"dtype: pw.cast one of them")
    for node in walk(init):
        if node.op is Op.LOAD and node.arg.name == tensor.name:
            raise WorkloadError(f"scan {name!r}: init reads the scan itself ({node}); init gives the first steps")
    axis = axes[k].arg[0]
    steps = longest_delay(name, tensor, update, axis, k)
    body = where(axes[k] < const(steps, axes[k].dtype), init, update)
    return ComputeTask(name, tensor, axes, body, Category.OPAQUE, None, Scan(axis, steps))
