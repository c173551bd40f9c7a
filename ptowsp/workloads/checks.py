"""What every task definition must satisfy (one named loop variable per dimension, bound reduce axes), and
the task named in the errors raised while it is defined."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator

from ptowsp.errors import PtowspError, ShapeError, WorkloadError
from ptowsp.te import Expr, Op
from ptowsp.te.names import check_name


@contextlib.contextmanager
def blamed_on(task: str) -> Iterator[None]:
    """Prefix errors raised while defining a task with the task's name."""
    try:
        yield
    except PtowspError as e:
        if not str(e).startswith("task "):
            e.args = (f"task {task!r}: {e}",)
        raise


def loop_names_of(name: str, shape: tuple[int, ...], fn: Callable[..., object]) -> tuple[str, ...]:
    """fn's parameter names, which become the task's loop names: one per dimension of `shape`."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise WorkloadError(f"compute {name!r} needs a function of its loop variables, got {fn!r}") from None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    # Parameters with defaults are the closure-binding idiom (`lambda i, f=f: ...`), not loops.
    params = [p for p in params if p.default is inspect.Parameter.empty]
    if any(p.kind not in positional for p in params):
        raise WorkloadError(f"compute {name!r}: give the function one named parameter per dimension (no *args)")
    if len(params) != len(shape):
        raise ShapeError(
            f"shape {shape} has {len(shape)} dimension(s) but the function takes "
            f"{len(params)} loop variable(s) ({', '.join(p.name for p in params)})"
        )
    return tuple(check_name(p.name, f"compute {name!r} loop variable") for p in params)


def with_parameters(fn: Callable[..., object], names: tuple[str, ...] | list[str]) -> Callable[..., object]:
    """`fn` (taking *args) presented as a function of parameters named `names`: how code that makes
    a task or an index map for another gives its loop variables their names (`loop_names_of`
    reads them from the signature)."""
    def named(*args):
        return fn(*args)

    named.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])
    return named


def check_reduce_axes(e: Expr, loop_names: tuple[str, ...], bound: frozenset[str]) -> None:
    """Every reduce axis is used inside a reduction over it, and none shadows a loop or another axis."""
    if e.op is Op.RVAR and e.arg[0] not in bound:
        raise WorkloadError(f"reduce axis {e.arg[0]} is used outside a pw.sum/max/min over it")
    if e.op is Op.REDUCE:
        axes = [a.arg[0] for a in e.src[1:]]
        clash = [a for a in axes if a in loop_names or a in bound]
        if clash:
            raise WorkloadError(f"reduce axis {clash[0]} has the name of an enclosing loop variable")
        check_reduce_axes(e.src[0], loop_names, bound | set(axes))
        return
    for s in e.src:
        check_reduce_axes(s, loop_names, bound)
