"""Fixed-length features of a lowered program: the input of the AutoScheduler's cost model.

Why from the loop IR and not from the schedule's knobs: a knob ("split j by
8") means different things in different tasks and workloads, while the
lowered loop nest says what the hardware will see (loop extents and kinds,
the bytes each loop level touches, how often data is reused, how wide the
vectors are), so one XGBoost model can rank candidates of every task of a
workload, and its training records transfer between workloads.

Memory model (a cache-miss estimate in the style of Halide's and Ansor's
features): the task grid loops are outermost, then each kernel's loops.  For
each access and loop level, the footprint is the cache lines the access
touches over that loop's iterations (affine indices give a span per
dimension; a non-affine one the product of its loops' extents, clipped to the
tensor).  Levels are the loops, plus one iteration of a loop whose body
holds several nests (so a row shared by a compute_at producer and its
consumer is seen as reused).  A level's working set sums, per buffer, the
largest footprint of its accesses under it (accesses of one buffer mostly
overlap), capped at the buffer's size.  Data for a cache of size S is fetched
once per execution of the outermost level whose working set fits S, so the
traffic into that cache is, per buffer, executions of that level x its
footprint there; a local buffer that fits S is fetched once (it is re-used
at the same addresses).  Quantities spanning orders of magnitude enter as
log2(1 + x).
"""

from __future__ import annotations

import math

import numpy as np

from ptowsp.lower import Allocate, Block, For, IfThen, Let, Program, Store
from ptowsp.lower.kernel import Kernel
from ptowsp.schedules.loopnest import PARALLEL, SERIAL, UNROLLED, VECTORIZED
from ptowsp.te import Expr, Op, walk
from ptowsp.te.affine import in_loops
from ptowsp.te.expr import UNARY_FLOAT_OPS

# A typical server core: private L1 data and L2, and a shared L3 (the model only needs the orders of magnitude).
L1_BYTES, L2_BYTES, L3_BYTES = 32 << 10, 1 << 20, 32 << 20
LINE_BYTES = 64

_KERNEL = {  # per kernel; combined over kernels by a work-weighted mean
    "log2_flops_per_instance": "arithmetic operations of one task instance",
    "log2_instances": "task instances (product of the grid extents)",
    "log2_instances_per_worker": "task instances per worker",
    "grid_idle_frac": "share of worker slots idle in the last round of instances",
    "log2_accesses": "element loads and stores of all instances",
    "log2_footprint": "distinct bytes (cache lines) the kernel touches",
    "log2_bytes_l2": "estimated bytes L1 fetches from L2",
    "log2_bytes_l3": "estimated bytes L2 fetches from L3",
    "log2_bytes_dram": "estimated bytes L3 fetches from memory",
    "log2_intensity_l2": "flops per byte fetched from L2 (signed log2)",
    "log2_intensity_dram": "flops per byte fetched from memory (signed log2)",
    "log2_reuse_l1": "accesses per distinct element at the outermost level fitting L1 (access-weighted)",
    "log2_reuse_l2": "the same at the outermost level fitting L2",
    "log2_ws_l1": "largest loop-level working set that fits L1",
    "log2_ws_l2": "largest loop-level working set that fits L2",
    "fit_depth_l1": "relative depth of the outermost level fitting L1 (0: whole kernel, 1: one statement)",
    "fit_depth_l2": "the same for L2",
    "vector_lanes": "lanes of the innermost loop where it is vectorized, else 0 (execution-weighted)",
    "vector_frac": "share of executions inside a vectorized loop",
    "vector_regs": "vector registers per vector statement (lanes x itemsize / vector_bytes)",
    "log2_unroll": "product of unrolled extents around a statement",
    "log2_inner_serial": "extent of the innermost serial loop (loop overhead)",
    "loop_depth": "loops around a statement, grid included",
    "loads_per_stmt": "loads per executed statement",
    "ops_per_stmt": "arithmetic operations per executed statement",
    "contiguous_frac": "accesses with stride 1 on the innermost loop",
    "strided_frac": "accesses with another stride, or a non-affine index, on the innermost loop",
    "invariant_frac": "accesses not moving with the innermost loop",
    "local_frac": "accesses to local (allocated) buffers",
    "carried_frac": "executions of accumulations carried by the innermost serial loop",
    "log2_chains": "independent accumulators of a carried accumulation (its unrolled/vector loops)",
    "guarded_frac": "executions under an IfThen guard",
    "transcendental_frac": "exp/log/sqrt/rsqrt/tanh/sigmoid/erf/pow per flop",
    "div_frac": "divisions per flop",
    "log2_local_bytes": "bytes of local allocations",
    "log2_code_size": "statements after unrolling",
}
_PROGRAM = {
    "n_kernels": "kernels that run",
    "n_host_tasks": "opaque tasks that run on the host",
    "log2_total_flops": "arithmetic operations of the program",
    "log2_total_instances": "task instances of the program",
    "log2_total_bytes_l2": "estimated bytes from L2, all kernels",
    "log2_total_bytes_dram": "estimated bytes from memory, all kernels",
    "log2_program_intensity": "total flops per total byte from memory (signed log2)",
    "max_log2_bytes_dram": "largest estimated memory traffic of one kernel",
    "max_grid_idle_frac": "worst grid_idle_frac of a kernel",
    "max_work_share": "share of the work in the largest kernel",
    "serial_work_frac": "share of the work in kernels with fewer instances than workers",
    # the runtime's knobs are not in the loop IR: without them, candidates differing only there look alike
    "prefetch_depth": "tasks whose inputs are loaded ahead (Schedule.prefetch)",
    "dispatch_round_robin": "1 when tasks are dispatched round robin",
    "dispatch_locality": "1 when tasks are dispatched by locality (work stealing, the default, is neither)",
}
FEATURE_DOCS: dict[str, str] = {**_KERNEL, **_PROGRAM}
FEATURE_NAMES: tuple[str, ...] = tuple(FEATURE_DOCS)
FEATURE_VERSION = 2  # bump when a feature's meaning changes: stored vectors of another version are not reused
FEATURE_SET = f"v{FEATURE_VERSION}:{len(FEATURE_NAMES)}"  # recorded beside stored vectors (records.py)

