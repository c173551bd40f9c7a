"""Cutting a model into tuning tasks: the kernels of its default schedule, each as a workload of its own.

A model of a hundred tasks has a search space the size of the product of all
of theirs, and most of its knobs do not interact: a convolution's register
tile does not change the next layer's best one.  So a whole-model search
(model_search.py) tunes each *kernel* of the default schedule on its own,
as Ansor does with its subgraphs:

- a kernel is a stored task with what the default schedule puts inside it:
  the producers inlined into it and those computed at its loops (a fused
  group, `lower.task_key`);
- its **subgraph** is a workload of those tasks alone; what they read from
  the rest of the model becomes its inputs (weights too: their values do
  not change a schedule's speed), except integer and boolean constants
  (a gather's indices, a mask), which stay constants with their values: a
  random index would read elsewhere;
- the subgraph's tasks and inputs get canonical names (t0, t1, ... in the
  model's order; x0, x1, ... and c0, ... in order of first read), so two
  kernels that compute the same thing on the same shapes have the same
  subgraph, whatever the layers are called; its fingerprint is the
  structural key that deduplicates them (ResNet-18's repeated blocks) and
  that a tuning log's records are found by, from any model with that task;
- a knob of the subgraph's space, `t1.tile_rows`, is the knob
  `<model task>.tile_rows` of each occurrence in the model.

A kernel whose subgraph would not be the same single kernel (an opaque or
scan task in the group, a different default plan on its own) is left out:
it keeps the default schedule's choices.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ptowsp.te import dtypes
from ptowsp.lower.program import task_key
from ptowsp.schedules import Schedule
from ptowsp.schedules.passes import fold
from ptowsp.schedules.passes.decisions import Decision, decision
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.schedules.resolved import ResolvedSchedule
from ptowsp.workloads import ComputeTask, Workload
from ptowsp.workloads.copying import copy_task

SUBGRAPH = "subgraph"  # every subgraph's workload name: the fingerprint must not depend on the model's


@dataclass(frozen=True)
class TuningTask:
    """One distinct kernel of a model: its subgraph and where it occurs."""

    key: str  # the subgraph's fingerprint: the structural key
    workload: Workload  # the subgraph, canonical names
    occurrences: tuple[Mapping[str, str], ...]  # per occurrence: subgraph task name -> model task name
    name: str  # the first occurrence's kernel (its root task) in the model, for people

    @property
    def weight(self) -> int:
        """How many times the model runs this kernel."""
        return len(self.occurrences)

    def model_knobs(self, point: Mapping[str, object]) -> dict[str, object]:
        """A point of the subgraph's space as the model's knobs, at every occurrence."""
        out: dict[str, object] = {}
        for names in self.occurrences:
            for knob, value in point.items():
                found = Decision.parse(knob)
                if found.task is not None and found.task in names:
                    out[decision(names[found.task], found.kind)] = value
        return out


def kernel_groups(wl: Workload, schedule: Schedule) -> dict[str, list[str]]:
    """Each kernel of a schedule: its root task -> the tasks lowered into it (root first, then in the
    workload's order)."""
    planned = ResolvedSchedule(schedule).planned
    known = set(wl.constants) | fold.foldable(wl)
    placed = planned.compute_at_locations
    position = {t: n for n, t in enumerate(wl.tasks)}
    out = {}
    for root in wl.tasks:
        if root in planned.inlined or root in placed or root in known or not isinstance(wl.task(root), ComputeTask):
            continue
        key = task_key(wl, planned, root)
        members, stack = {root}, [key]
        while stack:
            *_, inlined, placed_here = stack.pop()  # task_key ends with these two
            members |= inlined
            for task, _loop, inner in placed_here:
                members.add(task)
                stack.append(inner)
        out[root] = [root, *sorted(members - {root}, key=position.__getitem__)]
    return out


def extract(wl: Workload, *, vector_bytes: int, workers: int) -> list[TuningTask]:
    """The distinct kernels of `wl`'s default schedule, most frequent first (then in model order)."""
    groups = kernel_groups(wl, default_schedule(wl, vector_bytes=vector_bytes, workers=workers))
    folded = fold.fold_constants(wl)
    found: dict[str, TuningTask] = {}
    for root, members in groups.items():
        made = _subgraph(wl, members, folded)
        if made is None:
            continue
        sub, names = made
        plan = kernel_groups(sub, default_schedule(sub, vector_bytes=vector_bytes, workers=workers))
        if plan != {"t0": [f"t{n}" for n in range(len(members))]}:
            continue  # on its own it would not be this one kernel
        key = sub.fingerprint
        if key in found:
            task = found[key]
            found[key] = TuningTask(key, task.workload, (*task.occurrences, names), task.name)
        else:
            found[key] = TuningTask(key, sub, (names,), root)
    order = list(found)
    return sorted(found.values(), key=lambda t: (-t.weight, order.index(t.key)))


def _subgraph(wl: Workload, members: list[str], folded: Mapping[str, np.ndarray]
              ) -> tuple[Workload, dict[str, str]] | None:
    """The workload of `members` (root first) with canonical names, and subgraph name -> model name;
    None when a member is not a plain compute task."""
    tasks = [wl.task(t) for t in members]
    if any(not isinstance(t, ComputeTask) or t.domain is not None or t.scan is not None for t in tasks):
        return None
    ordered = sorted(members, key=wl.tasks.index)
    # the root is t0 whatever its place: its name must not depend on how many members precede it
    root = members[0]
    rename = {name: f"t{n + 1}" for n, name in enumerate(t for t in ordered if t != root)} | {root: "t0"}
    sub = Workload(SUBGRAPH)
    constants = {**wl.constants, **folded}
    for name in _external_reads(wl, members, ordered):
        tensor = wl.tensor(name)
        value = constants.get(name)
        if value is not None and not dtypes.is_float(tensor.dtype):
            rename[name] = f"c{sum(n.startswith('c') for n in rename.values())}"
            sub.constant(rename[name], value, tensor.dtype)
        else:
            rename[name] = f"x{len(sub.inputs)}"
            sub.input(rename[name], tensor.shape, tensor.dtype)
    for name in ordered:  # producers first: the root reads them all
        copy_task(sub, wl.task(name), rename[name], rename)
    sub.output(sub.tensor("t0"))
    return sub, {rename[t]: t for t in members}


def _external_reads(wl: Workload, members: list[str], ordered: list[str]) -> list[str]:
    """Tensors the members read that none of them computes, in order of first read."""
    inside, out = set(members), []
    for task in ordered:
        for tensor in wl.task(task).inputs:
            if tensor.name not in inside and tensor.name not in out:
                out.append(tensor.name)
    return out
