"""What a search returns: the best schedule, its cost, every trial, and the tuning curve."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ptowsp.autoschedule.records import TrialRecord
from ptowsp.errors import ScheduleError
from ptowsp.schedules import Schedule
from ptowsp.workloads import Workload


@dataclass
class SearchResult:
    workload: Workload
    target: str
    history: list[TrialRecord]  # every trial, in order (a resumed search's log trials first)
    wall_seconds: float = 0.0  # the search's wall time
    measure_seconds: float = 0.0  # of which spent building and timing candidates (the worker process)
    resumed: int = 0  # trials taken from the log rather than measured now
    strategy: str = "xgboost"

    @property
    def best_record(self) -> TrialRecord:
        ok = [r for r in self.history if r.seconds is not None]
        if not ok:
            raise ScheduleError(f"no trial of {self.workload.name!r} on {self.target!r} succeeded "
                                f"({len(self.history)} failed; see history[i].error)")
        return min(ok, key=lambda r: (r.seconds, r.trial))

    @property
    def schedule(self) -> Schedule:
        return self.best_record.schedule(self.workload)

    @property
    def best_seconds(self) -> float:
        seconds = self.best_record.seconds
        assert seconds is not None
        return seconds

    @property
    def overhead(self) -> float:
        """Share of wall time spent outside measurement (model, annealing, features, log)."""
        return 0.0 if self.wall_seconds <= 0 else max(0.0, 1.0 - self.measure_seconds / self.wall_seconds)

    def curve(self) -> list[float | None]:
        """Best seconds after each trial (None until one succeeds)."""
        out: list[float | None] = []
        best = None
        for r in self.history:
            if r.seconds is not None and (best is None or r.seconds < best):
                best = r.seconds
            out.append(best)
        return out

    def trials_to_reach(self, seconds: float) -> int | None:
        """How many trials it took to find a schedule at least this fast (None: never)."""
        for n, best in enumerate(self.curve(), 1):
            if best is not None and best <= seconds:
                return n
        return None

    def plot(self, path: str | Path, *others: SearchResult, flops: float | None = None) -> Path:
        """Best cost vs trial for this search and any `others` (a random search, other seeds) on one chart.

        With `flops`, the y axis is GFLOP/s instead of milliseconds.
        """
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        for result in (self, *others):
            curve = result.curve()
            xs = [n for n, c in enumerate(curve, 1) if c is not None]
            ys = [flops / c / 1e9 if flops else c * 1e3 for c in curve if c is not None]
            ax.step(xs, ys, where="post", label=f"{result.strategy}")
        ax.set_xlabel("trial")
        ax.set_ylabel("best GFLOP/s" if flops else "best time (ms)")
        ax.set_title(f"tuning {self.workload.name} on {self.target}")
        ax.grid(alpha=0.3)
        ax.legend()
        path = Path(path)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path

    def __repr__(self) -> str:
        ok = [r for r in self.history if r.seconds is not None]
        best = f"best {min(r.seconds for r in ok) * 1e3:.3f} ms" if ok else "no success"
        return (f"SearchResult({self.workload.name!r} on {self.target!r}: {len(self.history)} trials, {best}, "
                f"{len(self.history) - len(ok)} failed, {self.strategy})")
