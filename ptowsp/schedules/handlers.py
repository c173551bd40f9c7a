"""What each schedule step does: one function per step kind, `kind(schedule, step) -> ScheduleState`.

Each handler reads the schedule's frozen state (state.py), validates the step against it, raising
StepError with the reason, and returns the state after the step; `Schedule.apply` keeps it and adds
the step as written.  They are the only code that makes a schedule's next `ScheduleState`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import networkx as nx

from ptowsp.errors import ScheduleError, WorkloadError
from ptowsp.schedules import steps as st
from ptowsp.schedules.condition import parse_condition
from ptowsp.schedules.loopnest import PARALLEL, SERIAL, UNROLLED, VECTORIZED, LoopNest, StepError, inner_of, outer_of
from ptowsp.schedules.layouts import layout_of
from ptowsp.schedules.passes import fold
from ptowsp.schedules.passes.fusion import check_pair
from ptowsp.schedules.scan_rules import check_scan_nest
from ptowsp.schedules.state import ScheduleState
from ptowsp.te import Expr, Op, walk
from ptowsp.workloads import Category, OpaqueTask
from ptowsp.workloads.intrinsic import lookup

if TYPE_CHECKING:
    from ptowsp.schedules.schedule import Schedule


def compute_nest(s: Schedule, task: str) -> LoopNest:
    """The nest of a compute task (inlined or not)."""
    if task in s.state.nests:
        return s.state.nests[task]
    wl = s.workload
    if task not in wl.tasks:
        raise StepError(f"workload {wl.name!r} has no task {task!r}; its tasks are {', '.join(wl.tasks)}")
    if isinstance(wl.task(task), OpaqueTask):
        raise StepError(f"task {task!r} is opaque; opaque tasks have no loops and run on the host")
    raise StepError(f"task {task!r} was added to workload {wl.name!r} after this schedule was made; "
                    "make the schedule (wl.schedule()) once the workload is complete")


def _compute(s: Schedule, task: str) -> LoopNest:
    """The nest of a compute task that still has loops of its own."""
    compute_nest(s, task)
    if task in s.state.inlined:
        raise StepError(f"task {task!r} was inlined by compute_inline; it has no loops of its own")
    return s.state.nests[task]


def _on_task(message: str, task: str) -> StepError:
    return StepError(f"task {task!r}: {message}")


def _keep_anchors(s: Schedule, task: str, removed: list[str]) -> None:
    """A loop that another task is computed at, or a cache is filled at, cannot disappear."""
    for producer, (consumer, loop) in s.state.compute_at.items():
        if consumer == task and loop in removed:
            raise _on_task(f"loop {loop} is where {producer!r} is computed (compute_at); transform it first", task)
    for consumer, tensor, _, loop in s.state.cache_reads:
        if consumer == task and loop in removed:
            raise _on_task(f"loop {loop} is where the cache of {tensor!r} is filled (cache_read); transform it first",
                           task)
    for consumer, tensor, loop, _ in s.state.prefetched:
        if consumer == task and loop in removed:
            raise _on_task(f"loop {loop} is where {tensor!r} is prefetched (prefetch_tensor); transform it first", task)
    tensorized = s.state.tensorized.get(task)
    if tensorized is not None and tensorized[0] in removed:
        raise _on_task(f"loop {tensorized[0]} is where {tensorized[1]!r} is called (tensorize); "
                       "transform the loops first", task)


def _set_nest(s: Schedule, task: str, change: Callable[[LoopNest], LoopNest]) -> ScheduleState:
    """The state with the task's nest replaced by change(nest), naming the task in any error."""
    nest = _compute(s, task)
    found = s.workload.task(task)
    try:
        changed = change(nest)
        if found.scan is not None:
            check_scan_nest(found, changed)
    except StepError as e:
        raise _on_task(str(e), task) from None
    return s.state.with_nest(task, changed)


def split(s: Schedule, step: st.Split) -> ScheduleState:
    _compute(s, step.task)
    _keep_anchors(s, step.task, [step.loop])
    return _set_nest(s, step.task, lambda nest: nest.split(step.loop, step.factor))


