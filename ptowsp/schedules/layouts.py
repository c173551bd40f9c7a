"""transform_layout: a tensor stored in another layout (TVM's transform_layout).

`s.transform_layout("W", lambda o, c, kh, kw: (o // 8, c, kh, kw, o % 8))` stores W with element
(o, c, kh, kw) at (o // 8, c, kh, kw, o % 8) (OIHW8o).  A constant (or a task folded from
constants) is packed once at build time; an intermediate (a compute task's result that is not
an output) is written there by its producer and read there by every consumer: lower/layouts.py
rewrites each global read and write once the kernel is made.  The map must send the tensor's
domain one to one into a box of non-negative indices; the box is the stored tensor's shape
(positions no element reaches hold zeros in a constant, nothing in an intermediate).  Both are
checked when the step is taken, over every element.  Inputs and outputs keep the user's layout,
and so does a tensor an opaque task reads (it takes arrays as the user sees them).
"""

from __future__ import annotations

import functools
import keyword
import math
from dataclasses import dataclass

import numpy as np

from ptowsp.schedules.condition import parse_index
from ptowsp.schedules.loopnest import StepError
from ptowsp.te import Expr, Op, Tensor, cast, const, dtypes, substitute
from ptowsp.te.bounds import interval
from ptowsp.te.evaluate import Domain, Evaluator

MAX_CHECKED = 1 << 24  # elements a map is checked over


@dataclass(frozen=True)
class Layout:
    axes: tuple[Expr, ...]  # VARs over the tensor's shape, in order
    index: tuple[Expr, ...]  # where element `axes` is stored
    shape: tuple[int, ...]  # the stored tensor's shape

    def read(self, indices: tuple[Expr, ...]) -> tuple[Expr, ...]:
        """The stored position of the element at `indices`."""
        values = {a.arg[0]: i if i.dtype == dtypes.INDEX_DTYPE else cast(i, dtypes.INDEX_DTYPE)  # a gathered int32
                  for a, i in zip(self.axes, indices, strict=True)}
        return tuple(substitute(e, lambda n: values.get(n.arg[0]) if n.op is Op.VAR else None) for e in self.index)

    def positions(self) -> tuple[np.ndarray, ...]:
        """The stored position of every element, one array per stored dimension."""
        names = tuple(a.arg[0] for a in self.axes)
        dom = Domain(names, tuple((0, a.arg[1]) for a in self.axes))
        evaluator = Evaluator({})
        return tuple(np.broadcast_to(evaluator.run(e, dom), dom.shape) for e in self.index)

    def pack(self, array: np.ndarray) -> np.ndarray:
        """The array in this layout (a new one; zeros where no element goes)."""
        out = np.zeros(self.shape, dtype=array.dtype)
        out[self.positions()] = array
        return out


def layout_of(tensor: Tensor, axes: list[str], texts: list[str]) -> Layout:
    """The layout a transform_layout step describes, checked over every element of `tensor` (once:
    a schedule's steps are applied again each time fusion plans or sizes replay it)."""
    return _layout(tensor, tuple(axes), tuple(texts))


@functools.lru_cache(maxsize=512)
def _layout(tensor: Tensor, axes: tuple[str, ...], texts: tuple[str, ...]) -> Layout:
    if len(axes) != len(tensor.shape) or len(set(axes)) != len(axes):
        raise StepError(f"the map of {tensor.name} needs one distinct variable per dimension of {tensor.shape}, got "
                        f"({', '.join(axes)})")
    bad = [a for a in axes if not a.isidentifier() or keyword.iskeyword(a)]
    if bad:
        raise StepError(f"the map of {tensor.name} names its variable {bad[0]!r:.40}, not an identifier")
    if not all(isinstance(n, int) for n in tensor.shape):
        raise StepError(f"{tensor.name} has symbolic sizes {tensor.shape}; a layout needs a static shape")
    variables = tuple(Expr(Op.VAR, dtypes.INDEX_DTYPE, (), (n, e)) for n, e in zip(axes, tensor.shape, strict=True))
    try:
        index = [parse_index(t, dict(zip(axes, variables, strict=True))) for t in texts]
    except Exception as e:  # noqa: BLE001 - the parser's ScheduleError, said as this step's reason
        raise StepError(str(e)) from None
    index = [const(i, dtypes.INDEX_DTYPE) if isinstance(i, int) else i for i in index]
    if not index:
        raise StepError(f"the map of {tensor.name} gives no index")
    shape = []
    for text, e in zip(texts, index, strict=True):
        bounds = interval(e)
        if not dtypes.is_int(e.dtype) or bounds is None or bounds[0] < 0:
            raise StepError(f"index {text!r} of the map of {tensor.name} is not a non-negative integer over its "
                            f"domain (bounds {bounds})")
        shape.append(bounds[1] + 1)
    layout = Layout(variables, tuple(index), tuple(shape))
    count = math.prod(tensor.shape)
    if count > MAX_CHECKED:
        raise StepError(f"{tensor.name} has {count} elements; a layout is checked over at most {MAX_CHECKED}")
    if not _one_to_one(layout.positions(), layout.shape, tensor.shape):
        raise StepError(f"the map of {tensor.name} sends two elements to one position; a layout is one to one")
    return layout


def _one_to_one(positions: tuple[np.ndarray, ...], stored: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether no two elements of `shape` land on one stored position: marked in a table of the stored
    positions when it is at most a few times the elements (a weight matrix's panels: one linear pass,
    where sorting 3M positions took 1.8 s), sorted otherwise."""
    count = math.prod(shape)
    flat = np.ravel_multi_index(positions, stored).ravel()
    if math.prod(stored) <= 4 * count:
        return int(np.count_nonzero(np.bincount(flat, minlength=math.prod(stored)))) == count
    return np.unique(flat).size == count
