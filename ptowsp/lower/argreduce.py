"""Lowering of argmax / argmin: a (value, index) accumulator pair, combined commutatively.

The pair update takes the new element when it is strictly better, or equal
and at a smaller index (a NaN beats every number; of two NaNs the smaller
index wins).  That rule does not depend on the order the reduce loops run
in, so split and reordered reduce loops still give numpy's first index.
The index is written first; the value then follows it (`acc_i == idx` holds
exactly when the element was taken, since each index is visited once).

A vectorized reduce loop keeps one pair per lane, folded at the end by the
same rule.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ptowsp.lower.ir import LOCAL, Allocate, Buffer, For, Stmt, Store, block
from ptowsp.schedules.loopnest import SERIAL, UNROLLED, VECTORIZED
from ptowsp.te import Expr, Op, cast, const, dtypes
from ptowsp.te.expr import ARG_KINDS, binary, where
from ptowsp.te.reducer import reduction_identity

NO_INDEX = np.iinfo(np.int64).max  # the index of the identity: any real element is taken over it


def is_arg_reduction(e: Expr) -> bool:
    return e.op is Op.REDUCE and e.arg in ARG_KINDS


def value_identity(kind: str, dtype: str) -> Expr:
    """The worst value: every element, -inf included, is at least as good (and wins on index)."""
    return reduction_identity("max" if kind == "argmax" else "min", dtype)


def flat_index(axes: tuple[Expr, ...]) -> Expr:
    """The row-major flat index over the reduce axes (numpy's argmax of the reshaped array)."""
    index: Expr = cast(axes[0], "int64")
    for ax in axes[1:]:
        index = index * ax.arg[1] + ax
    return index


def taken(kind: str, x: Expr, idx: Expr, best: Expr, best_i: Expr) -> Expr:
    """Whether (x, idx) replaces (best, best_i)."""
    strictly = binary(Op.GT if kind == "argmax" else Op.LT, x, best)
    earlier_tie = binary(Op.EQ, x, best) & binary(Op.LT, idx, best_i)
    better = strictly | earlier_tie
    if dtypes.is_float(x.dtype):
        x_nan, best_is_number = binary(Op.NE, x, x), binary(Op.EQ, best, best)
        better = (better & best_is_number) | (x_nan & (best_is_number | binary(Op.LT, idx, best_i)))
    return better


def pair_update(kind: str, vals: Buffer, vi: tuple[Expr, ...], idxs: Buffer, ii: tuple[Expr, ...],
                x: Expr, idx: Expr) -> Stmt:
    """Fold one element into the pair: the index first, then the value that follows it."""
    x = cast(x, vals.dtype)
    take = taken(kind, x, idx, vals[vi], idxs[ii])
    return block(Store(idxs, ii, where(take, idx, idxs[ii])),
                 Store(vals, vi, where(binary(Op.EQ, idxs[ii], idx), x, vals[vi])))


def pair_init(kind: str, vals: Buffer, vi: tuple[Expr, ...], idxs: Buffer, ii: tuple[Expr, ...]) -> Stmt:
    return block(Store(vals, vi, value_identity(kind, vals.dtype)), Store(idxs, ii, const(NO_INDEX, "int64")))


def hoisted(lw, e: Expr, body: Expr, prelude: list[Stmt], locals_: list[Buffer], inner: list[Stmt]) -> tuple[
        Stmt, Expr]:
    """An argmax nested in an expression as scalar loops: (the statement, the index it leaves)."""
    kind, axes = e.arg, tuple(e.src[1:])
    zero = (const(0, "int64"),)
    name = lw.next_local()
    vals = Buffer(f"{name}v", (1,), body.dtype, LOCAL)
    idxs = Buffer(name, (1,), "int64", LOCAL)
    locals_.extend([vals, idxs])
    update: Stmt = block(*inner, pair_update(kind, vals, zero, idxs, zero, body, flat_index(axes)))
    for ax in reversed(axes):
        update = For(ax.arg[0], ax.arg[1], SERIAL, update)
    return block(pair_init(kind, vals, zero, idxs, zero), update), idxs[zero]


def lower_arg_reduction(lw, spatial: tuple[Expr, ...], reduction: Expr, path: Expr | None, lead: list,
                        rest: list, per_tile: list) -> Stmt:
    """init / update / epilogue of `out = epilogue(argmax(body))`, as kernel.lower_reduction lays
    them out, with two accumulators indexed by the per-tile loops.

    A vectorized innermost reduce loop (with the unrolled reduce loops right
    around it) keeps a pair per lane and copy, folded into the accumulators
    afterwards by the same order-free rule (as kernel.lane_partials does for
    one accumulator).
    """
    kind, rbody, axes = reduction.arg, reduction.src[0], tuple(reduction.src[1:])
    vals, index = lw.loop_buffer(per_tile, rbody.dtype, None)
    vals = replace(vals, name=f"{lw.name}_accv")
    idxs = replace(vals, name=f"{lw.name}_acci", dtype="int64")
    partial_loops = _partial_loops(lw.inner)
    if partial_loops:
        into_v, into = lw.loop_buffer([*per_tile, *partial_loops], rbody.dtype, None)
        into_v = replace(into_v, name=f"{lw.name}_lanesv")
        into_i = replace(into_v, name=f"{lw.name}_lanesi", dtype="int64")
    else:
        into_v, into_i, into = vals, idxs, index

    def piece(st: Stmt) -> Stmt:
        return lw.nest_over(per_tile, st, lead)

    def over_partials(st: Stmt, keep_kinds: bool) -> Stmt:  # no guards: every partial is folded
        for lp in reversed(partial_loops):
            st = For(lp.name, lp.extent, lp.annotation if keep_kinds else SERIAL, st)
        return st

    prelude: list[Stmt] = []
    locals_: list[Buffer] = []
    x = lw.hoist(lw.at_axes(rbody), None, prelude, locals_)
    update: Stmt = block(*prelude, pair_update(kind, into_v, into, into_i, into, x, lw.at_axes(flat_index(axes))))
    for buf in reversed(locals_):
        update = Allocate(buf, update)
    stmt = block(piece(over_partials(pair_init(kind, into_v, into, into_i, into), True)),
                 lw.nest_over(rest, lw.on_path(path, update), lead))
    if partial_loops:
        fold = block(pair_init(kind, vals, index, idxs, index),
                     over_partials(pair_update(kind, vals, index, idxs, index, into_v[into], into_i[into]), False))
        stmt = Allocate(into_v, Allocate(into_i, block(stmt, piece(fold))))
    epilogue = lw.epilogue_of(reduction, idxs[index])
    stmt = Allocate(vals, Allocate(idxs, block(stmt, piece(lw.store(lw.out, spatial, epilogue)))))
    return lw.nest_over(lead, stmt) if lead else stmt


def _partial_loops(inner: list) -> list:
    """The vectorized innermost reduce loop and the unrolled reduce loops directly around it."""
    if not inner or not inner[-1].reduce or inner[-1].annotation != VECTORIZED:
        return []
    position = len(inner) - 1
    while position > 0 and inner[position - 1].reduce and inner[position - 1].annotation == UNROLLED:
        position -= 1
    return inner[position:]
