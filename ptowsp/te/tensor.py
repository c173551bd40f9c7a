"""A workload's named arrays (`Tensor`): indexed, they become the expression IR's loads.

Above `expr.py` (a load's node holds its tensor, read by duck typing) and `boundary.py` (a tensor's
boundary views), so that neither imports this module back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ptowsp.errors import DTypeError, ShapeError
from ptowsp.te import dtypes
from ptowsp.te.boundary import boundary
from ptowsp.te.expr import Expr, Op, Operand, Unindexed, lift, shape_text


@dataclass(frozen=True)
class Tensor(Unindexed):
    """A named array of a workload: an input or the result of a task.

    Index it with one integer expression per dimension to read it:
    `A[i, k]`, `A[i + 1, 2 * j]`.
    """

    name: str
    shape: tuple[int | Expr, ...]  # an Expr for a symbolic dimension (te/sizes.py)
    dtype: str
    owner: int = field(default=0, repr=False)  # id of the workload that declared it

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        if not all(isinstance(d, int) for d in self.shape):
            raise ShapeError(f"tensor {self.name} has symbolic shape {self.shape_text}; its size is known only "
                             "once the sizes are bound (Workload.bind)")
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def shape_text(self) -> str:
        return shape_text(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def __getitem__(self, index: object) -> Expr:
        items = index if isinstance(index, tuple) else (index,)
        if len(items) != self.ndim:
            raise ShapeError(
                f"tensor {self.name} has {self.ndim} dimension(s) {self.shape_text} "
                f"but was indexed with {len(items)} index expression(s)"
            )
        indices = []
        for pos, item in enumerate(items):
            if isinstance(item, (slice, type(Ellipsis))) or item is None:
                raise ShapeError(
                    f"tensor {self.name}, index {pos}: slices are not supported; "
                    "index every dimension with an integer expression such as A[i, j]"
                )
            expr = lift(item)
            if not dtypes.is_int(expr.dtype):
                raise DTypeError(
                    f"tensor {self.name}, index {pos} ({expr}) has dtype {expr.dtype}; "
                    "indices must be integer expressions of loop variables, constants and integer tensor reads"
                )
            indices.append(expr)
        return Expr(Op.LOAD, self.dtype, tuple(indices), self)

    def boundary(self, kind: str, value: Operand | None = None):
        """A view that any integer index reads: "repeat_edge", ("constant", value) or "mirror"
        (Halide's BoundaryConditions; te/boundary.py gives the exact index maps)."""
        return boundary(self, kind, value)

    def unindexed_error(self) -> ShapeError:
        return ShapeError(f"tensor {self.name} was used without indices; read an element with "
                          f"{self.name}[{', '.join('i' + str(d) for d in range(self.ndim))}]")

    def _unindexed(self, *_: object) -> Expr:
        """Arithmetic on a whole tensor is a mistake: say how to read an element instead."""
        return lift(self)

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _unindexed
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __neg__ = __abs__ = _unindexed
    __lt__ = __le__ = __gt__ = __ge__ = __and__ = __rand__ = __or__ = __ror__ = __invert__ = _unindexed

    def __str__(self) -> str:
        return self.name
