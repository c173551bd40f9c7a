"""A reduction's accumulator: the value it starts from, its dtype, how one element folds in.

Kinds are "sum", "max", "min" or a one-value user reducer (te/reducer.py);
argmax and argmin keep a pair instead (argreduce.py), and several-value
reducers one accumulator per value (tuplereduce.py).
"""

from __future__ import annotations

from ptowsp.te import Expr, Op, cast
from ptowsp.te.expr import binary
from ptowsp.te.reducer import UserReducer, reduction_identity

COMBINE_OP = {"sum": Op.ADD, "max": Op.MAX, "min": Op.MIN}


def identity(kind: str | UserReducer, dtype: str) -> Expr:
    """The value a reduction starts from."""
    return reduction_identity(kind, dtype)


def combine(kind: str | UserReducer, acc: Expr, value: Expr) -> Expr:
    if isinstance(kind, UserReducer):
        return kind.apply(acc, value)
    return binary(COMBINE_OP[kind], acc, cast(value, acc.dtype))
