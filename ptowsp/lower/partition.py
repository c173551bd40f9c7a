"""Loop partitioning (Halide's): a loop cut into its edges and an interior where clamps do nothing.

A boundary view reads `X[clamp(x - 1, 0, w - 1)]`.  Inside a vectorized loop the clamp makes the
lanes' addresses non-contiguous, so the load becomes a gather, lane by lane; yet only the first
and last iterations of the loop around it ever clamp.  So the innermost serial loop around a
vectorized loop is cut where every integer `max(a, K)` / `min(a, K)` of its body whose `a`
moves with that loop and with the vector lanes stops binding: the interior runs with those
clamps simplified away (lower/simplify.py decides them from the narrowed loop range), the
edges keep them.  `a` must be affine in the loop variable (`c * v + rest`); the interior is
computed from the bounds of `rest` over every other loop, so it is exact for the clamps of
boundary views and conservative otherwise.  Results never change: each piece computes the
same iterations the loop did.
"""

from __future__ import annotations

import functools
import math
import operator

from ptowsp.lower.ir import For, IfThen, Stmt, block, map_exprs, stmt_exprs, walk_stmts
from ptowsp.lower.simplify import simplify
from ptowsp.schedules.loopnest import SERIAL, UNROLLED, VECTORIZED
from ptowsp.te import Expr, Op, dtypes, sizes, substitute_vars, walk
from ptowsp.te.expr import binary, const
from ptowsp.te.sizes import Extent
from ptowsp.te.affine import affine, integer, loops_named
from ptowsp.te.bounds import conjuncts, interval

MIN_INTERIOR = 2  # iterations: a shorter interior is not worth a third copy of the body

Bounds = tuple[int, int]


def partition_loops(s: Stmt) -> Stmt:
    """Cut the innermost serial loops around vectorized loops where their clamps stop binding, and
    every serial loop over vector or unrolled code (a register tile) before the iterations where a
    split's guard inside it can fail; plain scalar code keeps its guard (a copy of it would only cost
    compile time)."""
    if isinstance(s, For) and s.kind == SERIAL and isinstance(s.extent, int):
        lanes = _vector_loops(s.body)
        if lanes:
            cut = _interior(s, lanes)
            if cut is not None:
                return _cut(s, *cut)
        steady = _guards_hold_below(s) if lanes or _unrolled(s.body) else None
        if steady is not None:
            head, tail = _cut(s, 0, steady).stmts
            return block(partition_loops(_without_decided_guards(head)), partition_loops(tail))
    if isinstance(s, For) and s.kind == SERIAL and (_vector_loops(s.body) or _unrolled(s.body)):
        steady, held = _steady_at_run_time(s)
        if held and not isinstance(steady, int):  # the tail keeps its guards: its own parts only are cut
            whole, tail = _part(s, 0, steady, _without(s.body, held)), _part(s, steady, sizes.sub(s.extent, steady))
            return block(partition_loops(whole), tail.with_children([partition_loops(c) for c in tail.children()]))
    children = [partition_loops(c) for c in s.children()]
    return s if all(a is b for a, b in zip(children, s.children(), strict=True)) else s.with_children(children)


def _vector_loops(s: Stmt) -> set[str]:
    """The vectorized loops reached from `s` without passing a serial loop (unrolled ones are crossed)."""
    if isinstance(s, For):
        if s.kind == VECTORIZED:
            return {s.var}
        if s.kind != UNROLLED:
            return set()
    return set().union(*(_vector_loops(c) for c in s.children())) if s.children() else set()


