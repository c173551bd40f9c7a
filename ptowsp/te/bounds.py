"""Prove every tensor access of an expression in bounds, or find one that is not.

Each index is first bounded by interval arithmetic over the loop extents,
which is exact for affine indices where each variable appears once.  When
that fails (conv padding, stencils: `pw.where(i > 0, A[i - 1], 0)`), the
index is evaluated exactly over the loop variables it uses, keeping only the
points where the enclosing `pw.where` conditions that mention nothing else
hold.  Dropping other conditions is conservative: it can only add points.
A violation is reported with a concrete witness (the loop values and the
index they produce).

With symbolic sizes the proof runs at a few sample bindings (every size 1,
2, 3, 8 and 61, then distinct values), which catches the accesses that
fail at some size; the run time checks again at each binding it meets
(Workload.bind).  An index that reads a tensor (a gather) is checked
when it runs: by the kernel in debug builds, else clamped into the tensor.
"""

from __future__ import annotations

import math

import numpy as np

from ptowsp.errors import BoundsError
from ptowsp.te import dtypes, sizes
from ptowsp.te.affine import Affine, affine, loops_named
from ptowsp.te.domain import ARITHMETIC, arithmetic, fits
from ptowsp.te.evaluate import Domain, Evaluator, iter_boxes
from ptowsp.te.expr import COMPARE_OPS, Expr, Op, const, guarded, unary, walk
from ptowsp.te.fold import fold, per_node

ENUMERATION_LIMIT = 1 << 24  # loop points one index may be enumerated over

_NEGATED = {Op.LT: Op.GE, Op.LE: Op.GT, Op.GT: Op.LE, Op.GE: Op.LT, Op.EQ: Op.NE, Op.NE: Op.EQ}


@per_node
def interval(e: Expr) -> tuple[int, int] | None:
    """Inclusive integer bounds of e over all loop values, or None if unknown (a function of the node
    alone: nodes being hash-consed, the passes that ask of one index again get the answer kept)."""
    return fold(e, _interval_of, _interval_operands)


def _interval_operands(e: Expr) -> tuple[Expr, ...]:
    """The operands an interval reads: a `where`'s sides, arithmetic's operands, an index cast's."""
    if e.op is Op.WHERE:
        return e.src[1:]
    if e.op in ARITHMETIC or e.op is Op.NEG or (e.op is Op.CAST and dtypes.keeps_index(e.src[0].dtype, e.dtype)):
        return e.src
    return ()


def _interval_of(e: Expr, parts: tuple[tuple[int, int] | None, ...]) -> tuple[int, int] | None:
    op = e.op
    if op is Op.CONST:
        return None if isinstance(e.arg, (bool, float)) else (e.arg, e.arg)
    if op in (Op.VAR, Op.RVAR):
        return (0, e.arg[1] - 1) if isinstance(e.arg[1], int) else None
    if not parts:
        return None
    if op is Op.CAST:
        return parts[0]
    if op is Op.NEG:
        x = parts[0]
        return None if x is None else (-x[1], -x[0])
    a, b = parts
    if op is Op.WHERE:
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    found = combine(op, a, b)
    return found if found is None or fits(found, e.dtype) else None  # it may wrap: unknown


def combine(op: Op, a: tuple[int, int] | None, b: tuple[int, int] | None) -> tuple[int, int] | None:
    """Inclusive bounds of `a op b` for integer operands in the given bounds (None: unknown); the
    same arithmetic the domain test runs over many tiles at once (te/domain.py)."""
    return None if a is None or b is None or op not in ARITHMETIC else arithmetic(op, a, b)


def conjuncts(cond: Expr, negated: bool = False) -> tuple[Expr, ...]:
    """Split `a & b & c` into the conditions that must all hold; `negated`: those that hold where
    `cond` does not (De Morgan over |)."""
    joined = Op.OR if negated else Op.AND
    if cond.op is joined and cond.dtype == "bool":
        return conjuncts(cond.src[0], negated) + conjuncts(cond.src[1], negated)
    if not negated:
        return (cond,)
    if cond.op is Op.NOT:
        return conjuncts(cond.src[0])
    if cond.op in COMPARE_OPS:
        return (Expr(_NEGATED[cond.op], "bool", cond.src),)
    return (unary(Op.NOT, cond),)


def shift_of(index: Expr, loop: str, through_clamps: bool = False) -> int | None:
    """d when `index` is `loop + d` for a constant d (None otherwise); with `through_clamps`, also
    inside a boundary view's clamp against constants (`min(max(loop - 1, 0), 95)`)."""
    moves = loops_named(loop)

    def clamp(n: Expr) -> Affine | None:
        if through_clamps and n.op in (Op.MIN, Op.MAX) and n.src[1].op is Op.CONST:
            return affine(n.src[0], moves, clamp)
        return None

    form = affine(index, moves, clamp)
    return form.offset if form is not None and form.rest is None and form.coefs == {loop: 1} else None


def loop_vars(e: Expr) -> dict[str, int | Expr]:
    """Loop variables e mentions, with their extents (an Expr when symbolic)."""
    return {n.arg[0]: n.arg[1] for n in walk(e) if n.op in (Op.VAR, Op.RVAR)}


def reads_tensors(e: Expr) -> bool:
    return any(n.op is Op.LOAD for n in walk(e))


