"""Gathers kept inside their tensors: an index read from a tensor is clamped into its dimension."""

from __future__ import annotations

from ptowsp.lower.ir import Stmt, map_exprs
from ptowsp.te import Expr, Op, cast, const, rewrite, rules, sizes
from ptowsp.te.expr import binary


def clamp_gathers(body: Stmt) -> Stmt:
    """An index that reads a tensor (a gather) is clamped into its dimension, so a bad index value
    reads an edge element instead of memory outside the tensor (debug runs check the values
    before the kernel runs and name the offender)."""
    def clamp(n: Expr) -> Expr | None:  # its indices' own gathers already clamped
        if all(i.dtype == "int64" and not i.tensors_read for i in n.src):
            return None
        indices = []
        for i, size in zip(n.src, n.arg.shape, strict=True):
            inner = cast(i, "int64")  # an index read from an int32 tensor, widened
            if i.tensors_read:
                inner = binary(Op.MIN, binary(Op.MAX, inner, const(0, "int64")), sizes.as_expr(sizes.sub(size, 1)))
            indices.append(inner)
        return Expr(Op.LOAD, n.dtype, tuple(indices), n.arg)

    clamps = rules(clamp, Op.LOAD)
    return map_exprs(body, lambda e: rewrite(e, clamps, fixpoint=False))