_CACHES = (L1_BYTES, L2_BYTES, L3_BYTES)
_NOT_ARITHMETIC = frozenset({Op.CONST, Op.VAR, Op.RVAR, Op.LOAD, Op.CAST})  # as ptowsp.lower.access counts flops
_TRANSCENDENTAL = UNARY_FLOAT_OPS | {Op.POW}


def _log(x: float) -> float:
    return math.log2(1.0 + x)


def _linear(e: Expr) -> dict[str, int] | None:
    """An index as {loop: coefficient} (constants dropped), or None when a loop enters non-linearly
    or a part is neither a loop nor a constant (a gathered index, a symbolic size)."""
    form = in_loops(e)
    return None if form is None else form.coefs


def _loop_names(e: Expr) -> tuple[str, ...]:
    return tuple(dict.fromkeys(n.arg[0] for n in walk(e) if n.op in (Op.VAR, Op.RVAR)))


def _branches(s) -> bool:
    """Whether a loop body holds several statements (under its allocations and guards)."""
    while isinstance(s, (Allocate, IfThen)):
        s = s.body if isinstance(s, Allocate) else s.then
    return isinstance(s, Block)


def _scan(e: Expr, loads: list[Expr], tally: list[int]) -> None:
    """Collect the loads of a value and count its operations: [all, transcendental, divisions]."""
    if e.op is Op.LOAD:
        loads.append(e)
        return
    if e.op not in _NOT_ARITHMETIC:
        tally[0] += 1
        tally[1] += e.op in _TRANSCENDENTAL
        tally[2] += e.op is Op.DIV
    for s in e.src:
        _scan(s, loads, tally)


