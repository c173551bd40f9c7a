"""Whole-model tuning: one search per distinct kernel, and the trial budget where it pays.

A model's default schedule runs dozens of kernels (ResNet-18: 48, of which
33 differ).  `AutoScheduler.search` on such a workload (more than
SPLIT_KERNELS kernels, or `split=True`) tunes them as Ansor's task
scheduler does:

1. **Tasks** (tasks.py): each kernel becomes a small workload of its own;
   structurally identical ones are one task with a weight (how many times
   the model runs it).  Each task has its own space (the default
   generator's questions about its tasks) with the whole model's knobs
   (PINNED: fusion, dispatch, prefetch) kept at the default, its own search
   (search.Tuner) and its own records, keyed by the subgraph's fingerprint:
   another model with the same kernel finds them in the log.
2. **Warm-up**: every task's default schedule is measured first, which
   gives the estimate of the model's time, the sum over tasks of weight x
   best time so far.  Each task runs as a program of its own, so each of
   its times holds a run's fixed cost (tens of us, runtime/executor.py),
   which the model pays once: the estimate takes it off every task's time
   (measured at the start, on a one-element workload).
3. **Allocation**: each next batch goes to the task with the largest
   expected gain in that estimate, weight x best time x expected relative
   improvement.  The improvement expected is the task's last batch's (its
   recent gradient, as Ansor's), but at least OPTIMISM / (1 + batches it
   has had): a task not yet tuned is worth a try in proportion to its share
   of the time, and one that stopped improving yields to the others.
   The cost models learn from every task's measurements (normalised per
   task), so a convolution's trials teach the next convolution's search.
4. **Result**: each task's best knobs, at every occurrence, answer the
   default generator's questions for the whole model: one schedule.  The
   default and the tuned model are then measured END_TO_END times each,
   alternating, and the faster by the median is the result: kernels tuned
   alone can interact (caches, the runtime), and tuning never ends worse
   than `pw.build`'s choice.  Those measurements go to the log under the
   model's fingerprint, so `pw.autoschedule.best(log, model, target)`
   finds the model's schedule.

`num_trials` counts schedules measured across all tasks (those in the log
count, as in a single search); re-measurements and the end-to-end check
are on top.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ptowsp.autoschedule import records
from ptowsp.autoschedule.measure import Measurer
from ptowsp.autoschedule.result import SearchResult, best_cost, milliseconds
from ptowsp.autoschedule.tuner import Tuner, measure_logged
from ptowsp.autoschedule.space import Space, generate
from ptowsp.autoschedule.tasks import TuningTask
from ptowsp.schedules import Schedule
from ptowsp.workloads import Workload

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SPLIT_KERNELS = 8  # split=None tunes a workload with more kernels than this task by task
OPTIMISM = 0.3  # the relative gain expected of a task's next batch without evidence, / (1 + its batches)
PINNED = ("fuse", "inline", "dispatch", "prefetch")  # the whole model's knobs: each task keeps the default
END_TO_END = 3  # measurements of the default and of the tuned model each, alternating


@dataclass
class TaskResult:
    """One task's search within a whole-model search."""

    task: TuningTask
    search: SearchResult
    batches: int  # batches the scheduler gave it after its default

    @property
    def name(self) -> str:
        return self.task.name

    @property
    def weight(self) -> int:
        return self.task.weight

    @property
    def trials(self) -> int:
        return len(self.search.history) - self.search.confirmations

    @property
    def default_seconds(self) -> float | None:
        return self.search.default_seconds

    @property
    def best_seconds(self) -> float | None:
        return best_cost(self.search.history)


