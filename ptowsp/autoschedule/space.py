"""The search space: the default schedule generator's decisions, each with its candidates.

`default_schedule` (schedules/passes/default.py) asks a question at every
choice it makes: fuse or not, where a group member is computed, the
register tile and k block of a contraction, vector partial sums, vector
width and unroll of the innermost loop, how many tasks each grid makes, the
dispatch policy and prefetch depth.  The space runs it with a recorder that
answers from a *point* (knob name -> value) and notes every question asked.
So the space is derived from the workload, without templates, and every
point is a legal schedule by construction; the default point is exactly
what `pw.build` runs.

Which questions are asked can depend on earlier answers (fusion off asks no
placement), so a point may carry knobs its schedule never reads; two points
are the same candidate when their schedules have the same steps (`key`).
"""

from __future__ import annotations

import fnmatch
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ptowsp.errors import ScheduleError
from ptowsp.schedules import Schedule
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.workloads import Workload

Point = dict[str, Any]


@dataclass(frozen=True)
class Knob:
    name: str  # "C.tile_rows", "Y_max.partials", "fuse", "dispatch"
    choices: tuple[Any, ...]
    default: Any


class _Recorder:
    """Answers the generator's questions from a point; remembers what was asked."""

    def __init__(self, point: Mapping[str, Any], overrides: Mapping[str, tuple[Any, ...]]):
        self.point, self.overrides = point, overrides
        self.asked: dict[str, Knob] = {}

    def __call__(self, name: str, candidates: Sequence[Any], default: Any) -> Any:
        choices = self.overrides.get(name, tuple(dict.fromkeys(candidates)))
        if default not in choices:
            default = choices[0]
        self.asked[name] = Knob(name, choices, default)
        value = self.point.get(name, default)
        return value if value in choices else default


def generate(wl: Workload, point: Mapping[str, Any], *, vector_bytes: int, workers: int,
             overrides: Mapping[str, tuple[Any, ...]] | None = None) -> tuple[Schedule, dict[str, Knob]]:
    """The default generator's schedule of `wl` answering from `point` (a knob it does not name, or
    names with a value not among the knob's choices, keeps its default), and the knobs it asked.
    Without building a Space: a whole model's schedule from its tasks' tuned knobs."""
    recorder = _Recorder(point, overrides or {})
    s = default_schedule(wl, vector_bytes=vector_bytes, workers=workers, choose=recorder)
    return s, recorder.asked


class Space:
    """Every schedule the default generator can write for `wl` on a target.

    `overrides` narrows or extends knobs: {name or glob pattern: choices},
    e.g. {"C.k_block": [64, 128]} or {"*.tasks": [8, 16]}.  A numeric knob
    takes any non-negative integers; any other knob only a subset of its own
    choices (ScheduleError here, not a failed trial later).
    """

    def __init__(self, wl: Workload, *, vector_bytes: int = 32, workers: int = 2,
                 overrides: Mapping[str, Sequence[Any]] | None = None):
        self.workload, self.vector_bytes, self.workers = wl, vector_bytes, workers
        self._overrides: dict[str, tuple[Any, ...]] = {}
        self.knobs = self._discover()
        if overrides:
            self._apply(overrides)

    def _generate(self, point: Mapping[str, Any]) -> tuple[Schedule, dict[str, Knob]]:
        return generate(self.workload, point, vector_bytes=self.vector_bytes, workers=self.workers,
                        overrides=self._overrides)

    def _discover(self) -> dict[str, Knob]:
        """The knobs of the default point, then those that other values of each of them open up."""
        _, knobs = self._generate({})
        for knob in list(knobs.values()):
            for value in knob.choices:
                if value != knob.default:
                    for name, more in self._generate({knob.name: value})[1].items():
                        knobs.setdefault(name, more)
        return dict(sorted(knobs.items()))

    def _apply(self, overrides: Mapping[str, Sequence[Any]]) -> None:
        for pattern, choices in overrides.items():
            names = [n for n in self.knobs if fnmatch.fnmatchcase(n, pattern)]
            if not names:
                raise ScheduleError(f"space: no knob matches {pattern!r}; knobs are {', '.join(self.knobs)}")
            if not choices:
                raise ScheduleError(f"space: knob {pattern!r} needs at least one choice")
            for name in names:
                _check_choices(self.knobs[name], choices)
                self._overrides[name] = tuple(dict.fromkeys(choices))
        for name, choices in self._overrides.items():
            for value in choices:
                try:
                    self._generate({name: value})
                except ScheduleError as e:
                    raise ScheduleError(f"space: knob {name!r} cannot take {value!r}: {e}") from None
        self.knobs = self._discover()  # the recorder now answers from the overridden choices

    # -- points -------------------------------------------------------------------------------
    def default(self) -> Point:
        return {name: k.default for name, k in self.knobs.items()}

    def sample(self, rng: random.Random) -> Point:
        return {name: rng.choice(k.choices) for name, k in self.knobs.items()}

    def mutate(self, point: Point, rng: random.Random, among: set[str] | None = None) -> Point:
        """A neighbour: one knob (with a choice; of `among` when given, e.g. the knobs the point's
        schedule reads) set to another of its values, then with probability 1/2 one more, and so on
        (a jump over a valley that one knob at a time cannot cross)."""
        free = [k for k in self.knobs.values() if len(k.choices) > 1 and (among is None or k.name in among)]
        out = dict(point)
        for knob in rng.sample(free, k=len(free)):
            out[knob.name] = rng.choice([c for c in knob.choices if c != point.get(knob.name)])
            if rng.random() < 0.5:
                break
        return out

    def schedule(self, point: Mapping[str, Any]) -> Schedule:
        return self._generate(point)[0]

    def reads(self, point: Mapping[str, Any]) -> tuple[Schedule, Point]:
        """The schedule and the knobs it was generated from (the others did not matter)."""
        schedule, asked = self._generate(point)
        return schedule, {name: point.get(name, k.default) for name, k in asked.items() if name in self.knobs}

    def size(self) -> int:
        """Points in the space (an upper bound on distinct schedules)."""
        n = 1
        for k in self.knobs.values():
            n *= len(k.choices)
        return n

    def __repr__(self) -> str:
        lines = [f"Space({self.workload.name!r}: {len(self.knobs)} knobs, {self.size():.3g} points)"]
        lines += [f"  {k.name}: {list(k.choices)} (default {k.default!r})" for k in self.knobs.values()]
        return "\n".join(lines)


def _check_choices(knob: Knob, choices: Sequence[Any]) -> None:
    numeric = all(isinstance(c, int) and not isinstance(c, bool) for c in knob.choices)
    for value in choices:
        if numeric:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        else:
            ok = value in knob.choices
        if not ok:
            expected = "non-negative integers" if numeric else f"one of {list(knob.choices)}"
            raise ScheduleError(f"space: knob {knob.name!r} cannot take {value!r}: expected {expected}")


def key(schedule: Schedule) -> str:
    """What makes two candidates the same: their steps."""
    return schedule.to_json()
