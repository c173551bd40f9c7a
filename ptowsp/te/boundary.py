"""Boundary conditions (Halide's BoundaryConditions): a view of a tensor that any integer index reads.

`X.boundary("repeat_edge")`, `X.boundary("constant", value)` and
`X.boundary("mirror")` return a view; indexing it rewrites each index so the
read is always inside `X`, and the result is an ordinary expression:

- repeat_edge: `clamp(i, 0, n - 1)`;
- mirror (Halide's mirror_image: the edge element repeats, `-1 -> 0`,
  `n -> n - 1`): with `m = i mod 2n` (floor), `min(m, 2n - 1 - m)`, clamped
  to `[0, n - 1]` so bounds inference proves it in range without knowing
  that `min` of the two is;
- constant: `where(every index in range, X[clamped indices], value)`.

Because the indices are clamped rather than guarded, a stencil over the
view needs no `pw.where` of its own, every read is provably in bounds when
the task is defined, and bounds inference gives a tile the box it touches
(its halo clipped to the tensor).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ptowsp.errors import DTypeError, ShapeError
from ptowsp.te.expr import Expr, Operand, Unindexed, lift, where
from ptowsp.te.ops import clamp, minimum

if TYPE_CHECKING:
    from ptowsp.te.tensor import Tensor

KINDS = ("repeat_edge", "constant", "mirror")


@dataclass(frozen=True)
class BoundaryView:
    """A tensor read through a boundary condition: index it like the tensor, with any integer index."""

    tensor: Tensor
    kind: str
    value: Expr | None = None  # the constant outside, for kind "constant"

    def __getitem__(self, index: object) -> Expr:
        items = index if isinstance(index, tuple) else (index,)
        if len(items) != self.tensor.ndim:
            raise ShapeError(f"{self.tensor.name}.boundary({self.kind!r}) has {self.tensor.ndim} dimension(s) "
                             f"{self.tensor.shape_text} but was indexed with {len(items)} index expression(s)")
        indices = [lift(item) for item in items]
        inside = [_INDEX[self.kind](i, n) for i, n in zip(indices, self.tensor.shape, strict=True)]
        read = self.tensor[tuple(inside)]
        if self.kind != "constant":
            return read
        within = None
        for i, n in zip(indices, self.tensor.shape, strict=True):
            ok = (i >= 0) & (i < n)
            within = ok if within is None else within & ok
        return where(within, read, self.value)

    def __str__(self) -> str:
        return f"{self.tensor.name}.boundary({self.kind!r})"


def boundary(tensor: Tensor, kind: str, value: Operand | None = None) -> BoundaryView:
    """The view of `tensor` under boundary condition `kind` (and `value`, for "constant")."""
    if kind not in KINDS:
        raise ShapeError(f"{tensor.name}.boundary({kind!r}): the boundary conditions are {', '.join(KINDS)}")
    if kind == "constant":
        if value is None:
            raise ShapeError(f"{tensor.name}.boundary('constant', value): give the value read outside, "
                             "e.g. boundary('constant', 0)")
        if isinstance(value, (Unindexed, BoundaryView)):
            raise DTypeError(f"{tensor.name}.boundary('constant', value): the value is a scalar, got {value}")
        return BoundaryView(tensor, kind, lift(value, tensor.dtype))
    if value is not None:
        raise ShapeError(f"{tensor.name}.boundary({kind!r}) takes no value (only 'constant' does)")
    return BoundaryView(tensor, kind)


def _repeat_edge(i: Expr, n: int | Expr) -> Expr:
    return clamp(i, 0, n - 1)


def _mirror(i: Expr, n: int | Expr) -> Expr:
    period = 2 * n
    m = i % period
    return clamp(minimum(m, period - 1 - m), 0, n - 1)


_INDEX: dict[str, Callable[[Expr, int | Expr], Expr]] = {
    "repeat_edge": _repeat_edge, "mirror": _mirror, "constant": _repeat_edge}
