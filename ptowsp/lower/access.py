"""What one task instance touches: boxes of the tensors it reads and writes, and its flops.

Bounds inference (regions.py) gives each box as `start(grid coordinates) +
[0, extent)` with a constant extent, clipped to the tensor; the starts
become one small Python function of the grid coordinates, so the runtime's
task table costs microseconds per instance and a cached build can rebuild it
from text (`to_json`) without lowering again.  Boxes over-approximate (guards
are ignored; a start the inference cannot express covers the whole
dimension), which keeps dependencies safe.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ptowsp.lower.ir import GLOBAL, For, Stmt, Store, bound_loops, stmt_exprs
from ptowsp.lower.kernel import Kernel
from ptowsp.lower.regions import read_box
from ptowsp.te import Expr, Op, sizes, walk
from ptowsp.te.sizes import Extent, python_source

Box = tuple[tuple[str, str, str], ...]  # (start over g0, g1, ..., extent, size) per dimension, as Python source
Region = tuple[tuple[int, int], ...]
Regions = tuple[tuple[tuple[str, Region], ...], tuple[tuple[str, Region], ...]]
_NOT_ARITHMETIC = {Op.CONST, Op.VAR, Op.RVAR, Op.LOAD, Op.CAST, Op.SIZE}


@dataclass(frozen=True)
class KernelAccess:
    """Per-instance access boxes and cost of one kernel, as data: Python source over the grid
    coordinates (g0, g1, ...) and the workload's sizes (by name)."""

    grid: tuple[str, ...]
    reads: tuple[tuple[str, Box], ...]
    writes: tuple[tuple[str, Box], ...]
    flops: str
    bytes: str
    sizes: tuple[str, ...] = ()

    @staticmethod
    def _boxes(entries: tuple[tuple[str, Box], ...]) -> str:
        """((tensor, ((start, stop), ...)), ...) as Python source over g0, g1, ... and the sizes."""
        def dims(box: Box) -> str:
            return "".join(f"(max(0, {start}), min({size}, {start} + {extent}))," for start, extent, size in box)

        return "(" + "".join(f"({name!r}, ({dims(box)}))," for name, box in entries) + ")"

    @functools.cached_property
    def _bind(self) -> Callable[..., tuple[Callable[..., Regions], int, int]]:
        """f(*sizes) -> (regions(*coords), flops, bytes) at that binding."""
        params = ", ".join(f"g{k}" for k in range(len(self.grid)))
        regions = f"lambda {params}: ({self._boxes(self.reads)}, {self._boxes(self.writes)})"
        code = f"lambda {', '.join(self.sizes)}: ({regions}, {self.flops}, {self.bytes})"
        return eval(code, {"min": min, "max": max})  # noqa: S307 - source built here from integer expressions

    @functools.cached_property
    def _writes_over(self) -> Callable[..., Callable[..., tuple]]:
        """f(*sizes) -> writes(*coordinate arrays): the write boxes of many instances at once (numpy)."""
        params = ", ".join(f"g{k}" for k in range(len(self.grid)))
        code = f"lambda {', '.join(self.sizes)}: lambda {params}: {self._boxes(self.writes)}"
        return eval(code, {"min": np.minimum, "max": np.maximum})  # noqa: S307 - source built here

    def writes_over(self, sizes: tuple[int, ...], coords: Sequence[np.ndarray]) -> dict[str, tuple]:
        """tensor -> ((starts, stops), ...) per dimension, arrays over the instances at `coords`."""
        return dict(self._writes_over(*sizes)(*coords))

    @functools.cached_property
    def _bindings(self) -> dict[tuple[int, ...], tuple[Callable[..., Regions], int, int]]:
        return {}

    def at(self, sizes: tuple[int, ...] = ()) -> tuple[Callable[..., Regions], int, int]:
        """(regions(*coords) -> (reads, writes), flops, bytes) of one instance at a binding of the sizes
        (their values in `self.sizes` order)."""
        found = self._bindings.get(sizes)
        if found is None:
            if len(self._bindings) >= 64:
                self._bindings.clear()
            found = self._bindings[sizes] = self._bind(*sizes)
        return found

    @property
    def regions(self) -> Callable[..., Regions]:
        """f(*coords) -> (reads, writes) as ((tensor, ((start, stop), ...)), ...) (no symbolic sizes)."""
        return self.at()[0]

    def to_json(self) -> dict:
        return {"grid": list(self.grid), "reads": [[n, [list(d) for d in b]] for n, b in self.reads],
                "writes": [[n, [list(d) for d in b]] for n, b in self.writes], "flops": self.flops,
                "bytes": self.bytes, "sizes": list(self.sizes)}

    @classmethod
    def from_json(cls, data: dict) -> KernelAccess:
        def boxes(entries) -> tuple[tuple[str, Box], ...]:
            return tuple((n, tuple((str(s), str(x), str(size)) for s, x, size in b)) for n, b in entries)

        return cls(tuple(data["grid"]), boxes(data["reads"]), boxes(data["writes"]), str(data["flops"]),
                   str(data["bytes"]), tuple(data.get("sizes", ())))


