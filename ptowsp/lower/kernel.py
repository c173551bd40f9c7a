"""Lower one compute task and its loop nest to a kernel: loops, guards, stores.

The pipeline, one pass per line (`lower_task`):

    body = inline_producers(body)      # compute_inline: substitute producers' expressions
    axis = axis_values(nest)           # original loop variables from split/fuse relations
    stmt = reduction_nests(...)        # Halide-style init / update / epilogue nests
    stmt = hoist_inner_reductions(...) # reductions inside expressions become scalar loops

A reduction `out = epilogue(sum(body, axes))` lowers to three nests that share
the task's grid loops: init the accumulator, update it over every loop, then
store epilogue(accumulator).  The accumulator is the output itself when the
epilogue is the identity and the dtypes agree; otherwise a local buffer
indexed by the task's non-grid spatial loops, so each task instance owns its
tile.  Non-dividing splits guard the innermost statement with `axis < extent`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ptowsp.lower.ir import LOCAL, Allocate, Buffer, For, IfThen, Stmt, Store, block, stmt_exprs, var, walk_stmts
from ptowsp.schedules import LoopNest, Schedule
from ptowsp.schedules.loopnest import FuseRelation, SplitRelation
from ptowsp.te import Expr, Op, cast, const, outermost_reductions, substitute, walk
from ptowsp.te.expr import binary, unary, where
from ptowsp.workloads import ComputeTask, Workload

_IDENTITY_OP = {"sum": Op.ADD, "max": Op.MAX, "min": Op.MIN}


@dataclass(frozen=True)
class Kernel:
    """The code one task instance runs; its free variables are the grid loops."""

    name: str
    grid: tuple[tuple[str, int], ...]  # (loop name, extent) of the task grid, outermost first
    inputs: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    body: Stmt


def buffer_of(tensor) -> Buffer:
    return Buffer(tensor.name, tensor.shape, tensor.dtype)


def inline_producers(body: Expr, wl: Workload, inlined: frozenset[str]) -> Expr:
    """Replace reads of inlined tasks by their expressions at the read's indices."""
    if not inlined:
        return body

    def replace(e: Expr) -> Expr | None:
        if e.op is not Op.LOAD or e.arg.name not in inlined:
            return None
        producer = wl.task(e.arg.name)
        assert isinstance(producer, ComputeTask)
        at = {name: index for name, index in zip(producer.loop_names, e.src, strict=True)}
        inner = inline_producers(producer.body, wl, inlined)
        return substitute(inner, lambda n: at[n.arg[0]] if n.op is Op.VAR else None)

    return substitute(body, replace)


def to_buffers(body: Expr) -> Expr:
    """Reads of workload tensors become reads of global buffers (indices never read tensors)."""
    return substitute(body, lambda n: Expr(Op.LOAD, n.dtype, n.src, buffer_of(n.arg)) if n.op is Op.LOAD else None)


def axis_values(nest: LoopNest) -> tuple[dict[str, Expr], list[Expr]]:
    """Each original (and intermediate) loop variable as an expression of the final loops.

    Also returns the guards `v < extent` that non-dividing splits need.
    """
    values = {lp.name: var(lp.name, lp.extent) for lp in nest.loops}
    guards: list[Expr] = []
    for rel in reversed(nest.relations):
        if isinstance(rel, SplitRelation):
            values[rel.parent] = values[rel.outer] * rel.factor + values[rel.inner]
            if rel.guarded:
                guards.append(values[rel.parent] < rel.parent_extent)
        else:
            assert isinstance(rel, FuseRelation)
            values[rel.outer] = values[rel.fused] // rel.inner_extent
            values[rel.inner] = values[rel.fused] % rel.inner_extent
    return values, guards


def _guard_vars(guard: Expr) -> set[str]:
    return {n.arg[0] for n in walk(guard) if n.op is Op.VAR}


def _identity(kind: str, dtype: str) -> Expr:
    """The value a reduction starts from."""
    if kind == "sum":
        return const(0, dtype)
    if dtype == "bool":
        return const(kind == "min", dtype)
    if dtype.startswith("float"):
        return const(float("-inf") if kind == "max" else float("inf"), dtype)
    info = np.iinfo(dtype)
    return const(info.min if kind == "max" else info.max, dtype)


def accumulator_dtype(kind: str, dtype: str) -> str:
    """sum over float16 accumulates in float32, as the reference does."""
    return "float32" if kind == "sum" and dtype == "float16" else dtype


def _combine(kind: str, acc: Expr, value: Expr) -> Expr:
    return binary(_IDENTITY_OP[kind], acc, cast(value, acc.dtype))


