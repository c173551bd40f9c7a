"""The first lowering pass: one compute task's loop nest as loops, guards, reductions and stores
(`TaskLowering`; a scan's in two parts through its `over_steps`: scan.py).

Its producers are inlined and simplified first (compute_inline), and each
loop variable of the task's definition becomes the value its split and fused
loops give it (axes.py).

A reduction `out = epilogue(sum(body, axes))` lowers to init, update and
epilogue.  They share the spatial loops that enclose every reduction loop
(the task's leading spatial loops); under those, each is a nest of its own
over the remaining spatial loops, and the accumulator is a local buffer
indexed by them: one element per iteration when no spatial loop sits inside
a reduction loop, else the tile of one iteration of the leading loops (the
whole instance's tile when a reduction loop comes first).  The
accumulator is the output itself when the epilogue is the identity and the
dtypes agree.  Non-dividing splits guard with `axis < extent`, placed
just inside the last loop the guard reads.
"""

from __future__ import annotations

import copy
import functools
import itertools
import math


from ptowsp.errors import BuildError
from ptowsp.lower.ir import LOCAL, Allocate, Buffer, For, IfThen, Stmt, Store, block, var
from ptowsp.lower.accumulate import combine as _combine
from ptowsp.lower.accumulate import identity as _identity
from ptowsp.lower.argreduce import hoisted, is_arg_reduction, lower_arg_reduction
from ptowsp.lower.axes import axis_values, buffer_of, guard_vars, to_buffers
from ptowsp.lower.simplify import simplify_expr
from ptowsp.lower.tuplereduce import SeveralValues
from ptowsp.schedules import Schedule
from ptowsp.schedules.loopnest import SERIAL, UNROLLED, VECTORIZED
from ptowsp.schedules.state import schedulable_reduce_axes
from ptowsp.te import Expr, Op, cast, const, outermost_reductions, substitute, substitute_vars, walk
from ptowsp.te.sizes import Extent
from ptowsp.te.expr import unary, where
from ptowsp.te.reducer import accumulator_dtype, is_several
from ptowsp.workloads import ComputeTask, Workload, inline_producers

def local_shape(task: str, name: str, extents) -> tuple[int, ...]:
    """The shape of a local buffer: every extent a number, else BuildError naming the loop to split."""
    for e in extents:
        if not isinstance(e, int):
            raise BuildError(f"task {task!r}: local buffer {name} would span a loop of symbolic extent {e}; "
                             "split that loop and keep the buffer inside its outer part")
    return tuple(extents)


