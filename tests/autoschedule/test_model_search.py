"""Whole-model tuning: kernels as tasks, deduplicated by structure, the budget where it pays, one schedule."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.autoschedule import records
from ptowsp.autoschedule.measure import Runner
from ptowsp.autoschedule.model_search import ModelSearchResult, ModelTuner
from ptowsp.autoschedule.tasks import extract, kernel_groups
from ptowsp.backends import backend
from ptowsp.frontend.models import resnet18
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.workloads import random_inputs
from tests.autoschedule.faults import made_up_cost

CPU = backend("cpu")


def _model(seed: int = 0) -> pw.Workload:
    """ResNet-18 at a width and size a test can tune, as the cpu's default build runs it."""
    return CPU.default_workload(pw.frontend.from_onnx(resnet18(width=8, size=32, classes=10, seed=seed)))


def test_kernels_become_tasks_and_repeated_blocks_share_one():
    model = _model()
    groups = kernel_groups(model, default_schedule(model, vector_bytes=CPU.vector_bytes, workers=2))
    tasks = extract(model, vector_bytes=CPU.vector_bytes, workers=2)
    assert sum(t.weight for t in tasks) == len(groups)  # every kernel is an occurrence of one task
    assert len(tasks) < len(groups) and tasks[0].weight > 1  # the repeated blocks' kernels are shared
    for task in tasks:
        root = task.occurrences[0]["t0"]
        assert task.name == root and set(task.occurrences[0].values()) == set(groups[root])
        assert task.workload.outputs == ["t0"] and task.workload.name == "subgraph"
        # canonical names: nothing of the model's names in the subgraph
        assert all(t.startswith("t") and t[1:].isdigit() for t in task.workload.tasks)
        assert all(x.startswith(("x", "c")) for x in [*task.workload.inputs, *task.workload.constants])
    conv = next(t for t in tasks if t.weight > 1 and t.name.endswith("_blocked"))
    point = {"t0.tile_rows": 7, "fuse": True}
    mapped = conv.model_knobs(point)
    assert mapped == {f"{names['t0']}.tile_rows": 7 for names in conv.occurrences}  # global knobs stay out


def test_the_structural_key_ignores_names_and_weights():
    """Another model with other weights has the same tasks: a log's records serve both."""
    a = {t.key for t in extract(_model(seed=0), vector_bytes=CPU.vector_bytes, workers=2)}
    b = {t.key for t in extract(_model(seed=1), vector_bytes=CPU.vector_bytes, workers=2)}
    assert a == b


def test_the_subgraph_computes_what_the_model_kernel_computes():
    model = _model()
    task = next(t for t in extract(model, vector_bytes=CPU.vector_bytes, workers=2) if len(t.workload.tasks) > 2)
    inputs = random_inputs(task.workload)
    got = pw.build(task.workload, "cpu").run(**inputs)["t0"]
    np.testing.assert_allclose(got, pw.reference(task.workload, **inputs)["t0"], rtol=1e-4, atol=1e-4)


