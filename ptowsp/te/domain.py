"""Whether a task's domain may hold anywhere in a tile: interval evaluation over the tile's box.

The orchestrator asks this for every tile of a task with `domain=` before it
generates the task instance.  Each loop variable ranges over the tile's
interval; a read of an integer tensor (`lens[b]`) takes the least and the
greatest element of the part of the tensor its index intervals cover, from
the run's actual arrays.  Comparisons and `&`, `|`, `~` are three-valued
(surely false, surely true, either).  The answer is conservative: "may hold"
for anything it cannot bound, so a tile with work is never skipped; for the
usual conditions (`s < lens[b]`, `t <= s`, `slot < counts[e]`) it is exact
on the tile's bounds.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ptowsp.te.bounds import ARITHMETIC, combine
from ptowsp.te.expr import Expr, Op

Interval = tuple[int, int]  # inclusive; bools as 0/1


def may_hold(cond: Expr, tile: Mapping[str, Interval], arrays: Mapping[str, np.ndarray]) -> bool:
    """False only when `cond` is false at every point of the tile (loop name -> inclusive interval)."""
    found = _range(cond, tile, arrays, {})
    return found is None or found[1] >= 1


def _range(e: Expr, tile: Mapping[str, Interval], arrays, memo: dict) -> Interval | None:
    key = id(e)
    if key not in memo:
        memo[key] = _compute(e, tile, arrays, memo)
    return memo[key]


def _compute(e: Expr, tile, arrays, memo) -> Interval | None:
    op = e.op
    if op is Op.CONST:
        return None if isinstance(e.arg, float) else (int(e.arg), int(e.arg))
    if op in (Op.VAR, Op.RVAR):
        return tile.get(e.arg[0])
    if op is Op.CAST:
        return _range(e.src[0], tile, arrays, memo) if e.dtype != "bool" and not e.dtype.startswith("float") else None
    if op is Op.LOAD:
        return _load(e, tile, arrays, memo)
    if op is Op.WHERE:
        c, a, b = (_range(s, tile, arrays, memo) for s in e.src)
        if c is not None and c[0] == c[1]:
            return a if c[0] else b
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    args = [_range(s, tile, arrays, memo) for s in e.src]
    if op is Op.NOT:
        x = args[0]
        return None if x is None or e.dtype != "bool" else (1 - x[1], 1 - x[0])
    if len(args) != 2:
        return None
    a, b = args
    if op is Op.AND and e.dtype == "bool":
        return _logic(a, b, min)
    if op is Op.OR and e.dtype == "bool":
        return _logic(a, b, max)
    if a is None or b is None:
        return None
    if op in ARITHMETIC:
        return combine(op, a, b)
    return _compare(op, a, b)


def _logic(a: Interval | None, b: Interval | None, pick) -> Interval | None:
    """& (pick=min) and | (pick=max) over three-valued bools."""
    if a is None and b is None:
        return None
    if a is None or b is None:
        known = a if b is None else b
        decisive = 0 if pick is min else 1
        return (decisive, decisive) if known[0] == known[1] == decisive else None
    return (pick(a[0], b[0]), pick(a[1], b[1]))


def _compare(op: Op, a: Interval, b: Interval) -> Interval | None:
    if op is Op.LT:
        return _truth(a[1] < b[0], a[0] < b[1])
    if op is Op.LE:
        return _truth(a[1] <= b[0], a[0] <= b[1])
    if op is Op.GT:
        return _truth(a[0] > b[1], a[1] > b[0])
    if op is Op.GE:
        return _truth(a[0] >= b[1], a[1] >= b[0])
    if op is Op.EQ:
        return _truth(a[0] == a[1] == b[0] == b[1], a[0] <= b[1] and b[0] <= a[1])
    if op is Op.NE:
        return _truth(a[1] < b[0] or b[1] < a[0], not (a[0] == a[1] == b[0] == b[1]))
    return None


def _truth(always: bool, possibly: bool) -> Interval:
    return (1, 1) if always else ((0, 1) if possibly else (0, 0))


def _load(e: Expr, tile, arrays, memo) -> Interval | None:
    array = arrays.get(e.arg.name)
    if array is None or array.dtype.kind not in "iub":
        return None
    box = []
    for index, n in zip(e.src, array.shape, strict=True):
        r = _range(index, tile, arrays, memo)
        lo, hi = (0, n - 1) if r is None else (max(r[0], 0), min(r[1], n - 1))
        if lo > hi:
            return None  # the tile reads outside the tensor: leave it to the kernel's own checks
        box.append(slice(lo, hi + 1))
    part = array[tuple(box)]
    return int(part.min()), int(part.max())