@dataclass
class ModelSearchResult:
    """A whole-model search: the model's schedule, its end-to-end cost, and each task's search.

    `schedule`, `best_seconds` and `history` mean what they mean in a SearchResult: the schedule to
    build, its measured cost (the median of END_TO_END runs of the whole model), every record.
    """

    workload: Workload  # the model as the target's default build runs it
    target: str
    schedule: Schedule
    best_seconds: float | None  # the chosen schedule's end-to-end median (None: the model failed to run)
    default_seconds: float | None  # the default schedule's, measured beside it
    tuned_seconds: float | None  # the tuned schedule's (equal to best_seconds unless the default won)
    tasks: list[TaskResult]
    history: list[records.TrialRecord]  # every record: the tasks' trials in order, then the end-to-end runs
    estimates: list[tuple[int, float]] = field(default_factory=list)  # (trials so far, estimated model seconds)
    warmup: int = 0  # the trials that measured each task's default (the estimate starts after them)
    fixed_seconds: float = 0.0  # a run's fixed cost, taken off each task's time in the estimate
    wall_seconds: float = 0.0
    measure_seconds: float = 0.0
    seed: int | None = None
    strategy: str = "xgboost"

    @property
    def trials(self) -> int:
        return sum(t.trials for t in self.tasks)

    def table(self) -> str:
        """Each task: weight, trials, default and best time (each a program of its own), and its share
        of the estimated model time."""
        total = sum(t.weight * in_model(t.best_seconds, self.fixed_seconds) for t in self.tasks if t.best_seconds)
        total = total or 1.0
        lines = [f"{'task':<28} {'x':>3} {'trials':>6} {'default':>11} {'best':>11} {'speed-up':>8} {'share':>6}"]
        for t in sorted(self.tasks, key=lambda t: -t.weight * in_model(t.best_seconds or 0.0, self.fixed_seconds)):
            if t.best_seconds is None:
                lines.append(f"{t.name:<28} {t.weight:>3} {t.trials:>6} {'failed':>11}")
                continue
            default = t.default_seconds
            lines.append(f"{t.name:<28} {t.weight:>3} {t.trials:>6} "
                         f"{milliseconds(default) if default else '-':>11} {milliseconds(t.best_seconds):>11} "
                         f"{f'{default / t.best_seconds:.2f}x' if default else '-':>8} "
                         f"{t.weight * in_model(t.best_seconds, self.fixed_seconds) / total:>6.1%}")
        return "\n".join(lines)

    def plot(self, path: str | Path) -> Path:
        """Write `figure()` to `path` (PNG, or what its suffix names)."""
        path = Path(path)
        self.figure().savefig(path)
        return path

    def figure(self) -> Figure:
        """Left: the estimated model time (the sum of weight x best time of the tasks) after each
        trial, as a speed-up over the default's estimate, with the end-to-end measurements at the end.
        Right: where the trials went, task by task, and what each task gained."""
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        fig = Figure(figsize=(13, 5.2), dpi=110, layout="constrained")
        curve, bars = fig.subplots(1, 2, width_ratios=(1.15, 1))
        first = self.estimates[0][1] if self.estimates else None
        if self.warmup:
            curve.axvspan(0, self.warmup, color="tab:gray", alpha=0.15,
                          label=f"warm-up: each task's default measured ({self.warmup} trials)")
        if first:
            xs = [n for n, _ in self.estimates]
            curve.step(xs, [first / e for _, e in self.estimates], where="post",
                       label="estimate: sum over tasks of weight x best time")
        curve.axhline(1.0, color="black", linestyle=":", linewidth=1.2, label="default schedule")
        if self.default_seconds and self.tuned_seconds:
            x = self.estimates[-1][0] if self.estimates else 1
            speed = self.default_seconds / self.tuned_seconds
            curve.plot([x], [speed], "o", color="tab:red",
                       label=f"measured end to end: {milliseconds(self.tuned_seconds)} tuned, "
                             f"{milliseconds(self.default_seconds)} default ({speed:.2f}x)")
        curve.set_xlim(0, max(1, self.trials) * 1.04 + 0.5)  # room for the end-to-end point at the last trial
        curve.set_xlabel("trials (schedules measured, all tasks)")
        curve.set_ylabel("speed relative to the default schedule")
        curve.set_ylim(bottom=0, top=max(1.2, curve.get_ylim()[1] * 1.05))
        curve.xaxis.set_major_locator(MaxNLocator(integer=True))
        curve.grid(alpha=0.3)
        curve.legend(loc="lower right", fontsize="small")
        curve.set_title(f"tuning {self.workload.name} on {self.target}: {len(self.tasks)} tasks, "
                        f"{self.trials} trials", fontsize="medium")
        def share(t: TaskResult, seconds: float | None) -> float:
            return t.weight * in_model(seconds or t.default_seconds, self.fixed_seconds)

        shown = sorted((t for t in self.tasks if t.default_seconds),
                       key=lambda t: -share(t, t.default_seconds))[:16][::-1]
        total = sum(share(t, t.default_seconds) for t in self.tasks if t.default_seconds) or 1.0
        ys = range(len(shown))
        bars.barh(ys, [share(t, t.default_seconds) / total for t in shown], color="tab:gray", alpha=0.4,
                  label="default")
        bars.barh(ys, [share(t, t.best_seconds) / total for t in shown], color="tab:blue", height=0.5,
                  label="tuned")
        bars.set_yticks(list(ys), [f"{t.name} x{t.weight}" if t.weight > 1 else t.name for t in shown],
                        fontsize="small")
        for y, t in zip(ys, shown):
            bars.annotate(f" {t.trials} trial{'s' if t.trials > 1 else ''}",
                          (share(t, t.default_seconds) / total, y), va="center", fontsize="x-small")
        bars.set_xlabel("share of the default's estimated model time")
        bars.set_title("the largest tasks: time before and after, and their trials", fontsize="medium")
        bars.legend(loc="lower right", fontsize="small")
        bars.grid(alpha=0.3, axis="x")
        return fig

    def __repr__(self) -> str:
        best = "no success" if self.best_seconds is None else f"best {milliseconds(self.best_seconds)}"
        default = "" if self.default_seconds is None else f", default {milliseconds(self.default_seconds)}"
        return (f"ModelSearchResult({self.workload.name!r} on {self.target!r}: {len(self.tasks)} tasks, "
                f"{self.trials} trials, {best}{default})")