class _KernelScan:
    """One walk over a kernel's loop nest, accumulating what the features need."""

    def __init__(self, kernel: Kernel, vector_bytes: int):
        self.vector_bytes = vector_bytes
        self.trips: list[int] = []  # per node (loop or statement): how often it runs as a whole
        self.ws: list[dict[str, int]] = []  # per node: buffer -> footprint bytes (the largest of its accesses)
        self.caps: dict[str, int] = {}  # per buffer: its size in whole cache lines
        self.local: dict[str, bool] = {}  # per buffer: allocated by the kernel (not a workload tensor)
        self.groups: list[tuple[str, tuple[int, ...], list[int], list[int], int]] = []
        self.sums: dict[str, float] = dict.fromkeys(_KERNEL, 0.0)
        self.execs = self.accesses = self.flops = self.carried = self.local_bytes = 0
        self.lets: list[Expr] = []  # the values of the lets around the statement being visited
        self.linear: dict[int, tuple] = {}  # id(index expr) -> (coefs or None, loop names); lives for one kernel
        # the root level is the whole kernel over all instances; the grid loops are its outermost loops
        loops, levels, trips = [], [(self.node(1), 0)], 1
        for name, extent in kernel.grid:
            levels.append((self.node(trips), len(loops)))
            loops.append((name, extent, PARALLEL))
            trips *= extent
        self.instances = trips
        if kernel.grid and _branches(kernel.body):
            levels.append((self.node(trips), len(loops)))  # one instance
        self.visit(kernel.body, loops, levels, 0, trips)

    def node(self, trips: int) -> int:
        self.trips.append(trips)
        self.ws.append({})
        return len(self.trips) - 1

    def visit(self, s, loops: list, levels: list[tuple[int, int]], guards: int, trips: int) -> None:
        """loops: (name, extent, kind) around s, outermost first; levels: (node, first loop it spans)."""
        if isinstance(s, For):
            inner = [*loops, (s.var, s.extent, s.kind)]
            levels = [*levels, (self.node(trips), len(loops))]
            if _branches(s.body):  # one iteration of a body holding several nests is a level of its own
                levels.append((self.node(trips * s.extent), len(inner)))
            self.visit(s.body, inner, levels, guards, trips * s.extent)
        elif isinstance(s, Store):
            self.statement(loops, levels, guards, trips, (*self.lets, s.value), s)
        elif isinstance(s, Let):  # a part of the stores below it, computed once
            self.lets.append(s.value)
            self.visit(s.body, loops, levels, guards, trips)
            self.lets.pop()
        elif isinstance(s, IfThen):
            self.statement(loops, levels, guards, trips, (s.cond,), None)
            self.visit(s.then, loops, levels, guards + 1, trips)
        elif isinstance(s, Allocate):
            b = s.buffer
            self.local_bytes += math.prod(b.shape) * np.dtype(b.dtype).itemsize
            self.visit(s.body, loops, levels, guards, trips)
        elif isinstance(s, Block):
            for c in s.stmts:
                self.visit(c, loops, levels, guards, trips)

    def pattern(self, index: Expr) -> tuple:
        key = id(index)
        if key not in self.linear:
            self.linear[key] = (_linear(index), _loop_names(index), index)  # keeps index alive: ids stay unique
        return self.linear[key][:2]

    def statement(self, loops: list, levels: list, guards: int, trips: int, exprs, store: Store | None) -> None:
        loads: list[Expr] = []
        tally = [0, 0, 0]
        for e in exprs:
            _scan(e, loads, tally)
        if store is None and not loads:
            return
        k = self.sums
        self.execs += trips
        if store is not None:  # a guard's operations are not flops (as in ptowsp.lower.access)
            self.flops += trips * tally[0]
        kinds = [kind for _, _, kind in loops]
        lanes = loops[-1][1] if kinds and kinds[-1] == VECTORIZED else 0
        serial = [i for i, kind in enumerate(kinds) if kind == SERIAL]  # GPU thread axes run in parallel
        unroll = math.prod(loops[i][1] for i, kind in enumerate(kinds) if kind == UNROLLED)
        k["vector_lanes"] += trips * lanes
        k["vector_frac"] += trips * (VECTORIZED in kinds)
        if lanes and store is not None:
            k["vector_regs"] += trips * lanes * np.dtype(store.buffer.dtype).itemsize / self.vector_bytes
        k["log2_unroll"] += trips * math.log2(unroll)
        k["log2_inner_serial"] += trips * (math.log2(loops[serial[-1]][1]) if serial else 0.0)
        k["loop_depth"] += trips * len(loops)
        k["loads_per_stmt"] += trips * len(loads)
        k["ops_per_stmt"] += trips * tally[0]
        k["transcendental_frac"] += trips * tally[1]
        k["div_frac"] += trips * tally[2]
        k["guarded_frac"] += trips * (guards > 0)
        k["log2_code_size"] += unroll
        pos = {name: p for p, (name, _, _) in enumerate(loops)}  # innermost binding of each name
        inner = loops[-1][0] if loops else None
        stmt_node = self.node(trips)
        seen: dict[tuple, None] = {}
        accesses = [(ld.arg, ld.src) for ld in loads] + ([(store.buffer, store.indices)] if store else [])
        strides = []
        for buffer, indices in accesses:
            dims = [self.pattern(i) for i in indices]
            key = (buffer.name, indices)  # a read-modify-write touches its element once
            strides.append(self.stride(dims, buffer.shape, inner))
            self.accesses += trips
            k["local_frac"] += trips * (buffer.scope != "global")
            if key not in seen:
                seen[key] = None
                self.footprints(buffer, dims, loops, pos, [*levels, (stmt_node, len(loops))], trips)
        for stride in strides:
            cls = "invariant_frac" if stride == 0 else "contiguous_frac" if stride == 1 else "strided_frac"
            k[cls] += trips
        if store is not None and serial:
            self.accumulation(store, loads, loops, serial[-1], pos, trips)

    @staticmethod
    def stride(dims: list, shape: tuple[int, ...], inner: str | None) -> int | None:
        """Elements the access moves per step of the innermost loop (None: not affine in it)."""
        if inner is None:
            return 0
        total, scale = 0, 1
        for (coefs, names), size in zip(reversed(dims), reversed(shape), strict=True):
            if coefs is None:
                if inner in names:
                    return None
            else:
                total += coefs.get(inner, 0) * scale
            scale *= size
        return abs(total)

    def accumulation(self, store: Store, loads: list[Expr], loops: list, q: int, pos: dict, trips: int) -> None:
        """An update reading its own target that the innermost serial loop does not move: a dependence chain."""
        reads_target = any(ld.arg == store.buffer and all(a.same_as(b) for a, b in zip(ld.src, store.indices,
                                                                                          strict=True))
                           for ld in loads)
        dims = [self.pattern(i) for i in store.indices]
        if not reads_target or self.stride(dims, store.buffer.shape, loops[q][0]) != 0:
            return
        used = {name for _, names in dims for name in names}
        chains = math.prod(extent for name, extent, _ in loops[q + 1:] if name in used and pos[name] > q)
        self.carried += trips
        self.sums["log2_chains"] += trips * math.log2(chains)

    def footprints(self, buffer, dims: list, loops: list, pos: dict, levels: list, trips: int) -> None:
        """Footprint (bytes of whole lines) and distinct elements of one access at every level."""
        shape = buffer.shape or (1,)
        dims = dims or [({}, ())]
        itemsize = np.dtype(buffer.dtype).itemsize
        if buffer.name not in self.caps:
            self.caps[buffer.name] = math.prod(shape[:-1]) * math.ceil(shape[-1] * itemsize / LINE_BYTES) * LINE_BYTES
            self.local[buffer.name] = buffer.scope != "global"
        span, count = [1] * len(dims), [1] * len(dims)
        at_depth = [(0, 0)] * (len(loops) + 1)  # over the loops from position p inwards
        for p in range(len(loops), -1, -1):
            if p < len(loops) and pos[loops[p][0]] == p:
                name, extent, _ = loops[p]
                for d, (coefs, names) in enumerate(dims):
                    if coefs is None and name in names:  # non-affine: as many places as iterations
                        span[d] *= extent
                        count[d] *= extent
                    elif coefs is not None and coefs.get(name, 0):
                        span[d] += abs(coefs[name]) * (extent - 1)
                        count[d] *= extent
            distinct = [min(span[d], count[d], shape[d]) for d in range(len(dims))]
            last = min(span[-1], shape[-1])  # contiguous extent of the last dimension, in elements
            lines = math.prod(distinct[:-1]) * max(1, min(distinct[-1], math.ceil(last * itemsize / LINE_BYTES)))
            at_depth[p] = (lines * LINE_BYTES, math.prod(distinct))
        nodes = tuple(n for n, _ in levels)
        fps, elems = [at_depth[p][0] for _, p in levels], [at_depth[p][1] for _, p in levels]
        for n, fp in zip(nodes, fps, strict=True):
            # several accesses to one buffer (loops of different names over the same data, stencil
            # neighbours) mostly overlap: the largest stands for all, capped at the buffer's size
            self.ws[n][buffer.name] = min(self.caps[buffer.name], max(self.ws[n].get(buffer.name, 0), fp))
        self.groups.append((buffer.name, nodes, fps, elems, trips))

    def features(self, workers: int) -> tuple[dict[str, float], float]:
        """Per-kernel features and the kernel's weight (its dynamic work)."""
        k, execs = dict(self.sums), max(self.execs, 1)  # a copy: a cached walk is asked again
        for name in ("vector_lanes", "vector_frac", "vector_regs", "log2_unroll", "log2_inner_serial", "loop_depth",
                     "loads_per_stmt", "ops_per_stmt", "guarded_frac"):
            k[name] /= execs
        ops = max(self.flops, 1)
        k["transcendental_frac"] /= ops
        k["div_frac"] /= ops
        for name in ("contiguous_frac", "strided_frac", "invariant_frac", "local_frac"):
            k[name] /= max(self.accesses, 1)
        k["log2_chains"] /= max(self.carried, 1)
        k["carried_frac"] = self.carried / execs
        k["log2_code_size"] = _log(k["log2_code_size"])
        k["log2_local_bytes"] = _log(self.local_bytes)
        ws = [sum(node.values()) for node in self.ws]
        k["log2_footprint"] = _log(ws[0])
        traffic = []
        for level, cache in enumerate(_CACHES):
            moved: dict[tuple[int, str], int] = {}
            reuse = depth = weight = 0.0
            for buffer, nodes, _footprints, elems, trips in self.groups:
                p = next(p for p, n in enumerate(nodes) if ws[n] <= cache or p == len(nodes) - 1)
                reuse += trips * math.log2(max(trips / self.trips[nodes[p]] / elems[p], 1.0))
                # a local buffer that fits sits at the same addresses every time: it stays cached
                n = nodes[0] if self.local[buffer] and self.caps[buffer] <= cache else nodes[p]
                moved[n, buffer] = self.trips[n] * self.ws[n][buffer]
                depth += trips * p / max(len(nodes) - 1, 1)
                weight += trips
            traffic.append(sum(moved.values()))
            if level < 2:
                tag = ("l1", "l2")[level]
                k[f"log2_reuse_{tag}"] = reuse / max(weight, 1)
                k[f"fit_depth_{tag}"] = depth / max(weight, 1)
                k[f"log2_ws_{tag}"] = _log(max((w for w in ws if w <= cache), default=0))
        k["log2_bytes_l2"], k["log2_bytes_l3"], k["log2_bytes_dram"] = (_log(t) for t in traffic)
        k["log2_intensity_l2"] = math.log2((self.flops + 1) / (traffic[0] + 1))
        k["log2_intensity_dram"] = math.log2((self.flops + 1) / (traffic[2] + 1))
        k["log2_flops_per_instance"] = _log(self.flops / max(self.instances, 1))
        k["log2_instances"] = math.log2(self.instances)
        k["log2_instances_per_worker"] = _log(self.instances / workers)
        k["grid_idle_frac"] = 1.0 - self.instances / (math.ceil(self.instances / workers) * workers)
        k["log2_accesses"] = _log(self.accesses)
        self.l2, self.dram = traffic[0], traffic[2]
        return k, float(self.flops + self.accesses)


