"""Whether a task's domain may hold anywhere in a tile: interval evaluation over the tiles' boxes.

The orchestrator asks this for the tiles of a task with `domain=` before it
generates their instances, for all of a kernel's tiles at once: each loop
variable ranges over its tile's interval, held as numpy arrays with one
entry per tile.  A read of an integer tensor (`lens[b]`) takes the least and
the greatest element of the part of the tensor its index intervals cover,
from the run's actual arrays.  Comparisons and `&`, `|`, `~` are
three-valued (surely false, surely true, either).  The answer is
conservative: "may hold" for anything it cannot bound, so a tile with work
is never skipped; for the usual conditions (`s < lens[b]`, `t <= s`,
`slot < counts[e]`) it is exact on the tiles' bounds.

(te/bounds.py bounds expressions over whole loops when a workload is built,
one scalar interval at a time; this module works on many tiles per call.)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np

from ptowsp.te import dtypes
from ptowsp.te.expr import Expr, Op
from ptowsp.te.fold import fold

Bounds = tuple[np.ndarray, np.ndarray]  # inclusive lows and highs, one entry per tile; bools as 0/1


def may_hold(cond: Expr, tile: Mapping[str, tuple[int, int]], arrays: Mapping[str, np.ndarray]) -> bool:
    """False only when `cond` is false at every point of one tile (loop name -> inclusive interval)."""
    tiles = {name: (np.array([lo]), np.array([hi])) for name, (lo, hi) in tile.items()}
    return bool(may_hold_in(cond, tiles, arrays, 1)[0])


def may_hold_in(cond: Expr, tiles: Mapping[str, Bounds], arrays: Mapping[str, np.ndarray], count: int) -> np.ndarray:
    """Per tile (loop name -> inclusive lows and highs over `count` tiles): False where `cond` is false
    at every point of the tile."""
    found = _range(cond, tiles, arrays)
    return np.ones(count, bool) if found is None else np.broadcast_to(found[1] >= 1, (count,))


def surely_holds_in(cond: Expr, tiles: Mapping[str, Bounds], arrays: Mapping[str, np.ndarray],
                    count: int) -> np.ndarray:
    """Per tile: True where `cond` holds at every point of the tile (a specialized kernel's condition)."""
    found = _range(cond, tiles, arrays)
    return np.zeros(count, bool) if found is None else np.broadcast_to(found[0] >= 1, (count,))


def _range(e: Expr, tiles, arrays) -> Bounds | None:
    return fold(e, lambda n, parts: _compute(n, parts, tiles, arrays), _operands)


def _operands(e: Expr) -> tuple[Expr, ...]:
    """The operands a range reads: none of a cast that does not keep an index's value."""
    if e.op is Op.CAST and not (e.src[0].dtype == "bool" or dtypes.keeps_index(e.src[0].dtype, e.dtype)):
        return ()
    return e.src


def _compute(e: Expr, args: tuple, tiles, arrays) -> Bounds | None:
    op = e.op
    if op is Op.CONST:
        return None if isinstance(e.arg, float) or e.arg >= 1 << 63 else (np.int64(e.arg), np.int64(e.arg))
    if op in (Op.VAR, Op.RVAR):
        return tiles.get(e.arg[0])
    if op is Op.CAST:
        return args[0] if args else None
    if op is Op.LOAD:
        return _load(e, args, arrays)
    if op is Op.WHERE:
        c, a, b = args
        if a is None or b is None:
            return None
        either = (np.minimum(a[0], b[0]), np.maximum(a[1], b[1]))
        if c is None:
            return either
        surely, never = c[0] >= 1, c[1] < 1
        return (np.where(surely, a[0], np.where(never, b[0], either[0])),
                np.where(surely, a[1], np.where(never, b[1], either[1])))
    if op is Op.NOT:
        x = args[0]
        return None if x is None or e.dtype != "bool" else (1 - x[1], 1 - x[0])
    if len(args) != 2:
        return None
    a, b = args
    if op in (Op.AND, Op.OR) and e.dtype == "bool":
        return _logic(a, b, op is Op.AND)
    if a is None or b is None:
        return None
    if op not in ARITHMETIC:
        return _compare(op, a, b)
    found = arithmetic(op, a, b)
    return found if found is None or fits(found, e.dtype) else None  # it may wrap: unknown


def fits(bounds: Bounds, dtype: str) -> bool:
    """The bounds lie in a narrow integer dtype's range (int64 arithmetic is taken not to wrap)."""
    if dtype in ("int64", "uint64") or not dtypes.is_int(dtype):
        return True
    lo, hi = dtypes.int_range(dtype)
    return bool(np.all(bounds[0] >= lo) and np.all(bounds[1] <= hi))


def _logic(a: Bounds | None, b: Bounds | None, conjunction: bool) -> Bounds | None:
    """& and | over three-valued bools; an unknown side is (0, 1)."""
    if a is None and b is None:
        return None
    a, b = a or (0, 1), b or (0, 1)
    pick = np.minimum if conjunction else np.maximum
    return (pick(a[0], b[0]), pick(a[1], b[1]))


ARITHMETIC = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.FLOORDIV, Op.MOD, Op.MAX, Op.MIN})