def _interior(loop: For, lanes: set[str]) -> tuple[int, int] | None:
    """[lo, hi) of the loop where every clamp that moves with it and with the lanes is a no-op."""
    lo, hi = 0, loop.extent
    found = False
    for st in walk_stmts(loop.body):
        for e in stmt_exprs(st):
            for n in walk(e):
                if n.op not in (Op.MAX, Op.MIN) or not dtypes.is_int(n.dtype):
                    continue
                a, k = _through_opposite(n)
                bound = interval(k)
                names = {m.arg[0] for m in walk(a) if m.op is Op.VAR}
                if bound is None or bound[0] != bound[1] or loop.var not in names or not names & lanes:
                    continue
                form = _affine(a, loop.var)
                if form is None or form[0] == 0:
                    continue
                found = True
                c, (rest_lo, rest_hi) = form
                if n.op is Op.MAX:  # no-op where c * v + rest >= K
                    edge = (bound[0] - rest_lo) / c
                    lo, hi = (max(lo, math.ceil(edge)), hi) if c > 0 else (lo, min(hi, math.floor(edge) + 1))
                else:  # no-op where c * v + rest <= K
                    edge = (bound[0] - rest_hi) / c
                    lo, hi = (lo, min(hi, math.floor(edge) + 1)) if c > 0 else (max(lo, math.ceil(edge)), hi)
    if not found or hi - lo < MIN_INTERIOR or (lo, hi) == (0, loop.extent):
        return None
    return lo, hi


def _unrolled(s: Stmt) -> bool:
    return any(isinstance(st, For) and st.kind == UNROLLED for st in walk_stmts(s))