class ModelTuner:
    """Tunes a model's tasks with one runner (one machine's, or a cluster's: dask_runner.py), batch by
    batch where the expected gain is largest."""

    def __init__(self, model: Workload, target: str, tasks: list[TuningTask], *, workers: int, vector_bytes: int,
                 seed: int, cost_model: str, batch: int, epsilon: float, log_file, warm_start, progress: bool):
        self.model, self.target, self.tasks = model, target, tasks
        self.workers, self.vector_bytes, self.batch, self.log_file = workers, vector_bytes, batch, log_file
        self.seed, self.strategy, self.progress = seed, cost_model, progress
        self.tuners = []
        for task in tasks:
            whole = Space(task.workload, vector_bytes=vector_bytes, workers=workers)
            pins = {n: [whole.knobs[n].default] for n in PINNED if n in whole.knobs}
            space = Space(task.workload, vector_bytes=vector_bytes, workers=workers, overrides=pins)
            self.tuners.append(Tuner(task.workload, target, space, workers, seed, cost_model, batch, epsilon,
                                     log_file, warm_start, False))
        self.priors = [t.prior for t in self.tuners]  # each one's warm start, before the others' trials
        self.batches = [0] * len(tasks)
        self.recent = [0.0] * len(tasks)  # relative improvement of each task's last batch
        self.done: set[int] = set()  # tasks whose space is measured out
        self.history: list[records.TrialRecord] = []
        self.estimates: list[tuple[int, float]] = []
        self.warmup: int | None = None  # trials when the warm-up ended
        self.fixed = 0.0  # a run's fixed cost

    def trials(self) -> int:
        return sum(t.trials() for t in self.tuners)

    def run(self, num_trials: int, runner: Measurer, confirm: int) -> ModelSearchResult:
        started = time.perf_counter()
        for tuner in self.tuners:
            tuner.start(start_from_default=True)
            self.history += tuner.history  # resumed from the log
        self.fixed = _fixed_cost(runner)
        self._replay()
        missing = [n for n, tuner in enumerate(self.tuners) if tuner.trials() == 0]
        for n in missing:  # warm-up: the default of every task not in the log
            if self.trials() < num_trials:
                self._step(n, 1, runner, num_trials)
        if missing or self.warmup is None:
            self.warmup = self.trials()
            self._estimate()
        while self.trials() < num_trials:
            n = self._pick()
            if n is None:
                break  # every task's space is measured out
            self._step(n, min(self.batch, num_trials - self.trials()), runner, num_trials)
        results = []
        for n, (task, tuner) in enumerate(zip(self.tasks, self.tuners)):
            before = len(tuner.history)
            results.append(TaskResult(task, tuner.finish(runner, num_trials, confirm if tuner.trials() > 1 else 0),
                                      self.batches[n]))
            self.history += tuner.history[before:]
        if self.progress:
            print(file=sys.stderr)
        return self._result(results, runner, started)

    # -- allocation -----------------------------------------------------------------------------------
    def _step(self, n: int, count: int, runner: Measurer, num_trials: int) -> None:
        tuner = self.tuners[n]
        shared = [self.priors[n]] + [t.observations() for m, t in enumerate(self.tuners) if m != n]
        tuner.prior = tuple([x for part in shared for x in part[i]] for i in range(3))
        before, length = best_cost(tuner.history), len(tuner.history)
        measured = tuner.step(count, runner, num_trials)
        self.history += tuner.history[length:]
        if measured < count or tuner.trials() >= tuner.space.size():
            self.done.add(n)
        after = best_cost(tuner.history)
        if length:  # not the warm-up
            self.batches[n] += 1
            self.recent[n] = (before - after) / before if before and after else 0.0
        self._estimate()
        if self.progress:
            self._draw(num_trials)

    def _pick(self) -> int | None:
        """The task whose next batch is expected to take the most time off the model's estimate."""
        gains = {}
        for n, task in enumerate(self.tasks):
            best = self._time(n)
            if n in self.done or best is None:  # measured out, or even its default fails
                continue
            gains[n] = task.weight * best * max(self.recent[n], OPTIMISM / (1 + self.batches[n]))
        return max(gains, key=lambda n: (gains[n], -n)) if gains else None

    def _time(self, n: int) -> float | None:
        """Task n's best time so far as part of the model."""
        best = best_cost(self.tuners[n].history)
        return None if best is None else in_model(best, self.fixed)

    def _estimate(self) -> None:
        """After the warm-up: the model's estimated time now, the sum of weight x time of its tasks."""
        if self.warmup is None:
            return
        total = sum(task.weight * (self._time(n) or 0.0) for n, task in enumerate(self.tasks))
        if total > 0:
            self.estimates.append((self.trials(), total))

    def _replay(self) -> None:
        """A resumed search's warm-up and estimates, from its log's records in the order they were
        measured, so its curve starts where the interrupted search's did."""
        order = sorted((r.at, n) for n, tuner in enumerate(self.tuners) for r in tuner.history)
        best: list[float | None] = [None] * len(self.tasks)
        seen = [0] * len(self.tasks)
        keys: list[set[str]] = [set() for _ in self.tasks]  # a trial is a new schedule; a re-measurement is not
        for _, n in order:
            keys[n].add(self.tuners[n].keys[seen[n]])
            seen[n] += 1
            best[n] = best_cost(self.tuners[n].history[:seen[n]])
            count = sum(map(len, keys))
            if self.warmup is None and all(seen):
                self.warmup = count
            if self.warmup is not None:
                total = sum(task.weight * in_model(b, self.fixed) for task, b in zip(self.tasks, best, strict=True)
                            if b is not None)
                if total > 0 and self.estimates and self.estimates[-1][0] == count:
                    self.estimates[-1] = (count, total)  # a re-measurement: the same trial, a new median
                elif total > 0:
                    self.estimates.append((count, total))

    def _draw(self, num_trials: int) -> None:
        estimate = milliseconds(self.estimates[-1][1]) if self.estimates else "-"
        print(f"\rtuning {self.model.name} on {self.target}: {self.trials()}/{num_trials} trials over "
              f"{len(self.tasks)} tasks, estimated {estimate}", end="", file=sys.stderr, flush=True)

    # -- the result -----------------------------------------------------------------------------------
    def schedule(self, results: list[TaskResult]) -> Schedule:
        """The model's schedule: every task's best knobs at every occurrence, the rest the default's."""
        point: dict[str, object] = {}
        for result in results:
            if result.best_seconds is not None and result.search.best_record.knobs is not None:
                point.update(result.task.model_knobs(result.search.best_record.knobs))
        return generate(self.model, point, vector_bytes=self.vector_bytes, workers=self.workers)[0]

    def _result(self, results: list[TaskResult], runner: Measurer, started: float) -> ModelSearchResult:
        tuned = self.schedule(results)
        default = generate(self.model, {}, vector_bytes=self.vector_bytes, workers=self.workers)[0]
        times: dict[str, list[float]] = {"default": [], "tuned": []}
        measuring = sum(t.search.measure_seconds for t in results)
        runs = [("default", default), ("tuned", tuned)] * END_TO_END  # alternating (on one machine)
        first = len(self.history)
        made, waited = measure_logged(
            runner, [schedule for _, schedule in runs],
            lambda n, m: records.TrialRecord.of(runs[n][1], self.target, first + n, m.seconds, m.error), self.log_file)
        measuring += waited
        self.history += made
        for (which, _), r in zip(runs, made, strict=True):
            if r.seconds is not None:
                times[which].append(r.seconds)
        medians = {k: statistics.median(v) if v else None for k, v in times.items()}
        chosen = "tuned"
        if medians["tuned"] is None or (medians["default"] is not None and medians["default"] < medians["tuned"]):
            chosen = "default"
        return ModelSearchResult(self.model, self.target, tuned if chosen == "tuned" else default,
                                 medians[chosen], medians["default"], medians["tuned"], results, self.history,
                                 self.estimates, self.warmup or 0, self.fixed,
                                 wall_seconds=time.perf_counter() - started,
                                 measure_seconds=measuring, seed=self.seed, strategy=self.strategy)


def in_model(seconds: float, fixed: float) -> float:
    """A task's time as part of the model: its time as a program of its own without a run's fixed cost,
    but never less than a tenth of it (the fixed cost is itself a noisy figure)."""
    return max(seconds - fixed, 0.1 * seconds)


def _fixed_cost(runner: Measurer) -> float:
    """A run's fixed cost on the runner's target: the time of a one-element workload (0 if it fails)."""
    wl = Workload("fixed_cost")
    x = wl.input("x", (1,))
    wl.output(wl.compute("y", (1,), lambda i: x[i] + 1.0))
    seconds = runner.measure(Schedule(wl)).seconds
    return seconds or 0.0