def _search(model, log, num_trials, seed=0):
    with Runner(model, "cpu", workers=2, evaluate=made_up_cost) as runner:
        return pw.AutoScheduler.search(model, "cpu", num_trials=num_trials, log_file=log, seed=seed, runner=runner,
                                       batch=4, confirm=1)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A 45-trial search of the small ResNet-18 (made-up costs: its choices depend on the seed alone)."""
    model = _model()
    log = tmp_path_factory.mktemp("model") / "model.jsonl"
    return model, log, _search(model, log, num_trials=45)


def test_a_model_search_tunes_task_by_task_and_gives_one_schedule(searched):
    model, log, res = searched
    assert isinstance(res, ModelSearchResult)
    assert res.trials == 45
    assert res.warmup == len(res.tasks)  # every task's default first
    assert all(t.trials >= 1 for t in res.tasks) and sum(t.trials > 1 for t in res.tasks) >= 1
    assert [n for n, _ in res.estimates][0] == res.warmup and res.estimates[-1][0] == 45
    # the schedule is the whole model's, and runs like the reference
    assert res.schedule.workload is model and res.best_seconds is not None and res.default_seconds is not None
    inputs = random_inputs(model)
    want = pw.reference(model, **inputs)
    got = pw.build(res.schedule, "cpu").run(**inputs)
    assert all(pw.workloads.matches(got[k], want[k]) for k in want)
    # the end-to-end runs are in the log under the model's own fingerprint: `best` finds its schedule
    assert pw.autoschedule.best(log, model, "cpu").to_json() == res.schedule.to_json()
    assert len(records.load(log)) == len(res.history)
    assert "trials" in res.table() and res.tasks[0].name in res.table()


def test_a_tuned_task_s_loops_reach_every_occurrence(searched):
    model, _, res = searched
    tuner = ModelTuner(model, "cpu", [t.task for t in res.tasks], workers=2, vector_bytes=CPU.vector_bytes, seed=0,
                       cost_model="xgboost", batch=4, epsilon=0.2, log_file=None, warm_start=None, progress=False)
    tuned = tuner.schedule(res.tasks)

    def loops(schedule, task):
        return [(lp.name, lp.extent, lp.annotation) for lp in schedule.nest(task).loops]

    changed = 0
    for result in res.tasks:
        best = result.search.schedule  # the subgraph's best schedule
        changed += best.to_json() != result.search.default_schedule.to_json()
        for names in result.task.occurrences:
            assert loops(tuned, names["t0"]) == loops(best, "t0"), names["t0"]
    assert changed  # some task's best is not its default: the check above compared tuned loops


def test_a_model_search_resumes_and_another_model_reuses_the_records(tmp_path):
    log = tmp_path / "model.jsonl"
    tasks = len(extract(_model(), vector_bytes=CPU.vector_bytes, workers=2))  # each task's default is a trial
    first = _search(_model(seed=0), log, num_trials=tasks + 2)
    again = _search(_model(seed=0), log, num_trials=tasks + 5)
    assert again.trials == tasks + 5 and sum(len(t.search.history) for t in again.tasks) > 0
    assert all(t.search.resumed == len(f.search.history) for t, f in zip(again.tasks, first.tasks))
    other = _search(_model(seed=1), log, num_trials=tasks + 5)  # other weights, the same tasks: nothing new to measure
    assert other.trials == tasks + 5
    assert all(t.search.resumed == len(t.search.history) for t in other.tasks)
    # its curve is the log's, replayed in the order the trials were measured: the same warm-up, one
    # point per trial after it (re-measurements of a finalist are no new trials)
    assert other.warmup == again.warmup == len(other.tasks)
    assert [n for n, _ in other.estimates] == list(range(other.warmup, tasks + 6))
    assert other.estimates[-1][1] <= other.estimates[0][1]


def test_the_budget_goes_where_the_expected_gain_is_largest():
    model = _model()
    tasks = extract(model, vector_bytes=CPU.vector_bytes, workers=2)
    tuner = ModelTuner(model, "cpu", tasks, workers=2, vector_bytes=CPU.vector_bytes, seed=0, cost_model="xgboost",
                       batch=4, epsilon=0.2, log_file=None, warm_start=None, progress=False)
    seconds = [1e-3] * len(tasks)
    seconds[-1] = 50e-3  # the last task (weight 1) takes most of the model's time
    for t, s, task in zip(tuner.tuners, seconds, tasks):
        t.history = [records.TrialRecord.of(default_schedule(task.workload), "cpu", 0, s)]
    assert tuner._pick() == len(tasks) - 1
    tuner.batches[-1] = 20  # tuned a lot without improving: the others' first batch is worth more
    heavy = max(range(len(tasks) - 1), key=lambda n: tasks[n].weight)
    assert tuner._pick() == heavy
    tuner.recent[0] = 0.9  # its last batch took 90% off: go on with it
    assert tuner._pick() == 0
    tuner.done.add(0)  # its space is measured out
    assert tuner._pick() != 0


def test_a_model_search_refuses_what_it_cannot_honour():
    model = _model()
    with pytest.raises(pw.ScheduleError, match="takes no space="):
        pw.AutoScheduler.search(model, "cpu", num_trials=4, space={"*.tasks": [2]})
    with pytest.raises(pw.ScheduleError, match="start_from_default=False needs split=False"):
        pw.AutoScheduler.search(model, "cpu", num_trials=4, start_from_default=False)


def test_the_picture_says_where_the_trials_went(searched, tmp_path):
    res = searched[2]
    path = res.plot(tmp_path / "model.png")
    assert path.stat().st_size > 10_000
    fig = res.figure()
    curve, bars = fig.axes
    assert "warm-up" in " ".join(t.get_text() for t in curve.get_legend().get_texts())
    assert len(bars.get_yticklabels()) == min(16, len(res.tasks))
