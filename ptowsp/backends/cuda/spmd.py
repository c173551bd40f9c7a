"""GPU lowering: a kernel's loop IR rewritten as the program every CUDA thread runs (SPMD).

The loop IR is sequential; a CUDA launch runs one copy of the kernel per
thread of a grid of blocks.  The rewrite makes the two agree:

- a loop bound to a thread axis (`bind(task, loop, "threadIdx.x")`) stops
  being a loop: its variable becomes the axis register, read as the VAR
  named `threadIdx.x` (`blockIdx.x`, ...).  The launch's extent on an axis is
  the largest loop bound to it; a smaller loop runs under `axis < extent`;
- a `shared` buffer belongs to the block.  Its fill (the copy a cache_read
  stages, placement.py) is shared out among all threads of the block, TVM's
  cooperative fetching: the copy's iterations are numbered, thread t takes
  t, t + T, t + 2T, ..., and a barrier follows before anyone reads it.
  A second barrier after the readers keeps the next fill (the next
  iteration of the anchor loop) from overwriting what a slow thread still
  reads;
- a store to global or shared memory outside a loop bound to an axis the
  launch uses runs on index 0 of that axis only, so no two threads repeat a
  read-modify-write of the same element;
- vectorized loops run as serial loops (a thread has no SIMD lanes);
- a warp-level intrinsic call (mma.py: `mma.sync` for `gemm_f16`) is carried out by the 32
  lanes of a warp together: the launch has 32 threads on `threadIdx.x`, which no loop of the
  kernel may bind, the call runs where every lane of the warp reaches it with the same operands,
  and those live in global or shared memory.  The loops it stands for (what the host emulator
  runs) run on lane 0, as any store outside the lanes' loops.

Every thread must reach a barrier: a shared buffer under a condition that
depends on the thread (a thread loop smaller than the launch, a guard of a
non-dividing split over a thread loop) is refused with ScheduleError, as is
shared memory over the block's limit, a thread axis bound twice on one path,
or a launch over CUDA's limits.  Registers and local memory (`local`, `ub`
scopes and the accumulators) stay per thread.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np

from ptowsp.backends.cuda.accumulators import hold_accumulators
from ptowsp.backends.cuda.mma import WARP, is_warp_call
from ptowsp.errors import ScheduleError
from ptowsp.lower import Kernel
from ptowsp.lower.ir import GLOBAL, SHARED, Allocate, Barrier, Block, Buffer, For, IfThen, Let, Stmt, Store, \
    Tensorized, block, map_exprs, stmt_exprs, walk_stmts
from ptowsp.schedules.loopnest import MAX_THREADS_PER_BLOCK, SERIAL, VECTORIZED
from ptowsp.schedules.steps import THREAD_AXES
from ptowsp.te import Expr, Op, const, substitute, walk

BLOCK_AXES = THREAD_AXES[:3]
LANE_AXES = THREAD_AXES[3:]
MAX_STATIC_SHARED_BYTES = 48 * 1024  # what a block may declare statically on every CUDA GPU
_MAX_BLOCKS = {"blockIdx.x": 2**31 - 1, "blockIdx.y": 65535, "blockIdx.z": 65535}


def axis_var(axis: str, extent: int) -> Expr:
    """The register of a thread axis, as an int64 loop variable named after it."""
    return Expr(Op.VAR, "int64", (), (axis, extent))


@dataclass(frozen=True)
class GpuKernel:
    """A kernel as one CUDA thread runs it, with the launch shape it needs."""

    name: str
    grid: tuple[tuple[str, int], ...]  # the task grid: one launch per point, coordinates as arguments
    inputs: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    body: Stmt
    blocks: tuple[int, int, int]
    threads: tuple[int, int, int]
    shared: tuple[Buffer, ...]  # one static array per shared buffer name
    sizes: tuple[str, ...] = ()  # symbolic sizes: none yet on this target

    @property
    def shared_bytes(self) -> int:
        return sum(math.prod(b.shape) * np.dtype(b.dtype).itemsize for b in self.shared)


def _launch_extents(kernel: Kernel) -> dict[str, int]:
    """The launch's extent on each axis: the largest loop bound to it (a path binds an axis once)."""
    extents: dict[str, int] = {}

    def visit(s: Stmt, bound: dict[str, str]) -> None:
        if isinstance(s, For) and s.kind in THREAD_AXES:
            if s.kind in bound:
                raise ScheduleError(f"task {kernel.name!r}: loop {s.var} is bound to {s.kind} inside loop "
                                    f"{bound[s.kind]}, which is bound to it too; bind an axis once per loop nest")
            extents[s.kind] = max(s.extent, extents.get(s.kind, 1))
            bound = {**bound, s.kind: s.var}
        for c in s.children():
            visit(c, bound)

    visit(kernel.body, {})
    calls = [n for n in walk_stmts(kernel.body) if is_warp_call(n)]
    if calls:
        if "threadIdx.x" in extents:
            raise ScheduleError(f"task {kernel.name!r}: {calls[0].intrinsic} is a warp-level call whose {WARP} lanes "
                                "are threadIdx.x, and a loop of the kernel binds threadIdx.x too; bind warps to "
                                "threadIdx.y and threadIdx.z")
        extents["threadIdx.x"] = WARP
    threads = math.prod(extents.get(a, 1) for a in LANE_AXES)
    if threads > MAX_THREADS_PER_BLOCK:
        raise ScheduleError(f"task {kernel.name!r}: {threads} threads per block exceed the limit of "
                            f"{MAX_THREADS_PER_BLOCK}")
    for axis, limit in _MAX_BLOCKS.items():
        if extents.get(axis, 1) > limit:
            raise ScheduleError(f"task {kernel.name!r}: {extents[axis]} blocks on {axis} exceed CUDA's {limit}")
    return extents


