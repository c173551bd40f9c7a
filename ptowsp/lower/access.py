"""What one task instance touches: boxes of the tensors it reads and writes, and its flops.

Bounds inference (regions.py) gives each box as `start(grid coordinates) +
[0, extent)` with a constant extent, clipped to the tensor.  Starts, extents,
flops and bytes are formulas (formula.py): data, not code, so a cached build
rebuilds the task table from its manifest without lowering again and without
running anything the manifest holds.  At a binding of the sizes the extents
become numbers; the starts are evaluated over every instance of the grid at
once (numpy), which keeps the task table at about a microsecond or two per
instance.  Boxes over-approximate (guards are ignored; a start the inference
cannot express covers the whole dimension), which keeps dependencies safe.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator

from ptowsp.errors import BuildError
from ptowsp.lower.formula import Formula, check_limits, combine, constant, formula_of
from ptowsp.lower.ir import GLOBAL, For, Let, Stmt, Store, bound_loops, stmt_exprs
from ptowsp.lower.kernel import Kernel
from ptowsp.lower.regions import read_box
from ptowsp.te import Expr, Op, fold, sizes, walk
from ptowsp.te.sizes import Extent

Dim = tuple[Formula, Formula, Formula]  # start (over grid coordinates and sizes), extent, size
Box = tuple[Dim, ...]
Boxes = tuple[tuple[str, Box], ...]
Region = tuple[tuple[int, int], ...]
Regions = tuple[tuple[tuple[str, Region], ...], tuple[tuple[str, Region], ...]]
_NOT_ARITHMETIC = {Op.CONST, Op.VAR, Op.RVAR, Op.LOAD, Op.CAST, Op.SIZE}


class KernelAccess(BaseModel):
    """Per-instance access boxes and cost of one kernel, as formulas over the grid coordinates
    (numbered as `grid`, the grid's loop names) and the workload's sizes (named in `sizes`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    grid: tuple[str, ...]
    reads: Boxes
    writes: Boxes
    flops: Formula
    bytes: Formula
    sizes: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _closed(self) -> KernelAccess:
        """Formulas read only the declared sizes; only starts read grid coordinates, and only the
        grid's."""
        fixed = [self.flops, self.bytes, *(f for _, box in (*self.reads, *self.writes) for _, *xs in box for f in xs)]
        starts = [start for _, box in (*self.reads, *self.writes) for start, *_ in box]
        for f in (*fixed, *starts):
            unknown = check_limits(f).sizes() - set(self.sizes)
            if unknown:
                raise ValueError(f"a formula reads sizes {sorted(unknown)} the access does not declare")
        if any(f.coordinates() for f in fixed):
            raise ValueError("an extent, size, flops or bytes formula reads a grid coordinate")
        if any(k >= len(self.grid) for f in starts for k in f.coordinates()):
            raise ValueError(f"a start reads a grid coordinate beyond the grid's {len(self.grid)}")
        return self

    @functools.cached_property
    def _bindings(self) -> dict[tuple[int, ...], _Bound]:
        return {}

    def bound(self, sizes: tuple[int, ...] = ()) -> _Bound:
        """The access at a binding of the sizes (their values in `self.sizes` order)."""
        found = self._bindings.get(sizes)
        if found is None:
            if len(self._bindings) >= 64:
                self._bindings.clear()
            found = self._bindings[sizes] = _Bound(self, dict(zip(self.sizes, sizes, strict=True)))
        return found

    def at(self, sizes: tuple[int, ...] = ()) -> tuple[Callable[..., Regions], int, int]:
        """(regions(*coords) -> (reads, writes), flops, bytes) of one instance at a binding of the sizes
        (their values in `self.sizes` order)."""
        bound = self.bound(sizes)
        return bound.regions, bound.flops, bound.bytes

    @property
    def regions(self) -> Callable[..., Regions]:
        """f(*coords) -> (reads, writes) as ((tensor, ((start, stop), ...)), ...) (no symbolic sizes)."""
        return self.bound().regions

    @property
    def reads_at(self) -> Callable[..., tuple]:
        """f(*coords) -> the reads alone, as `regions` gives them."""
        return self.bound().reads_at

    def writes_over(self, sizes: tuple[int, ...], coords: Sequence[np.ndarray]) -> dict[str, tuple]:
        """tensor -> ((starts, stops), ...) per dimension, arrays over the instances at `coords`."""
        return {name: tuple(_span(s, coords) for s in spans) for name, spans, _ in self.bound(sizes).writes}


# one dimension at a binding: (None, start, stop) where every instance has the same [start, stop),
# else (start as a function of the grid coordinates, extent, size)
Span = tuple[Callable | None, int, int]
# per tensor: its name, its spans, and its region where that is the same for every instance (else None)
Part = tuple[str, tuple[Span, ...], tuple[str, Region] | None]


def _span(dim: Span, coords: Sequence) -> tuple:
    """[start, stop) of one dimension clipped to the tensor: ints, or arrays over many instances."""
    start, extent, size = dim
    if start is None:
        return extent, size
    at = start(coords)
    if isinstance(at, int):
        return max(0, at), min(size, at + extent)
    return np.maximum(at, 0), np.minimum(at + extent, size)


class _Bound:
    """A KernelAccess at one binding of the sizes: extents, sizes, flops and bytes are numbers; a
    start is a number or a function of the grid coordinates alone."""

    def __init__(self, access: KernelAccess, values: Mapping[str, int]):
        def number(f: Formula) -> int:
            return int(f.evaluate(values))

        def span(start: Formula, extent: Formula, size: Formula) -> Span:
            start, extent, size = start.bind(values), number(extent), number(size)
            at = start.number()
            return (start.function(), extent, size) if at is None else (None, max(0, at), min(size, at + extent))

        def parts(boxes: Boxes) -> tuple[Part, ...]:
            found = []
            for name, box in boxes:
                spans = tuple(span(*dim) for dim in box)
                fixed = all(s[0] is None for s in spans)
                found.append((name, spans, (name, tuple(s[1:] for s in spans)) if fixed else None))
            return tuple(found)

        self.reads, self.writes = parts(access.reads), parts(access.writes)
        self.flops, self.bytes = number(access.flops), number(access.bytes)

    def regions(self, *coords: int) -> Regions:
        """(reads, writes) of the instance at `coords`."""
        return _at(self.reads, coords), _at(self.writes, coords)

    def reads_at(self, *coords: int) -> tuple[tuple[str, Region], ...]:
        """The reads alone (the aicore cost model's streamed blocks write nothing of their own)."""
        return _at(self.reads, coords)

    def over(self, points: Sequence[tuple[int, ...]], coords: Sequence[np.ndarray] | None = None
             ) -> tuple[list, list]:
        """(reads, writes) of the instances at `points`, one entry each.  Many at once are evaluated
        by numpy over `coords` (one array per grid coordinate, made from the points if not given)."""
        if len(points) < 16:  # numpy's overhead is not worth it
            return [_at(self.reads, p) for p in points], [_at(self.writes, p) for p in points]
        if coords is None:
            coords = list(np.array(points, dtype=np.int64).T)
        return _per_instance(self.reads, coords, len(points)), _per_instance(self.writes, coords, len(points))


def _at(parts: tuple[Part, ...], coords: Sequence[int]) -> tuple[tuple[str, Region], ...]:
    """The regions of `parts` at one instance (plain loops: the aicore cost model asks for every block
    of every instance)."""
    found = []
    for name, spans, fixed in parts:
        if fixed is None:
            region = []
            for start, extent, size in spans:
                if start is None:
                    region.append((extent, size))  # the fixed [start, stop)
                else:
                    at = start(coords)
                    region.append((at if at > 0 else 0, at + extent if at + extent < size else size))
            fixed = name, tuple(region)
        found.append(fixed)
    return tuple(found)


def _per_instance(parts: tuple[Part, ...], coords: Sequence[np.ndarray], count: int) -> list:
    """Per instance, its regions of `parts`: one column per tensor, zipped."""
    columns = []
    for name, spans, fixed in parts:
        if fixed:
            columns.append(itertools.repeat(fixed, count))
            continue
        dims = [_span(s, coords) for s in spans]
        pairs = [itertools.repeat((lo, hi), count) if isinstance(lo, int) else
                 zip(np.broadcast_to(lo, count).tolist(), np.broadcast_to(hi, count).tolist()) for lo, hi in dims]
        columns.append(zip(itertools.repeat(name), zip(*pairs)))
    return list(zip(*columns)) if columns else [()] * count


def _gathered(indices: list[tuple[Expr, ...]], dim: int) -> bool:
    """Whether a dimension's index reads a tensor."""
    return any(n.op is Op.LOAD for index in indices for n in walk(index[dim]))


def _loops_read(indices: list[tuple[Expr, ...]], dim: int, inner: dict) -> set[str]:
    return {n.arg[0] for index in indices for n in walk(index[dim]) if n.op is Op.VAR and n.arg[0] in inner}


def _reach(indices: list[tuple[Expr, ...]], dim: int, inner: dict, spans: Sequence[Formula | None]) -> int | None:
    """For a gathered dimension (an index that reads a tensor), how many values its indices can
    take while the `inner` loops run: the product of the extents of the inner loops they read,
    less what the other dimensions whose indices read only those loops take of it (a paged cache's
    slot `j % block` beside its block `table[b, j // block]`: together they take one value per j,
    not a block's worth each); None for a dimension that is not gathered, or where an extent is
    symbolic.  `spans`: every dimension's extent in the box."""
    if not _gathered(indices, dim):
        return None
    loops = _loops_read(indices, dim, inner)
    extents = [inner[v] for v in sorted(loops)]
    if not all(isinstance(e, int) for e in extents):
        return None
    reach = math.prod(extents)
    for other, span in enumerate(spans):
        theirs = _loops_read(indices, other, inner) if other != dim else set()
        width = span.number() if span is not None else None
        if theirs and theirs <= loops and width and not _gathered(indices, other):
            reach = -(-reach // width)
    return reach


def kernel_access(kernel: Kernel) -> KernelAccess:
    """The boxes one instance of `kernel` reads and writes, as functions of its grid coordinates."""
    return statement_access(kernel.body, [name for name, _ in kernel.grid], kernel.sizes)


def statement_access(body: Stmt, outer: Sequence[str], size_names: Sequence[str] = (),
                     gathered_rows: bool = False) -> KernelAccess:
    """The boxes one run of `body` reads and writes, as functions of the `outer` loop variables
    around it (a task's grid, or the grid and the loops of a kernel down to one of its blocks).

    A gathered dimension covers the whole tensor (safe for dependencies); with `gathered_rows`
    (for a cost model) it counts the rows the gather can reach instead: the trip count of the
    loops its index reads, as if each row were fetched on its own."""
    coordinates = {name: k for k, name in enumerate(outer)}
    inner = bound_loops(body)
    loads: dict[object, list[tuple[Expr, ...]]] = defaultdict(list)
    stores: dict[object, list[tuple[Expr, ...]]] = defaultdict(list)
    for s, _ in _statements(body, 1):
        if isinstance(s, Store) and s.buffer.scope == GLOBAL:
            stores[s.buffer].append(s.indices)
        for e in stmt_exprs(s):
            for n in walk(e):
                if n.op is Op.LOAD and n.arg.scope == GLOBAL:
                    loads[n.arg].append(n.src)
    written = {b.name for b in stores}

    def boxes(accesses: dict[object, list[tuple[Expr, ...]]]) -> Boxes:
        out = []
        for buffer, indices in sorted(accesses.items(), key=lambda item: item[0].name):
            box = read_box(indices, inner, buffer.shape, shift=False)
            spans = [formula_of(extent) for extent in box.extents]
            dims = []
            for start, span, size in zip(box.starts, spans, buffer.shape, strict=True):
                whole = _required(size, f"tensor {buffer.name!r}: a dimension")
                rows = _reach(indices, len(dims), inner, spans) if gathered_rows else None
                begin = formula_of(start, coordinates)
                if rows is not None and isinstance(size, int):
                    dims.append((constant(0), constant(min(rows, size)), whole))
                elif begin is None or span is None:  # an index the inference cannot follow
                    dims.append((constant(0), whole, whole))
                else:
                    dims.append((begin, span, whole))
            out.append((buffer.name, tuple(dims)))
        return tuple(out)

    reads = boxes({b: i for b, i in loads.items() if b.name not in written})
    writes = boxes(stores)
    itemsize = {b.name: np.dtype(b.dtype).itemsize for b in (*loads, *stores)}
    moved = combine("add", constant(0), *(combine("mul", constant(itemsize[name]),
                                                  *(combine("min", x, size) for _, x, size in box))
                                          for name, box in (*reads, *writes)))
    return KernelAccess(grid=tuple(outer), reads=reads, writes=writes, flops=formula_of(_flops(body)) or constant(0),
                        bytes=moved, sizes=tuple(size_names))


def _required(extent: Extent, what: str) -> Formula:
    found = formula_of(extent)
    if found is None:
        raise BuildError(f"{what} ({extent}) is not integer arithmetic over sizes")
    return found


def _statements(s: Stmt, trips: Extent):
    """Every statement with the number of times one instance runs it (guards ignored)."""
    yield s, trips
    inner = sizes.mul(trips, s.extent) if isinstance(s, For) else trips
    for c in s.children():
        yield from _statements(c, inner)


def _flops(body: Stmt) -> Extent:
    """Arithmetic operations one instance performs: per store and let, its value's operations times its
    trips."""
    total: Extent = 0
    for s, trips in _statements(body, 1):
        if isinstance(s, (Store, Let)):
            total = sizes.add(total, sizes.mul(trips, _operations(s.value)))
    return total


def _operations(e: Expr) -> int:
    """Arithmetic nodes of a value, not counting index arithmetic inside loads; a shared part counts at
    each use, as the tree reads."""
    return fold(e, lambda n, parts: (n.op not in _NOT_ARITHMETIC) + sum(parts),
                lambda n: () if n.op is Op.LOAD else n.src)
