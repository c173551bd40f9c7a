"""Constant folding and exact algebraic identities, after inlining has substituted indices.

Inlining a producer read at a constant row turns its `pw.where(s == 0, ...)`
into `where(0 == 0, ...)`; a unit loop becomes 0; a border guard such as
`y >= 0` holds for every value of a loop variable.  Left in, every copy is
computed per point and LLVM spends its time proving the same facts again.

Every rewrite here gives the same value as the reference evaluator
(te/evaluate.py) would, so results never change:

- an operation on constants is evaluated by that evaluator, for integers,
  bools, float32 and float64 and for the exact operations only (arithmetic,
  comparisons, logic, casts, select); transcendental functions are left to
  the target, whose float32 versions are not numpy's;
- identities that hold bit for bit: `x * 1`, `x / 1.0`, `x - 0`, `x + 0` on
  integers (not floats: -0.0 + 0.0 is +0.0), `x * 0` and `x - x` on integers,
  `--x`, `~~x`, `x & x`, `max(x, x)`, `where(c, a, a)`, bool `&` and `|` with
  a constant;
- `where` with a constant condition keeps the chosen side (the other was
  never read);
- an integer comparison that interval arithmetic over the loop extents
  decides is a constant (index arithmetic does not wrap, as bounds inference
  already assumes); so is an integer `max` / `min` whose operands' bounds
  say which one wins (the clamp of a boundary view, inside the tensor).
"""

from __future__ import annotations

import numpy as np

from ptowsp.lower.ir import Stmt, map_exprs
from ptowsp.te import Expr, Op, const, dtypes
from ptowsp.te.bounds import interval
from ptowsp.te.evaluate import Domain, Evaluator
from ptowsp.te.rewrite import ANY, Pat, Rules, rewrite

_FOLDED = frozenset({Op.NEG, Op.ABS, Op.NOT, Op.FLOOR, Op.CEIL, Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOORDIV,
                     Op.MOD, Op.MAX, Op.MIN, Op.AND, Op.OR, Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE, Op.CAST})
_EXACT_FLOATS = frozenset({"float32", "float64"})  # the others compute through float32 in the reference
_DECIDE = {Op.LT: lambda a, b: (a[1] < b[0], a[0] >= b[1]), Op.LE: lambda a, b: (a[1] <= b[0], a[0] > b[1]),
           Op.GT: lambda a, b: (a[0] > b[1], a[1] <= b[0]), Op.GE: lambda a, b: (a[0] >= b[1], a[1] < b[0]),
           Op.EQ: lambda a, b: (a[0] == a[1] == b[0] == b[1], a[1] < b[0] or b[1] < a[0]),
           Op.NE: lambda a, b: (a[1] < b[0] or b[1] < a[0], a[0] == a[1] == b[0] == b[1])}
_CONSTANTS = Evaluator({})
_NOWHERE = Domain((), ())


def simplify(s: Stmt) -> Stmt:
    """Every expression of the statement folded and simplified (module docstring)."""
    return map_exprs(s, simplify_expr)


def simplify_expr(e: Expr) -> Expr:
    """The expression with constants folded and exact identities applied, bottom-up (SIMPLIFY)."""
    return rewrite(e, SIMPLIFY)


def _foldable(dtype: str) -> bool:
    return dtype == "bool" or dtypes.is_int(dtype) or dtype in _EXACT_FLOATS


def _is(e: Expr, value: float) -> bool:
    """e is the constant `value` (a bool constant is never a number here)."""
    return e.op is Op.CONST and not isinstance(e.arg, bool) and e.arg == value and not (
        e.arg == 0 and dtypes.is_float(e.dtype) and np.signbit(e.arg) != np.signbit(value))


def _select(e: Expr) -> Expr | None:
    """where with a constant condition is the side it chooses; with equal sides, that side."""
    cond, yes, no = e.src
    if cond.op is Op.CONST:
        return yes if cond.arg else no
    return yes if yes is no else None


def _fold(e: Expr) -> Expr | None:
    """An exact operation on constants, evaluated as the reference evaluator does."""
    if not all(s.op is Op.CONST for s in e.src) or not all(_foldable(d) for d in (e.dtype, *(s.dtype for s in e.src))):
        return None
    with np.errstate(all="ignore"):
        value = _CONSTANTS.run(e, _NOWHERE)
    return const(value.item(), e.dtype)


def _binary(e: Expr) -> Expr | None:
    """An identity, or a comparison or max / min the operands' bounds decide."""
    if len(e.src) != 2:
        return None
    found = _identity(e)
    found = _decided(e) if found is None else found
    return _bound_decided(e) if found is None else found


def _twice(e: Expr) -> Expr | None:
    """--x and ~~x (an integer or bool NOT) are x."""
    inner = e.src[0]
    if inner.op is e.op and not (e.op is Op.NOT and dtypes.is_float(e.dtype)):
        return inner.src[0]
    return None


def _identity(e: Expr) -> Expr | None:
    """x op identity, or an operation on two equal operands, where the result is exact."""
    op, (a, b), dtype = e.op, e.src, e.dtype
    exact = dtype == "bool" or dtypes.is_int(dtype)  # integers and bools: no NaN, no signed zero
    if op is Op.MUL:
        for x, y in ((a, b), (b, a)):
            if _is(y, 1):
                return x
            if exact and _is(y, 0):
                return y
    if op is Op.DIV and _is(b, 1):
        return a
    if op is Op.FLOORDIV and exact and _is(b, 1):
        return a
    if op is Op.SUB and (_is(b, 0) if exact else _is(b, 0.0)):
        return a
    if op is Op.SUB and exact and a.same_as(b):
        return const(0, dtype)
    if op is Op.ADD and exact:
        for x, y in ((a, b), (b, a)):
            if _is(y, 0):
                return x
    if op is Op.ADD and not exact and _is(b, -0.0):
        return a
    if op in (Op.AND, Op.OR, Op.MAX, Op.MIN) and a.same_as(b):
        return a
    if op in (Op.AND, Op.OR) and dtype == "bool":
        for x, y in ((a, b), (b, a)):
            if y.op is Op.CONST:
                return x if bool(y.arg) == (op is Op.AND) else y
    return None


def _decided(e: Expr) -> Expr | None:
    """An integer comparison whose answer the operands' bounds over the loop extents fix."""
    if e.op not in _DECIDE or not dtypes.is_int(e.src[0].dtype):
        return None
    a, b = interval(e.src[0]), interval(e.src[1])
    if a is None or b is None:
        return None
    true, false = _DECIDE[e.op](a, b)
    return const(True, "bool") if true else const(False, "bool") if false else None


def _bound_decided(e: Expr) -> Expr | None:
    """An integer max / min whose operands' bounds over the loop extents say which one it picks."""
    if e.op not in (Op.MAX, Op.MIN) or not dtypes.is_int(e.dtype):
        return None
    (a, b), (x, y) = e.src, (interval(e.src[0]), interval(e.src[1]))
    if x is None or y is None:
        return None
    if e.op is Op.MAX:
        return a if x[0] >= y[1] else b if y[0] >= x[1] else None
    return a if x[1] <= y[0] else b if y[1] <= x[0] else None


# in order: the first rule that answers for a node rewrites it (te/rewrite.py)
SIMPLIFY = Rules([(Pat.of(Op.WHERE), _select), (Pat.of(*_FOLDED), _fold), (ANY, _binary),
                  (Pat.of(Op.NEG, Op.NOT), _twice)])
