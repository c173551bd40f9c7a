"""Task instances for the runtime: whole tasks (opaque tasks on every target, every task on the
numpy target), the instances of a compiled kernel's task grid, and the table of one run.

A task with a domain (`wl.compute(..., domain=)`) gets no instance for a tile wholly outside it.
The orchestrator decides this from the tile's bounds (te/domain.py) when it builds the run's
table, if the domain reads only the run's inputs; a domain over data the run computes (a router's
counts) is decided once the instance is ready, and an empty one is retired unrun.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np

from ptowsp.lower.access import KernelAccess
from ptowsp.lower.formula import Formula
from ptowsp.runtime import Instance, TaskTable
from ptowsp.te import Op, walk
from ptowsp.te.domain import may_hold, may_hold_in, surely_holds_in
from ptowsp.workloads import Workload
from ptowsp.workloads.task import ComputeTask, OpaqueTask


def _whole(tensor) -> tuple[tuple[int, int], ...]:
    return tuple((0, n) for n in tensor.shape)


def host_instance(task: ComputeTask | OpaqueTask) -> Instance:
    """One instance that reads every input and writes every output of `task` whole (shapes bound)."""
    outputs = task.outputs
    moved = sum(int(np.prod(t.shape)) * np.dtype(t.dtype).itemsize for t in (*task.inputs, *outputs))
    return Instance(task.name, (), tuple((t.name, _whole(t)) for t in task.inputs),
                    tuple((t.name, _whole(t)) for t in outputs), bytes=moved)


def kernel_instances(name: str, grid: Sequence[int], access: KernelAccess, core: str | None,
                     sizes: tuple[int, ...] = (), points: Sequence[tuple[int, ...]] | None = None,
                     variants: Iterable[int] | None = None) -> Iterator[Instance]:
    """One instance per point of a kernel's task grid (or per point of `points`, each run by the
    kernel version in `variants`), with the regions it reads and writes there."""
    bound, coords = access.bound(sizes), None
    if points is None:
        points = list(itertools.product(*(range(extent) for extent in grid)))
        coords = [c.reshape(-1) for c in np.indices(grid, dtype=np.int64)] if grid else []
    reads, writes = bound.over(points, coords)
    for point, read, written, variant in zip(points, reads, writes,
                                             itertools.repeat(0) if variants is None else variants):
        yield Instance(name, point, read, written, core, access.grid, bound.bytes, bound.flops, variant)


def grid_extents(extents: Sequence[Formula], sizes: Mapping[str, int]) -> tuple[int, ...]:
    """A kernel's grid at a binding (the manifest keeps each extent as a formula over the sizes)."""
    return tuple(int(f.evaluate(sizes)) for f in extents)


def tile_of(task: ComputeTask, writes) -> dict[str, tuple[int, int]]:
    """The task's loop ranges [start, stop) over one instance: the box of its output the instance writes."""
    region = dict(writes)[task.name]
    return dict(zip(task.loop_names, region, strict=True))


def _tile(task: ComputeTask, writes) -> dict[str, tuple[int, int]]:
    """tile_of as inclusive intervals (te/domain.py)."""
    return {n: (lo, hi - 1) for n, (lo, hi) in tile_of(task, writes).items()}


def _tiles(task: ComputeTask, grid: Sequence[int], access: KernelAccess, sizes: tuple[int, ...]):
    """Every grid point's coordinates and its tile (loop name -> inclusive lows and highs), as arrays."""
    count = int(np.prod(grid))
    coords = [c.reshape(-1) for c in np.indices(grid, dtype=np.int64)] if grid else []
    region = access.writes_over(sizes, coords)[task.name]
    tiles = {n: (np.broadcast_to(lo, (count,)), np.broadcast_to(np.asarray(hi) - 1, (count,)))
             for n, (lo, hi) in zip(task.loop_names, region, strict=True)}
    return coords, tiles, count


