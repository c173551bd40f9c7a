"""Kernel cost on the device model: core class, streaming blocks, cycles, bytes moved, buffer fit.

From the lowered loop IR of each kernel and its access boxes:

- **core class**: a matrix-multiply-shaped reduction (a complex-out-fusable
  anchor: matmul, batched matmul, conv) runs on a cube core, the rest on
  vector cores; `bind(task, core=...)` overrides.
- **blocks**: a task streams its inputs along its outermost reduction loop
  when that loop sits at the top of the task's body (`k.outer` after
  `split(C, k, 256)`): each iteration loads its share of the inputs, then
  computes.  A task without one is one block.
- **compute**: a cube block takes one cycle per 16x16x16 fractal of its
  output tile times its k (padded to whole fractals; four for float32),
  plus one vector pass over the output tile after the last block (the
  epilogue: casts, bias, activation).  A vector task takes one cycle per
  `vector_bytes_per_cycle` of operands of each arithmetic operation.
- **bytes**: each block's loads and the task's stores are DMA transfers,
  each `dma_startup_seconds` plus its bytes at the core's DMA rate.  An L2
  (LRU over the boxes transferred) serves repeated reads; misses and every
  store also pass through HBM, one shared FIFO at `hbm_bytes_per_second`.
- **buffers**: a block's inputs (times 1 + prefetch, for the buffers loaded
  ahead) and the task's outputs must fit the core's buffers, else the build
  fails naming the buffer.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ptowsp.backends.aicore.model import DeviceModel
from ptowsp.errors import ScheduleError
from ptowsp.lower.ir import For, Stmt, bound_loops
from ptowsp.lower.kernel import Kernel
from ptowsp.runtime import Instance, TaskTable
from ptowsp.workloads import Category

Region = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class KernelShape:
    """What the cost model needs of one kernel, read once from its loop IR."""

    core: str  # "cube" or "vector"
    blocks: int  # streaming steps per task instance
    reduce_extent: int  # product of the reduction loops (k of a matmul)


def _stream_loop(stmt: Stmt, reduce_loops: set[str]) -> int:
    """Extent of the first reduction loop at the top of a task's body (not inside a spatial loop)."""
    if isinstance(stmt, For):
        return stmt.extent if stmt.var in reduce_loops else 0
    for child in stmt.children():  # blocks, allocations and guards
        if found := _stream_loop(child, reduce_loops):
            return found
    return 0


def kernel_shape(kernel: Kernel, category: Category, reduce_loops: Sequence[str], bound: str | None) -> KernelShape:
    loops = set(reduce_loops)
    extents = {var: extent for var, extent in bound_loops(kernel.body).items() if var in loops}
    core = bound or ("cube" if category is Category.COMPLEX_OUT_FUSABLE else "vector")
    return KernelShape(core, max(1, _stream_loop(kernel.body, loops)), math.prod(extents.values()))


def _box_elements(region: Region) -> int:
    return math.prod(max(0, stop - start) for start, stop in region)


def _kib(n: float) -> str:
    return f"{n / 1024:.1f} KiB"


