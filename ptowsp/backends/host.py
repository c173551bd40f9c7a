"""Task instances for the runtime: whole tasks (opaque tasks on every target, every task on the
numpy target), the instances of a compiled kernel's task grid, and the table of one run.

A binding's table holds every tile and is kept between runs.  A tile of a task with a domain
(`wl.compute(..., domain=)`) that lies wholly outside it is retired unrun: decided from the tile's
bounds (te/domain.py) before the run when the domain reads only the run's inputs, once the
instance is ready when it reads data the run computes (a router's counts).  So a run whose data
moves the domain (a decode step's context lengths) does not enumerate its instances again.
"""

from __future__ import annotations

import itertools
import math
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
    """One instance per point of a kernel's task grid in grid order (or per point of `points`), with
    the regions it reads and writes there, each run by the kernel version in `variants` (default:
    the task's own, 0)."""
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
              cores: Mapping[str, str], sizes: Mapping[str, int], after: Mapping[str, Sequence[str]] | None = None,
              versions: Mapping[str, Sequence[int]] | None = None) -> TaskTable:
    """The task table at the sizes' binding: an instance for every tile of every kernel (in grid
    order; of a domain that reads no tensor, the tiles it reaches), a host instance for every other
    task.  A run's data then decides which tiles of a task with a domain over data have work
    (`Domains`); `versions` (task -> per tile, from `kernel_versions`) the
    kernel version each tile of a specialized task runs (else its own loops, version 0)."""
    bound = wl.bind(sizes) if any(name not in kernels for name in order) else None
    values = tuple(sizes[n] for n in wl.sizes)
    instances: list[Instance] = []
    for name in order:
        if name not in kernels:
            instances.append(host_instance(bound.task(name)))
            continue
        extents, access = kernels[name]
        grid, task = grid_extents(extents, sizes), wl.task(name)
        points = points_in_domain(task, grid, access, values, {})[0] if _fixed_domain(task) else None
        instances.extend(kernel_instances(name, grid, access, cores.get(name), values, points,
                                          (versions or {}).get(name)))
    return TaskTable(instances, after=after)


def _fixed_domain(task) -> bool:
    """A domain that reads no tensor (a causal `j <= i`): the same tiles have work in every run at a
    binding, so the others are left out of its table."""
    return isinstance(task, ComputeTask) and task.domain is not None and not _reads(task.domain)


def kernel_versions(wl: Workload, kernels: Mapping[str, tuple[Sequence[Formula], KernelAccess]],
                    sizes: Mapping[str, int], arrays: Mapping[str, np.ndarray],
                    conditions: Mapping[str, Sequence]) -> dict[str, list[int]]:
    """Per specialized task, per tile: the first of its `conditions` that holds on the whole tile
    (1, 2, ...), else 0 (its own loops)."""
    values = tuple(sizes[n] for n in wl.sizes)
    found = {}
    for name, when in conditions.items():
        extents, access = kernels[name]
        task = wl.task(name)
        found[name] = points_in_domain(task, grid_extents(extents, sizes), access, values, arrays, when,
                                       domain=_fixed_domain(task))[1]  # the tiles run_table keeps
    return found