def arithmetic(op: Op, a: Bounds, b: Bounds) -> Bounds | None:
    """Bounds of `a op b`, over Python ints (one interval, as te/bounds.py asks) or numpy arrays
    (one entry per tile); // and % by a positive constant only."""
    scalar = type(a[0]) is int and type(b[0]) is int  # noqa: E721 - numpy integers take the array path
    low, high = (min, max) if scalar else (np.minimum, np.maximum)
    if op is Op.ADD:
        return (a[0] + b[0], a[1] + b[1])
    if op is Op.SUB:
        return (a[0] - b[1], a[1] - b[0])
    if op is Op.MUL:
        products = [x * y for x in a for y in b]
        return (functools.reduce(low, products), functools.reduce(high, products))
    if op in (Op.MAX, Op.MIN):
        pick = high if op is Op.MAX else low
        return (pick(a[0], b[0]), pick(a[1], b[1]))
    if np.ndim(b[0]) or b[0] != b[1] or b[0] <= 0:
        return None
    c = b[0]
    if op is Op.FLOORDIV:
        return (a[0] // c, a[1] // c)
    inside = (a[0] >= 0) & (a[1] < c)
    if scalar:
        return a if inside else (0, c - 1)
    return (np.where(inside, a[0], 0), np.where(inside, a[1], c - 1))


def _compare(op: Op, a: Bounds, b: Bounds) -> Bounds | None:
    if op is Op.LT:
        return _truth(a[1] < b[0], a[0] < b[1])
    if op is Op.LE:
        return _truth(a[1] <= b[0], a[0] <= b[1])
    if op is Op.GT:
        return _truth(a[0] > b[1], a[1] > b[0])
    if op is Op.GE:
        return _truth(a[0] >= b[1], a[1] >= b[0])
    point = (a[0] == a[1]) & (b[0] == b[1]) & (a[0] == b[0])
    overlap = (a[0] <= b[1]) & (b[0] <= a[1])
    if op is Op.EQ:
        return _truth(point, overlap)
    if op is Op.NE:
        return _truth(~overlap, ~point)
    return None


def _truth(always, possibly) -> Bounds:
    return (np.asarray(always, np.int64), np.asarray(always | possibly, np.int64))


def _load(e: Expr, indices: tuple, arrays) -> Bounds | None:
    """Least and greatest element over each tile's box of the tensor; tiles sharing a box share the
    work (a tile's box is usually one of few: lens[b] over a handful of b)."""
    array = arrays.get(e.arg.name)
    if array is None or array.dtype.kind not in "iub" or array.size == 0:
        return None
    lows, highs = [], []
    for r, n in zip(indices, array.shape, strict=True):
        lo, hi = (np.int64(0), np.int64(n - 1)) if r is None else (np.maximum(r[0], 0), np.minimum(r[1], n - 1))
        lows.append(lo)
        highs.append(hi)
    boxes = np.stack(np.broadcast_arrays(*lows, *highs), axis=-1).reshape(-1, 2 * len(lows))
    first: dict[tuple[int, ...], int] = {}  # each distinct box, numbered (np.unique over rows costs 40 us)
    which = np.fromiter((first.setdefault(box, len(first)) for box in map(tuple, boxes.tolist())),
                        np.int64, len(boxes))
    unique = list(first)
    least, most = np.empty(len(unique), np.int64), np.empty(len(unique), np.int64)
    empty = np.zeros(len(unique), bool)
    for k, box in enumerate(unique):
        dims = len(lows)
        part = array[tuple(slice(box[d], box[dims + d] + 1) for d in range(dims))]
        if part.size == 0:  # the tile reads outside the tensor: leave it to the kernel's own checks
            empty[k] = True
            continue
        least[k], most[k] = part.min(), part.max()
    if empty.any():
        return None
    shape = np.broadcast(*lows, *highs).shape
    return least[which].reshape(shape), most[which].reshape(shape)