def tile(s: Schedule, step: st.Tile) -> ScheduleState:
    if not step.factors:
        raise StepError("tile needs at least one loop=factor")
    _keep_anchors(s, step.task, list(step.factors))

    def change(nest: LoopNest) -> LoopNest:
        for loop, factor in step.factors.items():
            nest = nest.split(loop, factor)
        outers = [outer_of(loop) for loop in step.factors]
        inners = [inner_of(loop) for loop in step.factors]
        slots = iter(outers + inners)
        tiled = set(outers + inners)
        return nest.reorder([next(slots) if name in tiled else name for name in nest.names])

    return _set_nest(s, step.task, change)


def reorder(s: Schedule, step: st.Reorder) -> ScheduleState:
    return _set_nest(s, step.task, lambda nest: nest.reorder(step.loops))


def fuse(s: Schedule, step: st.Fuse) -> ScheduleState:
    _compute(s, step.task)
    _keep_anchors(s, step.task, [step.outer, step.inner])
    return _set_nest(s, step.task, lambda nest: nest.fuse(step.outer, step.inner))


def _keep_serial(s: Schedule, task: str, loops: list[str], annotation: str) -> None:
    """A loop a tensor is prefetched at keeps running its iterations one after another."""
    for consumer, tensor, loop, _ in s.state.prefetched:
        if consumer == task and loop in loops:
            raise _on_task(f"loop {loop} is where {tensor!r} is prefetched (prefetch_tensor), which needs its "
                           f"iterations in order; it cannot be {annotation}", task)


def vectorize(s: Schedule, step: st.Vectorize) -> ScheduleState:
    _keep_serial(s, step.task, [step.loop], VECTORIZED)
    return _set_nest(s, step.task, lambda nest: nest.annotate([step.loop], VECTORIZED))


def unroll(s: Schedule, step: st.Unroll) -> ScheduleState:
    return _set_nest(s, step.task, lambda nest: nest.annotate([step.loop], UNROLLED))


def parallel(s: Schedule, step: st.Parallel) -> ScheduleState:
    if not step.loops:
        raise StepError("parallel needs at least one loop")
    if step.task in s.state.compute_at:
        raise _on_task(f"it is computed inside {s.state.compute_at[step.task][0]!r} (compute_at), so its loops cannot "
                       "form a task grid", step.task)
    _keep_serial(s, step.task, step.loops, PARALLEL)
    return _set_nest(s, step.task, lambda nest: nest.annotate(step.loops, PARALLEL))


def _consumers(s: Schedule, task: str) -> list[str]:
    return list(s.workload.graph.successors(task))


def compute_inline(s: Schedule, step: st.ComputeInline) -> ScheduleState:
    task = step.task
    _compute(s, task)
    wl = s.workload
    if wl.category(task) is not Category.INJECTIVE:
        raise _on_task(f"only injective tasks can be inlined; this one is {wl.category(task).value}", task)
    if task in wl.outputs:
        raise _on_task("it is an output of the workload, so it must be stored", task)
    consumers = _consumers(s, task)
    if not consumers:
        raise _on_task("no task reads it", task)
    opaque = [c for c in consumers if c not in s.state.nests]
    if opaque:
        raise _on_task(f"the opaque task {opaque[0]!r} reads it and needs it stored", task)
    if task in s.state.compute_at:
        raise _on_task("it is already placed by compute_at", task)
    if task in s.state.cache_writes or any(t == task for t, *_ in s.state.cache_reads):
        raise _on_task("it has cache_read / cache_write steps, which need its own loops", task)
    anchored = [p for p, (c, _) in s.state.compute_at.items() if c == task]
    if anchored:
        raise _on_task(f"{anchored[0]!r} is computed at one of its loops", task)
    return s.state.with_(inlined=s.state.inlined | {task})


def _not_a_scan(s: Schedule, task: str, step: str) -> None:
    """Steps that place buffers at a task's loops or move it into another do not apply to scans."""
    if s.workload.task(task).scan is not None:
        raise _on_task(f"it is a scan: {step} is not supported on scans (their steps run as two nests that read "
                       "their own stored results)", task)


