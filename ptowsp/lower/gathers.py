"""Gathers kept inside their tensors: an index read from a tensor is clamped into its dimension."""

from __future__ import annotations

from ptowsp.lower.ir import Stmt, map_exprs
from ptowsp.te import Expr, Op, cast, const, sizes, substitute, walk
from ptowsp.te.expr import binary


def clamp_gathers(body: Stmt) -> Stmt:
    """An index that reads a tensor (a gather) is clamped into its dimension, so a bad index value
    reads an edge element instead of memory outside the tensor (debug runs check the values
    before the kernel runs and name the offender)."""
    def clamp(n: Expr) -> Expr | None:
        if n.op is not Op.LOAD or all(i.dtype == "int64" and not any(m.op is Op.LOAD for m in walk(i))
                                      for i in n.src):
            return None
        indices = []
        for i, size in zip(n.src, n.arg.shape, strict=True):
            inner = cast(substitute(i, clamp), "int64")  # an index read from an int32 tensor, widened
            if any(m.op is Op.LOAD for m in walk(i)):
                inner = binary(Op.MIN, binary(Op.MAX, inner, const(0, "int64")), sizes.as_expr(sizes.sub(size, 1)))
            indices.append(inner)
        return Expr(Op.LOAD, n.dtype, tuple(indices), n.arg)

    return map_exprs(body, lambda e: substitute(e, clamp))