class TaskLowering:
    """State for lowering one task: its loops, guards and local buffers."""

    def __init__(self, wl: Workload, schedule: Schedule, name: str,
                 region: tuple[dict[str, Expr], Buffer, tuple[Extent, ...]] | None = None):
        """region: (origin of each spatial axis, local buffer, extent of each axis) when the task is
        computed at another's loop."""
        self.task = wl.task(name)
        assert isinstance(self.task, ComputeTask)
        self.name = name
        self.nest = schedule.nest(name)
        self.out = buffer_of(self.task.tensor)
        self.origin: dict[str, Expr] = {}
        if region is not None:
            self.origin, self.out, extents = region
            roots = dict(zip(self.task.loop_names, extents, strict=True))
            self.nest = self.nest.with_root_extents(roots | dict(schedulable_reduce_axes(self.task.body)))
        self.values, self.guards = axis_values(self.nest)
        grid = [lp for lp in self.nest.loops if lp.annotation == "parallel"]
        self.grid = tuple((lp.name, lp.extent) for lp in grid)
        self.inner = [lp for lp in self.nest.loops if lp.annotation != "parallel"]
        self.cache_scope = schedule.cache_writes.get(name)
        self.counter = 0
        self.several = SeveralValues()  # several-value reductions hoisted so far (tuplereduce.py)
        self.body = simplify_expr(to_buffers(inline_producers(self.task.value, wl, schedule.inlined)))

    def next_local(self) -> str:
        """A fresh name for a reduction's local accumulators (`<task>_r<n>`; a reduction with several
        buffers adds its own suffixes)."""
        name = f"{self.name}_r{self.counter}"
        self.counter += 1
        return name

    def over_steps(self, wl: Workload, schedule: Schedule, axis: str, start: int, count: Extent,
                   value: Expr) -> TaskLowering:
        """This task's lowering for one part of a scan (scan.py): `value` computed over `count` steps of
        the scan `axis` from step `start`, with the task's loop schedule."""
        part = copy.copy(self)
        task = self.task
        part.nest = self.nest.with_root_extents({**dict(zip(task.loop_names, task.tensor.shape, strict=True)),
                                                 axis: count})
        part.values, part.guards = axis_values(part.nest)
        part.inner = [lp for lp in part.nest.loops if lp.annotation != "parallel"]
        part.origin = {axis: const(start, "int64")} if start else {}
        part.body = simplify_expr(to_buffers(inline_producers(value, wl, schedule.inlined)))
        return part

    def epilogue_of(self, reduction: Expr, value: Expr) -> Expr:
        """The task's body with `reduction` (a REDUCE in it) replaced by `value`, in the final loops; the
        reduction is kept apart from the axis rewrite, which would rename its axes."""
        marker = Expr(Op.VAR, reduction.dtype, (), ("@reduction", 1))
        around = self.at_axes(substitute(self.body, lambda n: marker if n is reduction else None))
        return substitute(around, lambda n: value if n is marker else None)

    def at_axes(self, e: Expr) -> Expr:
        """Rewrite original loop variables (spatial and scheduled reduce) as the final loops."""

        return substitute_vars(e, self.at_values)

    @property
    def at_values(self) -> dict[str, Expr]:
        """Each original loop variable's value in the final loops (from its part's origin: scan.py)."""
        return {name: local + self.origin[name] if name in self.origin else local
                for name, local in self.values.items()}

    def nest_over(self, loops, stmt: Stmt, outer=()) -> Stmt:
        """`stmt` inside `loops`, guarded where they make a split overrun; guards that the
        enclosing `outer` loops (and the grid) decide alone are theirs to place."""
        grid = {n for n, _ in self.grid}
        placed_outside = {lp.name for lp in outer} | grid
        names = {lp.name for lp in loops} | placed_outside
        guards = [g for g in self.guards
                  if guard_vars(g) <= names and not (outer and guard_vars(g) <= placed_outside)]
        depth = {lp.name: k for k, lp in enumerate(loops)}
        threads = {lp.name for lp in loops if lp.annotation.startswith("threadIdx")}

        def place(g: Expr) -> int:
            """Just inside the last loop the guard reads, so a tail stops before its inner loops run (and
            staging there sees the guard); a thread's guard stays innermost, where every thread of the
            block has passed its barriers."""
            used = guard_vars(g)
            return len(loops) - 1 if used & threads else max((depth[v] for v in used if v in depth), default=-1)

        for k in range(len(loops) - 1, -2, -1):
            here = [g for g in guards if place(g) == k]
            if here:
                stmt = IfThen(functools.reduce(lambda a, b: a & b, here), stmt)
            if k >= 0:
                stmt = For(loops[k].name, loops[k].extent, loops[k].annotation, stmt)
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
        if is_several(e):  # one value of a several-value reduction: all of them computed at once
            return self.several.value(self, e, path, prelude, locals_)
        if e.op is Op.REDUCE:
            kind, (body, *axes) = e.arg, e.src
            if is_arg_reduction(e):  # a (value, index) pair: argreduce.py
                inner = []
                stmt, index = hoisted(self, e, self.hoist(body, None, inner, locals_), prelude, locals_, inner)
                prelude.append(stmt if path is None else IfThen(path, stmt))
                return index
            acc = Buffer(self.next_local(), (1,), accumulator_dtype(kind, e.dtype), LOCAL)
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

    def loop_buffer(self, loops: list, dtype: str, scope: str | None) -> tuple[Buffer, tuple[Expr, ...]]:
        """A buffer with one element per iteration of `loops` (the accumulator, or the cache_write
        buffer when `scope` is given), and its index."""
        name = f"{self.name}_acc" if scope is None else f"{self.name}.{scope}"
        shape = local_shape(self.name, name, [lp.extent for lp in loops]) or (1,)
        index = tuple(var(lp.name, lp.extent) for lp in loops) or (const(0, "int64"),)
        return Buffer(name, shape, dtype, scope or LOCAL), index

    def lower(self) -> Stmt:
        spatial = tuple(self.values[name] for name in self.task.loop_names)
        found = outermost_reductions(self.body)
        if len(found) != 1 or is_several(found[0][0]):  # none, several or a several-value one: hoisted
            if self.cache_scope is None:
                return self.nest_over(self.inner, self.store(self.out, spatial, self.at_axes(self.body)))
            cache, index = self.loop_buffer(self.inner, self.out.dtype, self.cache_scope)
            compute = self.nest_over(self.inner, self.store(cache, index, self.at_axes(self.body)))
            return Allocate(cache, block(compute, self.nest_over(self.inner, Store(self.out, spatial, cache[index]))))
        return self.lower_reduction(spatial, *found[0])

    def lower_reduction(self, spatial: tuple[Expr, ...], reduction: Expr, path: Expr | None) -> Stmt:
        """init / update / epilogue of `out = epilogue(reduce(body))`.

        The three share the leading spatial loops (those before the first
        reduction loop; none when the result is cache-written per instance);
        under them each is a nest of its own over the other spatial loops,
        which index the accumulator.  So a matmul whose tile loops enclose k
        keeps one accumulator element (a register for LLVM), and a task that
        walks several tiles, each streamed along k, keeps one tile's
        accumulators, not the instance's.
        """
        kind, rbody = reduction.arg, reduction.src[0]
        acc_dtype = accumulator_dtype(kind, reduction.dtype)
        lead = [] if self.cache_scope is not None else list(
            itertools.takewhile(lambda lp: not lp.reduce, self.inner))
        rest = self.inner[len(lead):]
        per_tile = [lp for lp in rest if not lp.reduce]  # loops that index the accumulators and wrap each piece
        if kind in ("argmax", "argmin"):
            return lower_arg_reduction(self, spatial, reduction, path, lead, rest, per_tile)

        def piece(st: Stmt) -> Stmt:
            return self.nest_over(per_tile, st, lead)

        def reduction_nest(st: Stmt, path: Expr | None = None) -> Stmt:
            """`st` inside the reduction's loops, read only where its where-path holds: tested outside
            the loops when it reads none of them (once per result, not once per term: a decode step's
            scores tested their domain inside the vector loop of every dot product)."""
            cond = None if path is None else self.at_axes(path)
            if cond is not None and not {n.arg[0] for n in walk(cond) if n.op is Op.VAR} & {lp.name for lp in rest}:
                return IfThen(cond, self.nest_over(rest, st, lead))
            return self.nest_over(rest, st if cond is None else IfThen(cond, st), lead)

        direct = self.body is reduction and acc_dtype == self.out.dtype and self.cache_scope is None
        if direct:
            acc, acc_index = self.out, spatial
        else:
            acc, acc_index = self.loop_buffer(per_tile, acc_dtype, self.cache_scope)
        identity = _identity(kind, acc_dtype)
        last = self.inner[-1] if self.inner else None
        if last is not None and last.reduce and last.annotation == VECTORIZED:
            stmt = self.lane_partials(kind, acc, acc_index, per_tile, piece, reduction_nest, rbody, path)
        else:
            update = self.store(acc, acc_index, _combine(kind, acc[acc_index], self.at_axes(rbody)))
            stmt = block(piece(Store(acc, acc_index, identity)), reduction_nest(update, path))
        if not direct:
            epilogue_value = self.epilogue_of(reduction, cast(acc[acc_index], reduction.dtype))
            stmt = Allocate(acc, block(stmt, piece(self.store(self.out, spatial, epilogue_value))))
        return self.nest_over(lead, stmt) if lead else stmt

    def on_path(self, path: Expr | None, stmt: Stmt) -> Stmt:
        """The reduction is read only where its where-path holds."""
        return stmt if path is None else IfThen(self.at_axes(path), stmt)

    def lane_partials(self, kind: str, acc: Buffer, acc_index: tuple[Expr, ...], per_tile: list, piece,
                      reduction_nest, rbody: Expr, path: Expr | None) -> Stmt:
        """A vectorized reduction loop: one partial result per lane, folded into acc at the end.

        The partials live in a local buffer indexed by the lane (and by the
        spatial loops when the accumulators hold a tile), so the update is a
        plain lane-wise vector statement.  Unrolled reduction loops directly
        around the vectorized one get partials of their own: independent
        accumulators, so consecutive vector updates do not wait on each other.
        This reassociates the reduction (exact for max, min and integers); all
        partials start at the identity, so guarded lanes that never update
        fold in harmlessly.
        """
        position = len(self.inner) - 1
        while position > 0 and self.inner[position - 1].reduce and self.inner[position - 1].annotation == UNROLLED:
            position -= 1
        partial_loops = self.inner[position:]
        index = tuple(var(lp.name, lp.extent) for lp in [*per_tile, *partial_loops])
        part = Buffer(f"{self.name}_lanes", local_shape(self.name, f"{self.name}_lanes",
                                                        [lp.extent for lp in [*per_tile, *partial_loops]]),
                      acc.dtype, LOCAL)

        def over_partials(stmt: Stmt, keep_kinds: bool) -> Stmt:  # no guards: every partial is folded
            for lp in reversed(partial_loops):
                stmt = For(lp.name, lp.extent, lp.annotation if keep_kinds else SERIAL, stmt)
            return stmt

        identity = _identity(kind, acc.dtype)
        update = self.store(part, index, _combine(kind, part[index], self.at_axes(rbody)))
        fold = _fold_tree(kind, part, index[: len(per_tile)], partial_loops, acc, acc_index) or block(
            Store(acc, acc_index, identity),
            over_partials(Store(acc, acc_index, _combine(kind, acc[acc_index], part[index])), False))
        return Allocate(part, block(piece(over_partials(Store(part, index, identity), True)),
                                    reduction_nest(update, path), piece(fold)))


