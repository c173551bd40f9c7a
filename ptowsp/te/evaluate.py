"""Evaluate expressions with numpy over an iteration domain: the golden model.

The domain of a compute is its output shape; every loop variable becomes an
`arange` placed on its own axis, so an expression evaluates as ordinary numpy
broadcasting.  Work is chunked so that no temporary holds more than
`ELEMENT_BUDGET` elements: the output is cut into boxes and a reduction walks
its axes in chunks, accumulating partial results.  Reductions add their axes
after the enclosing ones and reduce them away before returning.

Semantics fixed here (and documented in docs/concepts.md):
- `pw.where` reads only the chosen side: loads on the other side see their
  indices replaced by 0 (always in bounds), and their values are discarded.
- `//` and `%` floor, as in Python and numpy; integer division by zero gives 0.
- integer arithmetic wraps in its dtype; casts follow dtypes.cast_array (float -> int
  truncates and saturates, NaN -> 0, where numpy leaves it undefined).
- a bfloat16 operation computes in float32 and rounds its result to bfloat16 once.
- sum over float16 and bfloat16 accumulates in float32; integer sums wrap like the dtype.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from ptowsp.errors import BoundsError
from ptowsp.te.dtypes import cast_array, is_bfloat16
from ptowsp.te.expr import Expr, Op, walk
from ptowsp.te.fold import fold
from ptowsp.te.reducer import Component, TupleReducer, UserReducer, same_reduction

ELEMENT_BUDGET = 1 << 22  # elements in the largest temporary an evaluation creates

Box = tuple[tuple[int, int], ...]  # (start, stop) per dimension

_UNARY = {
    Op.NEG: np.negative, Op.ABS: np.abs, Op.EXP: np.exp, Op.LOG: np.log, Op.SQRT: np.sqrt,
    Op.RSQRT: lambda x: 1 / np.sqrt(x), Op.TANH: np.tanh, Op.SIGMOID: lambda x: 1 / (1 + np.exp(-x)),
    Op.FLOOR: np.floor, Op.CEIL: np.ceil, Op.ROUND: np.rint, Op.NOT: np.invert,
}
_BINARY = {
    Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.DIV: np.true_divide,
    Op.FLOORDIV: np.floor_divide, Op.MOD: np.remainder, Op.POW: np.power, Op.MAX: np.maximum,
    Op.MIN: np.minimum, Op.AND: np.bitwise_and, Op.OR: np.bitwise_or, Op.LT: np.less,
    Op.LE: np.less_equal, Op.GT: np.greater, Op.GE: np.greater_equal, Op.EQ: np.equal,
    Op.NE: np.not_equal,
}
_REDUCE = {"max": np.max, "min": np.min}
_COMBINE = {"sum": np.add, "max": np.maximum, "min": np.minimum}
_erf = np.frompyfunc(math.erf, 1, 1)


def _accumulator_dtype(kind: str, dtype: str) -> str:
    if kind != "sum":
        return dtype
    return {"float16": "float32", "bfloat16": "float32", "int32": "int64"}.get(dtype, dtype)


def _computing(args: list[np.ndarray]) -> list[np.ndarray]:
    """Operands as an operation computes on them: bfloat16 widened to float32 (exact)."""
    return [a.astype(np.float32) if is_bfloat16(a.dtype) else a for a in args]


def iter_boxes(shape: tuple[int, ...], max_elements: int) -> Iterator[Box]:
    """Cover `shape` in row-major boxes of at most max_elements (at least one element)."""
    inner = 1
    split = len(shape)  # dims >= split are taken whole
    while split > 0 and inner * shape[split - 1] <= max_elements:
        split -= 1
        inner *= shape[split]
    if split == 0:
        yield tuple((0, n) for n in shape)
        return
    block = max(1, max_elements // inner)
    outer = [range(n) for n in shape[: split - 1]]
    whole = tuple((0, n) for n in shape[split:])
    for prefix in itertools.product(*outer):
        for start in range(0, shape[split - 1], block):
            stop = min(start + block, shape[split - 1])
            yield tuple((p, p + 1) for p in prefix) + ((start, stop),) + whole


@dataclass(frozen=True)
class Domain:
    """Loop variables bound to aranges on their own broadcast axes."""

    names: tuple[str, ...]
    ranges: tuple[tuple[int, int], ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(hi - lo for lo, hi in self.ranges)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def array(self, name: str) -> np.ndarray:
        axis = self.names.index(name)
        lo, hi = self.ranges[axis]
        shape = [1] * len(self.names)
        shape[axis] = hi - lo
        return np.arange(lo, hi, dtype=np.int64).reshape(shape)

    def extend(self, names: tuple[str, ...], ranges: Box) -> Domain:
        return Domain(self.names + names, self.ranges + tuple(ranges))


def _widen(value: np.ndarray, ndim: int) -> np.ndarray:
    """Give a domain-shaped array trailing unit axes up to ndim (0-d arrays stay)."""
    if value.ndim == 0 or value.ndim == ndim:
        return value
    return value.reshape(value.shape + (1,) * (ndim - value.ndim))


class Evaluator:
    """Evaluates expression trees over a Domain, reading tensors from `arrays` by name."""

    def __init__(self, arrays: Mapping[str, np.ndarray], budget: int = ELEMENT_BUDGET):
        self.arrays = arrays
        self.budget = budget
        self.folded: list[tuple[Domain, np.ndarray | None, Expr, tuple[np.ndarray, ...]]] = []  # see _several

    def run(self, e: Expr, dom: Domain, mask: np.ndarray | None = None) -> np.ndarray:
        """Value of e at every point of dom (broadcastable to dom.shape), in e.dtype."""
        op = e.op
        if op is Op.CONST:
            return np.asarray(e.arg, dtype=e.dtype)
        if op in (Op.VAR, Op.RVAR):
            return dom.array(e.arg[0])
        if op is Op.LOAD:
            return self._load(e, dom, mask)
        if op is Op.WHERE:
            return self._where(e, dom, mask)
        if op is Op.REDUCE:
            return self._reduce(e, dom, mask)
        args = [self.run(s, dom, mask) for s in e.src]
        if op is Op.CAST:
            return cast_array(args[0], e.dtype)
        if op is Op.ERF:
            return cast_array(np.asarray(_erf(args[0].astype(np.float64)), dtype=np.float64), e.dtype)
        fn = _UNARY.get(op) or _BINARY[op]
        return cast_array(np.asarray(fn(*_computing(args))), e.dtype)

    def _load(self, e: Expr, dom: Domain, mask: np.ndarray | None) -> np.ndarray:
        indices = [self.run(i, dom, mask) for i in e.src]
        if mask is not None:  # lanes outside the chosen side read element 0, then are discarded
            indices = [np.where(mask, i, 0) for i in indices]
        array = self.arrays[e.arg.name]
        for dim, (index, expr) in enumerate(zip(indices, e.src)):
            sources = sorted({n.arg.name for n in walk(expr) if n.op is Op.LOAD})
            if not sources or not index.size:  # affine indices were proven in bounds at definition
                continue
            if index.min() < 0 or index.max() >= array.shape[dim]:
                bad = index[(index < 0) | (index >= array.shape[dim])].flat[0]
                source = ", ".join(sources)
                raise BoundsError(f"{e} reads dimension {dim} of {e.arg.name} (size {array.shape[dim]}) at index "
                                  f"{int(bad)}, a value read from {source}")
        return np.asarray(array[tuple(indices)])

    def _where(self, e: Expr, dom: Domain, mask: np.ndarray | None) -> np.ndarray:
        cond = self.run(e.src[0], dom, mask)
        if cond.ndim == 0:
            return self.run(e.src[1] if cond else e.src[2], dom, mask)
        take = cond if mask is None else mask & cond
        skip = ~cond if mask is None else mask & ~cond
        return np.where(cond, self.run(e.src[1], dom, take), self.run(e.src[2], dom, skip))

    def _reduce(self, e: Expr, dom: Domain, mask: np.ndarray | None) -> np.ndarray:
        kind, (body, *axes) = e.arg, e.src
        names = tuple(a.arg[0] for a in axes)
        extents = tuple(a.arg[1] for a in axes)
        if kind == "sum" and mask is None:
            fast = contract(body, dom, names, extents, self.arrays, e.dtype)
            if fast is not None:
                return fast
        if kind in ("argmax", "argmin"):
            return self._arg_reduce(e, dom, mask)
        if isinstance(kind, Component):
            return self._several(e, dom, mask)[kind.index]
        acc_dtype = _accumulator_dtype(kind, e.dtype)
        trailing = tuple(range(len(dom.names), len(dom.names) + len(axes)))
        per_chunk = max(1, self.budget // max(1, dom.size))
        total = None
        for box in iter_boxes(extents, per_chunk):
            sub = dom.extend(names, box)
            sub_mask = None if mask is None else _widen(mask, len(sub.names))
            value = np.broadcast_to(self.run(body, sub, sub_mask), sub.shape)
            if isinstance(kind, UserReducer):
                (part,) = self._fold(kind, (value.reshape(*value.shape[: len(dom.names)], -1),))
                total = part if total is None else self._combine(kind, (total,), (part,))[0]
                continue
            if kind == "sum":
                part = np.sum(value, axis=trailing, dtype=acc_dtype)
            else:
                part = _REDUCE[kind](value, axis=trailing)
            total = part if total is None else _COMBINE[kind](total, part)
        return np.asarray(total).astype(e.dtype, copy=False)

    def _several(self, e: Expr, dom: Domain, mask: np.ndarray | None) -> tuple[np.ndarray, ...]:
        """Every value of a several-value reduction, folded together once per domain: its other
        components, evaluated next over the same domain, find them in `folded`."""
        for d, m, other, values in self.folded:
            if d is dom and m is mask and same_reduction(other, e):
                return values
        kind, (packed, *axes) = e.arg.reducer, e.src
        names = tuple(a.arg[0] for a in axes)
        extents = tuple(a.arg[1] for a in axes)
        per_chunk = max(1, self.budget // max(1, dom.size))
        total = None
        for box in iter_boxes(extents, per_chunk):
            sub = dom.extend(names, box)
            sub_mask = None if mask is None else _widen(mask, len(sub.names))
            flat = tuple(np.broadcast_to(self.run(v, sub, sub_mask), sub.shape).reshape(*dom.shape, -1)
                         for v in packed.src)
            part = self._fold(kind, flat)
            total = part if total is None else self._combine(kind, total, part)
        values = tuple(np.asarray(t).astype(d, copy=False) for t, d in zip(total, kind.dtypes, strict=True))
        if self.folded and self.folded[0][0] is not dom:  # a new domain: what was kept is never asked again
            self.folded.clear()
        self.folded.append((dom, mask, e, values))
        return values

    def _combine(self, kind: UserReducer | TupleReducer, a: tuple[np.ndarray, ...],
                 b: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        """Every value's combine over the accumulators `a` and the incoming values `b`."""
        shape = np.broadcast_shapes(*(x.shape for x in (*a, *b)))
        operands = _Operands(kind.operands(a, b))
        return tuple(np.broadcast_to(self.run(c, operands), shape) for c in kind.combines)

    def _fold(self, kind: UserReducer | TupleReducer, flat: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        """A user reducer over the last axis: halves combined pairwise (it is associative)."""
        while flat[0].shape[-1] > 1:
            half = flat[0].shape[-1] // 2
            paired = self._combine(kind, tuple(f[..., :half] for f in flat), tuple(f[..., half: 2 * half]
                                                                                  for f in flat))
            flat = tuple(np.concatenate([p, f[..., 2 * half:]], axis=-1) for p, f in zip(paired, flat, strict=True))
        return tuple(f[..., 0] for f in flat)

    def _arg_reduce(self, e: Expr, dom: Domain, mask: np.ndarray | None) -> np.ndarray:
        """argmax / argmin: numpy's per chunk, chunks met in row-major order, so a later chunk wins
        only when strictly better (a NaN beats every number; the first NaN stays)."""
        kind, (body, *axes) = e.arg, e.src
        names = tuple(a.arg[0] for a in axes)
        extents = tuple(a.arg[1] for a in axes)
        pick = np.argmax if kind == "argmax" else np.argmin
        per_chunk = max(1, self.budget // max(1, dom.size))
        best_v = best_i = None
        for box in iter_boxes(extents, per_chunk):
            sub = dom.extend(names, box)
            sub_mask = None if mask is None else _widen(mask, len(sub.names))
            value = np.broadcast_to(_computing([self.run(body, sub, sub_mask)])[0], sub.shape)
            flat = value.reshape(*value.shape[: len(dom.names)], -1)
            local = pick(flat, axis=-1)
            v = np.take_along_axis(flat, local[..., None], axis=-1)[..., 0]
            coords = np.unravel_index(local, tuple(hi - lo for lo, hi in box))
            i = np.ravel_multi_index(tuple(c + lo for c, (lo, _) in zip(coords, box)), extents)
            if best_v is None:
                best_v, best_i = v, i
                continue
            better = v > best_v if kind == "argmax" else v < best_v
            if value.dtype.kind == "f":
                better = (better & ~np.isnan(best_v)) | (np.isnan(v) & ~np.isnan(best_v))
            best_v, best_i = np.where(better, v, best_v), np.where(better, i, best_i)
        return np.asarray(best_i, dtype=np.int64)


@dataclass(frozen=True)
class _Operands:
    """The domain a reducer's combine is evaluated over: its two placeholders bound to arrays."""

    arrays: dict[str, np.ndarray]

    def array(self, name: str) -> np.ndarray:
        return self.arrays[name]


def _factors(product: Expr) -> list[Expr]:
    """The operands of a product of two (a longer product has a product among them: no contraction)."""
    return list(product.src) if product.op is Op.MUL else [product]


def is_contraction(body: Expr) -> bool:
    """A product of one or two loads, each indexed by distinct plain loop variables (not for float16
    or bfloat16, whose products round before they are summed: einsum cannot do that)."""
    factors = _factors(body)
    if len(factors) == 2 and body.dtype in ("float16", "bfloat16"):
        return False
    for f in factors:
        if f.op is not Op.LOAD or any(i.op not in (Op.VAR, Op.RVAR) for i in f.src):
            return False
        if len({i.arg[0] for i in f.src}) != len(f.src):
            return False
    return True


def contract(body: Expr, dom: Domain, names: tuple[str, ...], extents: tuple[int, ...],
             arrays: Mapping[str, np.ndarray], dtype: str) -> np.ndarray | None:
    """A sum over a contraction, as numpy.einsum over the tensors' windows.

    This is the definition of a tensor contraction (matmul, batched matmul),
    handed to einsum so the golden model stays fast at real sizes; it needs
    no temporaries beyond the result.  Returns None when the body is not one.
    """
    order = list(dom.names) + list(names)
    if not is_contraction(body) or len(order) > 26:
        return None
    ranges = dict(zip(dom.names, dom.ranges)) | {n: (0, x) for n, x in zip(names, extents)}
    letters = {n: chr(ord("a") + p) for p, n in enumerate(order)}
    operands, subscripts = [], []
    for f in _factors(body):
        index_names = [i.arg[0] for i in f.src]
        array = arrays[f.arg.name][tuple(slice(*ranges[n]) for n in index_names)]
        operands.append(array.astype(np.float32) if dtype in ("float16", "bfloat16") else array)
        subscripts.append("".join(letters[n] for n in index_names))
    used = set("".join(subscripts))
    out_names = [n for n in dom.names if letters[n] in used]
    spec = ",".join(subscripts) + "->" + "".join(letters[n] for n in out_names)
    result = np.einsum(spec, *operands, optimize=len(operands) > 1)
    shape = [hi - lo if n in out_names else 1 for n, (lo, hi) in zip(dom.names, dom.ranges)]
    result = np.asarray(result).reshape(shape)
    missing = math.prod(extents[p] for p, n in enumerate(names) if letters[n] not in used)
    if missing != 1:  # reduce axes no factor reads repeat each term
        result = result * missing
    return cast_array(result, dtype)


def evaluate(body: Expr, loop_names: tuple[str, ...], shape: tuple[int, ...],
             arrays: Mapping[str, np.ndarray], budget: int = ELEMENT_BUDGET) -> np.ndarray:
    """Evaluate `body` over the full domain `shape` (one loop name per dim) into a new array."""
    out = np.empty(shape, dtype=body.dtype)
    evaluator = Evaluator(arrays, budget)
    per_point = _work_per_point(body)
    with np.errstate(all="ignore"):
        for box in iter_boxes(shape, max(1, budget // per_point)):
            dom = Domain(loop_names, box)
            out[tuple(slice(lo, hi) for lo, hi in box)] = evaluator.run(body, dom)
    return out


def evaluate_scan(body: Expr, loop_names: tuple[str, ...], shape: tuple[int, ...], arrays: Mapping[str, np.ndarray],
                  name: str, axis: str, steps: int, budget: int = ELEMENT_BUDGET) -> np.ndarray:
    """Evaluate a scan `name` (a body that reads `name` at earlier steps along `axis`): its first
    `steps` steps at once, then one step at a time, each seeing the steps before it."""
    out = np.zeros(shape, dtype=body.dtype)
    evaluator = Evaluator({**arrays, name: out}, budget)
    k = loop_names.index(axis)
    rest = shape[:k] + shape[k + 1:]
    per_point = _work_per_point(body)
    first = min(steps, shape[k])
    with np.errstate(all="ignore"):
        for lo, hi in [(0, first), *((t, t + 1) for t in range(first, shape[k]))]:
            for box in iter_boxes(rest, max(1, budget // (per_point * (hi - lo)))):
                ranges = (*box[:k], (lo, hi), *box[k:])
                out[tuple(slice(a, b) for a, b in ranges)] = evaluator.run(body, Domain(loop_names, ranges))
    return out


def _work_per_point(e: Expr) -> int:
    """Temporary elements per element of e that its reductions need (1 without one): the most any
    reduction not nested in another needs, each its own points times what its body needs (1 for a
    contraction, which sums without temporaries)."""
    return max(1, fold(e, _work))


def _work(e: Expr, parts: tuple[int, ...]) -> int:
    if e.op is not Op.REDUCE:
        return max(parts, default=1)
    if e.arg == "sum" and is_contraction(e.src[0]):
        return 1
    return math.prod(a.arg[1] for a in e.src[1:]) * parts[0]