def compute_at(s: Schedule, step: st.ComputeAt) -> ScheduleState:
    task, consumer = step.task, step.consumer
    _compute(s, task)
    nest = _compute(s, consumer)
    _not_a_scan(s, task, "compute_at")
    _not_a_scan(s, consumer, "compute_at into it")
    here, chain = consumer, [consumer]
    while here != task and here in s.state.compute_at:  # follow where the consumer itself is computed
        here = s.state.compute_at[here][0]
        chain.append(here)
    if here == task:
        raise _on_task(f"computing it at {consumer!r} makes a compute_at cycle: {' -> '.join([task, *chain])}", task)
    if task in s.workload.outputs:
        raise _on_task("it is an output of the workload; outputs are computed at the root", task)
    if consumer not in nx.descendants(s.workload.graph, task):
        raise _on_task(f"{consumer!r} does not read it, directly or through other tasks, so it cannot be computed "
                       f"inside {consumer!r}", task)
    if task in s.state.compute_at:
        raise _on_task(f"it is already computed at {s.state.compute_at[task]}", task)
    if step.loop not in nest.names:
        raise _on_task(f"{consumer!r} has no loop {step.loop!r}; its loops are {', '.join(nest.names)}", task)
    grid = [lp.name for lp in s.state.nests[task].loops if lp.annotation == PARALLEL]
    if grid:
        raise _on_task(f"its loops {', '.join(grid)} are parallel (a task grid); a task computed inside another "
                       "has no grid of its own", task)
    return s.state.with_entry("compute_at", task, (consumer, step.loop))


def _scope(scope: str) -> None:
    if scope not in st.SCOPES:
        raise StepError(f"unknown memory scope {scope!r}; scopes are {', '.join(st.SCOPES)}")


def _reads_in_place(s: Schedule, task: str, tensor: str, step: str) -> None:
    """The task reads `tensor` itself, in its own layout: what cache_read and prefetch_tensor take."""
    _compute(s, task)
    _not_a_scan(s, task, step)
    if tensor in s.state.layouts:
        raise _on_task(f"{tensor!r} is stored in another layout (transform_layout); {step} of it is not "
                       "supported yet", task)
    read = [t.name for t in s.workload.task(task).inputs]
    if tensor not in read:
        raise _on_task(f"it does not read {tensor!r}; it reads {', '.join(read) or 'nothing'}", task)


def cache_read(s: Schedule, step: st.CacheRead) -> ScheduleState:
    _reads_in_place(s, step.task, step.tensor, "cache_read")
    _scope(step.scope)
    if any(t == step.task and n == step.tensor for t, n, _, _ in s.state.cache_reads):
        raise _on_task(f"{step.tensor!r} is already cached", step.task)
    loops = s.state.nests[step.task].names
    if step.loop is not None and step.loop not in loops:
        raise _on_task(f"has no loop {step.loop!r}; its loops are {', '.join(loops)}", step.task)
    return s.state.with_(cache_reads=(*s.state.cache_reads, (step.task, step.tensor, step.scope, step.loop)))


def prefetch_tensor(s: Schedule, step: st.PrefetchTensor) -> ScheduleState:
    _reads_in_place(s, step.task, step.tensor, "prefetch_tensor")
    gathered = [str(n) for n in walk(s.workload.task(step.task).body) if n.op is Op.LOAD and n.arg.name == step.tensor
                and any(x.op is Op.LOAD for i in n.src for x in walk(i))]
    if gathered:
        raise _on_task(f"it reads {step.tensor!r} where the values of another tensor say ({gathered[0]}), so what a "
                       "later iteration reads is not known ahead", step.task)
    if step.ahead < 1:
        raise _on_task(f"prefetch_tensor looks ahead by at least one iteration, got ahead={step.ahead}", step.task)
    nest = s.state.nests[step.task]
    if step.loop not in nest.names:
        raise _on_task(f"has no loop {step.loop!r}; its loops are {', '.join(nest.names)}", step.task)
    annotation = nest.loops[nest.names.index(step.loop)].annotation
    if annotation not in (SERIAL, UNROLLED):
        raise _on_task(f"loop {step.loop} is {annotation}; prefetch_tensor needs a serial loop, whose next "
                       "iteration comes after this one", step.task)
    if any(t == step.task and n == step.tensor for t, n, _, _ in s.state.prefetched):
        raise _on_task(f"{step.tensor!r} is already prefetched", step.task)
    return s.state.with_(prefetched=(*s.state.prefetched, (step.task, step.tensor, step.loop, step.ahead)))