class _Lowering:
    """State for lowering one task: its loops, guards and local buffers."""

    def __init__(self, wl: Workload, schedule: Schedule, name: str):
        self.task = wl.task(name)
        assert isinstance(self.task, ComputeTask)
        self.name = name
        self.nest = schedule.nest(name)
        self.out = buffer_of(self.task.tensor)
        self.values, self.guards = axis_values(self.nest)
        grid = [lp for lp in self.nest.loops if lp.annotation == "parallel"]
        self.grid = tuple((lp.name, lp.extent) for lp in grid)
        self.inner = [lp for lp in self.nest.loops if lp.annotation != "parallel"]
        self.counter = 0
        self.body = to_buffers(inline_producers(self.task.body, wl, schedule.inlined))

    def at_axes(self, e: Expr) -> Expr:
        """Rewrite original loop variables (spatial and scheduled reduce) as the final loops."""
        return substitute(e, lambda n: self.values.get(n.arg[0]) if n.op in (Op.VAR, Op.RVAR) else None)

    def nest_over(self, loops, stmt: Stmt) -> Stmt:
        names = {lp.name for lp in loops}
        guards = [g for g in self.guards if _guard_vars(g) <= names | {n for n, _ in self.grid}]
        if guards:
            cond = guards[0]
            for g in guards[1:]:
                cond = cond & g
            stmt = IfThen(cond, stmt)
        for lp in reversed(loops):
            stmt = For(lp.name, lp.extent, lp.annotation, stmt)
        return stmt

    def store(self, buffer: Buffer, indices: tuple[Expr, ...], value: Expr) -> Stmt:
        """A store whose value has its inner reductions hoisted into scalar loops before it."""
        prelude: list[Stmt] = []
        locals_: list[Buffer] = []
        value = self.hoist(value, None, prelude, locals_)
        stmt = block(*prelude, Store(buffer, indices, cast(value, buffer.dtype)))
        for buf in reversed(locals_):
            stmt = Allocate(buf, stmt)
        return stmt

    def hoist(self, e: Expr, path: Expr | None, prelude: list[Stmt], locals_: list[Buffer]) -> Expr:
        """Replace each REDUCE in e by a scalar computed before use, under its where-path condition."""
        if e.op is Op.WHERE:
            c = self.hoist(e.src[0], path, prelude, locals_)
            then_path = c if path is None else path & c
            else_path = unary(Op.NOT, c) if path is None else path & unary(Op.NOT, c)
            return where(c, self.hoist(e.src[1], then_path, prelude, locals_),
                         self.hoist(e.src[2], else_path, prelude, locals_))
        if e.op is Op.REDUCE:
            kind, (body, *axes) = e.arg, e.src
            acc = Buffer(f"{self.name}_r{self.counter}", (1,), accumulator_dtype(kind, e.dtype), LOCAL)
            self.counter += 1
            locals_.append(acc)
            inner: list[Stmt] = []
            body = self.hoist(body, None, inner, locals_)
            zero = (const(0, "int64"),)
            update: Stmt = block(*inner, Store(acc, zero, _combine(kind, acc[zero], body)))
            for ax in reversed(axes):
                update = For(ax.arg[0], ax.arg[1], "serial", update)
            stmt = block(Store(acc, zero, _identity(kind, acc.dtype)), update)
            prelude.append(stmt if path is None else IfThen(path, stmt))
            return cast(acc[zero], e.dtype)
        if not any(n.op is Op.REDUCE for n in walk(e)):
            return e
        return Expr(e.op, e.dtype, tuple(self.hoist(s, path, prelude, locals_) for s in e.src), e.arg)

    def lower(self) -> Stmt:
        spatial = tuple(self.at_axes(a) for a in self.task.axes)
        found = outermost_reductions(self.body)
        if len(found) != 1:  # no reduction, or several: stored directly, inner ones hoisted
            return self.nest_over(self.inner, self.store(self.out, spatial, self.at_axes(self.body)))
        reduction, path = found[0]
        kind, rbody = reduction.arg, reduction.src[0]
        acc_dtype = accumulator_dtype(kind, reduction.dtype)
        direct = self.body is reduction and acc_dtype == self.out.dtype
        spatial_loops = [lp for lp in self.inner if not lp.reduce]
        if direct:
            acc, acc_index = self.out, spatial
        else:
            shape = tuple(lp.extent for lp in spatial_loops)
            acc = Buffer(f"{self.name}_acc", shape or (1,), acc_dtype, LOCAL)
            acc_index = tuple(var(lp.name, lp.extent) for lp in spatial_loops) or (const(0, "int64"),)
        init = self.nest_over(spatial_loops, Store(acc, acc_index, _identity(kind, acc_dtype)))
        update_store = self.store(acc, acc_index, _combine(kind, acc[acc_index], self.at_axes(rbody)))
        if path is not None:  # the reduction is read only where its where-path holds
            update_store = IfThen(self.at_axes(path), update_store)
        update = self.nest_over(self.inner, update_store)
        if direct:
            return block(init, update)
        acc_value = cast(acc[acc_index], reduction.dtype)
        epilogue_value = substitute(self.body, lambda n: acc_value if n is reduction else None)
        epilogue = self.nest_over(spatial_loops, self.store(self.out, spatial, self.at_axes(epilogue_value)))
        return Allocate(acc, block(init, update, epilogue))


def lower_task(wl: Workload, schedule: Schedule, name: str) -> Kernel:
    """The kernel of compute task `name` under `schedule` (grid loops become parameters)."""
    lowering = _Lowering(wl, schedule, name)
    body = lowering.lower()
    reads: dict[str, Buffer] = {}
    for s in walk_stmts(body):
        for e in stmt_exprs(s):
            for n in walk(e):
                if n.op is Op.LOAD and n.arg.scope == "global" and n.arg.name != name:
                    reads.setdefault(n.arg.name, n.arg)
    return Kernel(name, lowering.grid, tuple(reads.values()), (lowering.out,), body)

