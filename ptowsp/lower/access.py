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
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ptowsp.lower.ir import GLOBAL, For, Stmt, Store, bound_loops, stmt_exprs
from ptowsp.lower.kernel import Kernel
from ptowsp.lower.regions import read_box
from ptowsp.te import Expr, Op, walk

Box = tuple[tuple[str, int, int], ...]  # (start as Python source over g0, g1, ..., extent, size) per dimension
Region = tuple[tuple[int, int], ...]

_INFIX = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.FLOORDIV: "//", Op.MOD: "%"}
_NOT_ARITHMETIC = {Op.CONST, Op.VAR, Op.RVAR, Op.LOAD, Op.CAST}


def _source(e: Expr, grid: dict[str, str]) -> str | None:
    """e as a Python integer expression over the grid variables, or None if it uses anything else."""
    if e.op is Op.CONST and isinstance(e.arg, int) and not isinstance(e.arg, bool):
        return str(e.arg)
    if e.op is Op.VAR:
        return grid.get(e.arg[0])
    if e.op is Op.CAST and e.src[0].dtype in ("int32", "int64"):
        return _source(e.src[0], grid)
    parts = [_source(s, grid) for s in e.src]
    if any(p is None for p in parts):
        return None
    if e.op in _INFIX:
        return f"({parts[0]} {_INFIX[e.op]} {parts[1]})"
    if e.op is Op.NEG:
        return f"(-{parts[0]})"
    if e.op in (Op.MIN, Op.MAX):
        return f"{e.op.name.lower()}({parts[0]}, {parts[1]})"
    return None


@dataclass(frozen=True)
class KernelAccess:
    """Per-instance access boxes and cost of one kernel, as data."""

    grid: tuple[str, ...]
    reads: tuple[tuple[str, Box], ...]
    writes: tuple[tuple[str, Box], ...]
    flops: int
    bytes: int

    @functools.cached_property
    def regions(self) -> Callable[..., tuple[tuple[tuple[str, Region], ...], tuple[tuple[str, Region], ...]]]:
        """f(*coords) -> (reads, writes) as ((tensor, ((start, stop), ...)), ...)."""
        def boxes(entries: tuple[tuple[str, Box], ...]) -> str:
            def dims(box: Box) -> str:
                return "".join(f"(max(0, {start}), min({size}, {start} + {extent}))," for start, extent, size in box)

            return "(" + "".join(f"({name!r}, ({dims(box)}))," for name, box in entries) + ")"

        params = ", ".join(f"g{k}" for k in range(len(self.grid)))
        code = f"lambda {params}: ({boxes(self.reads)}, {boxes(self.writes)})"
        return eval(code, {"min": min, "max": max})  # noqa: S307 - source built above from integer expressions

    def to_json(self) -> dict:
        return {"grid": list(self.grid), "reads": [[n, [list(d) for d in b]] for n, b in self.reads],
                "writes": [[n, [list(d) for d in b]] for n, b in self.writes], "flops": self.flops,
                "bytes": self.bytes}

    @classmethod
    def from_json(cls, data: dict) -> KernelAccess:
        def boxes(entries) -> tuple[tuple[str, Box], ...]:
            return tuple((n, tuple((str(s), int(x), int(size)) for s, x, size in b)) for n, b in entries)

        return cls(tuple(data["grid"]), boxes(data["reads"]), boxes(data["writes"]), int(data["flops"]),
                   int(data["bytes"]))


def kernel_access(kernel: Kernel) -> KernelAccess:
    """The boxes one instance of `kernel` reads and writes, as functions of its grid coordinates."""
    return statement_access(kernel.body, [name for name, _ in kernel.grid])


def statement_access(body: Stmt, outer: Sequence[str]) -> KernelAccess:
    """The boxes one run of `body` reads and writes, as functions of the `outer` loop variables
    around it (a task's grid, or the grid and the loops of a kernel down to one of its blocks)."""
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
                source = _source(start, grid)
                dims.append((source, extent, size) if source is not None else ("0", size, size))
            out.append((buffer.name, tuple(dims)))
        return tuple(out)

    reads = boxes({b: i for b, i in loads.items() if b.name not in written})
    writes = boxes(stores)
    itemsize = {b.name: np.dtype(b.dtype).itemsize for b in (*loads, *stores)}
    moved = sum(itemsize[name] * int(np.prod([min(x, size) for _, x, size in box])) for name, box in (*reads, *writes))
    return KernelAccess(tuple(grid), reads, writes, _flops(body), moved)


def _statements(s: Stmt, trips: int):
    """Every statement with the number of times one instance runs it (guards ignored)."""
    yield s, trips
    inner = trips * s.extent if isinstance(s, For) else trips
    for c in s.children():
        yield from _statements(c, inner)


def _flops(body: Stmt) -> int:
    """Arithmetic operations one instance performs: per store, its value's operations times its trips."""
    total = 0
    for s, trips in _statements(body, 1):
        if isinstance(s, Store):
            total += trips * _operations(s.value)
    return total


def _operations(e: Expr) -> int:
    """Arithmetic nodes of a value, not counting index arithmetic inside loads."""
    if e.op is Op.LOAD:
        return 0
    return (e.op not in _NOT_ARITHMETIC) + sum(_operations(s) for s in e.src)
