"""Tuning records: append, load, resume after a crash, pick the best schedule."""

from __future__ import annotations

import pytest

import ptowsp as pw
from ptowsp.autoschedule import records
from ptowsp.workloads import zoo


def _trials(wl):
    fast = wl.schedule().split("C", "j", 8).unroll("C", "j.inner")
    slow = wl.schedule()
    return [records.TrialRecord.of(slow, "cpu", 0, 2.0), records.TrialRecord.of(fast, "cpu", 1, 1.0),
            records.TrialRecord.of(slow, "cpu", 2, None, error="timeout after 10 s"),
            records.TrialRecord.of(slow, "numpy", 3, 0.5)]


def test_round_trip_and_best(tmp_path):
    wl = zoo.matmul(16, 16, 16)
    log = tmp_path / "tune.jsonl"
    assert records.load(log) == []
    trials = _trials(wl)
    records.append(log, trials[:2])
    records.append(log, trials[2:])
    assert records.load(log) == trials
    assert len(log.read_text().splitlines()) == 4
    best = pw.autoschedule.best(log, wl, "cpu")
    assert best == wl.schedule().split("C", "j", 8).unroll("C", "j.inner")
    assert pw.autoschedule.best(log, wl, "numpy") == wl.schedule()


def test_records_of_another_definition_or_target_are_not_used(tmp_path):
    log = tmp_path / "tune.jsonl"
    records.append(log, _trials(zoo.matmul(16, 16, 16)))
    with pytest.raises(pw.ScheduleError, match="no successful trial of workload 'matmul'"):
        pw.autoschedule.best(log, zoo.matmul(32, 16, 16), "cpu")  # same name, other definition
    with pytest.raises(pw.ScheduleError, match="on target 'aicore'"):
        pw.autoschedule.best(log, zoo.matmul(16, 16, 16), "aicore")


def test_a_line_cut_short_by_a_crash_is_skipped_and_garbage_is_named(tmp_path):
    wl = zoo.matmul(16, 16, 16)
    log = tmp_path / "tune.jsonl"
    records.append(log, _trials(wl)[:2])
    with log.open("a") as f:
        f.write('{"format": 1, "workload": "mat')  # the process died here
    with pytest.warns(RuntimeWarning, match=r"tune.jsonl:3: skipped a tuning record cut short"):
        assert len(records.load(log)) == 2
    trials = _trials(wl)
    records.append(log, trials[2:3])  # a resumed search: the cut line ends, the record starts a line
    with pytest.warns(RuntimeWarning, match=r"tune.jsonl:3: skipped"):
        assert [r.error for r in records.load(log)] == [None, None, trials[2].error]
    log.write_text(log.read_text() + '{"format": 1}\n')
    with pytest.raises(pw.ScheduleError, match=r"tune.jsonl:5: not a ptowsp tuning record: field 'workload'"):
        with pytest.warns(RuntimeWarning, match=r"tune.jsonl:3: skipped"):
            records.load(log)


def test_best_finds_the_records_of_the_workload_as_the_target_builds_it(tmp_path):
    """A search tunes what the target's default build runs (a conv blocked, keys transposed): `best`
    given the user's workload finds those records, and the schedule belongs to the built workload."""
    wl = pw.zoo.conv2d(1, 8, 6, 6, 32, 3, 1, 1)
    built = pw.build(wl, "cpu", workers=2).schedule
    assert built.workload.fingerprint != wl.fingerprint
    log = tmp_path / "tune.jsonl"
    records.append(log, [records.TrialRecord.of(built, "cpu", 0, 1e-3)])
    found = pw.autoschedule.best(log, wl, "cpu")
    assert found == built and found.workload.fingerprint == built.workload.fingerprint
    with pytest.raises(pw.ScheduleError, match="holds no successful trial"):
        pw.autoschedule.best(log, wl, "numpy")
