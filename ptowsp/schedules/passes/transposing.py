"""Transposed operands of contractions: a graph pass of the cpu's default build (after blocking.py).

A contraction whose second operand runs along the reduction,

    S[h, i, j] = sum(Q[i, h*hd + d] * K[j, h*hd + d], d) * scale      (attention scores, Q K^T)
    Y[i, j]    = sum(X[i, k] * W[j, k], k)                              (ONNX Gemm with transB=1)

has no vector along j in its second operand: K[j, ..] for consecutive j are a row apart, so the
default vectorises j with a gather per element.  As TVM's layout rewrite and oneDNN's weight
reorder do, the pass stores that operand transposed in a task of its own,

    S_K_t[h, d, j] = K[j, h*hd + d]                                     (folded at build time when K is constant)
    S[h, i, j]     = sum(Q[i, h*hd + d] * S_K_t[h, d, j], d) * scale

whose rows are contiguous in j: the register-tiled matmul of the default schedule (tiles.py) takes
it, panel packing included.  The copy costs one pass over K; the gathers it removes cost one per
multiply-add.  Measured side by side (2 workers): the zoo's transformer block at seq 128 ...
(docs/performance.md and its git history).

A task is rewritten when exactly one sum over one axis d is in its body, of a product of two
loads, the second operand's last index is d plus terms free of d, one of its indices is the
task's last loop variable j, the first operand does not read j, and j spans at least a vector;
the workload is plain compute tasks with static shapes.  Anything else is left as written.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptowsp.te import Expr, Op, substitute, walk
from ptowsp.te.dtypes import INDEX_DTYPE
from ptowsp.workloads import ComputeTask, Workload
from ptowsp.workloads.copying import compute_as, copy_replacing, fresh_name, names_in, plain, rebuild


@dataclass(frozen=True)
class _Operand:
    load: Expr  # the second operand's load, K[j, h*hd + d]
    free: tuple[tuple[str, int], ...]  # its other loop variables (name, extent), in the task's loop order
    reduce: tuple[str, int]  # the reduction axis d (name, extent)
    lane: tuple[str, int]  # the task's last loop variable j (name, extent)


def transpose_operands(wl: Workload, lanes: int) -> Workload:
    """`wl` with the second operand of every contraction that reads it along its reduction stored
    transposed (see the module docstring); `wl` itself when there is none."""
    if lanes < 2 or wl.sizes or any(not plain(wl.task(t)) for t in wl.tasks):
        return wl
    found = {t: op for t in wl.tasks if (op := _transposed_operand(wl.task(t), lanes)) is not None}
    if not found:
        return wl
    return rebuild(wl, {t: (lambda out, task, op=op: _rewrite(out, task, op)) for t, op in found.items()})


def _transposed_operand(task: ComputeTask, lanes: int) -> _Operand | None:
    reductions = [e for e in walk(task.body) if e.op is Op.REDUCE]
    if len(reductions) != 1 or reductions[0].arg != "sum" or len(reductions[0].src) != 2:
        return None
    product, axis = reductions[0].src
    if product.op is not Op.MUL or any(x.op is not Op.LOAD for x in product.src) or not task.loop_names:
        return None  # (a 0-d sum, an inner product, has no lane to transpose for)
    d = axis.arg[0]
    lane = task.loop_names[-1]
    extents = dict(zip(task.loop_names, task.tensor.shape, strict=True))
    if extents[lane] < lanes:
        return None
    for first, second in (product.src, product.src[::-1]):
        if _reads_var(first, lane) or not any(i.op is Op.VAR and i.arg[0] == lane for i in second.src):
            continue
        if not _unit_stride(second.src[-1], d) or any(_reads_rvar(i, d) for i in second.src[:-1]):
            continue
        names = {x.arg[0] for i in second.src for x in walk(i) if x.op is Op.VAR} - {lane}
        if names <= set(extents):
            free = tuple((n, extents[n]) for n in task.loop_names if n in names)
            return _Operand(second, free, (d, axis.arg[1]), (lane, extents[lane]))
    return None


def _rewrite(out: Workload, task: ComputeTask, op: _Operand) -> None:
    """The transposed copy of the operand, then the task reading it."""
    source = out.tensor(op.load.arg.name)
    loops = [*(n for n, _ in op.free), op.reduce[0], op.lane[0]]
    extents = [*(e for _, e in op.free), op.reduce[1], op.lane[1]]
    d, d_extent = op.reduce

    def transposed(*axes: Expr) -> Expr:
        by_name = dict(zip(loops, axes, strict=True))

        def rename(e: Expr) -> Expr | None:
            if e.op in (Op.VAR, Op.RVAR) and e.arg[0] in by_name:
                return by_name[e.arg[0]]
            return None

        return source[tuple(substitute(i, rename) for i in op.load.src)]

    copy = compute_as(out, fresh_name(f"{task.name}_{source.name}_t", names_in(out)), extents, loops, transposed)
    rvar = Expr(Op.RVAR, INDEX_DTYPE, (), (d, d_extent))
    at = tuple(Expr(Op.VAR, INDEX_DTYPE, (), (n, e)) for n, e in op.free) + (
        rvar, Expr(Op.VAR, INDEX_DTYPE, (), op.lane))
    copy_replacing(out, task, op.load, copy[at])


def _unit_stride(index: Expr, d: str) -> bool:
    """`index` is d, or d plus terms that do not read d."""
    if index.op is Op.RVAR:
        return index.arg[0] == d
    if index.op is Op.ADD:
        a, b = index.src
        return (_unit_stride(a, d) and not _reads_rvar(b, d)) or (_unit_stride(b, d) and not _reads_rvar(a, d))
    return False


def _reads_var(e: Expr, name: str) -> bool:
    return any(x.op is Op.VAR and x.arg[0] == name for x in walk(e))


def _reads_rvar(e: Expr, name: str) -> bool:
    return any(x.op is Op.RVAR and x.arg[0] == name for x in walk(e))