def cache_write(s: Schedule, step: st.CacheWrite) -> ScheduleState:
    _compute(s, step.task)
    _not_a_scan(s, step.task, "cache_write")
    _scope(step.scope)
    if step.task in s.state.cache_writes:
        raise _on_task(f"its result is already cached in {s.state.cache_writes[step.task]!r}", step.task)
    return s.state.with_entry("cache_writes", step.task, step.scope)


def fuse_tasks(s: Schedule, step: st.FuseTasks) -> ScheduleState:
    wl = s.workload
    for name in (step.producer, step.consumer):
        if name not in wl.tasks:
            raise StepError(f"workload {wl.name!r} has no task {name!r}")
    reason = check_pair(s, step.producer, step.consumer)
    if reason:
        raise StepError(reason)
    if (step.producer, step.consumer) in s.state.fused_tasks:
        raise StepError("these tasks are already fused")
    return s.state.with_(fused_tasks=(*s.state.fused_tasks, (step.producer, step.consumer)))


def fuse_by_category(s: Schedule, step: st.FuseByCategory) -> ScheduleState:
    return s.state.with_(fuse_by_category=True)


def dispatch(s: Schedule, step: st.Dispatch) -> ScheduleState:
    if step.policy not in st.DISPATCH_POLICIES:
        raise StepError(f"unknown dispatch policy {step.policy!r}; policies are {', '.join(st.DISPATCH_POLICIES)}")
    if (step.policy == "affinity") != (step.key is not None):
        raise StepError("affinity needs key=[grid loop names], and only affinity takes a key")
    return s.state.with_(dispatch=step)


def prefetch(s: Schedule, step: st.Prefetch) -> ScheduleState:
    if step.depth < 0:
        raise StepError(f"prefetch depth must be >= 0, got {step.depth}")
    return s.state.with_(prefetch=step.depth)


def bind(s: Schedule, step: st.Bind) -> ScheduleState:
    forms = [step.thread is not None, step.core is not None, step.kernel is not None]
    if sum(forms) != 1 or (step.loop is not None and step.core is not None):
        raise StepError("bind takes one of: (loop, thread), core=..., (loop, kernel=...)")
    if step.kernel is not None:
        return _tensorize(s, step)
    if step.core is not None:
        _compute(s, step.task)
        if step.core not in st.CORE_CLASSES:
            raise StepError(f"unknown core class {step.core!r}; classes are {', '.join(st.CORE_CLASSES)}")
        return s.state.with_entry("cores", step.task, step.core)
    if step.loop is None or step.thread not in st.THREAD_AXES:
        raise StepError(f"bind needs a loop and a thread axis among {', '.join(st.THREAD_AXES)}")
    return _set_nest(s, step.task, lambda nest: nest.annotate([step.loop], step.thread))


def _tensorize(s: Schedule, step: st.Bind) -> ScheduleState:
    """bind(task, loop, kernel=name): the nest under `loop` becomes a call of intrinsic `name`;
    whether the nest computes the intrinsic's pattern is checked where it is lowered."""
    nest = _compute(s, step.task)
    if s.workload.task(step.task).scan is not None:
        raise _on_task("it is a scan; tensorize is not supported on scans", step.task)
    inside = nest.loops[nest.index(step.loop):] if step.loop is not None else [
        lp for lp in nest.loops if lp.annotation != PARALLEL]  # no loop named: the lowering picks the outermost match
    busy = [lp.name for lp in inside if lp.annotation == PARALLEL or "Idx." in lp.annotation]
    if busy:
        raise _on_task(f"loop {busy[0]} at or inside {step.loop} is {nest.loop(busy[0]).annotation}; one intrinsic "
                       "call runs on one core", step.task)
    if step.task in s.state.tensorized:
        raise _on_task(f"it already calls {s.state.tensorized[step.task][1]!r} at loop {s.state.tensorized[step.task][0]}",
                       step.task)
    try:
        lookup(step.kernel)
    except WorkloadError as e:
        raise _on_task(str(e), step.task) from None
    return s.state.with_entry("tensorized", step.task, (step.loop, step.kernel))


