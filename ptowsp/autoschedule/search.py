"""`AutoScheduler.search`: one workload's search (tuner.py), or a whole model's, task by task
(model_search.py), as the workload's size asks."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ptowsp.autoschedule.measure import Measurer, Runner
from ptowsp.autoschedule.model_search import SPLIT_KERNELS, ModelSearchResult, ModelTuner
from ptowsp.autoschedule.result import SearchResult
from ptowsp.autoschedule.space import Space
from ptowsp.autoschedule.tasks import extract, kernel_groups
from ptowsp.autoschedule.tuner import CONFIRM, Tuner
from ptowsp.backends import backend
from ptowsp.errors import ScheduleError
from ptowsp.runtime.scheduler import worker_classes
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.workloads import Workload


class AutoScheduler:
    """`AutoScheduler.search(wl, target, num_trials, ...)`: the tuned schedule and every trial."""

    @staticmethod
    def search(wl: Workload, target: str = "cpu", num_trials: int = 64, cost_model: str = "xgboost",
               log_file: str | Path | None = None, seed: int = 0, *, workers: int | None = None,
               space: Mapping[str, Sequence[Any]] | Space | None = None, batch: int = 8, epsilon: float = 0.2,
               start_from_default: bool = True, warm_start: str | Path | None = None, confirm: int = CONFIRM,
               runner: Measurer | None = None, progress: bool | None = None, timeout: float = 60.0,
               split: bool | None = None) -> SearchResult | ModelSearchResult:
        """Tune `wl` on `target` for `num_trials` measured trials (those already in `log_file` count;
        fewer when the space has fewer distinct schedules).  What is tuned is the workload the
        target's default build runs (`pw.build(wl)`): on cpu, a convolution is blocked by channels
        first (schedules/passes/blocking.py), and the result's schedule belongs to that workload.

        cost_model: "xgboost" (model-guided annealing) or "random" (uniform sampling, the baseline).
        space: a Space, or {knob or glob pattern: choices} narrowing or extending the default one.
        warm_start: a log whose records of other workloads pre-train the model.
        confirm: how many of the best schedules are measured again at the end (0: none).
        runner: what measures: a measure.Runner (one worker process here) or a DaskRunner (the workers
        of a dask cluster); its target must match, it measures any workload, and the search leaves it
        open.  None: a Runner of the search's own, closed at the end.
        split: tune kernel by kernel (model_search.py: a ModelSearchResult), or the workload as one
        space; None splits a workload whose default schedule has more than SPLIT_KERNELS kernels.
        """
        if cost_model not in ("xgboost", "random"):
            raise ScheduleError(f"cost_model {cost_model!r} is not supported: use 'xgboost' or 'random'")
        if wl.sizes:
            raise ScheduleError(f"workload {wl.name!r} has symbolic sizes ({', '.join(wl.sizes)}); the "
                                "AutoScheduler tunes one binding at a time: search wl.bind(...)")
        if num_trials < 1 or batch < 1 or not 0.0 <= epsilon <= 1.0:
            raise ScheduleError(f"need num_trials >= 1, batch >= 1 and 0 <= epsilon <= 1; got "
                                f"num_trials={num_trials}, batch={batch}, epsilon={epsilon}")
        if runner is not None and runner.target != target:
            raise ScheduleError(f"the runner measures on {runner.target!r}, not {target!r}")
        n_workers = len(worker_classes(workers))
        wl = backend(target).default_workload(wl)
        vector_bytes = backend(target).vector_bytes
        if split is None:
            kernels = kernel_groups(wl, default_schedule(wl, vector_bytes=vector_bytes, workers=n_workers))
            split = len(kernels) > SPLIT_KERNELS
        if split:
            if space is not None:
                raise ScheduleError(f"a whole-model search of {wl.name!r} tunes each kernel in a space of its own "
                                    "and takes no space=; pass split=False to search the workload as one space")
            if not start_from_default:
                raise ScheduleError("a whole-model search measures every task's default first (its estimate of "
                                    "the model's time): start_from_default=False needs split=False")
            tasks = extract(wl, vector_bytes=vector_bytes, workers=n_workers)
            tuner = ModelTuner(wl, target, tasks, workers=n_workers, vector_bytes=vector_bytes, seed=seed,
                               cost_model=cost_model, batch=batch, epsilon=epsilon, log_file=log_file,
                               warm_start=warm_start, progress=sys.stderr.isatty() if progress is None else progress)
            own_runner = runner is None
            runner = runner or Runner(wl, target, workers=n_workers, timeout=timeout)
            try:
                return tuner.run(num_trials, runner, confirm)
            finally:
                if own_runner:
                    runner.close()
        if not isinstance(space, Space):
            space = Space(wl, vector_bytes=vector_bytes, workers=n_workers, overrides=space)
        own_runner = runner is None
        runner = runner or Runner(wl, target, workers=n_workers, timeout=timeout)
        tuner = Tuner(wl, target, space, n_workers, seed, cost_model, batch, epsilon, log_file, warm_start,
                       sys.stderr.isatty() if progress is None else progress)
        try:
            return tuner.run(num_trials, runner, start_from_default, confirm)
        finally:
            if own_runner:
                runner.close()