class ModelCosts:
    """Stage times of every instance of a table on a device; memory state (L2, HBM queue) is per run."""

    def __init__(self, device: DeviceModel, table: TaskTable, shapes: Mapping[str, KernelShape],
                 itemsize: Mapping[str, int]):
        self.device = device
        self.schedulers = device.schedulers
        self.orchestrate_seconds = device.orchestrate_seconds
        self.schedule_seconds = device.schedule_seconds
        self.dispatch_seconds = device.dispatch_seconds
        self.completion_seconds = device.completion_seconds
        self.slots = device.task_slots
        self.instances = table.instances
        self.shapes = shapes
        self.itemsize = itemsize
        self.l2: OrderedDict[tuple, int] = OrderedDict()
        self.l2_held = 0
        self.hbm_free = 0.0  # when the HBM queue is next idle
        self.hbm_read = self.hbm_written = self.l2_hits = 0

    def _bytes(self, part: tuple[str, Region]) -> int:
        return _box_elements(part[1]) * self.itemsize[part[0]]

    def blocks(self, i: int) -> int:
        shape = self.shapes.get(self.instances[i].name)
        return 1 if shape is None else shape.blocks

    def _transfer(self, start: float, nbytes: int, through_hbm: bool) -> float:
        d = self.device
        begin = start + d.dma_startup_seconds
        end = begin + nbytes / d.dma_bytes_per_second
        if through_hbm:
            self.hbm_free = max(begin, self.hbm_free) + nbytes / d.hbm_bytes_per_second
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

    def load(self, i: int, block: int, now: float) -> float:
        inst, t = self.instances[i], now
        blocks = self.blocks(i)
        for part in inst.reads:
            nbytes = math.ceil(self._bytes(part) / blocks)
            hit = self._cached((part, block, blocks), nbytes)
            self.l2_hits += nbytes if hit else 0
            self.hbm_read += 0 if hit else nbytes
            t = self._transfer(t, nbytes, not hit)
        return t - now

    def store(self, i: int, now: float) -> float:
        t = now
        for part in self.instances[i].writes:
            nbytes = self._bytes(part)
            self._cached((part, 0, 1), nbytes)  # what a consumer reads whole next is in L2
            self.hbm_written += nbytes
            t = self._transfer(t, nbytes, True)
        return t - now

    def compute(self, i: int, block: int) -> float:
        inst, d = self.instances[i], self.device
        shape = self.shapes.get(inst.name)
        if shape is None:  # a host (opaque) task: one pass over its bytes
            return inst.bytes / d.dma_bytes_per_second
        written = inst.writes[0][0] if inst.writes else None
        lanes = d.vector_bytes_per_cycle // max(1, self.itemsize.get(written, 4))
        if shape.core != "cube" or not inst.writes:
            return inst.flops / shape.blocks / lanes / d.clock_hz
        # the cube: whole 16x16x16 fractals of (output tile) x (this block's k); then one vector
        # pass over the output tile for the epilogue (casts, bias, activation) after the last block
        outputs = _box_elements(inst.writes[0][1])
        f = d.cube_fractal
        k = max(1, shape.reduce_extent // shape.blocks)
        fractals = math.ceil(outputs / (f * f)) * math.ceil(k / f)
        rate = 1.0 if min(self.itemsize[t] for t, _ in inst.reads) <= 2 else d.cube_float32_share
        cycles = fractals * (f ** 3 / d.cube_macs_per_cycle) / rate
        if block == shape.blocks - 1:
            cycles += outputs / lanes
        return cycles / d.clock_hz

    def statistics(self) -> dict:
        return {"hbm_read_bytes": self.hbm_read, "hbm_written_bytes": self.hbm_written,
                "l2_hit_bytes": self.l2_hits}


def check_buffers(device: DeviceModel, instances: Sequence[Instance], shapes: Mapping[str, KernelShape],
                  itemsize: Mapping[str, int], prefetch: int) -> None:
    """Refuse, at build time, a task whose block does not fit its core's buffers (ScheduleError)."""
    seen: set[str] = set()
    for inst in instances:
        shape = shapes.get(inst.name)
        if shape is None or inst.name in seen:
            continue
        seen.add(inst.name)
        sizes = [(_box_elements(r) * itemsize[t]) for t, r in inst.reads]
        blocks_in = [math.ceil(s / shape.blocks) for s in sizes]
        out_elements = sum(_box_elements(r) for _, r in inst.writes)
        out = sum(_box_elements(r) * itemsize[t] for t, r in inst.writes)
        ahead = 1 + prefetch
        hint = "split the task's reduction loop (streamed in blocks) or make its tile smaller"
        if shape.core == "cube":
            needs = [("L0C", out_elements * device.accumulator_bytes, device.l0c_bytes,
                      "its output tile's accumulators"),
                     ("L0A/L0B", max(blocks_in, default=0), min(device.l0a_bytes, device.l0b_bytes),
                      "its largest input block"),
                     ("L1", ahead * sum(blocks_in), device.l1_bytes,
                      f"{ahead} input block(s) in flight (prefetch {prefetch})")]
        else:
            needs = [("UB", ahead * sum(blocks_in) + out, device.ub_bytes,
                      f"{ahead} input block(s) in flight (prefetch {prefetch}) and its outputs")]
        for buffer, need, capacity, what in needs:
            if need > capacity:
                raise ScheduleError(f"task {inst.name!r} needs {_kib(need)} of {buffer} for {what}, but a "
                                    f"{shape.core} core's {buffer} holds {_kib(capacity)}: {hint}")


def itemsizes(dtypes: Mapping[str, str]) -> dict[str, int]:
    return {name: np.dtype(dtype).itemsize for name, dtype in dtypes.items()}
