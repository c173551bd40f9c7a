"""What a search returns: the best schedule, its cost, every trial, and the tuning curve."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ptowsp.autoschedule.records import TrialRecord, costs, steps_key
from ptowsp.errors import ScheduleError
from ptowsp.schedules import Schedule
from ptowsp.workloads import Workload


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

    @property
    def best_record(self) -> TrialRecord:
        """The best schedule's first record, its `seconds` the median of all its measurements."""
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
    def confirmations(self) -> int:
        """Records that re-measure a schedule measured before (the search's final check)."""
        return len(self.history) - len({steps_key(r) for r in self.history})

    @property
    def overhead(self) -> float:
        """Share of wall time spent outside measurement (model, annealing, features, log)."""
        return 0.0 if self.wall_seconds <= 0 else max(0.0, 1.0 - self.measure_seconds / self.wall_seconds)

    def curve(self) -> list[float | None]:
        """Best seconds measured after each trial (None until one succeeds); a schedule's first
        measurement only, so the curve shows the search, not its final confirmations."""
        out: list[float | None] = []
        best = None
        seen: set[str] = set()
        for r in self.history:
            key = steps_key(r)
            if key in seen:
                continue
            seen.add(key)
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
            seed = "" if result.seed is None else f", seed {result.seed}"
            ax.step(xs, ys, where="post", label=f"{result.strategy}{seed}",
                    linestyle="--" if result.strategy == "random" else "-")
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
        best = f"best {self.best_seconds * 1e3:.3f} ms" if ok else "no success"
        trials = len(self.history) - self.confirmations
        return (f"SearchResult({self.workload.name!r} on {self.target!r}: {trials} trials, {best}, "
                f"{len(self.history) - len(ok)} failed, {self.strategy})")
