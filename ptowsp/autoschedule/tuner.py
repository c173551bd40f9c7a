"""One workload's search: model-guided simulated annealing over the space, measured in batches.

Each round (Ansor / TVM's SA explorer, on this project's space):

1. retrain the cost model on every measurement so far;
2. run parallel simulated-annealing chains over the space with the model's
   prediction as the energy, starting from the best measured points (random
   ones while fewer are measured); every point a chain visits is a candidate;
3. pick the batch: greedily the best predicted, each pick scored by its
   prediction plus a diversity term (knobs differing from the points
   already picked) and a novelty term (knobs differing from the nearest
   point measured: a neighbour of a measured point mostly re-measures the
   noise around it), and an `epsilon` share of uniformly random points;
4. measure the batch with the runner: in the isolated worker process
   (measure.py), or spread over a dask cluster (dask_runner.py), appending
   every trial to the log as its result arrives.

At the end the three best schedules are measured twice more, at different
moments, and the result is the best by the median of its measurements: on
a noisy machine the lowest of many measurements is often a lucky one.

Until the model has something to learn from (a batch with two different
costs), candidates are random.  The first trial is the default schedule
unless `start_from_default=False`: tuning never ends worse than
`pw.build`'s choice.  Everything random flows from `seed`.
"""

from __future__ import annotations

import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ptowsp.autoschedule import records
from ptowsp.autoschedule.cost_model import CostModel
from ptowsp.autoschedule.features import FEATURE_NAMES, FEATURE_SET, program_features
from ptowsp.autoschedule.measure import Measurement, Measurer, arrivals
from ptowsp.autoschedule.result import SearchResult, best_cost, milliseconds
from ptowsp.autoschedule.space import Point, Space, key
from ptowsp.lower import lower_program
from ptowsp.lower.kernel import Kernel
from ptowsp.schedules import Schedule

CHAINS = 8  # annealing chains per round, each from one of the best measured points
POOL = 4  # a batch is picked from the best POOL x batch candidates by prediction
CONFIRM = 3  # finalists measured again at the end
CONFIRM_TIMES = 3  # measurements of each finalist in all
CONFIRM_ROUNDS = 3  # rounds of finalists at most: each round the best not yet confirmed
STEPS = 4  # mutations per chain per round
DIVERSITY = 0.3  # weight of the distance-to-picked term against the (0..1 normalised) prediction
NOVELTY = 0.5  # weight of the distance-to-measured term


class _Candidates:
    """Schedules, keys, read knobs and features of points, each computed once (the search revisits
    points often)."""

    def __init__(self, space: Space, workers: int, vector_bytes: int):
        self.space, self.workers, self.vector_bytes = space, workers, vector_bytes
        self._key: dict[tuple, str] = {}
        self._schedule: dict[str, Schedule] = {}
        self._read: dict[str, Point] = {}
        self._features: dict[str, np.ndarray] = {}
        self._kernels: dict[tuple, Kernel] = {}  # lowered tasks by lower.task_key: most points share most
        self._scans: dict[int, tuple] = {}  # and their feature walks (features.program_features)

    def key(self, point: Point) -> str:
        frozen = tuple(sorted(point.items()))
        if frozen not in self._key:
            schedule, read = self.space.reads(point)
            self._key[frozen] = k = self.add(schedule)
            self._read.setdefault(k, read)
        return self._key[frozen]

    def add(self, schedule: Schedule, features: Sequence[float] | None = None) -> str:
        """Register a schedule (from a point, or resumed from a log with its stored features); its key."""
        k = key(schedule)
        self._schedule.setdefault(k, schedule)
        if features is not None:
            self._features.setdefault(k, np.asarray(features))
        return k

    def schedule(self, k: str) -> Schedule:
        return self._schedule[k]

    def read(self, point: Point) -> Point:
        """The knobs the point's schedule was generated from, with their values."""
        return self._read[self.key(point)]

    def features(self, k: str) -> np.ndarray:
        if k not in self._features:
            s = self._schedule[k]
            program = lower_program(s.workload, s, kernels=self._kernels)
            self._features[k] = program_features(program, workers=self.workers, vector_bytes=self.vector_bytes,
                                                 scans=self._scans)
        return self._features[k]


