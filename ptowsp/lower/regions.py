"""Bounds inference: the box of a tensor that a loop body reads, as `start + [0, extent)`.

A computed-at producer or a read cache holds, per iteration of its anchor
loop, exactly the part of the tensor the loop's body reads.  The extent must
be a constant (it sizes a buffer); the start may move with the loops outside
the anchor.  Each index is split into `base(outer loops) + c + sum(coef *
inner loop)`; accesses whose bases agree give one box, the extremes of the
inner loops giving its extent.  Anything else (an inner loop under a division,
bases that differ) falls back to numeric bounds over every loop, a constant
box, which over-approximates but never misses an element.

The box is then clamped into the tensor by shifting it inwards (Halide's
ShiftInwards): an edge iteration computes a few elements it does not need
rather than reading outside the producer's domain, and no extent varies.

With symbolic sizes an extent may be an expression (a task instance that
walks a whole row of `n` elements reads a box `n` wide); the task table
evaluates it at each binding.  A buffer's box needs a number: placement
refuses a symbolic one.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptowsp.te import Expr, Op, const, sizes
from ptowsp.te.affine import Affine, Moving, affine
from ptowsp.te.bounds import interval
from ptowsp.te.expr import binary


@dataclass(frozen=True)
class Box:
    starts: tuple[Expr, ...]  # int64 expressions of the loops outside the anchor
    extents: tuple[sizes.Extent, ...]


def _affine(e: Expr, inner: dict[str, int], varying: frozenset[str] = frozenset()) -> Affine | None:
    """e as base (`rest`, what only outer loops move) + offset + sum(coef * inner loop), or None when
    an inner loop enters non-linearly; a clamp against a fixed value reads as a span (_clamped)."""
    # what changes while the anchor's body runs: an inner loop, or a read of a buffer filled inside
    # it (a base must be known before the body runs, where the box is filled)
    moving = Moving(loops=frozenset(inner), reads=varying)

    def clamp(n: Expr) -> Affine | None:
        if n.op in (Op.MIN, Op.MAX) and moving.still(n.src[1]):
            return _clamped(n, inner, varying)
        return None

    return affine(e, moving, clamp)


def _clamped(e: Expr, inner: dict[str, int], varying: frozenset[str]) -> Affine | None:
    """`min(a, c)` or `max(a, c)` (c fixed while the body runs; a tile start shifted inwards, regions
    of a computed-at producer's own box) as the clamp of a's least value plus a span as wide as a's
    range: the clamp moves by at most as much as a does.  The span is a loop of its own, added to
    `inner` (which _dimension copies for the purpose)."""
    a = _affine(e.src[0], inner, varying)
    if a is None:
        return None
    lo, hi = _bound(a, inner, _low), _bound(a, inner, _high)
    if not isinstance(lo, int) or not isinstance(hi, int):
        return None
    low = const(lo, "int64") if a.rest is None else a.rest if lo == 0 else a.rest + lo
    least = binary(e.op, low, e.src[1])
    span = f"#span{len(inner)}"
    inner[span] = hi - lo + 1
    return Affine(terms={span: (e, 1)}, rest=least)


def _offset(base: Expr | None, lo: Expr) -> Expr:
    return lo if base is None else base + lo


def _key(base: Expr | None) -> str:
    return "" if base is None else str(base)


def _low(coef: int, extent: sizes.Extent) -> sizes.Extent:
    """The least value of coef * v for v in [0, extent)."""
    return 0 if coef >= 0 else sizes.mul(coef, sizes.sub(extent, 1))


def _high(coef: int, extent: sizes.Extent) -> sizes.Extent:
    return 0 if coef <= 0 else sizes.mul(coef, sizes.sub(extent, 1))


def _bound(form: Affine, inner: dict, side) -> sizes.Extent:
    total: sizes.Extent = form.offset
    for v, c in sorted(form.coefs.items()):
        total = sizes.add(total, side(c, inner[v]))
    return total


def _dimension(indices: list[Expr], inner: dict, size: sizes.Extent, shift: bool,
               known: tuple[Expr, ...] = (), varying: frozenset[str] = frozenset()) -> tuple[Expr, sizes.Extent]:
    """(start, extent) of one dimension over all accesses, shifted into [0, size) when `shift`.

    An index clamped into the tensor (a boundary condition: `clamp(a, 0, size - 1)`) counts as
    `a`, and the box is then shifted into the tensor: the clamped values lie between the clamps
    of its ends, which the shifted box covers, so a tile reads its halo, not the whole tensor."""
    inner = dict(inner)  # _affine adds the spans of clamped forms (_clamped)
    unclamped = [_unclamped(i, size) for i in indices]
    clamped = any(u is not None for u in unclamped)
    indices = [i if u is None else u for i, u in zip(indices, unclamped, strict=True)]
    forms = [_affine(i, inner, varying) for i in indices]
    quotient = None if clamped else _quotient(indices, inner, varying)
    if quotient is not None:
        lo, hi, base = quotient
    elif all(f is not None for f in forms) and len({_key(f.rest) for f in forms}) == 1:  # type: ignore[union-attr]
        lows = [_bound(f, inner, _low) for f in forms]  # type: ignore[arg-type]
        highs = [_bound(f, inner, _high) for f in forms]  # type: ignore[arg-type]
        lo, hi = lows[0], highs[0]
        for x, y in zip(lows[1:], highs[1:]):
            lo, hi = sizes.minimum(lo, x), sizes.maximum(hi, y)
        base = forms[0].rest  # type: ignore[union-attr]
    else:  # numeric bounds over every loop, inner and outer
        bounds = [interval(i) for i in indices]
        found = [b for b in bounds if b is not None]
        lo, hi = (min(b[0] for b in found), max(b[1] for b in found)) if len(found) == len(bounds) else \
            (0, sizes.sub(size, 1))
        base = None
    extent = sizes.add(sizes.sub(hi, lo), 1)
    shift = shift or clamped
    if shift:  # a buffer never outgrows its tensor; unshifted, the caller clips [start, start + extent)
        extent = sizes.minimum(extent, size)  # (capped there, a box starting at -1 would miss its last row)
    if isinstance(extent, int):
        extent = max(1, extent)
    start = base if isinstance(lo, int) and lo == 0 else _offset(base, sizes.as_expr(lo))
    start = start if start is not None else const(0, "int64")
    return (_shift_inwards(start, extent, size, known) if shift else start), extent


def _quotient(indices: list[Expr], inner: dict, varying: frozenset[str]) -> tuple[int, int, Expr | None] | None:
    """(lo, hi, base) of a dimension every index of which divides one affine form by one constant
    d > 0 (`(base + a) // d`, a blocked layout's block index): its values are base // d + [lo, hi]
    exactly when base is a multiple of d, else within one more block (a floor moves by at most
    ceil(w / d) over a span of w).  None for anything else, which then falls back to numeric bounds."""
    divisors = {i.src[1].arg for i in indices if i.op is Op.FLOORDIV and i.src[1].op is Op.CONST}
    if len(divisors) != 1 or len(indices) != sum(i.op is Op.FLOORDIV for i in indices):
        return None
    d = divisors.pop()
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        return None
    forms = [_affine(i.src[0], inner, varying) for i in indices]
    if any(f is None for f in forms) or len({_key(f.rest) for f in forms}) != 1:  # type: ignore[union-attr]
        return None
    lows = [_bound(f, inner, _low) for f in forms]  # type: ignore[arg-type]
    highs = [_bound(f, inner, _high) for f in forms]  # type: ignore[arg-type]
    if not all(isinstance(x, int) for x in (*lows, *highs)):
        return None
    lo, hi, base = min(lows), max(highs), forms[0].rest  # type: ignore[union-attr]
    if base is None:
        return lo // d, hi // d, None
    if _multiple(base, d):
        return lo // d, hi // d, binary(Op.FLOORDIV, base, const(d, "int64"))
    return 0, -(-(hi - lo) // d), binary(Op.FLOORDIV, _offset(base, const(lo, "int64")), const(d, "int64"))


def _multiple(e: Expr, d: int) -> bool:
    """Whether the int expression e is a multiple of d for every value of its variables."""
    if e.op is Op.CONST:
        return not isinstance(e.arg, bool) and isinstance(e.arg, int) and e.arg % d == 0
    if e.op in (Op.ADD, Op.SUB):
        return _multiple(e.src[0], d) and _multiple(e.src[1], d)
    if e.op is Op.NEG:
        return _multiple(e.src[0], d)
    if e.op is Op.MUL:
        return any(x.op is Op.CONST and _multiple(x, d) for x in e.src)
    return False


def _unclamped(index: Expr, size: sizes.Extent) -> Expr | None:
    """`a` when index clamps a into the tensor: clamp(a, 0, size - 1) (minimum(maximum(a, 0), size - 1)),
    or one side of it where simplification dropped the other (`maximum(a, 0)`, `minimum(a, size - 1)`)."""
    last = sizes.as_expr(sizes.sub(size, 1))

    def low(e: Expr) -> Expr | None:
        zero = e.op is Op.MAX and e.src[1].op is Op.CONST and e.src[1].arg == 0
        return e.src[0] if zero else None

    def high(e: Expr) -> Expr | None:
        top = e.op is Op.MIN and (e.src[1].same_as(last) or (
            e.src[1].op is Op.CONST and last.op is Op.CONST and e.src[1].arg == last.arg))
        return e.src[0] if top else None

    inner = high(index)
    if inner is None:
        return low(index)
    both = low(inner)
    return inner if both is None else both


def _shift_inwards(start: Expr, extent: sizes.Extent, size: sizes.Extent, known: tuple[Expr, ...]) -> Expr:
    """clamp(start, 0, size - extent), each side dropped where the bounds of start, or a condition
    `start < size` known to hold there (a split's guard), already hold it."""
    last = sizes.sub(size, extent)
    if start.op is Op.CONST and isinstance(last, int):
        return const(min(max(int(start.arg), 0), last), "int64")
    lo, hi = interval(start) or (sizes.least(start), None)
    below = extent == 1 and any(k.op is Op.LT and k.src[0].same_as(start) and k.src[1].same_as(sizes.as_expr(size))
                                for k in known)
    if lo < 0:
        start = binary(Op.MAX, start, const(0, "int64"))
    if not below and (hi is None or not isinstance(last, int) or hi > last):
        start = binary(Op.MIN, start, sizes.as_expr(last))
    return start


def read_box(accesses: list[tuple[Expr, ...]], inner: dict, shape: tuple, shift: bool = True,
             known: tuple[Expr, ...] = (), varying: frozenset[str] = frozenset()) -> Box:
    """The box of a tensor that index tuples read while the `inner` loops run, shifted into the
    tensor (constant extent; for buffers) or, with shift=False, left for the caller to clip;
    `known`: conditions that hold where the box is read; `varying`: buffers filled while the
    inner loops run, whose reads in an index move like an inner loop."""
    dims = [_dimension([a[d] for a in accesses], inner, size, shift, known, varying)
            for d, size in enumerate(shape)]
    return Box(tuple(s for s, _ in dims), tuple(e for _, e in dims))
