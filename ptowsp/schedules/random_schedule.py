"""Seeded random *legal* schedules, for conformance fuzzing.

The generator proposes steps at random and keeps those the schedule accepts,
so every result is legal by construction (the schedule's own validation is
the judge) and the same seed always gives the same schedule.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from ptowsp.errors import ScheduleError
from ptowsp.schedules.loopnest import SERIAL
from ptowsp.schedules.schedule import Schedule
from ptowsp.schedules.steps import SCOPES
from ptowsp.te import Op, outermost_reductions, walk
from ptowsp.workloads import Category, Workload
from ptowsp.workloads.checks import with_parameters


def _factor(rng: random.Random, extent: int) -> int:
    """A split factor: a divisor, a power of two, or any size (often non-dividing)."""
    divisors = [d for d in range(1, min(extent, 64) + 1) if extent % d == 0] or [1]  # (a loop of extent 0)
    choice = rng.random()
    if choice < 0.4:
        return rng.choice(divisors)
    if choice < 0.8:
        return 2 ** rng.randint(0, 6)
    return rng.randint(1, max(1, extent + 2))


def _propose(s: Schedule, task: str, rng: random.Random) -> None:
    """Try one random loop step on `task` (raises ScheduleError when it is illegal)."""
    nest = s.nest(task)
    loops = nest.loops
    if not loops:  # a 0-d task without a reduction: nothing to schedule
        return
    serial = [lp for lp in loops if lp.annotation == SERIAL]
    kind = rng.choice(["split", "split", "tile", "reorder", "fuse", "vectorize", "unroll", "parallel"])
    if kind == "split" and serial:
        lp = rng.choice(serial)
        s.split(task, lp.name, _factor(rng, lp.extent))
    elif kind == "tile":
        chosen = rng.sample(serial, k=min(len(serial), rng.randint(1, 2)))
        s.tile(task, {lp.name: _factor(rng, lp.extent) for lp in chosen})
    elif kind == "reorder":
        s.reorder(task, *rng.sample(nest.names, k=len(nest.names)))
    elif kind == "fuse" and len(loops) > 1:
        p = rng.randrange(len(loops) - 1)
        s.fuse(task, loops[p].name, loops[p + 1].name)
    elif kind == "vectorize":
        s.vectorize(task, loops[-1].name)
    elif kind == "unroll" and serial:
        s.unroll(task, rng.choice(serial).name)
    elif kind == "parallel":
        s.parallel(task, *nest.names[: rng.randint(1, 2)])


def read_entries(s: Schedule, task: str, host: str) -> set[str | None] | None:
    """The loops of `host` at which reads of `task`'s result enter it (None: its own body),
    or None when some read happens outside `host`."""
    if task == host:
        return {None}
    if task in s.compute_at_locations:
        consumer, loop = s.compute_at_locations[task]
        return {loop} if consumer == host else read_entries(s, consumer, host)
    successors = list(s.workload.graph.successors(task))
    if task not in s.inlined or not successors:
        return None
    found: set[str | None] = set()
    for d in successors:
        more = read_entries(s, d, host)
        if more is None:
            return None
        found |= more
    return found


def _place(s: Schedule, task: str, rng: random.Random, compute_at: bool) -> None:
    """Maybe inline the task, or compute it in a consumer that holds all its reads: at the loop
    where they enter it (the body's own reads sit inside every spatial loop)."""
    wl = s.workload
    if rng.random() < 0.2:
        s.compute_inline(task)
        return
    successors = list(wl.graph.successors(task))
    if not (compute_at and successors and rng.random() < 0.25):
        return
    anchors = {}
    for host in wl.tasks:
        if wl.category(host) is Category.OPAQUE or host in s.inlined:
            continue
        found: set[str | None] | None = set()
        for d in successors:
            more = read_entries(s, d, host)
            found = None if found is None or more is None else found | more
        loops = None if found is None else found - {None}
        if loops is not None and len(loops) <= 1:
            anchors[host] = next(iter(loops)) if loops else rng.choice(s.spatial_loops(host))
    if anchors:
        host = rng.choice(sorted(anchors))
        s.compute_at(task, host, anchors[host])


def _cache(s: Schedule, task: str, rng: random.Random) -> None:
    """Maybe read an input through a cache (per instance or per loop), or cache the result."""
    read = [t.name for t in s.workload.task(task).inputs
            if t.name not in s.inlined and t.name not in s.compute_at_locations]
    if read and rng.random() < 0.15:
        loop = rng.choice([None, *s.spatial_loops(task)])
        s.cache_read(task, rng.choice(read), rng.choice(SCOPES), loop)
    if rng.random() < 0.15:
        s.cache_write(task, rng.choice(SCOPES))


def random_layout(shape: tuple[int, ...], rng: random.Random) -> Callable[..., tuple]:
    """An index map for a tensor of `shape`: one dimension cut into blocks (the block index in
    place, the offset last: NCHW -> NCHWc), two dimensions swapped, or one moved by 1 (a zero
    row before it)."""
    kind, dims = rng.choice(["block", "swap", "pad"]), len(shape)
    d = rng.randrange(dims)
    blocks = [f for f in (2, 3, 4, 8) if f < shape[d]]
    other = rng.randrange(dims)
    factor = rng.choice(blocks) if blocks else 1

    def index_map(*axes):
        if kind == "block" and blocks:
            return (*axes[:d], axes[d] // factor, *axes[d + 1:], axes[d] % factor)
        if kind == "swap":
            out = list(axes)
            out[d], out[other] = out[other], out[d]
            return tuple(out)
        return (*axes[:d], axes[d] + 1, *axes[d + 1:])

    return with_parameters(index_map, [f"a{k}" for k in range(dims)])


def _prefetch(s: Schedule, task: str, rng: random.Random) -> None:
    """Maybe prefetch an input the task reads itself at one of its serial loops, 1 or 2 ahead: a
    spatial loop (every read is inside it), or a reduce loop for a tensor the reduction reads."""
    cached = {n for t, n, _, _ in s.cache_reads if t == task}  # read through a cache: not inside the loops
    read = [t.name for t in s.workload.task(task).inputs
            if t.name not in s.inlined and t.name not in s.compute_at_locations and t.name not in cached]
    if not read or rng.random() >= 0.3:
        return
    tensor = rng.choice(read)
    reduced = {n.arg.name for r, _ in outermost_reductions(s.workload.task(task).body) for n in walk(r) if
               n.op is Op.LOAD}
    serial = [lp.name for lp in s.nest(task).loops if lp.annotation == SERIAL and (not lp.reduce or tensor in reduced)]
    if serial:
        loop, ahead = rng.choice(serial), rng.choice((1, 1, 2))
        # a task computed inside another runs where that one's indices say, which may be values read
        # from a tensor (bilateral_grid's blur at the grid cell of a pixel): the build refuses a
        # prefetch whose region is not known ahead (lower/prefetching.py), so none is drawn there
        if task not in s.compute_at_locations:
            s.prefetch_tensor(task, tensor, loop, ahead=ahead)


def random_schedule(wl: Workload, seed: int, steps_per_task: int = 4, compute_at: bool = True,
                    layouts: bool = False, prefetches: bool = False) -> Schedule:
    """A legal schedule of random placement (inline, compute_at), cache and loop steps, and with
    `layouts` (on targets that store tensors in other layouts) random layouts of intermediates and
    constants, with `prefetches` (on the cpu) random prefetch_tensor steps, each from its own
    random stream: the other steps are those of `layouts=False, prefetches=False`.

    Placement is decided consumers first, so a producer is only computed at a
    task that already holds every read of it.
    """
    rng = random.Random(seed)
    s = wl.schedule()
    computes = [t for t in wl.tasks if wl.category(t) is not Category.OPAQUE]
    for task in reversed(computes):
        try:
            _place(s, task, rng, compute_at)
        except ScheduleError:
            pass
    for task in computes:
        if task in s.inlined:
            continue
        try:
            _cache(s, task, rng)
        except ScheduleError:
            pass
        for _ in range(rng.randint(0, steps_per_task)):
            try:
                _propose(s, task, rng)
            except ScheduleError:
                pass  # illegal proposal: the schedule is unchanged, try another
    if prefetches:
        chooser = random.Random(f"prefetches {seed}")
        for task in computes:
            if task not in s.inlined:
                try:
                    _prefetch(s, task, chooser)
                except ScheduleError:
                    pass  # a task that reads no input of its own, or a task folded by fusion
    if layouts:
        chooser = random.Random(f"layouts {seed}")
        for tensor in [*wl.constants, *(t for t in computes if t not in wl.outputs)]:
            if chooser.random() < 0.3 and wl.tensor(tensor).shape:  # (a 0-d tensor has one layout)
                try:
                    s.transform_layout(tensor, random_layout(wl.tensor(tensor).shape, chooser))
                except ScheduleError:
                    pass  # an input, output or tensor read through a cache keeps its layout
    return s
