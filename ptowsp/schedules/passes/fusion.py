"""Category-based task fusion (DESIGN.md section 4), carried out by rewriting the schedule.

A fusion is expressed with the placement steps lowering already knows, so a
fused task is lowered, bounds-checked and compiled like any other:

- **inline**: an injective producer is substituted into its consumers
  (compute_inline).  Rules: injective chains fuse; injective producers fuse
  into a reduction (or a complex-out-fusable task).  A producer with several
  consumers is recomputed in each when fused explicitly (`fuse_tasks`);
  `fuse_by_category` keeps it materialised instead, so no work is repeated.
- **epilogue**: an injective consumer E of a complex-out-fusable producer P
  (matmul, conv) takes P's spatial loop schedule (tiling, order, task grid,
  GPU thread axes, vectorisation), and P is computed per output tile inside it (compute_at at
  the last of P's loops outside its reduction).  P's result then lives in a
  tile-sized local buffer: the intermediate tensor is never written to memory.

The anchor keeps its loop schedule; loop steps given to the folded task are
dropped, and `explain()` lists them.  Each fusion is checked by building the
rewritten schedule: a category fusion that would make it illegal is left
out with the reason, an explicit one raises ScheduleError.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ptowsp.errors import ScheduleError
from ptowsp.schedules import steps as st
from ptowsp.schedules.loopnest import renamed, roots_of
from ptowsp.schedules.passes import fold
from ptowsp.te import Op, walk
from ptowsp.workloads import Category, ComputeTask, Workload, inline_producers

if TYPE_CHECKING:
    from ptowsp.schedules.schedule import Schedule

FUSION_RULES = {
    (Category.INJECTIVE, Category.INJECTIVE): "injective chains fuse",
    (Category.INJECTIVE, Category.REDUCTION): "injective producers fuse into a reduction",
    (Category.INJECTIVE, Category.COMPLEX_OUT_FUSABLE): "injective producers fuse into a reduction",
    (Category.COMPLEX_OUT_FUSABLE, Category.INJECTIVE):
        "injective consumers fuse into a complex-out-fusable producer as an epilogue",
}
LOOP_STEPS = frozenset({"split", "tile", "reorder", "fuse", "vectorize", "unroll", "parallel"})
_TASK_STEPS = LOOP_STEPS | {"cache_read", "prefetch_tensor", "cache_write", "bind"}


@dataclass(frozen=True)
class Fusion:
    producer: str
    consumer: str  # the task the producer's result is folded into (after inlining)
    kind: str  # "inline" or "epilogue"
    rule: str

    @property
    def folded(self) -> str:
        """The task that loses its own loop schedule."""
        return self.producer if self.kind == "inline" else self.consumer


@dataclass
class FusionPlan:
    fusions: list[Fusion] = field(default_factory=list)
    refused: list[tuple[str, str, str]] = field(default_factory=list)  # producer, consumer, reason
    dropped: list[tuple[str, str]] = field(default_factory=list)  # (call, why) of steps the rewrite dropped
    schedule: Schedule | None = None  # the rewritten schedule lowering uses

    def explain(self) -> str:
        lines = []
        for f in self.fusions:
            how = (f"inlined into {f.consumer}" if f.kind == "inline"
                   else f"computed per output tile inside {f.consumer} (epilogue)")
            lines.append(f"fused {f.producer} -> {f.consumer}: {how}; rule: {f.rule}")
        lines += [f"not fused {p} -> {c}: {reason.split(' (the rules:')[0]}" for p, c, reason in self.refused]
        lines += [f"dropped {call}: {why}" for call, why in self.dropped]
        return "\n".join(lines) or "nothing to fuse"


def check_pair(s: Schedule, producer: str, consumer: str) -> str | None:
    """Why `producer` cannot fuse into its consumer `consumer` by the category rules (None: it can)."""
    wl = s.workload
    a, b = wl.category(producer), wl.category(consumer)
    if Category.OPAQUE in (a, b):
        return "opaque tasks never fuse"
    folded = [t for t in (producer, consumer) if t in fold.foldable(wl)]
    if folded:
        return f"{folded[0]!r} depends only on constants and is folded at build time"
    if consumer not in wl.graph.successors(producer):
        return f"{consumer!r} does not read {producer!r}; only a producer and its consumer fuse"
    if (a, b) not in FUSION_RULES:
        rules = "; ".join(sorted(set(FUSION_RULES.values())))
        return f"no rule fuses {_a(a.value)} producer into {_a(b.value)} consumer (the rules: {rules})"
    if producer in wl.outputs:
        return f"{producer!r} is an output of the workload, so it must be stored"
    return None


def _a(word: str) -> str:
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


def plan(s: Schedule, keep: Mapping[str, str] | None = None) -> FusionPlan:
    """Decide the fusions the schedule asks for and build the rewritten schedule.

    `keep`: {producer: reason} that category fusion leaves stored (the default schedule's choice,
    inlining.py); an explicit `fuse_tasks` still inlines them."""
    wl = s.workload
    requests = [(p, c, True) for p, c in s.fused_tasks]
    if s.fuse_all_by_category:
        asked = set(s.fused_tasks)
        requests += [(p, c, False) for p in wl.tasks for c in wl.graph.successors(p) if (p, c) not in asked]
    out = FusionPlan()
    inlined = set(s.inlined)
    injective = [r for r in requests if wl.category(r[0]) is Category.INJECTIVE]
    into_contraction = [r for r in injective if wl.category(r[1]) is Category.COMPLEX_OUT_FUSABLE]
    # first: an epilogue looks through them; consumers before producers, so that a producer whose
    # consumers all inline into one task (gelu's x and erf(x / sqrt 2)) is read by that one task
    chains = [r for r in injective if r not in into_contraction]
    order = {t: k for k, t in enumerate(wl.tasks)}
    first, refused = len(out.fusions), len(out.refused)
    for p, c, explicit in sorted(chains, key=lambda r: -order[r[0]]):
        if _inline(s, out, p, c, explicit, inlined, keep or {}):
            inlined.add(p)
    out.fusions[first:] = sorted(out.fusions[first:], key=lambda f: order[f.producer])  # the steps in task order
    out.refused[refused:] = sorted(out.refused[refused:], key=lambda r: (order[r[0]], order[r[1]]))
    for p, c, explicit in requests:
        if wl.category(p) is Category.INJECTIVE:
            continue
        consumer, reason = c, check_pair(s, p, c)
        if reason is None:
            consumer, reason = _epilogue_consumer(s, p, inlined, explicit)
        anchor = next((f.producer for f in out.fusions if f.kind == "epilogue" and f.consumer == consumer), None)
        if reason is None and anchor is not None:  # a residual add of two convolutions: the first takes it
            reason = f"{consumer!r} is the epilogue of {anchor!r} already"
        fusion = None if reason else Fusion(p, consumer, "epilogue", FUSION_RULES[wl.category(p), wl.category(c)])
        _try(s, out, fusion, p, c, reason, explicit)
    for p, c, explicit in into_contraction:  # last, and only on request: see _inline
        if _inline(s, out, p, c, explicit, inlined, keep or {}):
            inlined.add(p)
    out.schedule = rewrite(s, out.fusions, out.dropped) if out.fusions else s
    return out


def _inline(s: Schedule, out: FusionPlan, p: str, c: str, explicit: bool, inlined: set[str],
            keep: Mapping[str, str]) -> bool:
    """Fuse injective p into its consumer c by inlining, if the rules, the schedule and `keep` allow it."""
    wl = s.workload
    if p in inlined:
        return False  # inlined already (by the user, or for another consumer)
    if any(f.kind == "epilogue" and p == f.consumer for f in out.fusions):
        anchor = next(f.producer for f in out.fusions if f.kind == "epilogue" and f.consumer == p)
        reason = f"{p!r} already holds the epilogue of {anchor!r}"
    else:
        reason = check_pair(s, p, c) or _inline_problem(s, p, explicit, inlined)
    if reason is None and not explicit and p in keep:
        reason = keep[p]
    if reason is None and not explicit and wl.category(c) is Category.COMPLEX_OUT_FUSABLE:
        reason = (f"inlined into the contraction {c!r}, {p!r} would be recomputed at every step of its reduction; "
                  "fuse_by_category leaves it stored (fuse_tasks inlines it on request)")
    fusion = None if reason else Fusion(p, c, "inline", FUSION_RULES[wl.category(p), wl.category(c)])
    return _try(s, out, fusion, p, c, reason, explicit)


def _try(s: Schedule, out: FusionPlan, fusion: Fusion | None, p: str, c: str, reason: str | None,
         explicit: bool) -> bool:
    """Accept the fusion if the rewritten schedule stays legal; otherwise refuse it (or raise, if explicit)."""
    if fusion is not None:
        try:
            involved = _linked(s, [*out.fusions, fusion], {p, c})
            rewrite(s, [f for f in [*out.fusions, fusion] if f.producer in involved], [], involved)
        except ScheduleError as e:
            reason = f"fusing would make the schedule illegal: {e}"
        else:
            out.fusions.append(fusion)
            return True
    if explicit:
        raise ScheduleError(f"fuse_tasks({p!r}, {c!r}): {reason}")
    out.refused.append((p, c, reason or "no rule"))
    return False


def _inline_problem(s: Schedule, producer: str, explicit: bool, inlined: Collection[str]) -> str | None:
    consumers = list(s.workload.graph.successors(producer))
    if not explicit and len(consumers) > 1 and not _one_point_of_one_reader(s.workload, producer, inlined):
        return (f"{producer!r} has {len(consumers)} consumers ({', '.join(consumers)}); fuse_by_category keeps it "
                "materialised rather than recompute it in each (fuse_tasks recomputes it)")
    if producer in s.compute_at_locations:
        return f"{producer!r} is already placed by compute_at"
    return None


def _one_point_of_one_reader(wl: Workload, producer: str, inlined: Collection[str]) -> bool:
    """Whether every consumer of `producer` is inlined into one task, which reads it at one index only
    (gelu's `x * erf(x / sqrt 2)`): inlined there, each of its points is computed once, as if stored."""
    found = readers(wl, producer, inlined)
    if len(found) != 1:
        return False
    task = wl.task(next(iter(found)))
    if not isinstance(task, ComputeTask):
        return False
    loads = [n for n in walk(inline_producers(task.value, wl, set(inlined))) if n.op is Op.LOAD and n.arg.name == producer]
    return all(len(n.src) == len(loads[0].src) and all(a.same_as(b) for a, b in zip(n.src, loads[0].src))
               for n in loads)


def readers(wl: Workload, task: str, inlined: Collection[str]) -> set[str]:
    """Tasks that read `task`'s result, looking through inlined tasks."""
    found, frontier = set(), list(wl.graph.successors(task))
    while frontier:
        t = frontier.pop()
        if t in inlined:
            frontier += wl.graph.successors(t)
        else:
            found.add(t)
    return found


def _epilogue_consumer(s: Schedule, producer: str, inlined: set[str], explicit: bool) -> tuple[str, str | None]:
    """The one task that reads `producer` (looking through inlined tasks), if it can take it as an epilogue."""
    wl = s.workload
    found = readers(wl, producer, inlined)
    if len(found) != 1:
        return "", (f"{producer!r} is read by {len(found)} tasks ({', '.join(sorted(found))}); "
                    "an epilogue needs one")
    (consumer,) = found
    task = wl.task(consumer)
    if not isinstance(task, ComputeTask) or wl.category(consumer) is not Category.INJECTIVE:
        return consumer, f"{consumer!r} is {wl.category(consumer).value}, not injective"
    if consumer in s.inlined or consumer in s.compute_at_locations or producer in s.compute_at_locations:
        return consumer, "a compute_inline or compute_at step already places one of them"
    body = inline_producers(task.value, wl, inlined)
    own = tuple(task.loop_names)
    # index 0 of a dimension of 1 is the coordinate there too (ONNX's batch of one, broadcast)
    ones = {k for k, n in enumerate(task.tensor.shape) if n == 1}
    for node in walk(body):
        if node.op is Op.LOAD and node.arg.name == producer:
            if tuple(own[k] if k in ones and i.op is Op.CONST and i.arg == 0 else i.arg[0] if i.op is Op.VAR else None
                     for k, i in enumerate(node.src)) != own:
                return consumer, (f"{consumer!r} reads {producer!r} at other indices than its own coordinates; "
                                  "an epilogue reads the producer element by element")
    if _tile_loop(s, producer) is None:
        return consumer, f"{producer!r} has no spatial loop outside its reduction to compute its tiles at"
    return consumer, None


def _reduce_axes(task) -> int:
    """How many axes the task's reduction runs over (its body's, before any split)."""
    body = getattr(task, "body", None)
    return len(body.src) - 1 if body is not None and body.op is Op.REDUCE else 0


def _tile_loop(s: Schedule, producer: str) -> str | None:
    """The innermost loop of the producer outside its first reduction loop: one iteration is one output tile."""
    last = None
    for loop in s.nest(producer).loops:
        if loop.reduce:
            return last
        last = loop.name
    return last


def _linked(s: Schedule, fusions: list[Fusion], tasks: set[str]) -> set[str]:
    """`tasks` and every task tied to them by a fusion or a compute_at step, transitively: the tasks whose
    steps decide whether fusing them is legal (a step on any other task neither helps nor hinders it)."""
    ties: dict[str, set[str]] = {}
    pairs = [(f.producer, f.consumer) for f in fusions] + [(t, at[0]) for t, at in s.compute_at_locations.items()]
    pairs += [(t, c) for t in s.inlined for c in s.workload.graph.successors(t)]  # inlined by the user
    for a, b in pairs:
        ties.setdefault(a, set()).add(b)
        ties.setdefault(b, set()).add(a)
    found, frontier = set(tasks), list(tasks)
    while frontier:
        for other in ties.get(frontier.pop(), ()):
            if other not in found:
                found.add(other)
                frontier.append(other)
    return found


def rewrite(s: Schedule, fusions: list[Fusion], dropped: list[tuple[str, str]],
            only: set[str] | None = None) -> Schedule:
    """The schedule with the fusions carried out as compute_inline / compute_at steps (`only`: replaying
    just the steps of these tasks and those of no task, to check a fusion's legality cheaply)."""
    wl = s.workload
    folded = {f.folded for f in fusions}
    anchors = {f.producer: f for f in fusions if f.kind == "epilogue"}
    inlined = {f.producer for f in fusions if f.kind == "inline"}  # computed where read: never in memory
    out = type(s)(wl)  # an empty schedule of the workload (this module sits below schedule.py)
    for step in s.steps:
        task = getattr(step, "task", None)
        if step.kind in ("fuse_tasks", "fuse_by_category") or only is not None and task is not None and task not in only:
            continue
        if (task in folded and step.kind in _TASK_STEPS) or (task in anchors and _spans_tiles(step)):
            dropped.append((step.call(), "the task was folded into another"))
            continue
        if step.kind in ("cache_read", "prefetch_tensor") and step.tensor in inlined:
            dropped.append((step.call(), f"{step.tensor} is inlined: it is computed where read, never stored"))
            continue
        out.apply(step)
    for f in fusions:
        if f.kind == "inline":
            if f.producer not in out.inlined:
                out.apply(st.ComputeInline(task=f.producer))
            continue
        names = dict(zip(wl.task(f.producer).loop_names, wl.task(f.consumer).loop_names, strict=True))
        reduce_roots = {r for lp in s.nest(f.producer).loops if lp.reduce for r in roots_of(lp.name)}
        for step in s.steps:
            if getattr(step, "task", None) == f.producer and (step.kind in LOOP_STEPS or _spans_tiles(step)):
                moved = _translate(step, f.consumer, names, reduce_roots)
                if moved is not None:
                    out.apply(moved)
        tile = _tile_loop(s, f.producer)
        out.apply(st.ComputeAt(task=f.producer, consumer=f.consumer, loop=renamed(tile, names)))
    return out


def _spans_tiles(step: st._Step) -> bool:
    """A step that places the anchor's tiles (task grid, GPU thread axes): it moves to the epilogue,
    which walks the tiles; the anchor, computed once per tile inside it, keeps none."""
    return step.kind == "parallel" or (step.kind == "bind" and getattr(step, "thread", None) is not None)


def _translate(step: st._Step, task: str, names: dict[str, str], reduce_roots: set[str]) -> st._Step | None:
    """A loop step of the anchor, applied to its epilogue: spatial loops renamed, reduction loops left out."""
    def spatial(loop: str) -> bool:
        return roots_of(loop)[0] not in reduce_roots

    fields = step.model_dump()
    fields["task"] = task
    if step.kind == "tile":
        fields["factors"] = {renamed(k, names): v for k, v in step.factors.items() if spatial(k)}
        if not fields["factors"]:
            return None
    elif step.kind in ("reorder", "parallel"):
        fields["loops"] = [renamed(k, names) for k in step.loops if spatial(k)]
        if len(fields["loops"]) < (1 if step.kind == "parallel" else 2):
            return None
    elif step.kind == "fuse":
        if not spatial(step.outer):
            return None
        fields["outer"], fields["inner"] = renamed(step.outer, names), renamed(step.inner, names)
    else:
        if not spatial(step.loop):
            return None
        fields["loop"] = renamed(step.loop, names)
    return type(step)(**fields)
