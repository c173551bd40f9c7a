"""The runtime's input: task instances with the regions they read and write, and their dependencies.

The runtime knows nothing of tensor expressions: an instance is a name, grid
coordinates, boxes of named tensors, a core class and cost figures; the
backend supplies the code that runs it.  Dependencies are exact at region
level (DESIGN.md section 4): an instance depends on every earlier instance
whose written box overlaps one of its read boxes.  Tensors are written once
(each by one task, its instances writing disjoint parts), so read-after-write
is the only hazard between tensors of their own.  When the memory plan lets
a tensor take over the bytes of dead ones, `after` names them: every write
of the tensor then waits for every access of those (write-after-read and
write-after-write on the shared bytes).

Overlap queries use an index per tensor and dimension: the distinct
intervals writers cover, each with a bitset (a Python int) of the writers
covering it.  A query ORs the bitsets of the intervals it meets in each
dimension and ANDs the dimensions, so its cost follows the number of
distinct intervals (the grid's extent along that dimension), not the number
of writers.
"""

from __future__ import annotations

import bisect
import functools
import graphlib
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

Region = tuple[tuple[int, int], ...]  # [start, stop) per dimension


@dataclass(frozen=True, slots=True)
class Instance:
    """One task instance: what the runtime schedules, dispatches and traces."""

    name: str
    coords: tuple[int, ...] = ()
    reads: tuple[tuple[str, Region], ...] = ()
    writes: tuple[tuple[str, Region], ...] = ()
    core: str | None = None  # core class it must run on (None: any)
    grid: tuple[str, ...] = ()  # names of the grid loops behind `coords` (dispatch keys)
    bytes: int = 0  # read plus written
    flops: int = 0
    variant: int = 0  # which version of the task's kernel runs it (Schedule.specialize; 0: its own loops)

    @property
    def label(self) -> str:
        """The name the trace shows: the task, with `@k` for its k-th specialized kernel."""
        return self.name if not self.variant else f"{self.name}@{self.variant}"


class _DimensionIndex:
    """Distinct [start, stop) intervals along one dimension, each with a bitset of writers."""

    def __init__(self) -> None:
        self.bits: dict[tuple[int, int], int] = {}
        self._sorted: list[tuple[int, int]] | None = []
        self._reach: list[int] = []  # largest stop among the first k+1 sorted intervals

    def add(self, interval: tuple[int, int], writer: int) -> None:
        old = self.bits.get(interval)
        if old is None:
            self._sorted = None
            self.bits[interval] = 1 << writer
        else:
            self.bits[interval] = old | (1 << writer)

    def meeting(self, lo: int, hi: int) -> int:
        """Bitset of writers whose interval overlaps [lo, hi)."""
        if self._sorted is None:
            self._sorted = sorted(self.bits)
            self._reach = list(itertools.accumulate((stop for _, stop in self._sorted), max))
        ordered, reach = self._sorted, self._reach
        found = 0
        # intervals starting before hi, scanned downwards until none before can reach past lo
        for k in range(bisect.bisect_left(ordered, (hi, -1)) - 1, -1, -1):
            if reach[k] <= lo:
                break
            interval = ordered[k]
            if interval[1] > lo:
                found |= self.bits[interval]
        return found


@dataclass
class RegionIndex:
    """Written boxes of every tensor, for overlap queries (see the module docstring)."""

    dims: dict[str, list[_DimensionIndex]] = field(default_factory=dict)
    scalars: dict[str, int] = field(default_factory=dict)  # a 0-d tensor: the bitset of its writers

    def add(self, tensor: str, box: Region, writer: int) -> None:
        if not box:
            self.scalars[tensor] = self.scalars.get(tensor, 0) | 1 << writer
            return
        per_dim = self.dims.get(tensor)
        if per_dim is None:
            per_dim = self.dims[tensor] = [_DimensionIndex() for _ in box]
        for index, interval in zip(per_dim, box):
            index.add(interval, writer)

    def writers(self, tensor: str, box: Region) -> int:
        """Bitset of writers whose box of `tensor` overlaps `box`."""
        if not box:
            return self.scalars.get(tensor, 0)
        per_dim = self.dims.get(tensor)
        if per_dim is None:
            return 0
        found = -1
        for index, (lo, hi) in zip(per_dim, box):
            found &= index.meeting(lo, hi)
            if not found:
                return 0
        return found if per_dim else 0