def program_features(program: Program, *, workers: int = 2, vector_bytes: int = 32,
                     scans: dict[int, tuple[Kernel, _KernelScan]] | None = None) -> np.ndarray:
    """The feature vector of a lowered program (float64, one entry per FEATURE_NAMES); deterministic.

    scans: a cache of kernel walks by kernel identity (each entry holds its kernel, so the identity
    stays unique), for programs whose kernels come from one `lower_program(kernels=)` cache.
    """
    cache: dict[int, tuple[Kernel, _KernelScan]] = {} if scans is None else scans
    for kernel in program.kernels.values():
        if id(kernel) not in cache:
            cache[id(kernel)] = (kernel, _KernelScan(kernel, vector_bytes))
    scans = [cache[id(program.kernels[name])][1] for name in program.order if name in program.kernels]
    out = dict.fromkeys(FEATURE_NAMES, 0.0)
    per_kernel = [scan.features(workers) for scan in scans]
    total = sum(w for _, w in per_kernel)
    for feats, w in per_kernel:
        share = w / total if total else 1.0 / len(per_kernel)
        for name in _KERNEL:
            out[name] += share * feats[name]
    flops = sum(scan.flops for scan in scans)
    dram = sum(scan.dram for scan in scans)
    out["n_kernels"] = float(len(scans))
    out["n_host_tasks"] = float(sum(name not in program.kernels for name in program.order))
    out["log2_total_flops"] = _log(flops)
    out["log2_total_instances"] = _log(sum(scan.instances for scan in scans))
    out["log2_total_bytes_l2"] = _log(sum(scan.l2 for scan in scans))
    out["log2_total_bytes_dram"] = _log(dram)
    out["log2_program_intensity"] = math.log2((flops + 1) / (dram + 1))
    if per_kernel:
        out["max_log2_bytes_dram"] = max(f["log2_bytes_dram"] for f, _ in per_kernel)
        out["max_grid_idle_frac"] = max(f["grid_idle_frac"] for f, _ in per_kernel)
        out["max_work_share"] = max(w for _, w in per_kernel) / total if total else 1.0
        serial = sum(w for scan, (_, w) in zip(scans, per_kernel, strict=True) if scan.instances < workers)
        out["serial_work_frac"] = serial / total if total else 0.0
    policy = program.schedule.dispatch_policy.policy
    out["prefetch_depth"] = float(program.schedule.prefetch_depth)
    out["dispatch_round_robin"] = float(policy == "round_robin")
    out["dispatch_locality"] = float(policy == "locality")
    return np.array([out[name] for name in FEATURE_NAMES], dtype=np.float64)
