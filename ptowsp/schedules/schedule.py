"""`Schedule`: how a workload runs, as a replayable list of steps.

Every public step method builds a pydantic step and applies it through one
path, `_apply`, which validates it against the workload and the state left by
the earlier steps, then records it.  `from_json` replays saved steps through
the same path, so a loaded schedule is identical to the saved one.  A step
that fails leaves the schedule unchanged and raises ScheduleError naming the
step (as the user wrote it), the task and the reason.

Steps whose effect belongs to later layers (fusion passes, dispatch,
prefetch, core binding) are validated and recorded here; the layers that
carry them out read them back through the properties at the end.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Collection, Mapping, Sequence

import numpy as np
from pydantic import ValidationError

from ptowsp.errors import PtowspError, ScheduleError
from ptowsp.schedules import handlers
from ptowsp.schedules import steps as st
from ptowsp.schedules.layouts import Layout
from ptowsp.schedules.loopnest import PARALLEL, LoopNest, StepError, outer_of
from ptowsp.schedules.passes import fusion
from ptowsp.schedules.state import ScheduleState, original_loops
from ptowsp.te import Expr, Op, lift
from ptowsp.workloads import Workload
from ptowsp.workloads.checks import loop_names_of


class Schedule:
    """A workload's schedule: create with `wl.schedule()`; every step returns the schedule."""

    def __init__(self, workload: Workload):
        self.workload = workload
        self._steps: list[st._Step] = []
        self.state = ScheduleState.of(workload)  # frozen: each step makes the next (state.py)

    # -- loop steps -------------------------------------------------------------------
    def split(self, task: str, loop: str, factor: int) -> Schedule:
        """loop -> loop.outer, loop.inner (inner extent = factor; a non-dividing factor leaves a guarded tail)."""
        return self._make(st.Split, task=task, loop=loop, factor=factor)

    def tile(self, task: str, factors: Mapping[str, int] | None = None, **kwargs: int) -> Schedule:
        """Split each loop by its factor, then order all the outer loops before all the inner ones."""
        return self._make(st.Tile, task=task, factors={**(factors or {}), **kwargs})

    def reorder(self, task: str, *loops: str) -> Schedule:
        """Put the task's loops in this order (outermost first); every loop must be listed."""
        return self._make(st.Reorder, task=task, loops=list(loops))

    def fuse(self, task: str, outer: str, inner: str) -> Schedule:
        """Merge two adjacent loops into `outer.inner.fused`."""
        return self._make(st.Fuse, task=task, outer=outer, inner=inner)

    def vectorize(self, task: str, loop: str) -> Schedule:
        """Run the innermost spatial loop as SIMD lanes."""
        return self._make(st.Vectorize, task=task, loop=loop)

    def unroll(self, task: str, loop: str) -> Schedule:
        return self._make(st.Unroll, task=task, loop=loop)

    def parallel(self, task: str, *loops: str) -> Schedule:
        """These outermost spatial loops form the task grid: one task instance per point."""
        return self._make(st.Parallel, task=task, loops=list(loops))

    def parallelize(self, tasks: int = 8) -> Schedule:
        """Shortcut: give every task left untouched a task grid of about `tasks` row blocks.

        Expands to, per task whose loops no step has changed yet and that is stored
        (not inlined, not computed at another): `split(task, L, ceil(E / tasks))` and
        `parallel(task, "L.outer")`, L being the outermost spatial loop of extent E
        (or `parallel(task, L)` when E <= tasks).  The steps are recorded one by one.
        """
        if not isinstance(tasks, int) or tasks < 1:
            raise ScheduleError(f"parallelize(tasks={tasks!r}): tasks must be an integer >= 1")
        for name, nest in list(self.state.nests.items()):
            if name in self.state.inlined or name in self.state.compute_at or any(lp.annotation == PARALLEL for lp in nest.loops):
                continue
            if nest.names != LoopNest.of(*original_loops(self.workload, name)).names:
                continue
            spatial = [lp for lp in nest.loops if not lp.reduce]
            if not spatial:
                continue
            loop = spatial[0]
            if loop.extent <= tasks:
                self.parallel(name, loop.name)
            else:
                self.split(name, loop.name, -(-loop.extent // tasks)).parallel(name, outer_of(loop.name))
        return self

    def specialize(self, task: str, when: str, variant: Callable[[Schedule], Schedule]) -> Schedule:
        """Tiered kernels: a second version of `task`'s loops for the task instances whose whole tile
        satisfies `when`, e.g. `specialize("O", "lens[b] <= 256", lambda v: v.split("O", "r", 64))`.

        `when` is Python source over the task's loop variables, the workload's sizes and integer
        inputs.  `variant` gets a copy of this schedule and adds loop steps on `task` only; the
        variant keeps the task's task grid.  Each variant is compiled once with the rest; the
        orchestrator picks one per instance from the tile's bounds (the first `when` that holds
        on the whole tile, else the task's own loops).
        """
        twin = self.copy()
        done = len(twin.steps)
        if not callable(variant):
            raise ScheduleError(f"specialize({task!r}, {when!r}, ...): variant must be a function of a schedule")
        variant(twin)
        added = twin.steps[done:]
        others = [step.call() for step in added if not isinstance(step, st.LOOP_STEPS)]
        if others:
            raise ScheduleError(f"specialize({task!r}, {when!r}, ...): a variant takes loop steps (split, tile, "
                                f"reorder, fuse, vectorize, unroll, parallel), not {others[0]}")
        return self._make(st.Specialize, task=task, when=when, steps=added)

    def with_loops(self, task: str, nest: LoopNest) -> Schedule:
        """A copy in which `task` has these loops (one of its variants, for lowering)."""
        twin = self.copy()
        twin.state = twin.state.with_nest(task, nest)
        return twin

    @property
    def variants(self) -> dict[str, list[tuple[Expr, LoopNest]]]:
        """task -> [(condition, loop nest)] per specialize step, in order."""
        return {task: list(found) for task, found in self.state.variants.items()}

    # -- placement and storage --------------------------------------------------------
    def compute_inline(self, task: str) -> Schedule:
        """Substitute an injective task's expression into every consumer (Halide's inline)."""
        return self._make(st.ComputeInline, task=task)

    def compute_at(self, task: str, consumer: str, loop: str) -> Schedule:
        """Compute the part of `task` that one iteration of consumer's `loop` needs, inside it."""
        return self._make(st.ComputeAt, task=task, consumer=consumer, loop=loop)

    def cache_read(self, task: str, tensor: str, scope: str, loop: str | None = None) -> Schedule:
        """Read `tensor` through a `scope` copy of the region one task instance (or one
        iteration of `loop`) reads: TVM's cache_read placed by compute_at."""
        return self._make(st.CacheRead, task=task, tensor=tensor, scope=scope, loop=loop)

    def prefetch_tensor(self, task: str, tensor: str, loop: str, ahead: int = 1) -> Schedule:
        """While iteration v of `loop` runs, prefetch into the cache the part of `tensor` that
        iteration v + ahead reads, its lines spread over the iterations of the first serial loop
        inside `loop` (Halide's and TVM's prefetch, spread so no iteration stalls on a burst).

        For an operand re-read by the loops inside `loop` (a matmul's k block of B, read once per
        row tile): the first pass over each block then finds it in the cache.  Past the last
        iteration the lines continue in memory (for B stored as panels: the next panel).  A
        hint for the cpu target; it never changes a result (docs/schedules.md)."""
        return self._make(st.PrefetchTensor, task=task, tensor=tensor, loop=loop, ahead=ahead)

    def cache_write(self, task: str, scope: str) -> Schedule:
        """Compute one task instance's results into a `scope` buffer, then copy them out."""
        return self._make(st.CacheWrite, task=task, scope=scope)

    # -- graph and runtime steps ------------------------------------------------------
    def fuse_tasks(self, producer: str, consumer: str) -> Schedule:
        """Fuse two tasks of the graph (by TVM's category rules); the consumer reads the producer."""
        return self._make(st.FuseTasks, producer=producer, consumer=consumer)

    def fuse_by_category(self) -> Schedule:
        """Fuse every pair the category rules allow (carried out by the graph pass)."""
        return self._make(st.FuseByCategory)

    def fusion_plan(self, keep: Mapping[str, str] | None = None) -> fusion.FusionPlan:
        """What fusion makes of this schedule (passes/fusion.py): the fusions, the pairs left unfused
        and why, and the schedule rewritten with them (compute_inline and compute_at steps), which is
        what every target lowers.  `keep`: {producer: reason} that category fusion leaves stored (the
        default schedule's choice).  The one place the plan is made."""
        return fusion.plan(self, keep)

    def explain(self) -> str:
        """What fusion makes of this schedule: each fused pair with its rule, each pair left
        unfused with the reason, and the loop steps dropped from tasks folded into others."""
        return self.fusion_plan().explain()

    def dispatch(self, policy: str | object, key: Sequence[str] | None = None) -> Schedule:
        """Dispatch policy: round_robin, work_stealing, locality, heft (earliest expected finish, by
        kernel time estimates; docs/runtime.md), or affinity with key = grid loops.

        `policy` may also be a `pw.dispatch` object (`pw.dispatch.affinity("i.outer")`): any
        object with `policy` and `key` attributes is recorded as its name and key.
        """
        if not isinstance(policy, str) and hasattr(policy, "policy"):
            policy, key = policy.policy, getattr(policy, "key", None) if key is None else key
        return self._make(st.Dispatch, policy=policy, key=None if key is None else list(key))

    def prefetch(self, depth: int) -> Schedule:
        """Load the inputs of the next `depth` tasks while one computes."""
        return self._make(st.Prefetch, depth=depth)

    def bind(self, task: str, loop: str | None = None, thread: str | None = None, *,
             core: str | None = None, kernel: str | None = None) -> Schedule:
        """bind(task, loop, "threadIdx.x") for GPU axes, bind(task, core="cube") for a core class,
        bind(task, loop, kernel=name) to call a declared intrinsic for the nest under loop."""
        return self._make(st.Bind, task=task, loop=loop, thread=thread, core=core, kernel=kernel)

    def transform_layout(self, tensor: str, index_map: Callable[..., object]) -> Schedule:
        """Store a constant or an intermediate in another layout: element (axes) at index_map(axes),
        e.g. `lambda o, c, kh, kw: (o // 8, c, kh, kw, o % 8)` (OIHW8o); a constant is packed once
        at build time, an intermediate written and read through the map (schedules/layouts.py)."""
        try:
            shape = self.workload.tensor(tensor).shape
            axes = loop_names_of(f"transform_layout {tensor}", shape, index_map)
        except PtowspError as e:
            raise ScheduleError(f"transform_layout({tensor!r}): {e}") from None
        variables = [Expr(Op.VAR, "int64", (), (n, e)) for n, e in zip(axes, shape, strict=True)]
        found = index_map(*variables)
        index = found if isinstance(found, (tuple, list)) else (found,)
        return self._make(st.TransformLayout, tensor=tensor, axes=list(axes), index=[str(lift(i)) for i in index])

    @property
    def layouts(self) -> dict[str, Layout]:
        """tensor -> its stored layout, from transform_layout steps."""
        return dict(self.state.layouts)

    def tensorize(self, task: str, loop: str, intrinsic: str) -> Schedule:
        """Replace the loop nest under `loop` by calls of the intrinsic `intrinsic` (pw.intrinsic),
        when the nest computes its pattern (checked at build: ScheduleError saying what differs).
        The same step as bind(task, loop, kernel=intrinsic)."""
        return self._make(st.Bind, task=task, loop=loop, kernel=intrinsic)

    # -- introspection ----------------------------------------------------------------
    def loops(self, task: str) -> list[str]:
        """The task's current loop names, outermost first."""
        return self._nest(task).names

    def spatial_loops(self, task: str) -> list[str]:
        return [lp.name for lp in self._nest(task).loops if not lp.reduce]

    def reduce_loops(self, task: str) -> list[str]:
        return [lp.name for lp in self._nest(task).loops if lp.reduce]

    def nest(self, task: str) -> LoopNest:
        """The task's loop nest with extents, annotations and split/fuse relations."""
        return self._nest(task)

    @property
    def steps(self) -> list[st._Step]:
        return list(self._steps)

    @property
    def inlined(self) -> frozenset[str]:
        return frozenset(self.state.inlined)

    @property
    def compute_at_locations(self) -> dict[str, tuple[str, str]]:
        """task -> (consumer, loop) for every compute_at step."""
        return dict(self.state.compute_at)

    @property
    def cache_reads(self) -> list[tuple[str, str, str, str | None]]:
        """(task, tensor, scope, loop or None for the whole task instance) per cache_read step."""
        return list(self.state.cache_reads)

    @property
    def prefetched(self) -> list[tuple[str, str, str, int]]:
        """(task, tensor, loop, ahead) per prefetch_tensor step."""
        return list(self.state.prefetched)

    @property
    def cache_writes(self) -> dict[str, str]:
        return dict(self.state.cache_writes)

    @property
    def fused_tasks(self) -> list[tuple[str, str]]:
        return list(self.state.fused_tasks)

    @property
    def fuse_all_by_category(self) -> bool:
        return self.state.fuse_by_category

    @property
    def dispatch_policy(self) -> st.Dispatch:
        return self.state.dispatch or st.Dispatch(policy="work_stealing")

    @property
    def prefetch_depth(self) -> int:
        return self.state.prefetch

    @property
    def tensorized(self) -> dict[str, tuple[str, str]]:
        """task -> (loop, intrinsic) from tensorize / bind(..., kernel=...)."""
        return dict(self.state.tensorized)

    @property
    def cores(self) -> dict[str, str]:
        """task -> core class from bind(task, core=...)."""
        return dict(self.state.cores)

    # -- data -------------------------------------------------------------------------
    def to_json(self) -> str:
        record = st.ScheduleRecord(workload=self.workload.name, fingerprint=self.workload.fingerprint,
                                   steps=self._steps)
        return record.model_dump_json(exclude_none=True)

    @classmethod
    def from_json(cls, workload: Workload, text: str) -> Schedule:
        """Rebuild a saved schedule by replaying its steps on `workload`."""
        if not isinstance(text, (str, bytes)):
            raise ScheduleError(f"from_json takes the JSON text of a saved schedule, got {type(text).__name__}")
        try:
            record = st.ScheduleRecord.model_validate_json(text)
        except ValueError as e:
            raise ScheduleError(f"not a saved ptowsp schedule: {e}") from None
        if record.fingerprint != workload.fingerprint:
            raise ScheduleError(
                f"the schedule was saved for workload {record.workload!r} with a different definition "
                f"than workload {workload.name!r} "
                f"(fingerprint {record.fingerprint[:12]} vs {workload.fingerprint[:12]})"
            )
        schedule = cls(workload)
        for step in record.steps:
            schedule._apply(step)
        return schedule

    def copy(self) -> Schedule:
        """An independent schedule with the same steps and state (a frozen state is shared)."""
        twin = Schedule(self.workload)
        twin._steps, twin.state = list(self._steps), self.state
        return twin

    def without_compute_at(self, task: str) -> Schedule:
        """An independent schedule with the same steps but `task`'s compute_at: `task` is stored on its own
        again (a target whose buffers its consumer's loops overflow computes it as a task of its own)."""
        twin = Schedule(self.workload)
        for step in self._steps:
            if not (isinstance(step, st.ComputeAt) and step.task == task):
                twin._apply(step)
        return twin

    def onto(self, workload: Workload, left_out: Collection[str]) -> Schedule:
        """This schedule's steps replayed on `workload`: the same workload less the tensors `left_out`
        (workloads/empties.py: the empty ones, whose tasks compute nothing).  A step that names one of
        them is left out, and so is one that no longer applies (a split of a reduction over an empty
        set, which became its identity); neither changes what is computed."""
        twin, left = Schedule(workload), frozenset(left_out)
        for step in self._steps:
            if left.isdisjoint(_strings(step.model_dump())):
                try:
                    twin._apply(step)
                except ScheduleError:
                    pass
        return twin

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Schedule) and self.workload.fingerprint == other.workload.fingerprint
                and self._steps == other._steps)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __str__(self) -> str:
        return "\n".join([f"{self.workload.name}.schedule()"] + [f"    .{s.call()}" for s in self._steps])

    def __repr__(self) -> str:
        return f"Schedule({self.workload.name!r}, {len(self._steps)} steps)"

    # -- the one path every step takes ------------------------------------------------
    def _make(self, kind: type[st._Step], **fields: object) -> Schedule:
        try:
            step = kind(**{name: _plain(value) for name, value in fields.items()})
        except ValidationError as e:
            name = kind.model_fields["kind"].default
            shown = ", ".join(f"{k}={v!r}" for k, v in fields.items() if v is not None)
            reasons = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
            raise ScheduleError(f"{name}({shown}): {reasons}") from None
        return self._apply(step)

    def apply(self, step: st._Step) -> Schedule:
        """A recorded step (one of a schedule's `steps`) applied to this schedule, validated as every
        step is: ScheduleError, and the schedule unchanged, when it does not apply here.  How passes
        replay or rewrite schedules (the default schedule over symbols, fusion's rewrite)."""
        return self._apply(step)

    def _apply(self, step: st._Step) -> Schedule:
        try:
            state = getattr(handlers, step.kind)(self, step)  # type: ignore[attr-defined]
        except StepError as e:
            raise ScheduleError(f"{step.call()}: {e}") from None
        self.state = state
        self._steps.append(step)
        return self

    def _nest(self, task: str) -> LoopNest:
        try:
            return handlers.compute_nest(self, task)
        except StepError as e:
            raise ScheduleError(str(e)) from None


def _strings(value: object) -> set[str]:
    """Every string in a step's fields (the task, loop and tensor names it mentions)."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, Mapping):
        return set().union(*map(_strings, value.keys()), *map(_strings, value.values()))
    if isinstance(value, (list, tuple)):
        return set().union(*map(_strings, value))
    return set()


def _plain(value: object) -> object:
    """Integral numbers of any kind (numpy's int64, ...) as Python ints, inside lists and dicts too:
    steps are strict pydantic models, and a factor computed with numpy is still a factor."""
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
