"""The `numpy` target: the reference model, ignoring loop steps (results never depend on them)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ptowsp.schedules import Schedule
from ptowsp.workloads.reference import run_tasks


class NumpyExecutable:
    def __init__(self, schedule: Schedule):
        self.workload = schedule.workload

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return run_tasks(self.workload, dict(inputs))


class NumpyBackend:
    name = "numpy"

    def unavailable_reason(self) -> str | None:
        return None

    def compile(self, schedule: Schedule) -> NumpyExecutable:
        return NumpyExecutable(schedule)