def _fold_tree(kind: str, part: Buffer, tile_index: tuple[Expr, ...], partial_loops: list, acc: Buffer,
               acc_index: tuple[Expr, ...]) -> Stmt | None:
    """Fold the partials into acc in few dependent steps: the unrolled copies into the first one
    lane by lane, then its lanes pairwise, halving the width each step (all vector statements).

    None when there are too many copies to list (the caller folds them one by one).
    """
    lane, copies = partial_loops[-1], [lp.extent for lp in partial_loops[:-1]]
    if math.prod(copies) > 64:
        return None
    first = tuple(const(0, "int64") for _ in copies)

    def at(copy: tuple[Expr, ...], offset: int, width: int) -> tuple[Expr, ...]:
        v = var(lane.name, width)
        return (*tile_index, *copy, v + offset if offset else v)

    def combine_into_first(copy: tuple[Expr, ...], offset: int, width: int) -> Stmt:
        into = at(first, 0, width)
        return For(lane.name, width, VECTORIZED, Store(part, into, _combine(kind, part[into], part[at(copy, offset,
                                                                                                       width)])))

    steps = [combine_into_first(tuple(const(c, "int64") for c in combo), 0, lane.extent)
             for combo in itertools.product(*(range(n) for n in copies)) if any(combo)]
    width = lane.extent
    while width > 1:
        half = (width + 1) // 2
        steps.append(combine_into_first(first, half, width - half))
        width = half
    return block(*steps, Store(acc, acc_index, part[(*tile_index, *first, const(0, "int64"))]))
