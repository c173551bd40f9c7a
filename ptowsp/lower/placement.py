"""Staging: fill a local buffer per iteration of an anchor loop, and read it instead of a tensor.

One mechanism serves compute_at (the buffer is filled by computing the
producer over the region, Halide's meaning) and cache_read (filled by copying
the tensor, TVM's meaning).  At every occurrence of the anchor loop the body's
reads of the tensor are gathered, their box inferred (regions.py), the buffer
allocated and filled before the body, and the reads redirected to it:

    for i in ...:                      for i in ...:
      ... T[i, j] ...          ->        local T.local: [box extents]
                                         <fill T.local over start(i) + box>
                                         ... T.local[i - start(i), j] ...

A computed-at producer's buffer keeps the producer's name (it is never stored
globally, so nothing else in the kernel has that name); a read cache is
named `tensor.scope`, as in TVM.

An anchor that is a grid loop (or no loop: the whole task instance) stages
around the kernel body; grid loops inside the anchor then count as inner
loops over their whole extent.

A `shared` buffer belongs to a GPU thread block, not to one thread: loops
around the anchor that are bound to `threadIdx` axes count as inner loops
too (TVM relaxes thread axes the same way), so the box covers what every
thread of the block reads and its start does not depend on the thread.  On a
target that runs those loops one after another, each iteration fills the
whole box: the same values, more copying.
"""

from __future__ import annotations

from collections.abc import Callable

from ptowsp.errors import BuildError
from ptowsp.lower.ir import (GLOBAL, SHARED, Allocate, Buffer, For, IfThen, Stmt, block, bound_loops, map_exprs,
                             stmt_exprs, walk_stmts)
from ptowsp.lower.regions import Box, read_box
from ptowsp.te import Expr, Op, sizes, substitute, walk
from ptowsp.te.bounds import conjuncts

Fill = Callable[[Box, Buffer], Stmt]  # the statement that fills the buffer over the box


def global_reads(s: Stmt, tensor: str, skip: str | None = None) -> list[Expr]:
    """Every LOAD of the global tensor in a statement (outside allocations of buffer `skip`)."""
    if isinstance(s, Allocate) and s.buffer.name == skip:
        return []
    here = [n for e in stmt_exprs(s) for n in walk(e)
            if n.op is Op.LOAD and n.arg.name == tensor and n.arg.scope == GLOBAL]
    return here + [n for c in s.children() for n in global_reads(c, tensor, skip)]


def indexed_by(s: Stmt, tensor: str, other: str) -> bool:
    """Whether a read of global `tensor` in s has an index that reads `other` (gathers by its values)."""
    return any(n.op is Op.LOAD and n.arg.name == other for r in global_reads(s, tensor) for i in r.src for n in walk(i))


def _stage_body(body: Stmt, tensor: Buffer, name: str, scope: str, fill: Fill, relaxed: dict[str, int],
                known: tuple[Expr, ...] = ()) -> Stmt:
    """Stage the reads in `body`; loops in `relaxed` (outside the anchor) count as ranging over their
    extent; `known`: the conditions of the guards around the anchor."""
    reads = global_reads(body, tensor.name)
    if not reads:
        return body  # this occurrence of the anchor does not read the tensor
    filled_inside = frozenset(s.buffer.name for s in walk_stmts(body) if isinstance(s, Allocate))
    box = read_box([r.src for r in reads], bound_loops(body) | relaxed, tensor.shape, known=known,
                   varying=filled_inside)
    symbolic = [str(e) for e in box.extents if sizes.most(e) is None]
    if symbolic:
        raise BuildError(f"{name}: the part of {tensor.name} read there is {symbolic[0]} elements long, a symbolic "
                         "size; a buffer needs a fixed size: split the symbolic loop and place it at the outer part")
    local = Buffer(name, tuple(map(sizes.most, box.extents)), tensor.dtype, scope)  # the fill covers the box

    def redirect(n: Expr) -> Expr | None:
        if n.op is Op.LOAD and n.arg.name == tensor.name and n.arg.scope == GLOBAL:
            return local[tuple(i - s for i, s in zip(n.src, box.starts, strict=True))]  # tidy folds i - 0
        return None

    return Allocate(local, block(fill(box, local), map_exprs(body, lambda e: substitute(e, redirect))))


def stage(stmt: Stmt, anchor: str | None, grid: tuple[tuple[str, int], ...], tensor: Buffer, name: str,
          scope: str, fill: Fill) -> Stmt:
    """Stage `tensor` into buffer `name` at every occurrence of loop `anchor` (None: per task instance)."""
    grid_names = [g for g, _ in grid]
    if anchor is None or anchor in grid_names:
        inside = grid[grid_names.index(anchor) + 1:] if anchor is not None else ()
        return _stage_body(stmt, tensor, name, scope, fill, dict(inside))

    def inside_guards(body: Stmt, threads: dict[str, int], known: tuple[Expr, ...]) -> Stmt:
        """Staged under the guards that open the anchor's body (a split's tail: `i < 197`): the box is
        filled only where the body runs, and the guards bound it (without them, the reads of a
        producer computed here and of its own producer clamp differently, and their box fell back to
        the whole tensor: a LayerNorm's mean over every row, once per row)."""
        if isinstance(body, IfThen):
            return IfThen(body.cond, inside_guards(body.then, threads, known + conjuncts(body.cond)))
        return _stage_body(body, tensor, name, scope, fill, threads, known)

    def visit(s: Stmt, threads: dict[str, int], known: tuple[Expr, ...]) -> Stmt:
        if isinstance(s, For) and s.var == anchor:
            return For(s.var, s.extent, s.kind, inside_guards(s.body, threads, known))
        if isinstance(s, For) and scope == SHARED and s.kind.startswith("threadIdx."):
            threads = {**threads, s.var: s.extent}
        if isinstance(s, IfThen):
            known = known + conjuncts(s.cond)
        return s.with_children([visit(c, threads, known) for c in s.children()])

    return visit(stmt, {}, ())


