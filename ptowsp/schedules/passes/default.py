"""The default schedule: what `pw.build(wl)` runs when the user writes no schedule.

Three decisions, each from the workload's structure alone (no measurement;
the AutoScheduler is the tool that measures):

1. **Fusion** by category (fusion.py): injective chains inline, epilogues
   join their complex-out-fusable producer.
2. **Grouping** (Halide's compute_at): a stored intermediate X whose readers
   all belong to one group, and which they read at their own leading loop
   variables (`M[i]` in `E[i, j]`, `P[b, h, i, r]` in `O[b, h, i, j]`), is
   computed inside that group's root at the loop of those variables.  Each
   element is computed exactly once, but it lives in a small local buffer
   instead of memory, and the group runs as one task.  A contraction goes at
   the outermost such loop (a block of rows, computed with its own register
   tiling); anything else at the innermost (one row, kept in L1).
3. **Loops per category**: a contraction `C[.., i, j] = sum(A[.., i, k] *
   B[.., k, j], k)` gets a 4 x (2 vectors) register tile with k blocked by
   256 and B's panel packed per block (cache_read), a reduction whose last
   axis is one vector (a blocked convolution) a pixels x vector tile
   (tiles.py); a reduction over a contiguous last axis gets vector partial
   sums; everything else vectorises its innermost loop when the vector
   width divides it.  The leading loops
   of every group root form the task grid: about `TASKS_PER_WORKER` tasks per
   worker, fewer when a task would do less than `MIN_TASK_WORK`, in a count
   that shares out evenly over the workers (`balanced_grid`).

Loop steps that do not fit (extents the tile does not divide) are simply not
taken, with two exceptions that leave a guarded tail.  Where nothing divides
an extent (197 tokens) and there are at least `GUARDED_TILES` whole tiles, a
contraction's register tile (rows or columns), a vector strip and a
reduction's vector partial sums end in a guarded tile, which lowering runs
apart from the whole ones (lower/partition.py); and a task grid that no
divisor near the wanted count cuts evenly is split anyway.
docs/schedules.md shows the schedules it writes.

Every number and either-or above is a *decision* asked of `choose(name,
candidates, default)`.  `pw.build` answers each with its default; the
AutoScheduler (autoschedule/space.py) records the questions as its search
space and answers them from a point of it, so a tuned schedule is this same
generator with other answers (Ansor's sketch plus annotations, derived here
from the workload's structure rather than from templates).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ptowsp.schedules.loopnest import MAX_VECTOR_LANES, PARALLEL, SERIAL, inner_of, is_outer_part, outer_of, roots_of
from ptowsp.schedules.passes import fold, fusion, inlining
from ptowsp.schedules.passes.cube import CubeTiler, cube_tile
from ptowsp.schedules.passes.decisions import Choose, decision
from ptowsp.schedules.passes.symbolic import over_any_size, over_sizes
from ptowsp.schedules.passes.tiles import (
    GUARDED_TILES, channel_block_loop, contiguous, contraction_tile, hoist_channel_blocks, rows_inside_panel,
    stream_reduction, streamed_weights, vector_tile,
)
from ptowsp.schedules.scan_rules import independent_axes, scan_loops
from ptowsp.schedules.schedule import Schedule
from ptowsp.te import Expr, Op, const, substitute, walk
from ptowsp.te.bounds import interval, shift_of
from ptowsp.workloads import Category, ComputeTask, Workload, inline_producers

MIN_TASK_WORK = 1 << 14  # element operations per task instance (the native loop costs 0.2-1 us a task)
# A reduction's terms run from registers and caches, several of them costing what one element of a
# streaming task does: counted at that rate, a small contraction gets fewer, longer tasks.  128 when
# each task cost ~5-10 us of Python that the GIL serialised across workers; with the native loop
# (runtime/native.py, ~0.2-1 us a task) 16: MobileNetV3-Small's 1x1 convolutions at 14 x 14 (240 x 40
# channels, 120-140 us) ran as one task each with the other worker idle (3.3 -> 2.1 ms a run).
TERMS_PER_ELEMENT = 16
TASKS_PER_WORKER = 4
ROW_GROUP_BYTES = 512 << 10  # a contraction reading more than this is not grouped by blocks of rows (half an L2)
TYPICAL_SIZE = 1024  # what the default schedule assumes a symbolic size to be
DISPATCH = ("work_stealing", "round_robin", "locality")  # the runtime default first; affinity needs a key
CUBE = ("cube", "tile")  # _inner_loops' answer for a cube-tiled contraction: no register tile to place



def keep_default(name: str, candidates: Sequence[Any], default: Any) -> Any:
    """Answer every decision with its default: the schedule `pw.build` uses."""
    return default


@dataclass(frozen=True)
class _Group:
    root: str  # the stored task X is computed inside
    depth: int  # how many leading loop variables of the root index X
    before: tuple[str, ...] = ()  # readers placed inside the root: X goes at or outside their loops
    outermost: bool = False  # at the outermost legal loop of the root (a block of rows), else innermost
    halo: bool = False  # read at shifted indices (a stencil): only worth it per block of several rows


def default_schedule(wl: Workload, *, vector_bytes: int = 32, workers: int = 2, fuse: bool = True,
                     choose: Choose = keep_default, cube: CubeTiler | None = None) -> Schedule:
    """The schedule `pw.build(wl, target)` uses; `fuse=False` leaves every task stored on its own.

    `choose` answers the generator's decisions (see the module docstring); `cube`, a target with
    matrix cores (aicore), chooses the tiles of contractions that fit them (cube.py).  A workload with
    symbolic sizes gets the schedule of a typical binding (every size TYPICAL_SIZE), replayed over
    the symbols (symbolic.py): splits of a size leave guarded tails, a step that needs a number where
    a size stands or that would give a local buffer a symbolic size is left out, and a producer whose
    placement is left out gets a task grid of its own.
    """
    if wl.sizes:
        bound = wl.bind(dict.fromkeys(wl.sizes, TYPICAL_SIZE))
        typical = default_schedule(bound, vector_bytes=vector_bytes, workers=workers, fuse=fuse,
                                   choose=over_any_size(wl, choose), cube=cube)
        return over_sizes(wl, typical, lambda s, x: _grid(s, x, _tasks(x, _work(bound, x), workers, choose),
                                                          len(wl.task(x).loop_names), workers))
    s = Schedule(wl)
    folded = fold.foldable(wl)
    fuse = choose(decision(None, "fuse"), (True, False), fuse)
    keep: dict[str, str] = {}
    plan = Schedule(wl).fuse_by_category().fusion_plan() if fuse else fusion.FusionPlan()
    if fuse and choose(decision(None, "inline"), ("bounded", "all"), "bounded") == "bounded":  # inlining.py
        keep = inlining.keep_stored(wl, {f.producer for f in plan.fusions if f.kind == "inline"})
        if keep:  # the plan again, without those inlines
            plan = Schedule(wl).fuse_by_category().fusion_plan(keep)
    inlined = {f.producer for f in plan.fusions if f.kind == "inline"}
    anchors = {f.producer: f.consumer for f in plan.fusions if f.kind == "epilogue"}  # producer -> epilogue
    stored = [t for t in wl.tasks if isinstance(wl.task(t), ComputeTask) and t not in folded and t not in inlined]
    groups = _groups(wl, stored, inlined, anchors, workers, choose) if fuse else {}
    owners = set(anchors.values())  # epilogues take their anchor's loops: they get none of their own
    # an epilogue's loops (and grid) come from its anchor: the anchor stands for the group
    roots = [t for t in stored if t not in groups and t not in owners and anchors.get(t) not in groups]
    # tasks whose loops no other task's placement depends on (not an anchor, a group member or root)
    alone = {t for t in stored if t not in anchors and t not in groups and all(g.root != t for g in groups.values())}
    # group roots (their members go at their leading, row loops) and members (computed per block of rows)
    by_rows = {g.root for g in groups.values()} | set(groups)
    tiles = {task: _inner_loops(s, task, _lanes(wl, task, inlined, vector_bytes), workers, choose,
                                task in alone or task in anchors, task in by_rows or anchors.get(task) in by_rows,
                                cube)
             for task in stored if task not in owners}
    for root in roots:
        members = [x for x, g in groups.items() if g.root == anchors.get(root, root)]
        work = sum(_work(wl, t) for t in [root, *members])
        if wl.task(root).scan is not None:  # an instance holds its strips over every step: as many as allowed
            work = max(work, MIN_TASK_WORK * TASKS_PER_WORKER * workers)
        depth = min((groups[x].depth for x in members), default=len(wl.task(root).loop_names))
        if tiles.get(root) is CUBE:  # a run of tiles per cube core
            _grid(s, root, _tasks(root, work, cube.cores, choose, per_worker=1), depth, cube.cores)
        else:
            _grid(s, root, _tasks(root, work, workers, choose), depth, workers)
    for task, rows in tiles.items():
        if rows is CUBE:
            continue
        if rows is not None and choose(decision(task, "rows_inside_panel"), (True, False), True):
            rows_inside_panel(s, task, *rows)
        elif rows is None and task in alone and choose(decision(task, "stream_reduction"), (True, False), True):
            stream_reduction(s, task)
        if rows is None and task in alone and (block := channel_block_loop(s, task)) is not None and \
                choose(decision(task, "channel_blocks_outside"), (True, False), True):
            hoist_channel_blocks(s, task, block)
            # ResNet-18's 7x7 stage (9.4 MB a convolution) 1.04-1.10x; below a core's L2 it lost up to 14%
            weights = streamed_weights(s, task, block)
            if weights and choose(decision(task, "prefetch_weights"), (True, False), True):
                s.prefetch_tensor(task, weights, block)
    if fuse:
        s = s.fuse_by_category().fusion_plan(keep).schedule
    for x in [t for t in reversed(wl.tasks) if t in groups]:  # readers first: their loops bound a producer's
        group = groups[x]
        loop = _placement(s, group)
        if loop is not None and group.halo and not is_outer_part(loop):
            loop = None  # one row per iteration would recompute the halo rows every row: store it instead
        if loop is None:
            _grid(s, x, _tasks(x, _work(wl, x), workers, choose), len(wl.task(x).loop_names), workers)
        else:
            s.compute_at(x, group.root, loop)
    policy = choose(decision(None, "dispatch"), DISPATCH, DISPATCH[0])
    if policy != DISPATCH[0]:  # the runtime's default: no step
        s.dispatch(policy)
    depth = choose(decision(None, "prefetch"), (0, 1, 2), 0)
    return s.prefetch(depth) if depth else s


# -- grouping -----------------------------------------------------------------------------
def _groups(wl: Workload, stored: list[str], inlined: set[str], anchors: dict[str, str], workers: int,
            choose: Choose) -> dict[str, _Group]:
    """Which stored tasks go inside which group root, latest first (readers decide before producers).

    Decision `X.at`: "outer" or "inner" loop of the root, or "root" to keep X stored on its own.
    """
    out: dict[str, _Group] = {}
    fixed = set(anchors) | set(wl.outputs)  # an anchor stays in its epilogue; outputs are stored
    for x in reversed(stored):
        if x in fixed or wl.task(x).scan is not None:  # a scan is stored: nothing is computed at its loops
            continue
        found: set[str] = set()
        depth, before, halo = len(wl.task(x).loop_names), [], False
        for reader in fusion.readers(wl, x, inlined):
            task = wl.task(reader)
            if not isinstance(task, ComputeTask) or task.scan is not None:
                found.add("")  # an opaque reader or a scan needs x stored
                continue
            lead, shifted = _leading_match(inline_producers(task.body, wl, inlined), x, task.loop_names)
            halo |= shifted
            group = anchors.get(reader, reader)  # an anchor computes inside its epilogue: same variables
            if group in out:
                root, lead = out[group].root, min(lead, out[group].depth)
                before.append(group)
            else:
                root = group
                if reader in anchors:
                    before.append(reader)
            found.add(root)
            depth = min(depth, lead)
        root = next(iter(found)) if len(found) == 1 else ""
        # the loops X would go inside must leave the root a grid (a batch of 1 would make one task)
        enough = bool(root) and math.prod(wl.task(root).tensor.shape[:depth]) >= TASKS_PER_WORKER * workers
        if len(found) == 1 and "" not in found and depth >= 1 and enough:
            contraction = x in anchors.values() or wl.category(x) is Category.COMPLEX_OUT_FUSABLE
            # a block of rows for a contraction, and for a stencil's producer (its halo is recomputed per
            # block, not per row); one row (in L1) for anything else.  Stored where a block of rows would
            # re-read a large weight matrix: each of the root's row tasks would read all of it
            wide = _largest_operand(wl, x, anchors, depth) > ROW_GROUP_BYTES or _largest_operand(
                wl, next(iter(found)), anchors, depth) > ROW_GROUP_BYTES
            default = "root" if wide else "outer" if contraction or halo else "inner"
            at = choose(decision(x, "at"), ("outer", "inner", "root"), default)
            if at != "root":
                out[x] = _Group(found.pop(), depth, tuple(before), outermost=at == "outer", halo=halo)
    return out


def _largest_operand(wl: Workload, task: str, anchors: dict[str, str], depth: int) -> int:
    """Bytes of the largest operand the contraction of `task`'s group reads in one iteration of its
    first `depth` loops (its own inputs, and those of the producer it is the epilogue of); 0 when
    neither is a contraction.  A dimension indexed through those loops' variables counts by the span
    of its index with them fixed (Winograd's filter `U[e, f, k, o]`, read per point (e, f) of its
    tile, is 16 KB a point, not 590 KB; a block of rows `X[4 * b + a]` is 6 rows)."""
    producers = [p for p, e in anchors.items() if e == task]
    found = 0
    for t in [task, *producers]:
        if wl.category(t) is Category.COMPLEX_OUT_FUSABLE:
            compute = wl.task(t)
            fixed = {name: const(0, "int64") for name in compute.loop_names[:depth]}
            for load in (n for n in walk(compute.body) if n.op is Op.LOAD):
                spans = [_span(index, extent, fixed) for index, extent in zip(load.src, load.arg.shape)]
                found = max(found, math.prod(spans) * np.dtype(load.arg.dtype).itemsize)
    return found


def _span(index: Expr, extent: int, fixed: dict[str, Expr]) -> int:
    """How many values `index` takes with the loop variables in `fixed` held (at most `extent`)."""
    if not any(n.op is Op.VAR and n.arg[0] in fixed for n in walk(index)):
        return extent
    bounds = interval(substitute(index, lambda e: fixed.get(e.arg[0]) if e.op is Op.VAR else None))
    return extent if bounds is None else min(extent, bounds[1] - bounds[0] + 1)


def _leading_match(body: Expr, tensor: str, loops: tuple[str, ...]) -> tuple[int, bool]:
    """How many leading indices of every read of `tensor` are the reader's own leading loop variables,
    each maybe shifted by a constant (a stencil's halo), and whether any is shifted."""
    depth, halo = len(loops), False
    for node in walk(body):
        if node.op is Op.LOAD and node.arg.name == tensor:
            same = 0
            for index, loop in zip(node.src, loops):
                offset = shift_of(index, loop, through_clamps=True)
                if offset is None:
                    break
                halo |= offset != 0
                same += 1
            depth = min(depth, same)
    return depth, halo and depth > 0


def _placement(s: Schedule, group: _Group) -> str | None:
    """The loop of the root to compute a group member at: it and every loop outside it iterate
    only the root's first `depth` variables, it is at or inside the task grid, and at or outside
    the loop of the member's readers placed in the same root."""
    nest = s.nest(group.root)
    prefix = set(s.workload.task(group.root).loop_names[:group.depth])
    placed = s.compute_at_locations
    limit = min((nest.index(placed[r][1]) + 1 for r in group.before if placed.get(r, ("",))[0] == group.root),
                default=len(nest.loops))
    last_grid = max((n for n, lp in enumerate(nest.loops) if lp.annotation == PARALLEL), default=0)
    legal = []
    for n, lp in enumerate(nest.loops[:limit]):
        if lp.reduce or _variable(lp.name) not in prefix or lp.annotation not in (SERIAL, PARALLEL):
            break
        if n >= last_grid:
            legal.append(lp.name)
    if not legal:
        return None
    return legal[0] if group.outermost else legal[-1]


def _variable(loop: str) -> str:
    """The original loop variable a loop iterates (the default schedule never fuses loops)."""
    return roots_of(loop)[0]


# -- loops per category ---------------------------------------------------------------------
def _lanes(wl: Workload, task: str, inlined: set[str], vector_bytes: int) -> int:
    """Lanes of one vector register of the task's widest value, its output or an intermediate (a
    uint8 pipeline that sums in int32 gets 16 lanes per AVX-512 register, not 64: a wider vector
    only spills, and multiplies the code LLVM compiles)."""
    if not wl.task(task).loop_names:  # a 0-d task: one element, no vector
        return 1
    last = wl.task(task).loop_names[-1]  # the loop a vector runs along

    def along_vector(e: Expr) -> bool:  # varies along the vector: reads its loop (a load through its indices)
        return any(n.op is Op.VAR and n.arg[0] == last for n in walk(e))

    def values(e: Expr):  # the value nodes: not loop variables, reduce axes or the index arithmetic of loads,
        # nor an integer or boolean the vector loop leaves alone (a padding guard over the rows and
        # taps of a channel-blocked tile, a decode step's `t < pos[b]`: one scalar test per vector, not
        # a vector of int64: paged attention's weighted sum ran in 8-lane chunks, 6x slower)
        if e.op in (Op.VAR, Op.RVAR) or np.dtype(e.dtype).kind in "iub" and not along_vector(e):
            return
        yield e
        if e.op is not Op.LOAD:
            for x in e.src:
                yield from values(x)

    body = inline_producers(wl.task(task).value, wl, inlined)
    widest = max(np.dtype(n.dtype).itemsize for n in (wl.task(task).tensor, *values(body)))
    return max(1, min(MAX_VECTOR_LANES, vector_bytes // widest))  # aicore's 256-byte vectors: 128 float16


def _inner_loops(s: Schedule, task: str, lanes: int, workers: int, choose: Choose,
                 alone: bool, hosting: bool, cube: CubeTiler | None = None) -> tuple[str, str] | None:
    """Cube tile, register tile, vector partial sums, or a vectorised innermost loop: whichever fits (`alone`:
    no other task is placed by this one's loops, or only its epilogue, which mirrors them, so they
    may take any order; `hosting`: it is a
    group's root or member, which goes by blocks of rows, so its row tiles stay outermost).

    For a register-tiled contraction: (its row-tile loop, the loop its B panel is packed at); for a
    cube-tiled one, CUBE.
    """
    wl = s.workload
    if wl.task(task).scan is not None:
        scan_loops(s, task, lanes, TASKS_PER_WORKER * workers, choose)
        return None
    nest = s.nest(task)
    spatial = [lp for lp in nest.loops if not lp.reduce]
    reduce = [lp for lp in nest.loops if lp.reduce]
    if cube is not None and len(reduce) == 1 and cube_tile(s, task, spatial, reduce[0], cube):
        return CUBE
    machine = lanes
    if spatial and spatial[-1].extent == lanes // 2 and lanes >= 16:
        lanes //= 2  # a last axis of half a vector (channels blocked by 8 on AVX-512, blocking.py): one vector
    # a vector-wide tile keeps the leading (row) loops outermost: a group's root or member may take it too
    if (alone or hosting) and reduce and len(spatial) >= 2 and spatial[-1].extent == lanes \
            and vector_tile(s, task, spatial, reduce, lanes, choose, registers_of=machine):
        return None
    if len(reduce) == 1:
        tiled = contraction_tile(s, task, spatial, reduce[0], lanes, choose, rows_first=hosting)
        if tiled is not None:
            return tiled
    if len(reduce) == 1 and contiguous(wl.task(task).body, reduce[0].name) and lanes > 1:
        k = reduce[0]
        fits = [n for n in (1, 2, 4, 8) if k.extent % (n * lanes) == 0 and k.extent > lanes]
        if not fits and isinstance(k.extent, int) and k.extent >= GUARDED_TILES * lanes:
            fits = [1]  # whole vectors of partials and a guarded last one (a softmax's 197 keys)
        partials = choose(decision(task, "partials"), (0, *fits), 4 if 4 in fits else 1 if 1 in fits else 0)
        if partials:
            s.split(task, k.name, partials * lanes).split(task, inner_of(k.name), lanes)
            s.unroll(task, outer_of(inner_of(k.name))).vectorize(task, inner_of(inner_of(k.name)))
        return None
    if not spatial or lanes == 1:
        return None
    j = spatial[-1]
    if j.extent == lanes:  # one vector exactly (a channel-blocked tensor's lanes): vectorized as it is
        if choose(decision(task, "vectors"), (0, 1), 1):
            if reduce:
                s.reorder(task, *[lp.name for lp in spatial[:-1]], *[lp.name for lp in reduce], j.name)
            s.vectorize(task, j.name)
        return None
    full = lanes
    while lanes > 4 and isinstance(j.extent, int) and j.extent % lanes:  # a narrower vector that divides
        lanes //= 2
    # under a reduction, each vector of the tile is an accumulator the reduction's walk feeds: up to 8 of
    # them walk it once (paged attention's weighted sum over 128 values: 8 walks of the context and its
    # block table in 16-lane chunks took 6x the time of one walk with 8 accumulators)
    fits = [n for n in ((1, 2, 4, 8) if reduce else (1, 2, 4)) if j.extent % (n * lanes) == 0 and j.extent > n * lanes
            or reduce and j.extent == n * lanes and n > 1]
    if not fits and isinstance(j.extent, int) and j.extent >= GUARDED_TILES * full:
        # no vector divides the row (197 keys): whole vectors and a guarded last one, which lowering runs
        # apart from them (lower/partition.py; ViT's softmax over 197 keys ran scalar)
        lanes, fits = full, [1]
    vectors = choose(decision(task, "vectors"), (0, *fits), max(fits) if reduce and fits else 1 if 1 in fits else 0)
    if not vectors:
        return None
    s.split(task, j.name, vectors * lanes)
    if reduce:
        s.reorder(task, *[lp.name for lp in spatial[:-1]], outer_of(j.name), *[lp.name for lp in reduce],
                  inner_of(j.name))
    if vectors > 1:
        s.split(task, inner_of(j.name), lanes).unroll(task, outer_of(inner_of(j.name)))
        s.vectorize(task, inner_of(inner_of(j.name)))
    else:
        s.vectorize(task, inner_of(j.name))
    return None


# -- the task grid ----------------------------------------------------------------------------
def _work(wl: Workload, task: str) -> int:
    """The task's work in element operations: its elements, its reductions' terms (those of its
    longest reduction, over all of that reduction's axes) at TERMS_PER_ELEMENT to an element, or
    the elements of its largest input (each is read at least once: a matrix-vector product's terms
    each read a fresh element, no cheaper than a copy's; MobileNetV3-Small's squeeze-excite layers,
    576 x 144 weights read for 144 outputs, took 8 us each as one task with the other worker idle)."""
    t = wl.task(task)
    assert isinstance(t, ComputeTask)
    elements = math.prod(t.tensor.shape)
    terms = max((math.prod(r.arg[1] for r in n.src[1:]) for n in walk(t.body) if n.op is Op.REDUCE), default=1)
    read = max((math.prod(x.shape) for x in t.inputs if all(isinstance(d, int) for d in x.shape)), default=0)
    return max(elements, elements * terms // TERMS_PER_ELEMENT, read)


def _tasks(root: str, work: int, workers: int, choose: Choose, per_worker: int = TASKS_PER_WORKER) -> int:
    """Decision `root.tasks`: about how many task instances the root's grid makes: none smaller than
    MIN_TASK_WORK, but work enough for one task is shared by every worker (in a chain of one-task
    kernels, as in a squeeze-excite block, one worker would otherwise wait for the other)."""
    default = min(work // MIN_TASK_WORK, per_worker * workers)
    default = workers if 1 <= default < workers else max(1, default)
    return choose(decision(root, "tasks"), sorted({1, default, *(n * workers for n in (1, 2, 4, 8, 16))}), default)


def _grid(s: Schedule, task: str, target: int, depth: int, workers: int) -> None:
    """Make the leading loops (over the first `depth` variables) a grid of about `target` instances
    that keeps every worker busy: the loops taken whole, then one loop split into blocks (`balanced_grid`).
    Over symbolic sizes (symbolic.py's `regrid`) the loops of fixed extent among them, moved first.

    Loops something is computed at stay as they are (and end the grid).
    """
    if target <= 1:
        return
    found = s.workload.task(task)
    allowed = set(found.loop_names[:depth]) & (set(found.loop_names) if found.scan is None else independent_axes(found))
    hosts = {loop for consumer, loop in s.compute_at_locations.values() if consumer == task}
    extents = []
    for lp in s.nest(task).loops:
        if lp.reduce or lp.annotation != SERIAL or _variable(lp.name) not in allowed or lp.name in hosts:
            break
        if isinstance(lp.extent, int):  # not a symbolic loop: its blocks would vary in count with the size
            extents.append((lp.name, lp.extent))
    if any(e == 0 for _, e in extents):
        return  # an empty task: nothing to share out
    whole, blocks = balanced_grid([e for _, e in extents], target, workers)
    chosen = [name for name, _ in extents[:whole]]
    if blocks > 1:
        name, extent = extents[whole]
        s.split(task, name, -(-extent // blocks))
        chosen.append(outer_of(name))
    if chosen:
        names = s.loops(task)
        if names[:len(chosen)] != chosen:  # fixed loops from inside symbolic ones: theirs first
            s.reorder(task, *chosen, *[n for n in names if n not in chosen])
        s.parallel(task, *chosen)


def balanced_grid(extents: Sequence[int], target: int, workers: int) -> tuple[int, int]:
    """(how many leading loops to take whole, how many blocks to cut the next into: 1 for none).

    Of the grids of at most three times `target` instances, the one whose instances share out most evenly
    over the workers (5 channel blocks on 2 workers leave one idle for a fifth of the time; cut each
    block's rows in two and none is), then the one nearest `target`.  Blocks are as equal as the
    extent allows (a divisor near the wanted count, else a shorter last block)."""
    best, best_score = (0, 1), None
    count = 1
    for whole, extent in enumerate(extents):
        for blocks in range(2, min(extent, 3 * target) + 1):
            size = -(-extent // blocks)
            made = -(-extent // size)
            if count * made > 3 * target:
                break
            # time in units of one block's work, against the work shared out perfectly
            rounds = -(-count * made // workers) * size
            score = (count * extent / workers / rounds, -abs(math.log(count * made / target)), -made)
            if best_score is None or score > best_score:
                best, best_score = (whole, made if made < extent else 1), score
                if made == extent:  # the whole loop: take it and look further
                    best = (whole + 1, 1)
        count *= extent
        if count > 3 * target:
            break
    return best