def _bits(mask: int) -> list[int]:
    """The positions of a bitset's ones, in order (a long one through numpy: an instance that takes
    over a tensor's memory waits for thousands of its accesses)."""
    if mask.bit_count() > 64:
        raw = np.frombuffer(mask.to_bytes((mask.bit_length() + 7) // 8, "little"), np.uint8)
        return np.flatnonzero(np.unpackbits(raw, bitorder="little")).tolist()
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _through_written(after: Mapping[str, Sequence[str]], written: set[str]) -> dict[str, tuple[str, ...]]:
    """`after` less the pairs another pair implies: when T takes over V's bytes and V takes over U's,
    T's writes wait for V's writes, which wait for U's every access, so T need not wait for U's
    accesses itself.  A memory plan over a stack of layers names, for a tensor of the last layer, a
    tensor of every layer before that shared its bytes: all of their accesses are an edge per
    instance, a number quadratic in the layers that the instance-level reduction may not afford.
    V must be written by an instance of this table (one with no instance orders nothing)."""
    order = graphlib.TopologicalSorter({t: tuple(older) for t, older in after.items()}).static_order()
    preceding: dict[str, set[str]] = {}  # tensor -> tensors whose every access precedes its writes
    kept: dict[str, tuple[str, ...]] = {}
    for tensor in order:
        older = after.get(tensor, ())
        implied = set().union(*(preceding[u] for u in older if u in written))
        kept[tensor] = tuple(u for u in older if u not in implied)
        preceding[tensor] = implied.union(older)
    return {t: older for t, older in kept.items() if older}


REDUCTION_BUDGET = 5e7  # machine words of bitset work the transitive reduction may take (about 0.5 s)


class TaskTable:
    """Instances in an order every dependency respects, and (computed once) their predecessors."""

    def __init__(self, instances: Sequence[Instance], after: Mapping[str, Sequence[str]] | None = None,
                 skip: Callable[[int, Sequence[int]], bool] | None = None):
        self.instances = tuple(instances)
        self.after = dict(after or {})  # tensor -> tensors whose every access precedes its writes
        # skip(i, done) is asked once instance i is ready (its inputs written; done[k] is true for
        # every instance k that has finished): True retires it without running it, for work that
        # depends on data computed during the run (a domain over a router's counts)
        self.skip = skip
        # skipped[i] true: instance i is retired unrun, known before the run starts (a tile outside a
        # domain over the run's inputs); one run's mask over a table kept between runs (for_run)
        self.skipped: np.ndarray | None = None

    def for_run(self, skipped: np.ndarray | None = None,
                skip: Callable[[int, Sequence[int]], bool] | None = None) -> TaskTable:
        """This table for one run that leaves out the instances `skipped` marks (and those `skip`
        retires): the same instances, and dependencies worked out once (when first asked) and shared
        with every run, so a run whose data decides which tiles have work does not enumerate the
        table again."""
        return _RunTable(self, None if skipped is None or not skipped.any() else skipped, skip)

    def __len__(self) -> int:
        return len(self.instances)

    @functools.cached_property
    def cores(self) -> frozenset[str | None]:
        """The core classes the instances are bound to (None: any core)."""
        return frozenset(inst.core for inst in self.instances)

    @functools.cached_property
    def successor_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The dependencies as a native scheduler reads them: successors in CSR form (starts[i] to
        starts[i + 1] index instance i's in `successors`, in order) and each instance's predecessor
        count (numpy throughout: a causal attention's table has millions of edges)."""
        preds = self.predecessors
        n = len(preds)
        counts = np.fromiter(map(len, preds), np.int64, n)
        waiting = np.repeat(np.arange(n, dtype=np.int64), counts)  # per edge, its successor (ascending)
        producer = np.fromiter(itertools.chain.from_iterable(preds), np.int64, int(counts.sum()))
        successors = waiting[np.argsort(producer, kind="stable")]
        starts = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(producer, minlength=n), out=starts[1:])
        return starts, successors, counts

    @functools.cached_property
    def predecessors(self) -> tuple[tuple[int, ...], ...]:
        """For each instance, the earlier instances whose writes overlap its reads (and, for a
        tensor in shared bytes, every earlier access of the tensors it takes over), less those
        already implied through another of them (the transitive reduction: the same order, with
        far fewer edges for the scheduler to count on every run; a tile of a convolution that
        reads a whole padded tensor keeps the pad tiles, not the tiles those read)."""
        index = RegionIndex()
        after = _through_written(self.after, {t for inst in self.instances for t, _ in inst.writes})
        shared = {t for older in after.values() for t in older}
        accessed: dict[str, int] = {}  # shared tensor -> bitset of instances reading or writing it
        direct: list[list[int]] = []
        masks: list[int] = []  # the same, as bitsets
        for i, inst in enumerate(self.instances):
            mask = 0
            for tensor, box in inst.reads:
                mask |= index.writers(tensor, box)
            for tensor, _ in inst.writes:
                for older in after.get(tensor, ()):
                    mask |= accessed.get(older, 0)
            direct.append(list(_bits(mask)))
            masks.append(mask)
            for tensor, box in inst.writes:
                index.add(tensor, box, i)
            for tensor, _ in (*inst.reads, *inst.writes):
                if tensor in shared:
                    accessed[tensor] = accessed.get(tensor, 0) | (1 << i)
        edges = sum(map(len, direct))
        if edges * (len(direct) // 64 + 1) > REDUCTION_BUDGET:  # a huge, dense table: keep every edge
            return tuple(map(tuple, direct))
        ancestors: list[int] = []  # per instance: bitset of every instance it (transitively) waits for
        out = []
        for preds, mask in zip(direct, masks, strict=True):
            implied = 0
            for p in preds:
                implied |= ancestors[p]
            ancestors.append(implied | mask)
            out.append(tuple(p for p in preds if not implied >> p & 1))
        return tuple(out)


class _RunTable(TaskTable):
    """One run's view of a table (TaskTable.for_run): its own skipped instances and skip test, the
    table's instances and dependencies."""

    def __init__(self, origin: TaskTable, skipped: np.ndarray | None,
                 skip: Callable[[int, Sequence[int]], bool] | None):
        self.origin = origin
        self.instances, self.after = origin.instances, origin.after
        self.skipped, self.skip = skipped, skip

    def for_run(self, skipped: np.ndarray | None = None,
                skip: Callable[[int, Sequence[int]], bool] | None = None) -> TaskTable:
        return self.origin.for_run(skipped, skip)

    cores = property(lambda self: self.origin.cores)
    successor_arrays = property(lambda self: self.origin.successor_arrays)
    predecessors = property(lambda self: self.origin.predecessors)