def _guards_hold_below(loop: For) -> int | None:
    """The first iteration of `loop` where a guard `c * v + rest < K` inside it may fail (c > 0: a
    non-dividing split's `outer * factor + inner < extent`), when that leaves at least MIN_INTERIOR
    iterations before it and some after; None otherwise.  Below it every such guard holds: the
    register tile of a matmul over 197 rows runs 24 unguarded tiles of 8 rows and one guarded."""
    hi = loop.extent
    inside = {st.var for st in walk_stmts(loop.body) if isinstance(st, For)}
    for st in walk_stmts(loop.body):
        if not isinstance(st, IfThen):
            continue
        for cond in conjuncts(st.cond):
            if cond.op is not Op.LT:
                continue
            names = {m.arg[0] for m in walk(cond.src[0]) if m.op is Op.VAR}
            # the split of this loop itself (`rest` over the loops inside it): a guard that also reads an
            # enclosing loop would be cut at that loop's worst case, in every one of its iterations
            if loop.var not in names or not names - {loop.var} <= inside:
                continue
            form, bound = _affine(cond.src[0], loop.var), interval(cond.src[1])
            if form is None or form[0] <= 0 or bound is None or bound[0] != bound[1]:
                continue
            c, (_, rest_hi) = form
            hi = min(hi, max(0, (bound[0] - 1 - rest_hi) // c + 1))
    return hi if MIN_INTERIOR <= hi < loop.extent else None


def _steady_at_run_time(loop: For) -> tuple[Extent, set[Expr]]:
    """The iterations [0, steady) of `loop` where every guard `c * v + inner + outer < K` inside it
    holds (c > 0; `inner` over the loops inside it, of fixed extents; `outer` and K over enclosing
    loops and sizes, fixed while it runs, a size among them), and those guards: `_guards_hold_below`
    for a cut known only at run time, in workloads with symbolic sizes (the targets that take only
    fixed extents never meet one).  A register tile over `seq` rows, or over a task's block of them,
    kept its row guard in every tile, and with it LLVM's accumulators in memory (a 128-token
    projection ran 6x slower than at a bound size)."""
    steady: Extent = loop.extent
    held: set[Expr] = set()
    inside = {st.var: st.extent for st in walk_stmts(loop.body) if isinstance(st, For)}
    moving = loops_named(loop.var, *inside)
    for st in walk_stmts(loop.body):
        if not isinstance(st, IfThen):
            continue
        for cond in conjuncts(st.cond):
            if cond.op is not Op.LT or cond.src[1].loops_read & {loop.var, *inside} or cond.src[1].tensors_read:
                continue
            form = affine(cond.src[0], moving)
            c = 0 if form is None else form.coef(loop.var)
            if c <= 0 or (form.rest is not None and form.rest.tensors_read):
                continue
            if not (sizes.names_in(cond) or sizes.names_in(loop.extent)):
                continue  # all fixed: the cut at the enclosing loops' worst case is `_guards_hold_below`'s
            reach = [form.coef(u) * (extent - 1) for u, extent in inside.items() if form.coef(u)]
            if not all(isinstance(r, int) for r in reach):
                continue
            # holds while c * v <= K - 1 - max(inner) - outer, counted from a non-negative numerator
            bound = integer(cond.src[1])
            room = c - 1 - form.offset - sum(max(0, r) for r in reach)
            limit = sizes.add(cond.src[1] if bound is None else bound, room)
            if form.rest is not None:
                limit = binary(Op.SUB, sizes.as_expr(limit), form.rest)
            limit = sizes.maximum(0, limit)
            cut = limit // c if isinstance(limit, int) or c == 1 else binary(Op.FLOORDIV, limit, const(c, "int64"))
            steady = sizes.minimum(steady, cut)
            held.add(cond)
    return steady, held


def _without(s: Stmt, held: set[Expr]) -> Stmt:
    """`s` with the guards in `held` taken out of every condition (a condition left empty: its body)."""
    if isinstance(s, IfThen) and any(c in held for c in conjuncts(s.cond)):
        rest = [c for c in conjuncts(s.cond) if c not in held]
        then = _without(s.then, held)
        return then if not rest else IfThen(functools.reduce(operator.and_, rest), then)
    children = [_without(c, held) for c in s.children()]
    return s if all(a is b for a, b in zip(children, s.children(), strict=True)) else s.with_children(children)


def _part(loop: For, start: Extent, count: Extent, body: Stmt | None = None) -> For:
    """The iterations [start, start + count) of `loop` (its body, or `body`), counted from 0."""
    moved = Expr(Op.VAR, "int64", (), (loop.var, count))
    at = moved + start if not (isinstance(start, int) and start == 0) else moved
    return For(loop.var, count, loop.kind,
               map_exprs(loop.body if body is None else body, lambda e: substitute_vars(e, {loop.var: at}, (Op.VAR,))))


def _without_decided_guards(s: Stmt) -> Stmt:
    """`s` with every guard its loops' ranges decide true taken away (simplify folded it to true)."""
    if isinstance(s, IfThen) and s.cond.op is Op.CONST and s.cond.arg is True:
        return _without_decided_guards(s.then)
    children = [_without_decided_guards(c) for c in s.children()]
    return s if all(a is b for a, b in zip(children, s.children(), strict=True)) else s.with_children(children)


def _through_opposite(clamp: Expr) -> tuple[Expr, Expr]:
    """(a, K) of `max(a, K)` / `min(a, K)`, looking through an opposite clamp of a that cannot change
    when this one is a no-op: `min(max(b, 0), 63) <= 63` exactly where `b <= 63`."""
    a, k = clamp.src
    other = Op.MIN if clamp.op is Op.MAX else Op.MAX
    if a.op is other:
        inner, (lo, hi), bound = a.src[0], interval(a.src[1]) or (None, None), interval(k)
        if bound is not None and lo is not None and lo == hi and (
                (clamp.op is Op.MIN and lo <= bound[0]) or (clamp.op is Op.MAX and lo >= bound[1])):
            return inner, k
    return a, k


def _affine(e: Expr, v: str) -> tuple[int, Bounds] | None:
    """(c, bounds of rest) when e is `c * v + rest` with rest free of v; None when it is not."""
    form = affine(e, loops_named(v))
    if form is None:
        return None
    bounds = (0, 0) if form.rest is None else interval(form.rest)
    return None if bounds is None else (form.coef(v), (bounds[0] + form.offset, bounds[1] + form.offset))


def _cut(loop: For, lo: int, hi: int) -> Stmt:
    """The loop as up to three loops over [0, lo), [lo, hi) and [hi, extent), each simplified with its
    own range (a piece's variable counts from 0 and is shifted back by its start)."""
    ranges = ((0, lo), (lo, hi), (hi, loop.extent))
    pieces = [_part(loop, start, stop - start) for start, stop in ranges if start < stop]
    return block(*(For(p.var, p.extent, p.kind, simplify(p.body)) for p in pieces))
