"""Tuning records: one JSON line per trial, appended as trials finish.

A log is the AutoScheduler's memory: a search resumes from it, `best()`
picks the fastest schedule of a workload on a target from it, and the cost
model can warm-start on the records of other workloads.  Each line is a
`TrialRecord` (pydantic), so a line written by one version is validated,
not guessed at, when read back.  A line cut short (the process died while
writing it) is skipped; any other malformed line raises, naming the file
and the line.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ptowsp.errors import PtowspError, ScheduleError
from ptowsp.schedules import Schedule, ScheduleRecord, Step
from ptowsp.workloads import Workload

FORMAT = 1


class TrialRecord(BaseModel):
    """One measured (or failed) candidate schedule."""

    model_config = ConfigDict(extra="forbid")

    format: int = FORMAT
    workload: str
    fingerprint: str  # of the workload's definition: records of another definition never mix
    target: str
    trial: int  # index within its search
    steps: list[Step]
    seconds: float | None = None  # the measured cost; None when the trial failed
    error: str | None = None  # why it failed: build error, crash, timeout, wrong result
    at: float  # unix time when it was recorded
    knobs: dict[str, Any] | None = None  # the point of the search space (a search resumes from it)
    features: list[float] | None = None  # the cost model's input (other searches warm-start on it)
    feature_set: str | None = None  # which definition of features (features.FEATURE_SET) they follow

    @classmethod
    def of(cls, schedule: Schedule, target: str, trial: int, seconds: float | None,
           error: str | None = None, knobs: dict[str, Any] | None = None,
           features: Iterable[float] | None = None, feature_set: str | None = None) -> TrialRecord:
        wl = schedule.workload
        return cls(workload=wl.name, fingerprint=wl.fingerprint, target=target, trial=trial,
                   steps=schedule.steps, seconds=seconds, error=error, at=time.time(), knobs=knobs,
                   features=None if features is None else [float(x) for x in features],
                   feature_set=feature_set if features is not None else None)

    def schedule(self, wl: Workload) -> Schedule:
        """Replay the steps on `wl` (ScheduleError if it is not the workload they were made for)."""
        record = ScheduleRecord(workload=self.workload, fingerprint=self.fingerprint, steps=self.steps)
        return Schedule.from_json(wl, record.model_dump_json(exclude_none=True))


def append(path: str | Path, records: Iterable[TrialRecord]) -> None:
    """Add records at the end of the log (created if missing), one line each, flushed."""
    with Path(path).open("a", encoding="utf-8") as f:
        for r in records:
            f.write(r.model_dump_json(exclude_none=True) + "\n")
            f.flush()


def load(path: str | Path) -> list[TrialRecord]:
    """Every record of a log, in order; an empty list when the file does not exist."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").split("\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(TrialRecord.model_validate_json(line))
        except ValidationError as e:
            if number == len(lines):
                continue  # the last line lacks its newline: cut short by a crash while writing it
            raise PtowspError(f"{path}:{number}: not a ptowsp tuning record: {e.errors()[0]['msg']}") from None
    return records


def costs(trials: Iterable[TrialRecord]) -> dict[str, tuple[float, TrialRecord]]:
    """Per schedule (its steps as JSON): the median of its successful measurements, and its first record.

    A schedule measured more than once (a search confirms its finalists) costs the median of its
    measurements: one lucky run on a noisy machine does not make it the best.
    """
    seen: dict[str, list[TrialRecord]] = {}
    for r in trials:
        if r.seconds is not None:
            seen.setdefault(steps_key(r), []).append(r)
    return {k: (statistics.median(r.seconds for r in rs), rs[0]) for k, rs in seen.items()}  # type: ignore[misc]


def steps_key(r: TrialRecord) -> str:
    return json.dumps([step.model_dump(exclude_none=True) for step in r.steps], sort_keys=True)


def best(log_file: str | Path, wl: Workload, target: str) -> Schedule:
    """The fastest schedule of `wl` on `target` in the log (by the median of its measurements)."""
    mine = costs(r for r in load(log_file) if r.fingerprint == wl.fingerprint and r.target == target)
    if not mine:
        raise ScheduleError(f"{log_file} holds no successful trial of workload {wl.name!r} "
                            f"(this definition) on target {target!r}")
    return min(mine.values(), key=lambda c: (c[0], c[1].trial))[1].schedule(wl)