class Tuner:
    """One workload's search, in steps: `start`, then `step` a batch at a time, then `finish`
    (`run` does all three; a whole-model search interleaves the steps of its tasks' tuners)."""

    def __init__(self, wl, target, space, workers, seed, cost_model, batch, epsilon, log_file, warm_start,
                 progress):
        self.wl, self.target, self.space, self.workers = wl, target, space, workers
        self.rng, self.seed = random.Random(seed), seed
        self.guided = cost_model == "xgboost"
        self.model = CostModel(seed)
        self.batch, self.epsilon, self.log_file, self.progress = batch, epsilon, log_file, progress
        self.candidates = _Candidates(space, workers, space.vector_bytes)
        self.history: list[records.TrialRecord] = []
        self.keys: list[str] = []  # the candidate key of each trial in history
        self.points: dict[str, Point] = {}  # measured key -> its point
        self.prior = _prior(warm_start, wl.fingerprint) if self.guided else ([], [], [])
        self.measuring = 0.0  # seconds spent in the runner

    def resume(self) -> None:
        """Take the log's trials of this workload and target as this search's first ones.  The log is
        read, then created or checked writable: a bad log fails here, before the first trial (and a
        file that is no log is never written to)."""
        if not self.log_file:
            return
        lines = records.read(self.log_file)
        records.append(self.log_file, [])
        for line in lines:
            r = line.record
            if r.fingerprint != self.wl.fingerprint or r.target != self.target:
                continue
            k = self.candidates.add(records.replay(self.log_file, line, self.wl), _stored_features(r))
            self.history.append(r)
            self.keys.append(k)
            if r.knobs is not None:
                self.points[k] = dict(r.knobs)

    def run(self, num_trials: int, runner: Measurer, start_from_default: bool, confirm: int) -> SearchResult:
        self.start(start_from_default)
        while self.trials() < num_trials:
            if not self.step(min(self.batch, num_trials - self.trials()), runner, num_trials):
                break  # every point of the space is measured
        return self.finish(runner, num_trials, confirm)

    def start(self, start_from_default: bool) -> None:
        """Resume from the log; the first batch then starts with the default schedule unless resumed."""
        self.started = time.perf_counter()
        self.resume()
        self.resumed = len(self.history)
        self.first = start_from_default and self.resumed == 0

    def step(self, count: int, runner: Measurer, num_trials: int) -> int:
        """Measure one batch of up to `count` new schedules; how many (0: the space is exhausted)."""
        chosen = self._next_batch(count, self.first)
        self.first = False
        self._measure([(self.candidates.key(point), point) for point in chosen], runner, num_trials)
        return len(chosen)

    def finish(self, runner: Measurer, num_trials: int, confirm: int) -> SearchResult:
        """Measure the finalists again; the result."""
        self._confirm(runner, num_trials, confirm)
        wall = time.perf_counter() - self.started
        if self.progress:
            print(file=sys.stderr)
        default = self.candidates.schedule(self.candidates.key(self.space.default()))
        return SearchResult(self.wl, self.target, self.history, wall_seconds=wall, measure_seconds=self.measuring,
                            resumed=self.resumed, strategy="xgboost" if self.guided else "random", seed=self.seed,
                            default_schedule=default)

    def observations(self) -> tuple[list, list, list]:
        """This search's measurements as training data for another's cost model: features, costs and
        workload groups (a whole-model search's tasks share what they learn, as Ansor's do)."""
        feats = [self.candidates.features(k) for k in self.keys]
        return feats, [r.seconds for r in self.history], [r.fingerprint for r in self.history]

    def trials(self) -> int:
        return len(set(self.keys))

    def _confirm(self, runner: Measurer, num_trials: int, count: int) -> None:
        """Measure the `count` best schedules, and the default they are judged against, again until
        each has CONFIRM_TIMES measurements, at different moments: on a noisy machine the lowest of
        many measurements is often a lucky one, and the result is chosen by the median of each
        schedule's measurements.  Confirmed finalists that fall back let the next best in, which
        are confirmed in turn (at most CONFIRM_ROUNDS rounds): otherwise the best would be the
        luckiest schedule measured once (BERT's FFN: 1.87 ms once, 2.10-2.15 ms again, like the
        default's 2.15-2.23)."""
        default = self.candidates.key(self.space.default())
        confirmed: set[str] = set()
        for _ in range(CONFIRM_ROUNDS):
            measured: dict[str, list[float]] = {}
            for r, k in zip(self.history, self.keys):
                if r.seconds is not None:
                    measured.setdefault(k, []).append(r.seconds)
            ranked = sorted(measured, key=lambda k: statistics.median(measured[k]))
            finalists = [k for k in ranked[:count] if k not in confirmed]
            if finalists and default in measured and default not in confirmed | set(finalists):
                finalists.append(default)  # the yardstick too: measured once, first, as every gain's base
            if not finalists:
                return
            confirmed |= set(finalists)
            done = {k: len(measured[k]) for k in finalists}  # a failed re-measurement counts: not retried
            for _ in range(CONFIRM_TIMES - 1):  # round-robin over the finalists: each at other moments
                again = [k for k in finalists if done[k] < CONFIRM_TIMES]
                for k in again:
                    done[k] += 1
                self._measure([(k, self.points.get(k)) for k in again], runner, num_trials)

    def _measure(self, batch: list[tuple[str, Point | None]], runner: Measurer, num_trials: int) -> None:
        """Measure a batch of (key, point), logging each trial as its result arrives."""
        first = len(self.history)

        def record(n: int, m: Measurement) -> records.TrialRecord:
            k, point = batch[n]
            return records.TrialRecord.of(self.candidates.schedule(k), self.target, first + n, m.seconds, m.error,
                                          knobs=point, features=self.candidates.features(k),
                                          feature_set=FEATURE_SET)

        def draw(arrived: dict[int, records.TrialRecord]) -> None:
            done = len(set(self.keys) | {batch[n][0] for n in arrived})
            _draw(self.wl.name, self.target, done, num_trials, self.history + list(arrived.values()))

        made, waited = measure_logged(runner, [self.candidates.schedule(k) for k, _ in batch], record,
                                      self.log_file, draw if self.progress else None)
        self.measuring += waited
        for r, (k, point) in zip(made, batch, strict=True):
            self.history.append(r)
            self.keys.append(k)
            if point is not None:
                self.points[k] = point

    # -- choosing a batch ---------------------------------------------------------------------------
    def _next_batch(self, count: int, first: bool) -> list[Point]:
        chosen: list[Point] = [self.space.default()] if first else []
        taken = set(self.keys) | {self.candidates.key(p) for p in chosen}
        if self.guided and self._train():
            explore = int(round(self.epsilon * count))
            chosen += self._best_predicted(count - len(chosen) - explore, taken)
            taken |= {self.candidates.key(p) for p in chosen}
        while len(chosen) < count:
            point = self._random_unmeasured(taken)
            if point is None:
                break  # the space is exhausted
            chosen.append(point)
            taken.add(self.candidates.key(point))
        return chosen[:count]

    def _train(self) -> bool:
        feats = [self.candidates.features(k) for k in self.keys]
        X = np.array(self.prior[0] + feats) if feats or self.prior[0] else np.zeros((0, len(FEATURE_NAMES)))
        seconds = self.prior[1] + [r.seconds for r in self.history]
        groups = self.prior[2] + [r.fingerprint for r in self.history]
        self.model.fit(X, seconds, groups)
        return self.model.trained

    def _score(self, points: list[Point]) -> np.ndarray:
        return self.model.predict(np.array([self.candidates.features(self.candidates.key(p)) for p in points]))

    def _best_predicted(self, count: int, taken: set[str]) -> list[Point]:
        if count <= 0:
            return []
        visited = self._anneal()
        ranked = sorted(((s, k, p) for k, (s, p) in visited.items() if k not in taken), key=lambda t: -t[0])
        pool = ranked[: POOL * count]
        if not pool:
            return []
        hi, lo = pool[0][0], pool[-1][0]
        spread = (hi - lo) or 1.0
        measured = [self.candidates.read(p) for p in self.points.values()]

        def nearest(point: Point, others: list[Point]) -> float:
            knobs = self.candidates.read(point)
            return min((_distance(knobs, other) for other in others), default=1.0)

        # the normalised prediction plus novelty does not change as points are picked; diversity does
        scored = [((s - lo) / spread + NOVELTY * nearest(p, measured), p) for s, _, p in pool]
        picked: list[Point] = []
        while scored and len(picked) < count:
            chosen = [self.candidates.read(p) for p in picked]
            best = max(scored, key=lambda item: item[0] + DIVERSITY * nearest(item[1], chosen))
            scored.remove(best)
            picked.append(best[1])
        return picked

    def _anneal(self) -> dict[str, tuple[float, Point]]:
        """Chains of mutations accepted by the Metropolis rule on predicted throughput; every point seen."""
        measured = sorted((r.seconds, k) for r, k in zip(self.history, self.keys) if r.seconds is not None)
        starts = [self.points[k] for _, k in measured if k in self.points][:CHAINS]
        chains = starts + [self.space.sample(self.rng) for _ in range(CHAINS - len(starts))]
        scores = self._score(chains)
        visited = {self.candidates.key(p): (float(s), p) for p, s in zip(chains, scores)}
        for step in range(STEPS):
            temperature = 0.05 * (1 - step / STEPS) + 1e-3
            proposals = [self.space.mutate(p, self.rng, among=set(self.candidates.read(p))) for p in chains]
            new = self._score(proposals)
            for n, (p, s) in enumerate(zip(proposals, new)):
                visited.setdefault(self.candidates.key(p), (float(s), p))
                if s >= scores[n] or self.rng.random() < math.exp((s - scores[n]) / temperature):
                    chains[n], scores[n] = p, s
        return visited

    def _random_unmeasured(self, taken: set[str], tries: int = 64) -> Point | None:
        for _ in range(tries):
            point = self.space.sample(self.rng)
            if self.candidates.key(point) not in taken:
                return point
        return None