def transform_layout(s: Schedule, step: st.TransformLayout) -> ScheduleState:
    """A constant (packed at build time) or an intermediate (written and read through the map)
    stored in another layout (layouts.py); inputs and outputs keep the user's."""
    wl = s.workload
    try:
        tensor = wl.tensor(step.tensor)
    except WorkloadError as e:
        raise StepError(str(e)) from None
    opaque = [t for t in wl.tasks if isinstance(wl.task(t), OpaqueTask) and step.tensor in
              {x.name for x in wl.task(t).inputs}]
    if opaque:
        raise StepError(f"{step.tensor!r} is read by the opaque task {opaque[0]!r}, which takes arrays in the user's "
                        "layout; its layout cannot change")
    if step.tensor not in wl.constants and step.tensor not in fold.foldable(wl):
        _intermediate(s, step.tensor)
    if step.tensor in s.state.layouts:
        raise StepError(f"{step.tensor!r} already has a layout")
    cached = [t for t, n, _, _ in s.state.cache_reads if n == step.tensor]
    if cached:
        raise StepError(f"task {cached[0]!r} reads {step.tensor!r} through cache_read; transform the layout first")
    return s.state.with_entry("layouts", step.tensor, layout_of(tensor, step.axes, step.index))


def _intermediate(s: Schedule, tensor: str) -> None:
    """A tensor whose layout only ptowsp's kernels see: a compute task's result, not an output."""
    wl = s.workload
    if tensor in wl.inputs or tensor in wl.outputs:
        kind = "an input" if tensor in wl.inputs else "an output"
        raise StepError(f"{tensor!r} is {kind} of the workload, which keeps the user's layout; store a copy of it in "
                        "another layout (a task that reads it) and transform that")
    producer = wl.task(wl.producer(tensor))
    if isinstance(producer, OpaqueTask) or producer.domain is not None:
        why = "an opaque task" if isinstance(producer, OpaqueTask) else "a task with a domain (zeros elsewhere)"
        raise StepError(f"{tensor!r} is made by {why}; its layout cannot change (not supported)")


def specialize(s: Schedule, step: st.Specialize) -> ScheduleState:
    """A variant nest of the task: its loops now, with the variant's loop steps on top."""
    _compute(s, step.task)
    if step.task in s.state.compute_at:
        raise _on_task(f"it is computed inside {s.state.compute_at[step.task][0]!r}; specialize the task that holds it",
                       step.task)
    hosted = [p for p, (c, _) in s.state.compute_at.items() if c == step.task] + \
        [t for c, t, _, _ in s.state.cache_reads if c == step.task]
    if hosted:
        raise _on_task(f"{hosted[0]!r} is placed at its loops (compute_at or cache_read), which a variant's "
                       "loops may not have; specialize before placing, or place in the producer", step.task)
    condition = _condition(s, step.task, step.when)
    twin = s.copy()
    for sub in step.steps:
        if sub.task != step.task:
            raise _on_task(f"the variant's step {sub.call()} is on task {sub.task!r}; a variant changes only the "
                           "task it specializes", step.task)
        try:
            twin.apply(sub)
        except ScheduleError as e:
            raise StepError(f"in the variant: {e}") from None
    return s.state.with_entry("variants", step.task,
                              (*s.state.variants.get(step.task, ()), (condition, twin.state.nests[step.task])))


def _condition(s: Schedule, task: str, when: str) -> Expr:
    """`when` as a bool expression over the task's loop variables, the sizes and integer inputs."""
    wl = s.workload
    names = {**{n: wl.size(n) for n in wl.sizes}, **{n: wl.tensor(n) for n in wl.inputs},
             **dict(zip(wl.task(task).loop_names, wl.task(task).axes, strict=True))}
    try:
        found = parse_condition(when, names)
    except ScheduleError as e:
        raise _on_task(str(e), task) from None
    if found.dtype != "bool":
        raise _on_task(f"when={when!r} is {found.dtype}, not a condition (compare with <, <=, ...)", task)
    for node in walk(found):
        if node.op is Op.LOAD and node.arg.dtype not in ("int32", "int64"):
            raise _on_task(f"when={when!r} reads {node.arg.name}, a {node.arg.dtype} input; conditions read "
                           "integer inputs (lengths, counts)", task)
        if node.op is Op.REDUCE:
            raise _on_task(f"when={when!r} reduces; a condition is on the task's own loops", task)
    return found