def points_in_domain(task: ComputeTask, grid: Sequence[int], access: KernelAccess, sizes: tuple[int, ...],
                     arrays: Mapping[str, np.ndarray], conditions: Sequence = (),
                     domain: bool = True) -> tuple[list[tuple[int, ...]], list[int]]:
    """The grid points whose tile the domain may reach (all of them without `domain`), each with the
    kernel version that runs it: the first of the specialized `conditions` that holds on its whole
    tile (1, 2, ...), else 0.  Every tile at once (numpy): a grid of thousands costs milliseconds."""
    coords, tiles, count = _tiles(task, grid, access, sizes)
    keep = np.flatnonzero(may_hold_in(task.domain, tiles, arrays, count) if domain else np.ones(count, bool))
    chosen = np.zeros(count, np.int64)
    for k, condition in reversed(list(enumerate(conditions, 1))):  # the first that holds wins
        chosen[surely_holds_in(condition, tiles, arrays, count)] = k
    points = list(zip(*(c[keep].tolist() for c in coords), strict=True)) if coords else [()] * len(keep)
    return points, chosen[keep].tolist()


def run_table(wl: Workload, order: Sequence[str], kernels: Mapping[str, tuple[Sequence[Formula], KernelAccess]],
              cores: Mapping[str, str], sizes: Mapping[str, int], arrays: Mapping[str, np.ndarray] | None,
              after: Mapping[str, Sequence[str]] | None = None,
              variants: Mapping[str, Sequence] | None = None) -> TaskTable:
    """The task table of one run: kernel instances at the sizes' binding, host instances for the
    rest, tiles outside a domain left out, each tile of a specialized task given the kernel version
    its conditions choose (`variants`: task -> conditions; with `arrays` None every tile is kept and
    runs the task's own kernel: the table is then the same for every run at this binding)."""
    bound = wl.bind(sizes)
    values = tuple(sizes[n] for n in wl.sizes)
    instances: list[Instance] = []
    deferred: dict[int, ComputeTask] = {}
    grids: dict[str, tuple[int, ...]] = {}
    for name in order:
        if name not in kernels:
            instances.append(host_instance(bound.task(name)))
            continue
        extents, access = kernels[name]
        task, grid = wl.task(name), grids.setdefault(name, grid_extents(extents, sizes))
        domain = task.domain if isinstance(task, ComputeTask) and arrays is not None else None
        early = domain is not None and all(t.name in wl.inputs or t.name in wl.constants for t in _reads(domain))
        conditions = (variants or {}).get(name, ()) if arrays is not None else ()
        points, chosen = points_in_domain(task, grid, access, values, arrays, conditions, early) \
            if early or conditions else (None, None)
        for inst in kernel_instances(name, grid, access, cores.get(name), values, points, chosen):
            if domain is not None and not early:
                deferred[len(instances)] = task
            instances.append(inst)
    if not deferred:
        return TaskTable(instances, after=after)
    table = instances
    writers: dict[str, list[int]] = {}  # per deferred task: the instances writing what its domain reads
    for task in {t.name: t for t in deferred.values()}.values():
        read = {t.name for t in _reads(task.domain)}
        writers[task.name] = [k for k, inst in enumerate(table) if any(t in read for t, _ in inst.writes)]
    decided: dict[str, set[tuple[int, ...]]] = {}

    def skip(i: int, done: Sequence[int]) -> bool:
        """Once every writer of the data a task's domain reads has finished, all its tiles are decided
        at once; before that (a domain over data still being written elsewhere), tile by tile."""
        task = deferred.get(i)
        if task is None:
            return False
        kept = decided.get(task.name)
        if kept is None and all(done[k] for k in writers[task.name]):
            _, access = kernels[task.name]
            kept = decided[task.name] = set(points_in_domain(task, grids[task.name], access, values, arrays)[0])
        if kept is not None:
            return table[i].coords not in kept
        return not may_hold(task.domain, _tile(task, table[i].writes), arrays)

    return TaskTable(instances, after=after, skip=skip)


def domain_outputs(wl: Workload) -> set[str]:
    """Tensors of tasks with a domain: zero-filled before each run, as skipped tiles write nothing."""
    return {name for name in wl.tasks if isinstance(t := wl.task(name), ComputeTask) and t.domain is not None}


def _reads(e) -> list:
    return [n.arg for n in walk(e) if n.op is Op.LOAD]