def measure_logged(runner: Measurer, schedules: Sequence[Schedule],
                   record: Callable[[int, Measurement], records.TrialRecord], log_file: str | Path | None,
                   arrived: Callable[[dict[int, records.TrialRecord]], None] | None = None,
                   ) -> tuple[list[records.TrialRecord], float]:
    """Measure `schedules`; `record(n, m)` makes the nth one's record, appended to the log as soon as its
    result arrives (an interrupted search loses no finished trial) and passed to `arrived` with those
    before it.  The records in the schedules' order (the search that follows then does not depend on
    which worker of a cluster finished first), and the seconds spent waiting for them."""
    made: dict[int, records.TrialRecord] = {}
    waited = 0.0
    for n, m, wait in arrivals(runner, schedules):
        waited += wait
        made[n] = record(n, m)
        if log_file:
            records.append(log_file, [made[n]])
        if arrived is not None:
            arrived(made)
    return [made[n] for n in range(len(schedules))], waited


def _distance(a: Point, b: Point) -> float:
    """The share of knobs on which two points differ (of those their schedules read)."""
    names = set(a) | set(b)
    return sum(a.get(n) != b.get(n) for n in names) / max(1, len(names))


def _prior(log_file: str | Path | None, fingerprint: str) -> tuple[list, list, list]:
    """Features, costs and workload groups of other workloads' records, for a warm start."""
    feats, seconds, groups = [], [], []
    for r in records.load(log_file, missing_ok=False) if log_file else []:
        features = _stored_features(r)
        if r.fingerprint != fingerprint and features is not None:
            feats.append(features)
            seconds.append(r.seconds)
            groups.append(r.fingerprint)
    return feats, seconds, groups


def _stored_features(r: records.TrialRecord) -> np.ndarray | None:
    """A record's features when they follow this definition (set and length), else None (recomputed)."""
    if r.features is None or r.feature_set != FEATURE_SET or len(r.features) != len(FEATURE_NAMES):
        return None
    return np.asarray(r.features)


def _draw(name: str, target: str, done: int, total: int, history: list[records.TrialRecord]) -> None:
    width = 30
    filled = width * min(done, total) // max(1, total)
    cost = best_cost(history)  # the result's definition: its last figure is the result's best_seconds
    best = "no success yet" if cost is None else f"best {milliseconds(cost)}"
    failed = sum(r.seconds is None for r in history)
    checks = len(history) - done
    print(f"\rtuning {name} on {target} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {best}"
          + (f", {failed} failed" if failed else "") + (f", {checks} re-measured" if checks else ""),
          end="", file=sys.stderr, flush=True)
