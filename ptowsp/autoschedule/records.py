"""Tuning records: one JSON line per trial, appended as trials finish.

A log is the AutoScheduler's memory: a search resumes from it, `best()`
picks the fastest schedule of a workload on a target from it, and the cost
model can warm-start on the records of other workloads.  Each line is a
`TrialRecord` (pydantic), so a line written by one version is validated,
not guessed at, when read back.

A log may come from someone else, so it is data and nothing more: no line
is ever run as Python, and every fault is a `ScheduleError` naming the file
(and the line, the field and the value) rather than a crash or a silently
wrong choice.  The one exception is a line cut short (the JSON text ends
before the record does: a process died while writing it): it is skipped
with a warning, wherever it is, since a resumed search appends after it.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import reprlib
import stat
import statistics
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ptowsp.backends import backend
from ptowsp.errors import PtowspError, ScheduleError
from ptowsp.schedules import Schedule, ScheduleRecord, Step
from ptowsp.workloads import Workload

FORMAT = 1
MAX_TRIAL = 2**63 - 1  # a trial index fits a C long, as every index a search writes does


def usable_seconds(seconds: object) -> bool:
    """A measured cost a search may rank: a positive, finite real number of seconds (not a bool)."""
    return (isinstance(seconds, numbers.Real) and not isinstance(seconds, (bool, np.bool_))
            and math.isfinite(seconds) and seconds > 0)


class TrialRecord(BaseModel):
    """One measured (or failed) candidate schedule."""

    # allow_inf_nan=False: NaN or infinite seconds, times or features are refused, never ranked
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    format: Literal[1] = FORMAT  # the version of this layout; another version is refused, not guessed at
    workload: str
    fingerprint: str  # of the workload's definition: records of another definition never mix
    target: str
    trial: int = Field(ge=0, le=MAX_TRIAL)  # index within its search
    steps: list[Step]
    # the measured cost, None when the trial failed; strict: `true` or "1" is no number of seconds
    seconds: float | None = Field(default=None, gt=0, strict=True)
    error: str | None = None  # why it failed: build error, crash, timeout, wrong result
    at: float = Field(strict=True)  # unix time when it was recorded
    knobs: dict[str, bool | int | str] | None = None  # the point of the search space (a search resumes from it)
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


class Line(NamedTuple):
    """A record and the line of the log it was read from (for messages)."""

    number: int
    record: TrialRecord


def append(path: str | Path, records: Iterable[TrialRecord]) -> None:
    """Add records at the end of the log (created if missing), one line each, flushed.

    A log whose last line was cut short gets a newline first, so the next record starts a line of its own.
    """
    path = _path(path)
    try:
        with path.open("a+b") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.write(b"\n")
            for r in records:
                f.write(r.model_dump_json(exclude_none=True).encode() + b"\n")
                f.flush()
    except OSError as e:
        raise ScheduleError(f"cannot write tuning log {path}: {e.strerror or e}") from None


def load(path: str | Path, *, missing_ok: bool = True) -> list[TrialRecord]:
    """Every record of a log, in order; an empty list when the file does not exist and `missing_ok`."""
    return [line.record for line in read(path, missing_ok=missing_ok)]


def read(path: str | Path, *, missing_ok: bool = True) -> list[Line]:
    """Every record of a log with its line number (see the module's docstring for the rules)."""
    path = _path(path)
    data = _read_bytes(path, missing_ok)
    if data is None:
        return []
    chunks = data.split(b"\n")
    out = []
    for number, chunk in enumerate(chunks, 1):
        last = number == len(chunks)  # no newline after it
        try:
            line = chunk.decode("utf-8")
        except UnicodeDecodeError as e:
            if last and e.reason == "unexpected end of data":
                _skip(path, number)  # cut short inside a multi-byte character
                continue
            raise ScheduleError(f"{path}:{number}: not a ptowsp tuning record: not UTF-8 text "
                                f"(byte {chunk[e.start]:#04x} at column {e.start + 1}); is it a tuning log?") from None
        if not line.strip():
            continue
        try:
            out.append(Line(number, TrialRecord.model_validate_json(line)))
        except ValidationError as e:
            if _cut_short(e):
                _skip(path, number)
                continue
            raise ScheduleError(f"{path}:{number}: not a ptowsp tuning record: {_fault(e)}") from None
    return out


def replay(path: str | Path, line: Line, wl: Workload) -> Schedule:
    """A record's schedule on `wl`; a record whose steps do not replay is named by file and line."""
    try:
        return line.record.schedule(wl)
    except PtowspError as e:
        raise ScheduleError(f"{path}:{line.number}: the record's schedule does not replay on workload "
                            f"{wl.name!r}: {e}") from None


def costs(trials: Iterable[TrialRecord]) -> dict[str, tuple[float, TrialRecord]]:
    """Per schedule (its steps as JSON): the median of its successful measurements, and its first record.

    A schedule measured more than once (a search confirms its finalists) costs the median of its
    measurements: one lucky run on a noisy machine does not make it the best.  A record whose
    seconds are not a usable cost (built by hand past validation) counts as a failed trial.
    """
    seen: dict[str, list[TrialRecord]] = {}
    for r in trials:
        if usable_seconds(r.seconds):
            seen.setdefault(steps_key(r), []).append(r)
    return {k: (statistics.median(r.seconds for r in rs), rs[0]) for k, rs in seen.items()}  # type: ignore[misc]


def steps_key(r: TrialRecord) -> str:
    return json.dumps([step.model_dump(exclude_none=True) for step in r.steps], sort_keys=True)


def best(log_file: str | Path, wl: Workload, target: str) -> Schedule:
    """The fastest schedule of `wl` on `target` in the log (by the median of its measurements): of
    `wl` itself, or of `wl` as the target's default build runs it (what a search tunes: on cpu a
    convolution blocked, an operand transposed), whose workload the schedule then belongs to.

    ScheduleError when the log is missing, unreadable or damaged (naming the file and line), or holds
    no successful trial of this workload definition on this target.
    """
    every = read(log_file, missing_ok=False)
    lines = [x for x in every if x.record.fingerprint == wl.fingerprint and x.record.target == target]
    if not lines:  # a search tunes `wl` as the target's default build runs it
        try:
            wl = backend(target).default_workload(wl)
        except PtowspError:  # an unknown or unusable target: no records of it either
            pass
        lines = [x for x in every if x.record.fingerprint == wl.fingerprint and x.record.target == target]
    mine = costs(x.record for x in lines)
    if not mine:
        raise ScheduleError(f"{log_file} holds no successful trial of workload {wl.name!r} "
                            f"(this definition) on target {target!r}")
    chosen = min(mine.values(), key=lambda c: (c[0], c[1].trial))[1]
    return replay(log_file, next(x for x in lines if x.record is chosen), wl)


# -- reading safely ---------------------------------------------------------------------------------
def _path(path: object) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise ScheduleError(f"a tuning log is named by a path (str or os.PathLike), got {path!r}")
    return Path(path)


def _read_bytes(path: Path, missing_ok: bool) -> bytes | None:
    """The log's bytes; None when it is missing and that is allowed.  Only a regular file is read:
    a FIFO or a device (/dev/zero) would block or never end."""
    try:
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise ScheduleError(f"tuning log {path} is a directory, not a file of JSON lines")
        if not stat.S_ISREG(mode):
            raise ScheduleError(f"tuning log {path} is not a regular file (a FIFO, socket or device?)")
        return path.read_bytes()
    except FileNotFoundError:
        if missing_ok:
            return None
        raise ScheduleError(f"tuning log {path} does not exist") from None
    except OSError as e:  # permissions, a path through a file, ...
        raise ScheduleError(f"cannot read tuning log {path}: {e.strerror or e}") from None


def _cut_short(e: ValidationError) -> bool:
    """The JSON text ended before its value did: what a process killed mid-write leaves."""
    first = e.errors()[0]
    return first["type"] == "json_invalid" and "EOF while parsing" in first["msg"]


_short = reprlib.Repr()  # bounded: a value may be huge or deeply nested
_short.maxstring = _short.maxother = 60
_short.maxlevel = 3


def _fault(e: ValidationError) -> str:
    """The first problem of a line: the field, what was expected, and the value found."""
    first = e.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    found = "" if first["type"] == "json_invalid" else f", got {_short.repr(first['input'])}"
    more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
    return f"{'field ' + repr(where) + ': ' if where else ''}{first['msg']}{found}{more}"


def _skip(path: Path, number: int) -> None:
    warnings.warn(f"{path}:{number}: skipped a tuning record cut short (a process died while writing it)",
                  RuntimeWarning, stacklevel=3)
