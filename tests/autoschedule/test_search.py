"""The search loop: measuring in a worker process, failures recorded, resume from a log, seeded."""

from __future__ import annotations

import functools
import json

import pytest

import ptowsp as pw
from ptowsp.autoschedule import measure, records, tuner
from ptowsp.autoschedule.measure import Runner, time_program
from ptowsp.autoschedule.space import Space
from ptowsp.workloads import zoo
from tests.autoschedule.faults import crash_or_hang, lucky_first_cost, made_up_cost


def _matmul():
    return zoo.matmul(32, 32, 64)


def _space(wl):
    """The search's space, the same on every host (the default one follows the CPU's vector width)."""
    return Space(wl, vector_bytes=32, workers=2)


def test_a_crashing_or_hanging_candidate_is_recorded_and_tuning_goes_on(tmp_path):
    wl = _matmul()
    space = Space(wl, vector_bytes=32, workers=2)
    only_prefetch = {name: [k.default] for name, k in space.knobs.items() if name != "prefetch"}
    log = tmp_path / "tune.jsonl"
    with Runner(wl, "cpu", workers=2, timeout=2.0, evaluate=crash_or_hang) as runner:
        res = pw.AutoScheduler.search(wl, "cpu", num_trials=5, log_file=log, seed=0, runner=runner,
                                      space={**only_prefetch, "prefetch": [0, 1, 2]})
        assert runner.restarts == 2
    # the space has three schedules: the search stops when all are measured, then re-measures the one
    # that succeeded twice (its final check)
    assert len(res.history) == 5 and res.confirmations == 2
    errors = {r.knobs["prefetch"]: r.error for r in res.history[:3]}
    assert errors[1].startswith("crash: the measuring process died (signal SIGSEGV)")
    assert errors[2].startswith("timeout: no result within 2 s")
    assert errors[0] is None
    assert res.schedule.prefetch_depth == 0 and res.best_seconds > 0
    assert [r.error for r in records.load(log)] == [r.error for r in res.history]


class _Disturbed:
    """A program whose runs take the listed seconds in turn, on a clock of its own: a neighbour slows
    most of them down."""

    def __init__(self, seconds):
        self.seconds, self.runs, self.now = list(seconds), 0, 0.0

    def run(self):
        self.now += self.seconds[self.runs % len(self.seconds)]
        self.runs += 1


def test_a_trial_times_the_fastest_run_and_at_least_min_time_of_runs(monkeypatch):
    disturbed = _Disturbed([0.03, 0.03, 0.005, 0.03, 0.03, 0.03])  # the median run was slowed down
    monkeypatch.setattr(measure.time, "perf_counter", lambda: disturbed.now)
    assert time_program(disturbed, {}, repeat=5, min_time=0.2, budget=2.0) == pytest.approx(0.005)
    assert disturbed.runs == 8  # 5 runs take 0.125 s: runs go on until 0.2 s
    slow = _Disturbed([0.05])
    monkeypatch.setattr(measure.time, "perf_counter", lambda: slow.now)
    time_program(slow, {}, repeat=100, min_time=0.0, budget=0.2)
    assert slow.runs == 4  # cut short at the budget


