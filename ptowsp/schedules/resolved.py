"""A schedule as every target lowers it, worked out once per build.

A `Schedule` is what a person (or the default, or the AutoScheduler) wrote: loop steps, fusion
by category, bindings.  Before any target lowers it, two things are decided from it: what fusion
makes of it (passes/fusion.py: the fused pairs as compute_inline / compute_at steps, `planned`)
and which tasks are computed at build time (passes/fold.py: tasks over constants alone,
`folded`).  `pw.build` makes one `ResolvedSchedule` and hands it to the target, so the plan is
made once and every part of a build reads the same one; a target that reshapes the planned
schedule (cuda binds loops to threads) makes a `replanned` copy that shares the rest.
"""

from __future__ import annotations

import functools

import numpy as np

from ptowsp.schedules.passes import fold
from ptowsp.schedules.passes.fusion import FusionPlan
from ptowsp.schedules.schedule import Schedule
from ptowsp.workloads import Workload


class ResolvedSchedule:
    """`schedule` with its fusion plan and folded constants, each worked out when first asked."""

    def __init__(self, schedule: Schedule, planned: Schedule | None = None):
        self.schedule = schedule
        self._given = planned  # a target's reshaping of the planned schedule (replanned)

    @staticmethod
    def of(schedule: Schedule | ResolvedSchedule) -> ResolvedSchedule:
        """`schedule` resolved: as given when it is already (a build's), else resolved now (a caller
        that lowers a schedule of its own: a test, the AutoScheduler's trials)."""
        return schedule if isinstance(schedule, ResolvedSchedule) else ResolvedSchedule(schedule)

    @property
    def workload(self) -> Workload:
        return self.schedule.workload

    @functools.cached_property
    def plan(self) -> FusionPlan:
        """What fusion makes of the schedule: the fused pairs, the pairs left apart and why."""
        return self.schedule.fusion_plan()

    @functools.cached_property
    def planned(self) -> Schedule:
        """The schedule with fusion as compute_inline and compute_at steps: what a target lowers."""
        return self.plan.schedule if self._given is None else self._given

    @property
    def folded(self) -> dict[str, np.ndarray]:
        """{task computed at build time: its read-only result} (fold keeps them per workload object)."""
        return fold.fold_constants(self.workload)

    @property
    def constants(self) -> dict[str, np.ndarray]:
        """Every tensor known at build time: the workload's constants and the folded tasks' results."""
        return {**self.workload.constants, **self.folded}

    def replanned(self, planned: Schedule) -> ResolvedSchedule:
        """The same schedule lowered as `planned` instead (a target's reshaping of the planned one)."""
        return ResolvedSchedule(self.schedule, planned)