def _thread_dependent(e: Expr) -> bool:
    return any(n.op is Op.VAR and n.arg[0] in LANE_AXES for n in walk(e))


def _rename_var(s: Stmt, name: str, to: Expr) -> Stmt:
    return map_exprs(s, lambda e: substitute(e, lambda n: to if n.op is Op.VAR and n.arg[0] == name else None))


class _Rewrite:
    def __init__(self, kernel: Kernel, extents: dict[str, int]):
        self.kernel, self.extents = kernel, extents
        self.threads = [(a, extents[a]) for a in LANE_AXES if extents.get(a, 1) > 1]
        self.shared: dict[str, Buffer] = {}

    def stmt(self, s: Stmt, bound: frozenset[str], divergent: str | None) -> Stmt:
        """`bound`: axes whose loops enclose s; `divergent`: why threads of a block may disagree here."""
        if isinstance(s, For) and s.kind in THREAD_AXES:
            launch = self.extents[s.kind]
            axis = axis_var(s.kind, launch)
            body = _rename_var(s.body, s.var, axis)
            inner_divergent = divergent
            if s.extent < launch and s.kind in LANE_AXES:
                inner_divergent = divergent or f"loop {s.var} runs on {s.extent} of the {launch} threads of {s.kind}"
            body = self.stmt(body, bound | {s.kind}, inner_divergent)
            return body if s.extent == launch else IfThen(axis < s.extent, body)
        if isinstance(s, For):
            kind = SERIAL if s.kind == VECTORIZED else s.kind
            return For(s.var, s.extent, kind, self.stmt(s.body, bound, divergent))
        if isinstance(s, IfThen):
            why = divergent or (f"the condition {s.cond} depends on the thread" if _thread_dependent(s.cond) else None)
            return IfThen(s.cond, self.stmt(s.then, bound, why))
        if isinstance(s, Block):
            return Block(tuple(self.stmt(c, bound, divergent) for c in s.stmts))
        if isinstance(s, Allocate) and s.buffer.scope == SHARED:
            return self.shared_buffer(s, bound, divergent)
        if isinstance(s, Allocate):
            return Allocate(s.buffer, self.stmt(s.body, bound, divergent))
        if isinstance(s, Store) and s.buffer.scope in (GLOBAL, SHARED):
            return self.single_writer(s, bound)
        if is_warp_call(s):
            return self.warp_call(s, bound, divergent)
        return s.with_children([self.stmt(c, bound, divergent) for c in s.children()])  # lets, local stores

    def warp_call(self, s: Tensorized, bound: frozenset[str], divergent: str | None) -> Stmt:
        """A call every lane of a warp reaches with the same operands; one warp per call."""
        if divergent is not None:
            raise ScheduleError(f"task {self.kernel.name!r}: the warp-level call {s.intrinsic} runs where threads "
                                f"disagree ({divergent}); all {WARP} lanes of a warp must reach it: use split "
                                "factors that divide the extents around it")
        for o in s.operands:
            if o.buffer.scope not in (GLOBAL, SHARED):
                raise ScheduleError(f"task {self.kernel.name!r}: {s.intrinsic} reads and writes its operands "
                                    f"across a warp, but {o.buffer.name} is {o.buffer.scope} memory, which each "
                                    "thread holds alone; keep it in global or shared memory (an epilogue fused "
                                    "into the task keeps its tile in local memory: leave it a kernel of its own)")
        call = replace(s, body=self.stmt(s.body, bound, divergent))  # what the emulator runs: lane 0
        return self.single_writer(call, bound | {"threadIdx.x"})

    def single_writer(self, s: Stmt, bound: frozenset[str]) -> Stmt:
        """A store outside some axis' loops runs on index 0 of that axis only."""
        missing = [a for a, n in self.extents.items() if n > 1 and a not in bound]
        if not missing:
            return s
        cond = axis_var(missing[0], self.extents[missing[0]]) == 0
        for a in missing[1:]:
            cond = cond & (axis_var(a, self.extents[a]) == 0)
        return IfThen(cond, s)

    def shared_buffer(self, s: Allocate, bound: frozenset[str], divergent: str | None) -> Stmt:
        buf = s.buffer
        if divergent is not None:
            raise ScheduleError(
                f"task {self.kernel.name!r}: shared buffer {buf.name} is filled where threads of a block "
                f"disagree ({divergent}); every thread must reach its barrier: bind loops that cover the "
                "whole block and use split factors that divide the extents around it")
        known = self.shared.get(buf.name)
        if known is None or math.prod(buf.shape) > math.prod(known.shape):
            self.shared[buf.name] = buf
        stmts = list(s.body.stmts) if isinstance(s.body, Block) else [s.body]
        fill = _fill_nest(stmts[0], buf)
        if fill is None:  # a cache_write buffer: each thread writes and reads back its own elements
            return Allocate(buf, self.stmt(s.body, bound, divergent))
        cooperative = self.cooperative(*fill)
        rest = self.stmt(block(*stmts[1:]), bound, divergent) if stmts[1:] else Block()
        if _starts_with_fill(rest):  # the next buffer's fill reads only global memory: one barrier after both
            return Allocate(buf, block(cooperative, rest, *(() if _ends_with_barrier(rest) else (Barrier(),))))
        return Allocate(buf, block(cooperative, Barrier(), rest, *(() if _ends_with_barrier(rest) else (Barrier(),))))

    def cooperative(self, loops: list[For], store: Store) -> Stmt:
        """The fill's iterations dealt out to the block's threads in turn: thread t copies elements
        t, t + T, ... (neighbouring threads read neighbouring elements and write neighbouring banks;
        runs of 16 bytes per thread were tried and measured slower: docs/performance.md and its git
        history)."""
        total = math.prod(lp.extent for lp in loops)
        count = math.prod(n for _, n in self.threads)
        linear: Expr = const(0, "int64")
        for position, (axis, n) in enumerate(reversed(self.threads)):  # threadIdx.x varies fastest
            linear = axis_var(axis, n) if position == 0 else linear * n + axis_var(axis, n)
        chunk = f"{store.buffer.name}.chunk"
        element = Expr(Op.VAR, "int64", (), (chunk, -(-total // count))) * count + linear
        values, stride = {}, 1
        for lp in reversed(loops):
            values[lp.var] = (element // stride) % lp.extent if stride > 1 else element % lp.extent
            stride *= lp.extent
        body: Stmt = map_exprs(store, lambda e: substitute(
            e, lambda n: values.get(n.arg[0]) if n.op is Op.VAR else None))
        if total % count:
            body = IfThen(element < total, body)
        return For(chunk, -(-total // count), SERIAL, body)


def _starts_with_fill(s: Stmt) -> bool:
    """s is a shared buffer whose cooperative fill comes first (this module's own output shape)."""
    return (isinstance(s, Allocate) and s.buffer.scope == SHARED and isinstance(s.body, Block)
            and isinstance(s.body.stmts[0], For) and s.body.stmts[0].var == f"{s.buffer.name}.chunk")


def _ends_with_barrier(s: Stmt) -> bool:
    while isinstance(s, (Allocate, Block)) and (not isinstance(s, Block) or s.stmts):
        s = s.body if isinstance(s, Allocate) else s.stmts[-1]
    return isinstance(s, Barrier)


def _fill_nest(s: Stmt, buf: Buffer) -> tuple[list[For], Store] | None:
    """(loops, store) when s is a perfect nest of loops storing into `buf` (a cache_read fill)."""
    loops: list[For] = []
    while isinstance(s, For) and s.kind not in THREAD_AXES:
        loops.append(s)
        s = s.body
    if isinstance(s, Store) and s.buffer.name == buf.name and not any(
            n.op is Op.LOAD and n.arg.scope != GLOBAL for n in walk(s.value)):
        return loops, s
    return None


def _private_dims(body: Stmt) -> dict[str, set[int]]:
    """Per local buffer, the dimensions every access indexes by one and the same thread axis."""
    indices: dict[str, list[tuple[Expr, ...]]] = defaultdict(list)
    local: set[str] = set()
    for st in walk_stmts(body):
        if isinstance(st, Allocate) and st.buffer.scope != SHARED:
            local.add(st.buffer.name)
        if isinstance(st, Store):
            indices[st.buffer.name].append(st.indices)
        for e in stmt_exprs(st):
            for n in walk(e):
                if n.op is Op.LOAD:
                    indices[n.arg.name].append(n.src)

    def axis(e: Expr) -> str | None:
        return e.arg[0] if e.op is Op.VAR and e.arg[0] in THREAD_AXES else None

    owned = {}
    for name in local:
        seen = indices[name]
        owned[name] = {d for d in range(len(seen[0])) if axis(seen[0][d]) is not None
                       and all(axis(i[d]) == axis(seen[0][d]) for i in seen)} if seen else set()
    return {name: dims for name, dims in owned.items() if dims}


def _privatize(body: Stmt) -> Stmt:
    """A local buffer keeps one index along a dimension a thread axis alone indexes: each thread
    only ever touches its own, so accumulators over a block's tile shrink to the thread's part."""
    dims = _private_dims(body)
    if not dims:
        return body
    zero = const(0, "int64")

    def narrow(buf: Buffer) -> Buffer:
        return Buffer(buf.name, tuple(1 if d in dims[buf.name] else n for d, n in enumerate(buf.shape)),
                      buf.dtype, buf.scope)

    def at(name: str, index: tuple[Expr, ...]) -> tuple[Expr, ...]:
        return tuple(zero if d in dims[name] else i for d, i in enumerate(index))

    def expr(e: Expr) -> Expr:
        return substitute(e, lambda n: Expr(Op.LOAD, n.dtype, at(n.arg.name, n.src), narrow(n.arg))
                          if n.op is Op.LOAD and n.arg.name in dims else None)

    def visit(st: Stmt) -> Stmt:
        if isinstance(st, Store):
            private = st.buffer.name in dims
            return Store(narrow(st.buffer) if private else st.buffer,
                         at(st.buffer.name, st.indices) if private else tuple(map(expr, st.indices)), expr(st.value))
        if isinstance(st, IfThen):
            return IfThen(expr(st.cond), visit(st.then))
        if isinstance(st, Let):
            return Let(st.var, expr(st.value), visit(st.body))
        if isinstance(st, Allocate) and st.buffer.name in dims:
            return Allocate(narrow(st.buffer), visit(st.body))
        return st.with_children([visit(c) for c in st.children()])

    return visit(body)


def to_spmd(kernel: Kernel, max_shared_bytes: int = MAX_STATIC_SHARED_BYTES) -> GpuKernel:
    """The kernel as one thread runs it, with its launch shape; ScheduleError for what a GPU cannot run."""
    extents = _launch_extents(kernel)
    rewrite = _Rewrite(kernel, extents)
    body = hold_accumulators(_privatize(rewrite.stmt(kernel.body, frozenset(), None)))
    gpu = GpuKernel(kernel.name, kernel.grid, kernel.inputs, kernel.outputs, body,
                    tuple(extents.get(a, 1) for a in BLOCK_AXES), tuple(extents.get(a, 1) for a in LANE_AXES),
                    tuple(rewrite.shared.values()))
    if gpu.shared_bytes > max_shared_bytes:
        listed = ", ".join(f"{b.name} {list(b.shape)} {b.dtype}" for b in gpu.shared)
        raise ScheduleError(f"task {kernel.name!r}: {gpu.shared_bytes} bytes of shared memory ({listed}) exceed "
                            f"the {max_shared_bytes} bytes a block may have; cache smaller tiles")
    return gpu
