"""B stored as column panels, once: a graph pass of the cpu's default build (after transposing.py).

The default's register-tiled matmul (tiles.py) reads B's k x W panel (W: the tile's columns,
two or three vectors, `tile_vectors`) once per k block.  Packed inside the task, as `pack_panel` does, every task packs
the panels it reads: a square matmul's row tasks each pack all of B (1024³ on 8 tasks: 32 MB of
copying for a 4 MB operand).  As OpenBLAS packs B once for all its threads, this pass stores the
operand as panels in a task of its own,

    C_B_panels[.., jb, k, jl] = B[.., k, jb * W + jl]           (folded at build time when B is constant)
    C[.., i, j]               = sum(A[.., i, k] * C_B_panels[.., j // W, k, j % W], k)

and the tile splits j by W, so it reads `C_B_panels[.., j.outer, k, j.inner]`: one contiguous
k x W panel, nothing to pack per task.  Hand-written, 1024³ on 2 workers: 7.24-7.37 ms against
8.20-8.66 ms packing per task (docs/performance.md and its git history).

A B known when the program is built (weights, and tasks over them) is stored so: its panels are
folded then, and a run pays nothing.  An input B is copied on every run, by a task of its own, only
where many row tasks would each pack all of it (at least PACKED_ROWS rows): side by side with the
Python scheduler, the transformer block (128 rows) lost 0.77x and batch_matmul 0.69x that way,
where BERT's layer (constant weights) gained 1.21x.

A task is rewritten only when the tile will take it (tiles.py `contraction_tile`): float32, one
sum over one axis k of a product of two loads, the second `B[.., k, j]` with k and the task's
last loop j as its last two indices and j extent a multiple of W, the first not reading j, the
row axis a multiple of REGISTER_ROWS, and B's rows exactly j long; the workload is plain compute
tasks with static shapes.  Anything else is left as written.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptowsp.schedules.passes.fold import foldable
from ptowsp.schedules.passes.tiles import REGISTER_ROWS
from ptowsp.te import Expr, Op, walk
from ptowsp.te.dtypes import INDEX_DTYPE
from ptowsp.workloads import ComputeTask, Workload
from ptowsp.workloads.copying import compute_as, copy_replacing, fresh_name, names_in, plain, rebuild

PACKED_ROWS = 512  # an input B is stored as panels by a task of its own for at least this many rows


@dataclass(frozen=True)
class _Panel:
    load: Expr  # B[.., k, j]
    reduce: tuple[str, int]  # k (name, extent)
    lane: tuple[str, int]  # j (name, extent)


def pack_panels(wl: Workload, widths: tuple[int, ...]) -> Workload:
    """`wl` with the panel operand of every contraction the register tile takes stored as panels of
    the first of `widths` (columns, preferred first: tiles.py `tile_vectors`) its columns are a
    multiple of (see the module docstring); `wl` itself when there is none."""
    if min(widths) < 2 or wl.sizes or any(not plain(wl.task(t)) for t in wl.tasks):
        return wl
    known = set(wl.constants) | foldable(wl)
    found = {}
    for t in wl.tasks:
        for width in widths:
            if (p := _panel_operand(wl.task(t), width, known)) is not None:
                found[t] = (p, width)
                break
    if not found:
        return wl
    return rebuild(wl, {t: (lambda out, task, p=p, w=w: _rewrite(out, task, p, w)) for t, (p, w) in found.items()})


def _panel_operand(task: ComputeTask, width: int, known: set[str]) -> _Panel | None:
    body = task.body
    if body.op is not Op.REDUCE or body.arg != "sum" or len(body.src) != 2 or body.dtype != "float32":
        return None
    product, axis = body.src
    if product.op is not Op.MUL or any(x.op is not Op.LOAD or x.dtype != "float32" for x in product.src):
        return None
    if len(task.loop_names) < 2:
        return None
    k, (i, j) = axis.arg[0], task.loop_names[-2:]
    extents = dict(zip(task.loop_names, task.tensor.shape, strict=True))
    if extents[j] % width or extents[i] % REGISTER_ROWS:  # the tile's columns, its smallest row count
        return None
    for first, second in (product.src, product.src[::-1]):
        names = [x.arg[0] if x.op in (Op.VAR, Op.RVAR) else None for x in second.src]
        if len(names) < 2 or names[-2:] != [k, j] or _reads(first, j):
            continue
        if second.arg.name not in known and extents[i] < PACKED_ROWS:
            continue
        if any(_reads(x, n) for x in second.src[:-2] for n in (i, j, k)):
            continue
        if second.arg.shape[-1] != extents[j]:
            continue  # B wider than the task's columns: a panel copy would read past what is used
        return _Panel(second, (k, axis.arg[1]), (j, extents[j]))
    return None


def _rewrite(out: Workload, task: ComputeTask, p: _Panel, width: int) -> None:
    """The panel copy of the operand, then the task reading it."""
    source = out.tensor(p.load.arg.name)
    lead = source.shape[:-2]
    loops = [*(f"d{n}" for n in range(len(lead))), "jb", "k", "jl"]
    shape = (*lead, p.lane[1] // width, p.reduce[1], width)
    panels = compute_as(out, fresh_name(f"{task.name}_{source.name}_panels", names_in(out)), shape, loops,
                        lambda *axes: source[(*axes[:-3], axes[-2], axes[-3] * width + axes[-1])])
    j = Expr(Op.VAR, INDEX_DTYPE, (), p.lane)
    copy_replacing(out, task, p.load, panels[(*p.load.src[:-2], j // width, p.load.src[-2], j % width)])


def _reads(e: Expr, name: str) -> bool:
    return any(x.op in (Op.VAR, Op.RVAR) and x.arg[0] == name for x in walk(e))
