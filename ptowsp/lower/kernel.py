"""Lower one compute task and its loop nest to a kernel: loops, guards, stores.

The pipeline is `PASSES`, run in order by `lower_task` (the IR verified between passes with
PTOWSP_VERIFY=1: verify.py).  The first pass is `loops.py`'s `TaskLowering`: producers inlined
(compute_inline) and simplified, the loops' axis values from their split and fuse relations,
reductions as init / update / epilogue, reductions inside expressions hoisted into scalar
loops; a scan's in two parts (scan.py).  The passes after it, one per line:

{passes}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ptowsp.lower.cse import bind_common
from ptowsp.lower.gathers import clamp_gathers
from ptowsp.lower.ir import Buffer, Stmt, stmt_exprs, walk_stmts
from ptowsp.lower.layouts import in_stored_layouts, stored_buffer
from ptowsp.lower.axes import buffer_of
from ptowsp.lower.loops import TaskLowering
from ptowsp.lower.partition import partition_loops
from ptowsp.lower.prefetching import place_prefetches
from ptowsp.lower.producers import place
from ptowsp.lower.scan import lower_scan
from ptowsp.lower.simplify import simplify
from ptowsp.lower.tensorize import tensorize
from ptowsp.lower.tidy import bound_unrolling, tidy
from ptowsp.lower.verify import enabled, verify
from ptowsp.schedules import Schedule
from ptowsp.te import Op, walk
from ptowsp.te.sizes import Extent
from ptowsp.workloads import Workload


@dataclass(frozen=True)
class Kernel:
    """The code one task instance runs; its free variables are the grid loops."""

    name: str
    grid: tuple[tuple[str, Extent], ...]  # (loop name, extent) of the task grid, outermost first
    inputs: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    body: Stmt
    sizes: tuple[str, ...] = ()  # the workload's symbolic sizes: arguments after the grid coordinates


@dataclass(frozen=True)
class Lowered:
    """What every pass after the first reads: the task, its schedule, its workload and its grid."""

    wl: Workload
    schedule: Schedule
    name: str
    grid: tuple[tuple[str, Extent], ...]


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Stmt, Lowered], Stmt]
    why: str  # one line of the module docstring


PASSES = (
    Pass("place", lambda s, k: place(k.wl, k.schedule, k.name, s, k.grid),
         "read caches and computed-at producers (producers.py, placement.py)"),
    Pass("place_prefetches", lambda s, k: place_prefetches(k.schedule, k.name, s, lambda t: buffer_of(k.wl.tensor(t))),
         "prefetch_tensor's loads of the next block (prefetching.py)"),
    Pass("in_stored_layouts", lambda s, k: in_stored_layouts(s, k.schedule.layouts),
         "tensors stored in another layout read there (layouts.py)"),
    Pass("tensorize", lambda s, k: tensorize(s, k.name, k.schedule.tensorized.get(k.name),
                                             set(k.schedule.reduce_loops(k.name))),
         "nests that compute an intrinsic's pattern become calls (tensorize.py)"),
    Pass("tidy", lambda s, k: tidy(s), "unit loops dropped, index arithmetic folded (tidy.py)"),
    Pass("simplify", lambda s, k: simplify(s), "constants folded again: unit loops left zeros (simplify.py)"),
    Pass("partition_loops", lambda s, k: partition_loops(s),
         "boundary clamps only at the edges of vectorized rows (partition.py)"),
    Pass("clamp_gathers", lambda s, k: clamp_gathers(s), "data-dependent indices kept inside their tensors (gathers.py)"),
    Pass("bind_common", lambda s, k: bind_common(s), "repeated subexpressions of a store let-bound (cse.py)"),
    Pass("bound_unrolling", lambda s, k: bound_unrolling(s), "unrolled code within the code-size budget (tidy.py)"),
)

__doc__ = __doc__.format(passes="\n".join(f"    {p.name:<18} {p.why}" for p in PASSES))


def lower_task(wl: Workload, schedule: Schedule, name: str) -> Kernel:
    """The kernel of compute task `name` under `schedule` (grid loops become parameters)."""
    lowering = TaskLowering(wl, schedule, name)  # producers inlined and simplified, the loops' axis values
    body = lower_scan(lowering, wl, schedule) if lowering.task.scan is not None else lowering.lower()
    lowered, checking = Lowered(wl, schedule, name, lowering.grid), enabled()
    grid = [g for g, _ in lowering.grid]
    if checking:
        verify(body, grid, name, "loops")
    for p in PASSES:
        body = p.run(body, lowered)
        if checking:
            verify(body, grid, name, p.name)
    reads: dict[str, Buffer] = {}
    for s in walk_stmts(body):
        for e in stmt_exprs(s):
            for n in walk(e):
                if n.op is Op.LOAD and n.arg.scope == "global" and n.arg.name != name:
                    reads.setdefault(n.arg.name, n.arg)
    out = stored_buffer(lowering.out, schedule.layouts)
    return Kernel(name, lowering.grid, tuple(reads.values()), (out,), body, tuple(wl.sizes))
