"""Read caches and computed-at producers placed in a consumer's loops (`place`; placement.py says
where a staged buffer goes and what box it holds): a producer is lowered over its box by its own
schedule (`lower_region`), a cache filled by a copy of its box."""

from __future__ import annotations

import functools

import networkx as nx

from ptowsp.errors import BuildError
from ptowsp.lower.ir import LOCAL, Buffer, For, Stmt, Store, map_exprs, rename_loops, var
from ptowsp.lower.axes import buffer_of
from ptowsp.lower.placement import global_reads, indexed_by, stage
from ptowsp.lower.regions import Box
from ptowsp.lower.loops import TaskLowering
from ptowsp.lower.tensorize import tensorize
from ptowsp.schedules import Schedule
from ptowsp.schedules.loopnest import SERIAL
from ptowsp.te import Op, sizes, substitute_vars
from ptowsp.workloads import ComputeTask, Workload

def lower_region(wl: Workload, schedule: Schedule, name: str, box: Box, buffer: Buffer) -> Stmt:
    """Task `name` computed over a box of its domain into a local buffer (compute_at).

    It runs its own schedule over the box's extents; its loops are renamed
    `name.loop` so they cannot shadow the consumer's loops its box starts use.
    """
    task = wl.task(name)
    assert isinstance(task, ComputeTask)
    holders = {axis: var(f"@{name}.{axis}", sizes.add(sizes.sub(size, extent), 1))
               for axis, size, extent in zip(task.loop_names, task.tensor.shape, box.extents, strict=True)}
    lowering = TaskLowering(wl, schedule, name, region=(holders, buffer, box.extents))
    if lowering.grid:
        consumer = schedule.compute_at_locations[name][0]
        raise BuildError(f"task {name!r} is computed at {consumer!r}, so its parallel loops "
                         f"{', '.join(g for g, _ in lowering.grid)} cannot form a task grid; drop parallel from it")
    placed = place(wl, schedule, name, lowering.lower(), (), within=f"{name}.")
    stmt = tensorize(placed, name, schedule.tensorized.get(name), set(schedule.reduce_loops(name)))
    stmt = rename_loops(stmt, f"{name}.")
    starts = {h.arg[0]: start for h, start in zip(holders.values(), box.starts, strict=True)}
    return map_exprs(stmt, lambda e: substitute_vars(e, starts, (Op.VAR,)))


def _copy_from(tensor: Buffer):
    """The fill of a cache_read buffer: copy the box of the tensor."""

    def fill(box: Box, local: Buffer) -> Stmt:
        names = [f"{local.name}.i{d}" for d in range(len(box.extents))]
        at = tuple(var(n, e) for n, e in zip(names, box.extents, strict=True))
        stmt: Stmt = Store(local, at, tensor[tuple(start + v for start, v in zip(box.starts, at, strict=True))])
        for n, e in reversed(list(zip(names, box.extents, strict=True))):
            stmt = For(n, e, SERIAL, stmt)
        return stmt

    return fill


def place(wl: Workload, schedule: Schedule, consumer: str, stmt: Stmt, grid: tuple[tuple[str, int], ...],
          within: str = "") -> Stmt:
    """Stage the consumer's read caches, then the producers computed at its loops (placement.py).

    `within`: the prefix of a producer's region's read caches (`A.local` of a producer computed
    inside a task that caches A too would be two buffers of one name in one kernel).

    A staged buffer is filled before the body of its loop, so what its fill
    or its box reads must be staged after it (around it): producers go in
    reverse topological order, so a producer computed at the same loop as its
    own consumer covers that consumer's reads too, and a producer whose values
    index the reads of another (a computed gather index) goes after that one.
    """
    stages = [(tensor, loop, f"{within}{tensor}.{scope}", scope, None)
              for task, tensor, scope, loop in schedule.cache_reads if task == consumer]
    order = {t: n for n, t in enumerate(wl.tasks)}
    producers = sorted(((p, loop) for p, (c, loop) in schedule.compute_at_locations.items() if c == consumer),
                       key=lambda pl: -order[pl[0]])
    while stages or producers:
        if stages:
            tensor, loop, name, scope, producer = stages.pop(0)
        else:
            producer, loop = _next_producer(wl, stmt, producers)
            producers.remove((producer, loop))
            tensor, name, scope = producer, producer, LOCAL  # never stored, so the name is free
        what = "cache_read" if producer is None else "compute_at"
        if not global_reads(stmt, tensor):
            raise BuildError(f"task {consumer!r} does not read {tensor!r}, neither itself nor through tasks inlined or "
                             f"computed inside it, so {what} has nothing to place there")
        buffer = buffer_of(wl.tensor(tensor))
        fill = _copy_from(buffer) if producer is None else functools.partial(lower_region, wl, schedule, producer)
        stmt = stage(stmt, loop, grid, buffer, name, scope, fill)
        if global_reads(stmt, tensor, skip=name):
            where = f"loop {loop}" if loop else "its task instances"
            raise BuildError(f"task {consumer!r} reads {tensor!r} outside {where}, where {what} puts it; "
                             "choose a loop that encloses every read")
    return stmt


def _next_producer(wl: Workload, stmt: Stmt, producers: list[tuple[str, str | None]]) -> tuple[str, str | None]:
    """The first producer that no other one left must be staged before: neither one reading it (a
    consumer) nor one whose reads it indexes.  With none (a cycle), the first: its box widens."""

    def waits(q: str) -> bool:
        return any(p != q and (nx.has_path(wl.graph, q, p) or indexed_by(stmt, p, q)) for p, _ in producers)

    return next((pl for pl in producers if not waits(pl[0])), producers[0])
