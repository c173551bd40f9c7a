"""The expression IR: one immutable node type, `Expr(op, dtype, src, arg)`.

Every expression a user writes in a `compute` lambda becomes a tree of
`Expr` nodes.  Nodes are frozen and hash-consed: building a node equal in
structure to a live one returns that one, so structural equality is identity,
an expression costs what its distinct parts cost (an inlined producer read
at equal indices is one object), and passes memoize by node.  Construction canonicalises
types: the two operands of a binary node always share one dtype (explicit
`CAST` nodes are inserted on promotion), so evaluators and code generators
never have to re-derive promotion rules.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Union

import numpy as np

from ptowsp.errors import DTypeError, ShapeError
from ptowsp.te import dtypes
from ptowsp.te.opcodes import (  # noqa: F401 - re-exported: passes read them from here
    ARG_KINDS, ARITH_OPS, BINARY_OPS, COMPARE_OPS, LOGIC_OPS, REDUCE_KINDS, UNARY_FLOAT_OPS, Op,
)
from ptowsp.te.printer import to_text


Operand = Union["Expr", bool, int, float, np.generic]


class _HashConsed(type):
    """Expr's constructor: a node equal to a live one is that one.

    The table holds nodes weakly and keys them by their operands' identities (operands are
    hash-consed already), their op, dtype and arg; a constant's value by its repr, which keeps
    -0.0 apart from 0.0 and a NaN equal to itself."""

    _table: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
    _lock = threading.RLock()  # an arg's equality may build an expression (a symbolic extent)

    def __call__(cls, op: Op, dtype: str, src: tuple = (), arg: Any = None) -> Any:
        key = (op, dtype, tuple(map(id, src)), repr(arg) if op is Op.CONST else arg)
        with cls._lock:
            node = cls._table.get(key)
            if node is None:
                node = cls._table[key] = super().__call__(op, dtype, src, arg)
        return node


@dataclass(frozen=True, eq=False)
class Expr(metaclass=_HashConsed):
    """One node of a tensor expression.  Build with operators and `pw.*` functions."""

    op: Op
    dtype: str
    src: tuple[Expr, ...] = ()
    arg: Any = None

    # -- identity -----------------------------------------------------------
    @cached_property
    def _hash(self) -> int:
        return hash((self.op, self.dtype, self.src, self.arg))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:
        return Expr, (self.op, self.dtype, self.src, self.arg)  # unpickled through the table

    @cached_property
    def loops_read(self) -> frozenset[str]:
        """The loop variables (VAR and RVAR) in this expression, by name: made once per node, so
        an analysis that asks of every node of an index what moves in it pays once (te/affine.py)."""
        if self.op in (Op.VAR, Op.RVAR):
            return frozenset((self.arg[0],))
        return frozenset().union(*(x.loops_read for x in self.src)) if self.src else frozenset()

    @cached_property
    def tensors_read(self) -> frozenset[str]:
        """The tensors and buffers this expression loads from, by name (made once per node)."""
        found = frozenset().union(*(x.tensors_read for x in self.src)) if self.src else frozenset()
        return found | {self.arg.name} if self.op is Op.LOAD else found

    def same_as(self, other: object) -> bool:
        """Structural equality (`==` builds a comparison expression instead): identity, nodes being
        hash-consed."""
        return self is other

    def __bool__(self) -> bool:
        # Lets `==` serve both as a comparison builder and in dict/set lookups, as in TVM.
        if self.op is Op.EQ:
            return self.src[0].same_as(self.src[1])
        if self.op is Op.NE:
            return not self.src[0].same_as(self.src[1])
        raise TypeError(
            f"the expression {self} has no truth value while the workload is being built; "
            "use pw.where(cond, a, b) for a choice and & / | to combine conditions"
        )

    # -- accessors for loop variables ----------------------------------------
    @property
    def name(self) -> str:
        if self.op not in (Op.VAR, Op.RVAR):
            raise AttributeError(f"{self.op.name} expressions have no name")
        return self.arg[0]

    @property
    def extent(self) -> int | Expr:
        if self.op not in (Op.VAR, Op.RVAR):
            raise AttributeError(f"{self.op.name} expressions have no extent")
        return self.arg[1]

    def __str__(self) -> str:
        return to_text(self)

    def __repr__(self) -> str:
        return f"Expr({self}: {self.dtype})"

    # -- operators -----------------------------------------------------------
    def __add__(self, o: Operand) -> Expr: return binary(Op.ADD, self, o)
    def __radd__(self, o: Operand) -> Expr: return binary(Op.ADD, o, self)
    def __sub__(self, o: Operand) -> Expr: return binary(Op.SUB, self, o)
    def __rsub__(self, o: Operand) -> Expr: return binary(Op.SUB, o, self)
    def __mul__(self, o: Operand) -> Expr: return binary(Op.MUL, self, o)
    def __rmul__(self, o: Operand) -> Expr: return binary(Op.MUL, o, self)
    def __truediv__(self, o: Operand) -> Expr: return binary(Op.DIV, self, o)
    def __rtruediv__(self, o: Operand) -> Expr: return binary(Op.DIV, o, self)
    def __floordiv__(self, o: Operand) -> Expr: return binary(Op.FLOORDIV, self, o)
    def __rfloordiv__(self, o: Operand) -> Expr: return binary(Op.FLOORDIV, o, self)
    def __mod__(self, o: Operand) -> Expr: return binary(Op.MOD, self, o)
    def __rmod__(self, o: Operand) -> Expr: return binary(Op.MOD, o, self)
    def __pow__(self, o: Operand) -> Expr: return binary(Op.POW, self, o)
    def __rpow__(self, o: Operand) -> Expr: return binary(Op.POW, o, self)
    def __and__(self, o: Operand) -> Expr: return binary(Op.AND, self, o)
    def __rand__(self, o: Operand) -> Expr: return binary(Op.AND, o, self)
    def __or__(self, o: Operand) -> Expr: return binary(Op.OR, self, o)
    def __ror__(self, o: Operand) -> Expr: return binary(Op.OR, o, self)
    def __lt__(self, o: Operand) -> Expr: return binary(Op.LT, self, o)
    def __le__(self, o: Operand) -> Expr: return binary(Op.LE, self, o)
    def __gt__(self, o: Operand) -> Expr: return binary(Op.GT, self, o)
    def __ge__(self, o: Operand) -> Expr: return binary(Op.GE, self, o)
    def __eq__(self, o: object) -> Expr: return binary(Op.EQ, self, o)  # type: ignore[override, arg-type]
    def __ne__(self, o: object) -> Expr: return binary(Op.NE, self, o)  # type: ignore[override, arg-type]
    def __neg__(self) -> Expr: return unary(Op.NEG, self)
    def __pos__(self) -> Expr: return self
    def __abs__(self) -> Expr: return unary(Op.ABS, self)
    def __invert__(self) -> Expr: return unary(Op.NOT, self)


class Unindexed:
    """An operand that names a whole array (a workload's tensor): a read of it needs indices."""

    def unindexed_error(self) -> ShapeError:
        """The error a read of it without indices raises (a tensor's names it and shows the indices)."""
        return ShapeError(f"{self} was used without indices; index it to read an element")


# -- construction ---------------------------------------------------------------


def shape_text(shape) -> str:
    """(n, 4096): how a shape reads in messages and in a workload's text."""
    items = [str(d) for d in shape]
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def const(value: bool | int | float, dtype: str) -> Expr:
    """A scalar constant of a given dtype (an integer wrapped into its range, bfloat16 rounded)."""
    dtype = dtypes.normalize(dtype)
    return Expr(Op.CONST, dtype, (), dtypes.scalar_value(value, dtype))


def lift(value: Operand, partner: str | None = None) -> Expr:
    """Turn an operand into an Expr; Python scalars take a weak dtype beside `partner`."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, np.generic):  # numpy scalars carry a concrete dtype
        return const(value.item(), dtypes.normalize(value.dtype))
    if isinstance(value, (bool, int, float)):
        if partner is None:
            return const(value, dtypes.scalar_dtype(value))
        return const(value, dtypes.weak_scalar_dtype(value, partner))
    if isinstance(value, Unindexed):
        raise value.unindexed_error()
    raise DTypeError(f"cannot use {value!r} ({type(value).__name__}) in a tensor expression")


def cast(x: Operand, dtype: str) -> Expr:
    """Convert to `dtype` by the rules of dtypes.cast_array; a no-op when x already has it."""
    x = lift(x)
    dtype = dtypes.normalize(dtype)
    if x.dtype == dtype:
        return x
    if x.op is Op.CONST:
        return const(dtypes.cast_scalar(x.arg, x.dtype, dtype), dtype)
    return Expr(Op.CAST, dtype, (x,), dtype)


def lift_pair(a: Operand, b: Operand) -> tuple[Expr, Expr]:
    """Lift two operands to one common dtype, weak scalars taking the other's dtype."""
    if not isinstance(a, Expr) and isinstance(b, Expr):
        a = lift(a, b.dtype)
    elif not isinstance(b, Expr) and isinstance(a, Expr):
        b = lift(b, a.dtype)
    a, b = lift(a), lift(b)
    common = dtypes.promote(a.dtype, b.dtype)
    return cast(a, common), cast(b, common)


def binary(op: Op, a: Operand, b: Operand) -> Expr:
    """Build a binary node with NumPy-style promotion made explicit."""
    x, y = lift_pair(a, b)
    dtype = x.dtype
    if op in COMPARE_OPS:
        return Expr(op, "bool", (x, y))
    if op in LOGIC_OPS:
        if dtypes.is_float(dtype):
            raise DTypeError(f"{op.name.lower()} (& or |) needs bool or integer operands, got {dtype}: {x}, {y}")
        return Expr(op, dtype, (x, y))
    if dtype == "bool" and op not in (Op.MAX, Op.MIN):
        raise DTypeError(
            f"arithmetic {op.name.lower()} on two bool operands ({x}, {y}); "
            "cast them first, e.g. pw.cast(mask, 'int32')"
        )
    if op in (Op.DIV, Op.POW):  # true division and powers compute in floating point
        dtype = dtypes.to_float(dtype)
        x, y = cast(x, dtype), cast(y, dtype)
    return Expr(op, dtype, (x, y))


def unary(op: Op, a: Operand) -> Expr:
    """Build a unary node; float functions of integers compute in float64."""
    x = lift(a)
    if op in UNARY_FLOAT_OPS:
        x = cast(x, dtypes.to_float(x.dtype))
    elif op in (Op.FLOOR, Op.CEIL, Op.ROUND) and not dtypes.is_float(x.dtype):
        return x  # integers are already whole
    elif op is Op.ABS and (x.dtype == "bool" or dtypes.is_unsigned(x.dtype)):
        return x
    elif op is Op.NEG and x.dtype == "bool":
        raise DTypeError(f"cannot negate the bool expression {x}; use ~ for logical not")
    elif op is Op.NOT and dtypes.is_float(x.dtype):
        raise DTypeError(f"~ needs a bool or integer operand, got {x.dtype}: {x}")
    return Expr(op, x.dtype, (x,))


def where(cond: Operand, a: Operand, b: Operand) -> Expr:
    """`a` where cond holds, else `b`; only the chosen side is read."""
    c = lift(cond)
    if c.dtype != "bool":
        raise DTypeError(f"pw.where needs a bool condition, got {c.dtype}: {c}")
    x, y = lift_pair(a, b)
    return Expr(Op.WHERE, x.dtype, (c, x, y))


def walk(expr: Expr, operands: Callable[[Expr], Iterable[Expr]] | None = None) -> Iterator[Expr]:
    """Yield every node of the tree, parents before children (shared nodes once); `operands(node)`:
    the nodes to go on to from it, instead of its `src` (a load's collapsed indices)."""
    seen: dict[int, Expr] = {}  # the node too: one `operands` made stays alive, so its id stays its own
    stack = [expr]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        yield node
        stack.extend(reversed(node.src if operands is None else tuple(operands(node))))


def guarded(expr: Expr, once: bool = True, stop: Callable[[Expr], bool] | None = None
            ) -> Iterator[tuple[Expr, tuple[Expr, ...]]]:
    """Every node with the conditions of the `where`s around it, each condition as it holds there (`c` on
    the chosen side, `~c` on the other), depth first in reading order (a condition before its
    sides).  `once`: a node met again under the same conditions is not yielded again; `stop(node)`:
    its operands are not visited."""
    seen: set[tuple[Expr, tuple[Expr, ...]]] = set()
    stack: list[tuple[Expr, tuple[Expr, ...]]] = [(expr, ())]
    while stack:
        e, conds = stack.pop()
        if once:
            if (e, conds) in seen:
                continue
            seen.add((e, conds))
        yield e, conds
        if stop is not None and stop(e):
            continue
        if e.op is Op.WHERE:
            c, then, other = e.src
            stack += [(other, (*conds, unary(Op.NOT, c))), (then, (*conds, c)), (c, conds)]
        else:
            stack += [(s, conds) for s in reversed(e.src)]


def outermost_reductions(body: Expr) -> list[tuple[Expr, Expr | None]]:
    """Each REDUCE not nested in another, with the where-condition that guards it (None: always), once
    per path to it.

    The schedule exposes the loops of a task's reduction only when there is
    exactly one; lowering builds its nests from the same answer.
    """
    return [(e, functools.reduce(lambda a, b: binary(Op.AND, a, b), conds) if conds else None)
            for e, conds in guarded(body, once=False, stop=lambda e: e.op is Op.REDUCE) if e.op is Op.REDUCE]
