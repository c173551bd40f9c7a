"""Symbolic sizes: dimensions named by the user and bound at run time from the input arrays.

`wl.input("x", ("n", 4096))` makes `n` a size: an `Op.SIZE` leaf (int64)
that shapes, loop extents and reduce axes may use, alone or in integer
arithmetic (`n + 1`, `(n + 63) // 64` for the outer loop of a split).  An
extent is therefore an `int` or such an expression; the helpers here keep
integers integers, so a workload without sizes never sees an expression
where it had a number.

Kernels are compiled once over the symbols; `bind` turns an expression,
tensor or workload piece into its value at one binding, which is how the
reference, the task table and the memory plan handle each run.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Mapping

from ptowsp.errors import ShapeError
from ptowsp.te.expr import Expr, Op, binary, const, walk
from ptowsp.te.fold import fold
from ptowsp.te.rewrite import rewrite, rules
from ptowsp.te.names import check_name

Extent = int | Expr
_INT_OPS = {Op.ADD: int.__add__, Op.SUB: int.__sub__, Op.MUL: int.__mul__, Op.FLOORDIV: int.__floordiv__,
            Op.MOD: int.__mod__, Op.MAX: max, Op.MIN: min}


def size_var(name: str) -> Expr:
    return Expr(Op.SIZE, "int64", (), name)


def dimension(d: object, what: str) -> Extent:
    """One entry of a shape: an int >= 0 (0: an empty tensor, workloads/empties.py), a size name, or an
    int64 expression over sizes."""
    if isinstance(d, str):
        return size_var(check_name(d, f"{what}: symbolic size", ShapeError))
    if isinstance(d, Expr):
        stray = [n for n in walk(d) if n.op not in _INT_OPS and n.op not in (Op.SIZE, Op.CONST, Op.CAST)]
        if d.dtype not in ("int32", "int64") or stray:
            raise ShapeError(f"{what}: a symbolic dimension must be integer arithmetic over sizes, got {d}")
        return d
    if isinstance(d, bool) or not isinstance(d, int) or d < 0:
        raise ShapeError(f"{what}: a dimension must be an int >= 0 or a size name such as 'n', got {d!r}")
    return d


def is_static(x: object) -> bool:
    return isinstance(x, int)


def names_in(x: Extent | Expr | Iterable) -> set[str]:
    """The size names an extent, a shape or an expression (its loop extents and tensor shapes too) uses."""
    if isinstance(x, int):
        return set()
    if isinstance(x, Expr):
        return set(_names(x))
    return set().union(*(names_in(item) for item in x)) if not isinstance(x, str) else set()


@functools.lru_cache(maxsize=4096)
def _names(e: Expr) -> frozenset[str]:
    found: set[str] = set()
    for n in walk(e):
        if n.op is Op.SIZE:
            found.add(n.arg)
        elif n.op in (Op.VAR, Op.RVAR) and isinstance(n.arg[1], Expr):
            found |= _names(n.arg[1])
        elif n.op is Op.LOAD:
            found |= names_in(n.arg.shape)
    return frozenset(found)


def as_expr(x: Extent) -> Expr:
    return const(x, "int64") if isinstance(x, int) else x


def add(a: Extent, b: Extent) -> Extent:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if isinstance(b, int) and b == 0:
        return a
    return binary(Op.ADD, as_expr(a), as_expr(b))


def sub(a: Extent, b: Extent) -> Extent:
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    if isinstance(b, int) and b == 0:
        return a
    if isinstance(a, Expr) and isinstance(b, Expr) and a.same_as(b):
        return 0
    return binary(Op.SUB, as_expr(a), as_expr(b))


def mul(a: Extent, b: Extent) -> Extent:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if (isinstance(a, int) and a == 0) or (isinstance(b, int) and b == 0):
        return 0
    if isinstance(a, int) and a == 1:
        return b
    if isinstance(b, int) and b == 1:
        return a
    return binary(Op.MUL, as_expr(a), as_expr(b))


def ceil_div(a: Extent, factor: int) -> Extent:
    if isinstance(a, int):
        return -(-a // factor)
    return a if factor == 1 else binary(Op.FLOORDIV, binary(Op.ADD, a, const(factor - 1, "int64")),
                                        const(factor, "int64"))


def minimum(a: Extent, b: Extent) -> Extent:
    return _extreme(a, b, Op.MIN, min)


def maximum(a: Extent, b: Extent) -> Extent:
    return _extreme(a, b, Op.MAX, max)


def _extreme(a: Extent, b: Extent, op: Op, pick) -> Extent:
    if isinstance(a, int) and isinstance(b, int):
        return pick(a, b)
    if isinstance(a, Expr) and isinstance(b, Expr) and a.same_as(b):
        return a
    number, symbol = (a, b) if isinstance(a, int) else (b, a)
    if isinstance(number, int) and number <= least(symbol):  # minimum(1, n) is 1: sizes are at least 1
        return number if op is Op.MIN else symbol
    return binary(op, as_expr(a), as_expr(b))


def most(x: Extent | Expr) -> int | None:
    """A number an extent never exceeds at any binding (minimum(512, n) -> 512), or None."""
    return _bounds(x)[1]


def least(x: Extent | Expr) -> float:
    """A lower bound of an extent or index over every binding (sizes are at least 1, loop variables at
    least 0); -inf where none is known."""
    return _bounds(x)[0]


def _bounds(x: Extent | Expr) -> tuple[float, int | None]:
    """(least, most) of an extent or index: what `least` and `most` say, from one fold."""
    return (x, x) if isinstance(x, int) else fold(x, _bounds_of)


def _bounds_of(x: Expr, parts: tuple[tuple[float, int | None], ...]) -> tuple[float, int | None]:
    if x.op is Op.SIZE:
        return 1, None
    if x.op in (Op.VAR, Op.RVAR):
        return 0, None
    if x.op is Op.CONST:
        return (x.arg, x.arg) if isinstance(x.arg, int) else (-math.inf, None)
    if x.op is Op.CAST:
        return (parts[0][0] if x.src[0].dtype in ("int32", "int64") else -math.inf), None
    low = [lo for lo, _ in parts]
    if x.op is Op.ADD:
        return low[0] + low[1], None
    if x.op is Op.MUL and min(low) >= 0:
        return low[0] * low[1], None
    if x.op is Op.FLOORDIV and x.src[1].op is Op.CONST and x.src[1].arg > 0 and low[0] > -math.inf:
        return low[0] // x.src[1].arg, None
    if x.op is Op.MIN:
        high = [hi for _, hi in parts if hi is not None]
        return min(low), (min(high) if high else None)
    if x.op is Op.MAX:
        return max(low), None
    return -math.inf, None


def value(x: Extent | Expr, sizes: Mapping[str, int]) -> int:
    """The integer an extent takes at a binding (KeyError for a size not bound)."""
    if isinstance(x, int):
        return x
    return fold(x, lambda n, parts: _value_of(n, parts, sizes), _integer_operands)


def _integer_operands(x: Expr) -> tuple[Expr, ...]:
    """The operands `value` reads: none of a node it cannot compute (the error names that node)."""
    return x.src if x.op in _INT_OPS or x.op in (Op.CAST, Op.NEG) else ()


def _value_of(x: Expr, parts: tuple[int, ...], sizes: Mapping[str, int]) -> int:
    op = x.op
    if op is Op.CONST:
        return int(x.arg)
    if op is Op.SIZE:
        return sizes[x.arg]
    if op is Op.CAST:
        return parts[0]
    if op is Op.NEG:
        return -parts[0]
    if op in _INT_OPS:
        return _INT_OPS[op](*parts)
    raise ShapeError(f"{x} is not integer arithmetic over sizes")


def bind_shape(shape: tuple[Extent, ...], sizes: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(value(d, sizes) for d in shape)


def bind(e: Expr, sizes: Mapping[str, int]) -> Expr:
    """e at a binding: sizes become constants, loop extents and tensor (or buffer) shapes numbers."""
    if not sizes or not _names(e):
        return e

    def bound(n: Expr) -> Expr | None:  # a load's indices bound already
        if n.op is Op.SIZE:
            return const(sizes[n.arg], "int64")
        if n.op in (Op.VAR, Op.RVAR) and isinstance(n.arg[1], Expr):
            return Expr(n.op, n.dtype, (), (n.arg[0], value(n.arg[1], sizes)))
        if n.op is Op.LOAD and names_in(n.arg.shape):
            return Expr(Op.LOAD, n.dtype, n.src, dataclasses.replace(n.arg, shape=bind_shape(n.arg.shape, sizes)))
        return None

    return rewrite(e, rules(bound, Op.SIZE, Op.VAR, Op.RVAR, Op.LOAD), fixpoint=False)