def test_a_search_resumes_from_its_log(tmp_path):
    wl = _matmul()
    log = tmp_path / "tune.jsonl"
    with Runner(wl, "cpu", workers=2, evaluate=made_up_cost) as runner:
        first = pw.AutoScheduler.search(wl, "cpu", num_trials=5, log_file=log, seed=0, runner=runner, batch=3,
                                        space=_space(wl))
        again = pw.AutoScheduler.search(wl, "cpu", num_trials=9, log_file=log, seed=1, runner=runner, batch=3,
                                        space=_space(wl))
    assert first.confirmations == 8  # the three best and the default, measured twice more each
    assert again.resumed == len(first.history) and again.history[:again.resumed] == first.history
    assert len(again.history) - again.confirmations == 9  # 5 from the log, 4 new
    assert len(records.load(log)) == len(again.history)
    keys = [json.dumps([s.model_dump() for s in r.steps]) for r in again.history]
    assert len(set(keys)) == 9  # resumed trials are not measured again as trials
    assert again.best_seconds <= first.best_seconds
    assert pw.autoschedule.best(log, wl, "cpu") == again.schedule
    median = sorted(r.seconds for r in again.history if r.steps == again.best_record.steps)
    assert again.best_seconds == median[len(median) // 2]  # the median of the best one's measurements


@pytest.mark.parametrize("strategy", ["xgboost", "random"])
def test_the_same_seed_gives_the_same_search(strategy):
    wl = _matmul()
    with Runner(wl, "cpu", workers=2, evaluate=made_up_cost) as runner:
        runs = [pw.AutoScheduler.search(wl, "cpu", num_trials=10, cost_model=strategy, seed=seed, runner=runner,
                                        batch=4, start_from_default=False, space=_space(wl)) for seed in (3, 3, 4)]
    steps = [[r.steps for r in res.history] for res in runs]
    assert steps[0] == steps[1]
    assert steps[0] != steps[2]


def test_bad_arguments_are_refused():
    wl = _matmul()
    with pytest.raises(pw.ScheduleError, match="cost_model 'gbm' is not supported"):
        pw.AutoScheduler.search(wl, "cpu", num_trials=4, cost_model="gbm")
    with pytest.raises(pw.ScheduleError, match="num_trials >= 1"):
        pw.AutoScheduler.search(wl, "cpu", num_trials=0)


def test_the_result_gives_the_tuning_curve_and_plots_it(tmp_path):
    wl = _matmul()
    schedules = [wl.schedule().split("C", "j", factor) for factor in (1, 2, 4, 8, 16)]
    history = [records.TrialRecord.of(s, "cpu", n, seconds, None if seconds else "crash")
               for n, (s, seconds) in enumerate(zip(schedules, [None, 3.0, 4.0, 2.0, 2.5]))]
    res = pw.autoschedule.SearchResult(wl, "cpu", history, wall_seconds=10.0, measure_seconds=9.0)
    assert res.curve() == [None, 3.0, 3.0, 2.0, 2.0]
    assert res.trials_to_reach(2.5) == 4 and res.trials_to_reach(1.0) is None
    assert res.best_seconds == 2.0 and res.schedule == schedules[3] and abs(res.overhead - 0.1) < 1e-9
    checked = [*history, records.TrialRecord.of(schedules[3], "cpu", 5, 2.9),  # 2.0 was lucky
               records.TrialRecord.of(schedules[3], "cpu", 6, 2.7)]
    res = pw.autoschedule.SearchResult(wl, "cpu", checked)
    assert res.confirmations == 2 and res.curve() == [None, 3.0, 3.0, 2.7, 2.5]  # each at its median
    assert res.best_seconds == 2.5 and res.schedule == schedules[4]  # 2.5 beats the median 2.7
    assert res.curve()[-1] == res.best_seconds and res.trials_to_reach(2.6) == 5
    other = pw.autoschedule.SearchResult(wl, "cpu", history[:3], strategy="random")
    assert res.plot(tmp_path / "curve.png", other, flops=1e9).stat().st_size > 0
    with pytest.raises(pw.ScheduleError, match="no trial .* succeeded"):
        _ = pw.autoschedule.SearchResult(wl, "cpu", history[:1]).schedule


def test_a_batch_prefers_points_far_from_those_measured():
    """Among equally promising candidates, one that differs from every measured point in more knobs is
    picked first: a neighbour of a measured point mostly re-measures the noise around it."""
    wl = _matmul()
    space = Space(wl, vector_bytes=32, workers=2)
    search = tuner.Tuner(wl, "cpu", space, 2, 0, "xgboost", 8, 0.2, None, None, False)
    measured = space.default()
    search.points[search.candidates.key(measured)] = measured
    free = [k for k in space.knobs.values() if len(k.choices) > 1]
    neighbour = {**measured, free[0].name: next(c for c in free[0].choices if c != measured[free[0].name])}
    far = {**measured, **{k.name: next(c for c in k.choices if c != measured[k.name]) for k in free}}
    assert search.candidates.key(far) != search.candidates.key(neighbour)
    # the neighbour comes first among equal predictions: only the novelty term can put `far` ahead
    search._anneal = lambda: {search.candidates.key(p): (1.0, p) for p in (neighbour, far)}
    assert search._best_predicted(1, taken=set()) == [far]


def test_the_default_is_measured_again_with_the_finalists():
    """A gain is judged against the default's median too, not against its one (first) measurement."""
    wl = _matmul()
    with Runner(wl, "cpu", workers=2, evaluate=made_up_cost) as runner:
        res = pw.AutoScheduler.search(wl, "cpu", num_trials=6, seed=0, runner=runner, batch=3, confirm=1,
                                      space=_space(wl))
    default = records.steps_key(records.TrialRecord.of(res.default_schedule, "cpu", 0, 1.0))
    best = records.steps_key(res.best_record)
    assert best != default  # else the default is the one finalist anyway
    counts = {k: sum(records.steps_key(r) == k for r in res.history) for k in (best, default)}
    assert counts == {best: tuner.CONFIRM_TIMES, default: tuner.CONFIRM_TIMES}
    assert res.confirmations == 2 * (tuner.CONFIRM_TIMES - 1)


def test_finalists_that_fall_back_on_a_second_look_let_the_next_best_be_confirmed(tmp_path):
    """Every first measurement is lucky (half the true cost): the confirmed finalists fall back, so
    the next best are confirmed in turn, for CONFIRM_ROUNDS rounds."""
    wl = _matmul()
    with Runner(wl, "cpu", workers=2, evaluate=functools.partial(lucky_first_cost, seen=str(tmp_path))) as runner:
        res = pw.AutoScheduler.search(wl, "cpu", num_trials=8, seed=0, runner=runner, batch=4, confirm=1,
                                      space=_space(wl))
    confirmed = {records.steps_key(r) for r in res.history[len(res.history) - res.confirmations:]}
    assert len(confirmed) == tuner.CONFIRM_ROUNDS + 1  # a finalist per round, and the default once
    assert res.confirmations == 2 * len(confirmed)
