"""What a search returns: the best schedule, its cost, every trial, and the tuning curve.

"Best" has one definition wherever it is shown (the progress bar, `best_seconds` and the result's
str, the curve's last point): the lowest cost among the schedules measured, a schedule's cost being
the median of its measurements (`records.costs`; the search measures its finalists three times).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ptowsp.autoschedule.records import TrialRecord, costs, steps_key
from ptowsp.errors import ScheduleError
from ptowsp.schedules import Schedule
from ptowsp.workloads import Workload

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def best_cost(history: Iterable[TrialRecord]) -> float | None:
    """The search's best figure so far (None before a success): the module docstring's definition."""
    mine = costs(history)
    return min(c for c, _ in mine.values()) if mine else None


def milliseconds(seconds: float) -> str:
    """How every "best" figure is printed, so the progress bar, the result and the curve read alike."""
    return f"{seconds * 1e3:.3f} ms"


@dataclass
class SearchResult:
    workload: Workload
    target: str
    history: list[TrialRecord]  # every measurement, in order (a resumed search's log first, confirmations last)
    wall_seconds: float = 0.0  # the search's wall time
    measure_seconds: float = 0.0  # of which spent building and timing candidates (the worker process)
    resumed: int = 0  # trials taken from the log rather than measured now
    strategy: str = "xgboost"
    seed: int | None = None
    default_schedule: Schedule | None = None  # what pw.build would pick: the curve's reference line

    @property
    def best_record(self) -> TrialRecord:
        """The best schedule's first record, its `seconds` its cost (the median of its measurements)."""
        mine = costs(self.history)
        if not mine:
            raise ScheduleError(f"no trial of {self.workload.name!r} on {self.target!r} succeeded "
                                f"({len(self.history)} failed; see history[i].error)")
        seconds, record = min(mine.values(), key=lambda c: (c[0], c[1].trial))
        return record.model_copy(update={"seconds": seconds})

    @property
    def schedule(self) -> Schedule:
        return self.best_record.schedule(self.workload)

    @property
    def best_seconds(self) -> float:
        seconds = self.best_record.seconds
        assert seconds is not None
        return seconds

    @property
    def default_seconds(self) -> float | None:
        """The default schedule's cost, when the search measured it (its first trial, by default)."""
        if self.default_schedule is None:
            return None
        wanted = steps_key(TrialRecord.of(self.default_schedule, self.target, 0, None))
        found = costs(r for r in self.history if steps_key(r) == wanted)
        return next(iter(found.values()))[0] if found else None

    @property
    def confirmations(self) -> int:
        """Records that re-measure a schedule measured before (the search's final check)."""
        return len(self.history) - len({steps_key(r) for r in self.history})

    @property
    def overhead(self) -> float:
        """Share of wall time spent outside measurement (model, annealing, features, log)."""
        return 0.0 if self.wall_seconds <= 0 else max(0.0, 1.0 - self.measure_seconds / self.wall_seconds)

    def curve(self) -> list[float | None]:
        """After each trial, the cost of the best schedule found so far (None until one succeeds).

        A trial is a schedule's first measurement (the finalists' re-measurements add no point), and
        a schedule counts at its cost after the whole search, so the last point is `best_seconds`.
        """
        final = costs(self.history)
        out: list[float | None] = []
        best = None
        seen: set[str] = set()
        for r in self.history:
            key = steps_key(r)
            if key in seen:
                continue
            seen.add(key)
            if key in final and (best is None or final[key][0] < best):
                best = final[key][0]
            out.append(best)
        return out

    def trials_to_reach(self, seconds: float) -> int | None:
        """How many trials it took to find a schedule at least this fast (None: never)."""
        for n, best in enumerate(self.curve(), 1):
            if best is not None and best <= seconds:
                return n
        return None

    def plot(self, path: str | Path, *others: SearchResult, flops: float | None = None,
             default: float | None = None) -> Path:
        """Write `figure(...)`, the tuning curve, to `path` (PNG, or what its suffix names)."""
        path = Path(path)
        self.figure(*others, flops=flops, default=default).savefig(path)
        return path

    def figure(self, *others: SearchResult, flops: float | None = None, default: float | None = None) -> Figure:
        """Best so far vs trial for this search and any `others` (a random search, other seeds) on one chart,
        with a line at the default schedule (`default` seconds, else the first of these searches that
        measured it).  Up is better, from zero: the y axis is GFLOP/s with `flops`, else the speed relative
        to the default schedule (a first trial 15x slower than the rest would squash a time axis), else,
        when no default was measured, the time in milliseconds (down is better).

        A matplotlib Figure, not pyplot's: drawing never changes the user's matplotlib backend.
        """
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        results = (self, *others)
        if default is None:
            default = next((r.default_seconds for r in results if r.default_seconds is not None), None)
        if flops:
            value, ylabel = (lambda s: flops / s / 1e9), "best GFLOP/s so far"
        elif default is not None:
            value, ylabel = (lambda s: default / s), "best speed so far, relative to the default schedule"
        else:
            value, ylabel = (lambda s: s * 1e3), "best time so far (ms)"
        fig = Figure(figsize=(8.5 if others else 7.5, 4.5 + 0.15 * len(others)), dpi=110, layout="constrained")
        ax = fig.add_subplot()
        trials = 1
        for result in results:
            curve = result.curve()
            points = [(n, c) for n, c in enumerate(curve, 1) if c is not None]
            seed = "" if result.seed is None else f", seed {result.seed}"
            label = f"{result.strategy}{seed}"
            if points:
                best = points[-1][1]
                rate = f", {flops / best / 1e9:.1f} GFLOP/s" if flops and not others else ""  # else: the y axis
                speedup = f", {default / best:.2f}x the default" if default else ""
                label += f": best {milliseconds(best)}{rate}{speedup}"
                xs, ys = [n for n, _ in points], [value(c) for _, c in points]
                (line,) = ax.step(xs, ys, where="post", label=label,
                                  linestyle="--" if result.strategy == "random" else "-")
                ax.plot(xs[-1], ys[-1], "o", color=line.get_color())
            trials = max(trials, len(curve))
        if default is not None:
            ax.axhline(value(default), color="black", linestyle=":", linewidth=1.2, zorder=1.5,
                       label=f"default schedule: {milliseconds(default)}"
                       + (f", {flops / default / 1e9:.1f} GFLOP/s" if flops else ""))
        ax.set_xlim(0.5, trials + 0.5)
        ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.05)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("trial (schedules measured; the finalists' re-measurements add none)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"tuning {self.workload.name} on {self.target}\n"
                     "(a schedule's time: the median of its measurements)", fontsize="medium")
        ax.grid(alpha=0.3)
        fig.legend(loc="outside lower center", ncol=2 if len(results) > 1 else 1, fontsize="small", frameon=False)
        return fig

    def __repr__(self) -> str:
        best = best_cost(self.history)
        failed = sum(r.seconds is None for r in self.history)
        trials = len(self.history) - self.confirmations
        return (f"SearchResult({self.workload.name!r} on {self.target!r}: {trials} trials, "
                f"{'no success' if best is None else 'best ' + milliseconds(best)}, {failed} failed, {self.strategy})")