class Domains:
    """The tiles of a binding's table that belong to tasks with a domain, and which of them one
    run's data leaves without work.

    A domain over the run's inputs is decided before the run, for all of a task's tiles at once
    (`TaskTable.skipped`); one over data the run computes (a router's counts) once the instance is
    ready (`TaskTable.skip`): for all the task's tiles at once when every writer of that data has
    finished, else tile by tile.  The table itself is made once per binding and kept."""

    def __init__(self, wl: Workload, table: TaskTable, kernels: Mapping[str, tuple[Sequence[Formula], KernelAccess]],
                 sizes: Mapping[str, int]):
        self.kernels = kernels
        self.values = tuple(sizes[n] for n in wl.sizes)
        first: dict[str, int] = {}
        for k, inst in enumerate(table.instances):
            first.setdefault(inst.name, k)
        self.tasks: dict[str, tuple[ComputeTask, tuple[int, ...], int]] = {}  # name -> task, grid, first instance
        self.early: list[str] = []  # domains over the run's inputs
        late: list[str] = []
        for name in first:
            task = wl.task(name)
            if name not in kernels or not isinstance(task, ComputeTask) or task.domain is None or _fixed_domain(task):
                continue
            self.tasks[name] = (task, grid_extents(kernels[name][0], sizes), first[name])
            over_inputs = all(t.name in wl.inputs or t.name in wl.constants for t in _reads(task.domain))
            (self.early if over_inputs else late).append(name)
        self.n, self.instances = len(table), table.instances
        # the early domains grouped by condition and tiles, each group decided once per run (a decoder's
        # layers share theirs): (domain, tiles' bounds) -> task names, tiles, tile count
        self.alike: dict[tuple, tuple[list[str], dict, int]] = {}
        for name in self.early:
            task, grid, _ = self.tasks[name]
            _, tiles, count = _tiles(task, grid, kernels[name][1], self.values)
            key = (task.domain, tuple((n, lo.tobytes(), hi.tobytes()) for n, (lo, hi) in sorted(tiles.items())))
            self.alike.setdefault(key, ([], tiles, count))[0].append(name)
        # per group, its tasks' instances in one index (a run sets them in one step)
        self.positions = {key: np.concatenate([self.tasks[name][2] + np.arange(count) for name in names])
                          for key, (names, _, count) in self.alike.items()}
        self.deferred = {first[name] + k: name for name in late for k in range(math.prod(self.tasks[name][1]))}
        self.writers: dict[str, list[int]] = {}  # per late-domain task: the instances writing what its domain reads
        for name in late:
            read = {t.name for t in _reads(self.tasks[name][0].domain)}
            self.writers[name] = [k for k, inst in enumerate(table.instances) if any(t in read for t, _ in inst.writes)]

    def __bool__(self) -> bool:
        return bool(self.tasks)

    def skipped(self, arrays: Mapping[str, np.ndarray]) -> np.ndarray | None:
        """Per instance of the table, whether the run's `arrays` (its inputs at least) leave it
        outside its task's domain over the run's inputs (None: no such domain)."""
        if not self.alike:
            return None
        skipped = np.zeros(self.n, bool)
        for key, (names, tiles, count) in self.alike.items():
            skipped[self.positions[key]] = np.tile(~may_hold_in(key[0], tiles, arrays, count), len(names))
        return skipped

    def unfilled(self, skipped: np.ndarray | None) -> set[str]:
        """The outputs a run that skips `skipped` need not zero-fill: those of tasks with a domain over
        the run's inputs and no tile skipped (a tile that runs writes its zeros itself)."""
        kept = set()
        for name in self.early:
            _, grid, first = self.tasks[name]
            if skipped is None or not skipped[first:first + math.prod(grid)].any():
                kept.add(name)
        return kept

    def for_run(self, table: TaskTable, skipped: np.ndarray | None, arrays: Mapping[str, np.ndarray]) -> TaskTable:
        """`table` (this binding's) for a run that skips `skipped` (from `self.skipped`) and tests
        the tiles of a domain over computed data as they become ready, over `arrays` (every tensor)."""
        return table.for_run(skipped, self._skip(arrays) if self.deferred else None)

    def _skip(self, arrays: Mapping[str, np.ndarray]):
        decided: dict[str, set[tuple[int, ...]]] = {}

        def skip(i: int, done: Sequence[int]) -> bool:
            """Once every writer of the data a task's domain reads has finished, all its tiles are
            decided at once; before that (a domain over data still being written elsewhere), tile by tile."""
            name = self.deferred.get(i)
            if name is None:
                return False
            task, grid, _ = self.tasks[name]
            kept = decided.get(name)
            if kept is None and all(done[k] for k in self.writers[name]):
                kept = decided[name] = set(points_in_domain(task, grid, self.kernels[name][1], self.values, arrays)[0])
            if kept is not None:
                return self.instances[i].coords not in kept
            return not may_hold(task.domain, _tile(task, self.instances[i].writes), arrays)

        return skip


def domain_outputs(wl: Workload) -> set[str]:
    """Tensors of tasks with a domain: zero-filled before each run, as skipped tiles write nothing."""
    return {name for name in wl.tasks if isinstance(t := wl.task(name), ComputeTask) and t.domain is not None}


def _reads(e) -> list:
    return [n.arg for n in walk(e) if n.op is Op.LOAD]