def _reach(indices: list[tuple[Expr, ...]], dim: int, inner: dict) -> int | None:
    """For a gathered dimension (an index that reads a tensor), how many values its indices can
    take while the `inner` loops run: the product of the extents of the inner loops they read
    (None for a dimension that is not gathered, or where an extent is symbolic)."""
    if not any(n.op is Op.LOAD for index in indices for n in walk(index[dim])):
        return None
    loops = {n.arg[0] for index in indices for n in walk(index[dim]) if n.op is Op.VAR and n.arg[0] in inner}
    extents = [inner[v] for v in sorted(loops)]
    return math.prod(extents) if all(isinstance(e, int) for e in extents) else None


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
    grid = {name: f"g{k}" for k, name in enumerate(outer)}
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

    def boxes(accesses: dict[object, list[tuple[Expr, ...]]]) -> tuple[tuple[str, Box], ...]:
        out = []
        for buffer, indices in sorted(accesses.items(), key=lambda item: item[0].name):
            box = read_box(indices, inner, buffer.shape, shift=False)
            dims = []
            for start, extent, size in zip(box.starts, box.extents, buffer.shape, strict=True):
                whole = python_source(size, {})
                source = python_source(start, grid)
                extent_source = python_source(extent, {})
                rows = _reach(indices, len(dims), inner) if gathered_rows else None
                if rows is not None and isinstance(size, int):
                    dims.append(("0", str(min(rows, size)), whole))
                elif source is None or extent_source is None:  # an index the inference cannot follow
                    dims.append(("0", whole, whole))
                else:
                    dims.append((source, extent_source, whole))
            out.append((buffer.name, tuple(dims)))
        return tuple(out)

    reads = boxes({b: i for b, i in loads.items() if b.name not in written})
    writes = boxes(stores)
    itemsize = {b.name: np.dtype(b.dtype).itemsize for b in (*loads, *stores)}
    moved = " + ".join(f"{itemsize[name]} * {' * '.join(f'min({x}, {size})' for _, x, size in box) or '1'}"
                       for name, box in (*reads, *writes)) or "0"
    return KernelAccess(tuple(grid), reads, writes, python_source(_flops(body), {}) or "0", moved,
                        tuple(size_names))


def _statements(s: Stmt, trips: Extent):
    """Every statement with the number of times one instance runs it (guards ignored)."""
    yield s, trips
    inner = sizes.mul(trips, s.extent) if isinstance(s, For) else trips
    for c in s.children():
        yield from _statements(c, inner)


def _flops(body: Stmt) -> Extent:
    """Arithmetic operations one instance performs: per store, its value's operations times its trips."""
    total: Extent = 0
    for s, trips in _statements(body, 1):
        if isinstance(s, Store):
            total = sizes.add(total, sizes.mul(trips, _operations(s.value)))
    return total


def _operations(e: Expr) -> int:
    """Arithmetic nodes of a value, not counting index arithmetic inside loads."""
    if e.op is Op.LOAD:
        return 0
    return (e.op not in _NOT_ARITHMETIC) + sum(_operations(s) for s in e.src)
