"""Kernel cost on the device model: core class, streamed blocks, cycles, bytes moved, buffer fit.

From the lowered loop IR of each kernel:

- **core class** (chosen by the target, aicore/__init__.py): a kernel with
  a matrix-multiply-shaped reduction in it (a complex-out-fusable task:
  matmul, batched matmul, conv, also as a fused epilogue's anchor) runs on
  a cube core, the rest on vector cores; `bind(task, core=...)` overrides.
- **tiles and blocks**: a task streams along its *stream loop*: the first
  reduction loop, reached from the top of its body through tile loops, that
  has spatial loops inside it (`k.outer` after `split(C, k, 256)` and a
  reorder that puts the tile's element loops inside it).  The *tile loops*
  are spatial loops that wrap the reduction's init and epilogue as well as
  its update (lowering shares the spatial loops before the first reduction
  loop between the three).  One iteration of the tile loops is a *tile*,
  whose accumulators stay on the core; one iteration of the stream loop is
  a *block*.  A task without a stream loop is one tile of one block.
- **bytes**: what one block reads is the box its loop body touches (bounds
  inference over the loops inside the stream loop); what a tile reads
  outside its stream loop (a bias) comes with its first block, and what it
  writes is stored after its last block.  Transfers go through two DMA
  engines per core, one loading and one storing (MTE2 and MTE3/FixPipe),
  at the rates of its class's pipes (a cube core loads GM->L1 and stores
  L0C->GM, a vector core GM->UB and UB->GM); each transfer arrives
  `dma_startup_seconds` after its bytes are through, so the latencies of
  back-to-back transfers overlap, and one transfer on its own follows the
  published saturating curve (peak x size / (size + peak x startup)).  An
  L2 (LRU over the boxes transferred) serves repeated reads; misses and
  every store also pass through HBM, one shared FIFO.
- **compute**: a cube block takes one cycle per 16x16x16 fractal of its
  tile's outputs times its k (padded to whole fractals; float16 and
  bfloat16 inputs, accumulated in float32, at the full rate; float32 at
  `cube_float32_share`; int8/uint8 inputs, accumulated in int32, at
  `cube_int8_speedup` times it).  Every other arithmetic operation of a cube task
  (the epilogue: casts, bias, activation; producers computed inside it)
  runs on the core's vector unit after the tile's last block.  A vector
  unit takes one cycle per `vector_bytes_per_cycle` of operands of each
  arithmetic operation.
- **declared cost**: a kernel that calls an intrinsic declared with
  `cycles=` (pw.intrinsic) takes, per block, those cycles times the calls in
  the block, in place of the rates above.
- **buffers**: a tile's accumulators, 1 + prefetch blocks of inputs and its
  outputs must fit the core's buffers, else the build fails naming the
  buffer.  On a cube core a block waits in L1 and feeds L0A/L0B in *L0
  steps*: a reduction loop at the top of the block (before any spatial
  loop) with the tile's spatial loops inside it (`k.inner.outer` after
  splitting a 256-deep block by 64: four k steps per L1 load, as the PTO
  ISA's GEMM runs), or the whole block without one; an L0 step's input
  boxes must fit L0A/L0B.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ptowsp.backends.aicore.model import DeviceModel
from ptowsp.errors import ScheduleError
from ptowsp.lower.access import KernelAccess, statement_access
from ptowsp.lower.ir import Block, For, Stmt, Store, Tensorized, bound_loops, walk_stmts
from ptowsp.lower.kernel import Kernel
from ptowsp.runtime import TaskTable
from ptowsp.workloads.intrinsic import lookup

Region = tuple[tuple[int, int], ...]
Parts = tuple[tuple[str, Region], ...]


@dataclass(frozen=True)
class KernelShape:
    """What the cost model needs of one kernel, read once from its loop IR."""

    core: str  # "cube" or "vector"
    path: tuple[int, ...]  # extents of the tile loops and the stream loop (last); () without a stream loop
    tile: KernelAccess  # one tile: reads outside the stream loop, and writes (over grid + tile loops)
    stream: KernelAccess | None  # one block's reads (over grid + tile loops + stream loop)
    block_reduce: int  # contraction iterations of one block on the cube (k of one block; 0: none)
    call_cycles: float = 0.0  # cycles of one block's calls of intrinsics declared with `cycles=` (0: none)
    l0_step: KernelAccess | None = None  # the reads of one L0 step inside a block (None: the whole block)

    @property
    def blocks(self) -> int:
        return math.prod(self.path)

    @property
    def tile_outputs(self) -> int:
        """Elements of a whole tile's first output (guards ignored, as in the instance's flops)."""
        return _largest(self.tile.writes[0][1]) if self.tile.writes else 0

    @property
    def per_tile(self) -> int:
        return self.path[-1] if self.path else 1

    def tile_coords(self, block: int) -> tuple[int, ...]:
        """Values of the tile loops in tile `block // per_tile` (mixed radix, outermost first)."""
        index, values = block // self.per_tile, []
        for extent in reversed(self.path[:-1]):
            index, value = divmod(index, extent)
            values.append(value)
        return tuple(reversed(values))


def _without(stmt: Stmt, part: Stmt) -> Stmt:
    """`stmt` with `part` (a statement inside it) left out."""
    if stmt is part:
        return Block(())
    return stmt.with_children([_without(c, part) for c in stmt.children()])


def _spatial_inside(stmt: Stmt, reduce_vars: set[str]) -> bool:
    """Whether a spatial loop (one not in `reduce_vars`) is inside `stmt`: a tile, not an element."""
    return any(isinstance(n, For) and n.var not in reduce_vars for n in walk_stmts(stmt))


def _stream_path(stmt: Stmt, reduce_vars: set[str], top: bool = True) -> list[For] | None:
    """The tile loops from the top of a task's body down to its stream loop (last), if it has one.

    The stream loop is a reduction loop with spatial loops inside it (a tile, not an element, per
    iteration), or, at the top of the body (the instance is one tile), with any loop inside it (a
    row's sum in vector partial sums: its lanes are pieces of the reduction); a spatial loop above it
    is a tile loop when it also wraps stores outside the stream loop (the reduction's init and
    epilogue), not just the update nest of a per-element order.
    """
    if isinstance(stmt, For):
        if stmt.var in reduce_vars:
            looped = any(isinstance(n, For) for n in walk_stmts(stmt.body))
            tiled = _spatial_inside(stmt.body, reduce_vars) or (top and looped)
            return [stmt] if tiled else None
        inner = _stream_path(stmt.body, reduce_vars, top=False)
        wraps = inner is not None and any(isinstance(n, Store) for n in walk_stmts(_without(stmt.body, inner[-1])))
        return [stmt, *inner] if wraps else None
    for child in stmt.children():  # blocks, allocations and guards
        if (found := _stream_path(child, reduce_vars, top)) is not None:
            return found
    return None


def kernel_shape(kernel: Kernel, core: str, reduce_vars: set[str], own_reduce: set[str]) -> KernelShape:
    """`reduce_vars`: every reduction loop in the kernel's body (of tasks computed at it too);
    `own_reduce`: those of the kernel's own task, the contraction a cube core runs when the kernel
    does not stream (the stream loop's contraction when it does)."""
    grid = [name for name, _ in kernel.grid]
    path = _stream_path(kernel.body, reduce_vars)
    if path is None:
        own = [e for v, e in bound_loops(kernel.body).items() if v in own_reduce]
        reduce = math.prod(own) if own else 0
        return KernelShape(core, (), statement_access(kernel.body, grid, gathered_rows=True), None, reduce,
                           _call_cycles(kernel.body))
    *tile_loops, stream = path
    tile_body = tile_loops[-1].body if tile_loops else kernel.body
    tile_vars = [*grid, *(lp.var for lp in tile_loops)]
    reads = statement_access(_without(tile_body, stream), tile_vars, gathered_rows=True).reads
    tile = statement_access(tile_body, tile_vars, gathered_rows=True)
    block = statement_access(stream.body, [*tile_vars, stream.var], gathered_rows=True)
    reduce = math.prod(e for v, e in bound_loops(stream.body).items() if v in reduce_vars)
    tile = KernelAccess(**{**dict(tile), "reads": reads})  # a fresh model: no binding cached yet
    step = _l0_step(stream.body, reduce_vars, [*tile_vars, stream.var])
    return KernelShape(core, tuple(lp.extent for lp in path), tile, block, reduce, _call_cycles(stream.body), step)


def _l0_step(stmt: Stmt, reduce_vars: set[str], outer: list[str]) -> KernelAccess | None:
    """The reads of one iteration of a reduction loop at the top of a block with the tile's spatial loops
    inside it (what one L0A/L0B load holds), as a function of the loops around it; None without one
    (a spatial loop first: the block's reduction runs per element, and the block feeds L0 whole)."""
    if isinstance(stmt, For):
        if stmt.var not in reduce_vars:
            return None
        if _spatial_inside(stmt.body, reduce_vars):
            return statement_access(stmt.body, [*outer, stmt.var], gathered_rows=True)
        return _l0_step(stmt.body, reduce_vars, [*outer, stmt.var])
    for child in stmt.children():
        if (found := _l0_step(child, reduce_vars, outer)) is not None:
            return found
    return None


def _call_cycles(stmt: Stmt, trips: int = 1) -> float:
    """Cycles of the calls in `stmt` of intrinsics declared with a per-call cost (`cycles=`): each
    call's cycles times the iterations of the loops around it (inside `stmt`)."""
    if isinstance(stmt, Tensorized):
        cycles = lookup(stmt.intrinsic).cycles
        return 0.0 if cycles is None else cycles * trips
    if isinstance(stmt, For):
        return _call_cycles(stmt.body, trips * (stmt.extent if isinstance(stmt.extent, int) else 1))
    return sum(_call_cycles(c, trips) for c in stmt.children())


def _box_elements(region: Region) -> int:
    return math.prod(max(0, stop - start) for start, stop in region)


def _largest(box) -> int:
    """Elements of a KernelAccess box at its full extent (clipped to the tensor, not to guards)."""
    return math.prod(min(extent.evaluate(), size.evaluate()) for _, extent, size in box)  # static workloads only


def _box_bytes(access_parts, itemsize: Mapping[str, int]) -> list[int]:
    """Bytes of each (largest) box of a KernelAccess's reads or writes."""
    return [_largest(box) * itemsize[name] for name, box in access_parts]


def _kib(n: float) -> str:
    return f"{n / 1024:.1f} KiB"


class ModelCosts:
    """Stage times of every instance of a table on a device; memory state (L2, HBM queue) is per run."""

    def __init__(self, device: DeviceModel, table: TaskTable, shapes: Mapping[str, KernelShape],
                 itemsize: Mapping[str, int]):
        self.device = device
        self.schedulers = device.schedulers
        self.orchestrate_seconds = device.orchestrate_seconds
        self.record_seconds = device.record_seconds
        self.replay_seconds = device.replay_seconds
        self.schedule_seconds = device.schedule_seconds
        self.dispatch_seconds = device.dispatch_seconds
        self.completion_seconds = device.completion_seconds
        self.switch_seconds = device.task_switch_seconds
        self.slots = device.task_slots
        self.instances = table.instances
        self.shapes = shapes
        self._shapes = [shapes.get(inst.label) for inst in table.instances]  # per instance (a hot lookup)
        self.itemsize = itemsize
        self.l2: OrderedDict[tuple, int] = OrderedDict()
        self.l2_held = 0
        self.hbm_free = 0.0  # when the HBM queue is next idle
        self.hbm_read = self.hbm_written = self.l2_hits = 0
        self.hbm_busy = 0.0  # seconds the HBM moved bytes
        # per instance on a core now: (tile, its regions) and (tile, last block, its compute seconds); a
        # tile's blocks ask for the same ones block after block (the model's hot path)
        self._tiles: dict[int, tuple[int, tuple[Parts, Parts]]] = {}
        self._computes: dict[int, tuple[int, bool, float]] = {}

    def _shape(self, i: int) -> KernelShape | None:
        return self._shapes[i]

    def _tile(self, i: int, block: int) -> tuple[Parts, Parts]:
        """(reads outside the stream loop, writes) of the tile that `block` belongs to."""
        shape, inst = self._shape(i), self.instances[i]
        if shape is None:  # a host (opaque) task: its whole tensors
            return inst.reads, inst.writes
        tile = block // shape.per_tile
        known = self._tiles.get(i)
        if known is None or known[0] != tile:
            known = self._tiles[i] = tile, shape.tile.regions(*inst.coords, *shape.tile_coords(block))
        return known[1]

    def blocks(self, i: int) -> int:
        shape = self._shape(i)
        return 1 if shape is None else shape.blocks

    def stores(self, i: int, block: int) -> bool:
        shape = self._shape(i)
        return shape is None or (block + 1) % shape.per_tile == 0

    def _bytes(self, part: tuple[str, Region]) -> int:
        return _box_elements(part[1]) * self.itemsize[part[0]]

    def _move(self, engine: float, nbytes: int, rate: float, through_hbm: bool) -> float:
        """When the core's DMA engine, free at `engine`, has passed `nbytes` on at `rate` bytes per
        second (HBM waits included)."""
        end = engine + nbytes / rate
        if through_hbm:
            seconds = nbytes / self.device.hbm_bytes_per_second
            self.hbm_busy += seconds
            self.hbm_free = max(engine, self.hbm_free) + seconds
            end = max(end, self.hbm_free)
        return end

    def _cached(self, key: tuple, nbytes: int) -> bool:
        """Whether the L2 holds `key`; either way it is most recently used afterwards."""
        if key in self.l2:
            self.l2.move_to_end(key)
            return True
        self.l2[key] = nbytes
        self.l2_held += nbytes
        while self.l2_held > self.device.l2_bytes and self.l2:
            self.l2_held -= self.l2.popitem(last=False)[1]
        return False

    def load(self, i: int, block: int, now: float) -> tuple[float, float]:
        """(seconds the DMA engine is busy, seconds until the block is in the core's buffers)."""
        shape, inst = self._shape(i), self.instances[i]
        parts: Parts = ()
        if block % (shape.per_tile if shape else 1) == 0:
            parts += self._tile(i, block)[0]
        if shape is not None and shape.stream is not None:
            parts += shape.stream.reads_at(*inst.coords, *shape.tile_coords(block), block % shape.per_tile)
        return self._transfer(parts, now, self._core(i), loading=True)

    def _core(self, i: int) -> str:
        shape = self._shape(i)
        return "vector" if shape is None else shape.core  # a host (opaque) task: on a vector core

    def store(self, i: int, block: int, now: float) -> float:
        seconds = self._transfer(self._tile(i, block)[1], now, self._core(i), loading=False)[1]
        if block == self.blocks(i) - 1:  # the instance is done: nothing asks for its tiles again
            self._tiles.pop(i, None)
            self._computes.pop(i, None)
        return seconds

    def _transfer(self, parts: Parts, now: float, core: str, loading: bool) -> tuple[float, float]:
        """(busy, ready) of moving `parts` through a `core` core's DMA engine from device time `now`:
        loads are served by L2 where it holds them; stores go to HBM and stay in L2 for their consumer."""
        d, engine = self.device, now
        rate = d.load_bytes_per_second(core) if loading else d.store_bytes_per_second(core)
        for part in parts:
            nbytes = self._bytes(part)
            if nbytes:
                hit = self._cached(part, nbytes) and loading
                if loading:
                    self.l2_hits += nbytes if hit else 0
                    self.hbm_read += 0 if hit else nbytes
                else:
                    self.hbm_written += nbytes
                engine = self._move(engine, nbytes, rate, not hit)
        busy = engine - now
        return busy, busy + (self.device.dma_startup_seconds if engine > now else 0.0)

    def compute(self, i: int, block: int) -> float:
        """Seconds of one block's arithmetic: the same for every block of a tile but its last."""
        shape = self._shape(i)
        if shape is None:
            return self._compute(i, block)
        key = block // shape.per_tile, self.stores(i, block)
        known = self._computes.get(i)
        if known is None or known[:2] != key:
            known = self._computes[i] = (*key, self._compute(i, block))
        return known[2]

    def _compute(self, i: int, block: int) -> float:
        inst, d, shape = self.instances[i], self.device, self._shape(i)
        if shape is None:  # a host (opaque) task: one pass over its bytes
            return inst.bytes / d.gm_to_ub_bytes_per_second
        written = inst.writes[0][0] if inst.writes else None
        lanes = d.vector_bytes_per_cycle // max(1, self.itemsize.get(written, 4))
        if shape.call_cycles:  # intrinsic calls declared with their own cost: that many cycles per call
            return shape.call_cycles / d.clock_hz
        if shape.core != "cube" or not inst.writes:
            return inst.flops / shape.blocks / lanes / d.clock_hz
        # the cube: whole 16x16x16 fractals of (this tile's outputs) x (this block's k); the rest of the
        # tile's arithmetic (2 flops per multiply-accumulate are the cube's) on the vector unit after its last block
        writes = self._tile(i, block)[1]
        outputs = _box_elements(writes[0][1]) if writes else 0
        f = d.cube_fractal
        fractals = math.ceil(outputs / (f * f)) * math.ceil(shape.block_reduce / f)
        narrowest = min(self.itemsize[t] for t, _ in inst.reads)  # int8 in: int32 sums; 16-bit in: float32 sums
        rate = d.cube_int8_speedup if narrowest == 1 else 1.0 if narrowest == 2 else d.cube_float32_share
        cycles = fractals * (f ** 3 / d.cube_macs_per_cycle) / rate
        if self.stores(i, block) and outputs:  # (a tile its guards leave empty computes nothing)
            tiles = shape.blocks // shape.per_tile
            cube_flops = 2 * shape.tile_outputs * shape.block_reduce * shape.per_tile
            cycles += max(0, inst.flops / tiles - cube_flops) / lanes
        return cycles / d.clock_hz

    def statistics(self) -> dict:
        return {"hbm_read_bytes": self.hbm_read, "hbm_written_bytes": self.hbm_written,
                "l2_hit_bytes": self.l2_hits, "hbm_busy_seconds": self.hbm_busy}


class DeviceLimit(ScheduleError):
    """A legal schedule the device cannot take as given; `task` says which task's tiles."""

    def __init__(self, task: str, message: str):
        super().__init__(message)
        self.task = task


class BufferOverflow(DeviceLimit):
    """A task's tile or blocks do not fit a core buffer; `task` and `buffer` say which, `tensor` whose
    block is the largest (None: the accumulators of the tile's outputs)."""

    def __init__(self, task: str, buffer: str, message: str, tensor: str | None = None):
        super().__init__(task, message)
        self.buffer = buffer
        self.tensor = tensor
        self.others: list[BufferOverflow] = []  # the other tasks that overflow in the same build, one each


class TooManyBlocks(DeviceLimit):
    """A task instance streams more blocks than its limit: each is a DMA, compute and store step
    that the AICPU-driven core takes (and the model simulates) one at a time."""

    def __init__(self, task: str, message: str, blocks: int):
        super().__init__(task, message)
        self.blocks = blocks
        self.others: list[TooManyBlocks] = []  # the other tasks over the limit in the same build


MAX_BLOCKS = 1 << 18  # blocks of one task instance: about 2 s of the model's host time
# the default schedule's own limit: a tile of a few elements streaming its reduction one element a block
# (a convolution's 8 pixels, one channel a block) is a legal schedule, but it gives each block less
# arithmetic than one cube fractal and costs the model one event each (ResNet-50: 160 million blocks)
DEFAULT_MAX_BLOCKS = 1 << 12


def check_blocks(shapes: Mapping[str, KernelShape], limit: int = MAX_BLOCKS) -> None:
    """Refuse, at build time, a task whose tiles are so small that one instance streams more than
    `limit` blocks (a random schedule's eight tile loops made 46 million; the model would run for
    hours, one event per block): the first, with every other such task in `others`."""
    found = []
    for name, shape in shapes.items():
        if shape.blocks > limit:
            loops = " x ".join(map(str, shape.path))
            found.append(TooManyBlocks(name, f"task {name!r} streams {shape.blocks:,} blocks per instance ({loops}: "
                                       f"its tile loops and stream loop), more than the {limit:,} an aicore task "
                                       "takes; make its tiles larger (fewer, longer loops inside the task grid)",
                                       shape.blocks))
    if found:
        found[0].others = found[1:]
        raise found[0]


def check_buffers(device: DeviceModel, shapes: Mapping[str, KernelShape], itemsize: Mapping[str, int],
                  prefetch: int) -> None:
    """Refuse, at build time, a task whose tile does not fit its core's buffers (ScheduleError): the first,
    with every other task's first overflow in `others` (the aicore default refits them all at once)."""
    found = []
    for name, shape in shapes.items():
        try:
            _check_buffers(device, name, shape, itemsize, prefetch)
        except BufferOverflow as e:
            found.append(e)
    if found:
        found[0].others = found[1:]
        raise found[0]


def _check_buffers(device: DeviceModel, name: str, shape: KernelShape, itemsize: Mapping[str, int],
                   prefetch: int) -> None:
    ahead = 1 + prefetch
    hint = "split the task's reduction loop (streamed in blocks) or make its tile smaller"
    tile_in = _box_bytes(shape.tile.reads, itemsize)
    block_in = _box_bytes(shape.stream.reads, itemsize) if shape.stream else tile_in
    reads = shape.stream.reads if shape.stream else shape.tile.reads
    largest = _largest_tensor(reads, block_in)
    out = _box_bytes(shape.tile.writes, itemsize)
    in_flight = ahead * sum(block_in) + (sum(tile_in) if shape.stream else 0)
    if shape.core == "cube":
        out_elements = sum(_largest(box) for _, box in shape.tile.writes)
        step = block_in if shape.l0_step is None else _box_bytes(shape.l0_step.reads, itemsize)
        step_reads = reads if shape.l0_step is None else shape.l0_step.reads
        needs = [("L0C", out_elements * device.accumulator_bytes, device.l0c_bytes,
                  "its tile's accumulators", None),
                 ("L0A/L0B", max(step, default=0), min(device.l0a_bytes, device.l0b_bytes),
                  "its largest input block" if shape.l0_step is None else "its largest input of one L0 step",
                  _largest_tensor(step_reads, step)),
                 ("L1", in_flight, device.l1_bytes, f"{ahead} input block(s) in flight (prefetch {prefetch})",
                  largest)]
    else:
        needs = [("UB", in_flight + sum(out), device.ub_bytes,
                  f"{ahead} input block(s) in flight (prefetch {prefetch}) and its outputs", largest)]
    for buffer, need, capacity, what, tensor in needs:
        if need > capacity:
            raise BufferOverflow(name, buffer, f"task {name!r} needs {_kib(need)} of {buffer} for {what}, but a "
                                 f"{shape.core} core's {buffer} holds {_kib(capacity)}: {hint}", tensor)


def _largest_tensor(reads, sizes: list[int]) -> str | None:
    """The tensor of the largest of `reads` (a KernelAccess's boxes), whose bytes are `sizes`."""
    return reads[sizes.index(max(sizes))][0] if sizes else None


def itemsizes(dtypes: Mapping[str, str]) -> dict[str, int]:
    return {name: np.dtype(dtype).itemsize for name, dtype in dtypes.items()}