SAMPLE_SIZES = (1, 2, 3, 8, 61)


def check_bounds(body: Expr) -> None:
    """Raise BoundsError for the first access of body that may leave its tensor (at sample
    bindings when it uses symbolic sizes)."""
    names = sorted(sizes.names_in(body))
    if not names:
        _check_bound(body)
        return
    samples = [dict.fromkeys(names, n) for n in SAMPLE_SIZES]
    samples.append({name: 5 + 3 * k for k, name in enumerate(names)})
    for binding in samples:
        try:
            _check_bound(sizes.bind(body, binding))
        except BoundsError as e:
            at = ", ".join(f"{k}={v}" for k, v in binding.items())
            raise BoundsError(f"{e} (with sizes {at})") from None


def _check_bound(body: Expr) -> None:
    for e, conds in guarded(body):  # in reading order: the first bad access is reported
        if e.op is Op.LOAD:
            split = tuple(part for c in conds for part in (conjuncts(c.src[0], negated=True) if c.op is Op.NOT
                                                            else conjuncts(c)))
            for dim, index in enumerate(e.src):
                _check_index(e, dim, index, split)


def _check_index(load: Expr, dim: int, index: Expr, conds: tuple[Expr, ...]) -> None:
    tensor = load.arg
    size = tensor.shape[dim]
    if reads_tensors(index):  # a gather: checked when it runs
        return
    bounds = interval(index)
    if bounds is not None and bounds[0] >= 0 and bounds[1] < size:
        return
    variables = loop_vars(index)
    free = [c for c in conds if not reads_tensors(c)]
    guards = [c for c in free if loop_vars(c).keys() <= variables.keys()]
    where = f"{load} reads dimension {dim} of {tensor.name} (shape {tensor.shape}, valid indices 0..{size - 1})"
    points = math.prod(variables.values())
    if points > ENUMERATION_LIMIT:
        raise BoundsError(
            f"{where} with index {index} in [{bounds[0] if bounds else '?'}, {bounds[1] if bounds else '?'}], "
            f"which could not be proven in bounds over {points} loop points; guard the access with pw.where"
        )
    bad = _first_bad(index, size, guards, variables)
    if bad is not None:  # perhaps a guard over other loops rules those points out (a part of length 0)
        wider = {**variables, **{k: v for c in free for k, v in loop_vars(c).items()}}
        if wider != variables and math.prod(wider.values()) <= ENUMERATION_LIMIT:
            bad = _first_bad(index, size, free, wider)
    if bad is not None:
        value, witness = bad
        raise BoundsError(f"{where}, but index {index} = {value} at {witness or 'every point'}; "
                          "guard the access with pw.where or shrink the loop")


def _first_bad(index: Expr, size: int, guards: list[Expr], variables: dict[str, int]) -> tuple[int, str] | None:
    """The first point of the loops `variables` where every guard holds and `index` leaves 0..size-1:
    (the index there, the point as text), or None."""
    names = tuple(sorted(variables))
    evaluator = Evaluator({})
    with np.errstate(all="ignore"):
        for box in iter_boxes(tuple(variables[n] for n in names), 1 << 20):
            dom = Domain(names, box)
            value = np.broadcast_to(evaluator.run(index, dom), dom.shape)
            bad = (value < 0) | (value >= size)
            for guard in guards:
                bad = bad & evaluator.run(guard, dom)
            if bad.any():
                point = np.argwhere(np.broadcast_to(bad, dom.shape))[0]
                witness = ", ".join(f"{n}={lo + p}" for n, (lo, _), p in zip(names, box, point))
                return value[tuple(point)], witness
    return None


def gather_indices(body: Expr) -> list[tuple[Expr, int, Expr, tuple[Expr, ...]]]:
    """(load, dimension, index, where-conditions on its path) of every index that reads a tensor."""
    return [(e, d, i, conds) for e, conds in guarded(body) if e.op is Op.LOAD
            for d, i in enumerate(e.src) if reads_tensors(i)]


def check_gathers(body: Expr, tile: dict[str, tuple[int, int]], arrays) -> None:
    """BoundsError naming the index tensor and the value when a gather in `body` (extents bound)
    reads outside its tensor anywhere in the tile (loop name -> [start, stop)); the debug check."""
    for load, dim, index, conds in gather_indices(body):
        guarded = index
        for c in reversed(conds):
            guarded = Expr(Op.WHERE, index.dtype, (c, guarded, const(0, index.dtype)))
        variables = {n.arg[0]: n.arg[1] for c in (guarded,) for n in walk(c) if n.op in (Op.VAR, Op.RVAR)}
        names = tuple(sorted(variables))
        dom = Domain(names, tuple(tile.get(n, (0, variables[n])) for n in names))
        values = np.broadcast_to(Evaluator(arrays).run(guarded, dom), dom.shape)
        size = load.arg.shape[dim]
        bad = (values < 0) | (values >= size)
        if bad.any():
            point = np.argwhere(bad)[0]
            at = ", ".join(f"{n}={lo + p}" for n, (lo, _), p in zip(names, dom.ranges, point))
            sources = ", ".join(sorted({n.arg.name for n in walk(index) if n.op is Op.LOAD}))
            raise BoundsError(f"{load} reads dimension {dim} of {load.arg.name} (size {size}) at index "
                              f"{int(values[tuple(point)])} taken from {sources} (at {at})")
