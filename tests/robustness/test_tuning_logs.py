"""Tuning logs are data a user may receive from someone else, and the AutoScheduler tunes every
workload it accepts: bad or hostile logs give a ScheduleError naming the file, the line and the
fault (never a crash, a hang, a run of code or a silently chosen bogus record); opaque tasks that
are lambdas or closures are measured out of process; a workload that cannot be is a BuildError
before the first trial."""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ptowsp as pw
from ptowsp.autoschedule import records
from ptowsp.autoschedule.measure import Runner
from ptowsp.workloads import zoo

WL = zoo.matmul(8, 8, 8)
GOOD = WL.schedule().split("C", "j", 4).unroll("C", "j.inner").parallel("C", "i")


def _record(**changes) -> dict:
    """A valid successful record of GOOD as a JSON object, with `changes` applied."""
    record = records.TrialRecord.of(GOOD, "cpu", 0, 1e-3, knobs={"fuse": True, "prefetch": 0},
                                    features=[0.5, 1.0], feature_set="test")
    return {**json.loads(record.model_dump_json(exclude_none=True)), **changes}


def _log(tmp_path: Path, *lines: str | bytes) -> Path:
    """A log of one good record, then `lines` (each ended by a newline)."""
    path = tmp_path / "tune.jsonl"
    body = [json.dumps(_record()).encode()] + [x if isinstance(x, bytes) else x.encode() for x in lines]
    path.write_bytes(b"".join(x + b"\n" for x in body))
    return path


# -- one bad line: the error names the file, the line, the field and the value ---------------------------
def _raw(seconds: str) -> str:
    """A record whose seconds are written as raw JSON text (NaN, Infinity, huge numbers)."""
    return json.dumps(_record(seconds=0.5)).replace('"seconds": 0.5', f'"seconds": {seconds}')


DEEP = 100_000
BAD_LINES = {
    "negative seconds": (json.dumps(_record(seconds=-1.0)), r"field 'seconds'.*greater than 0, got -1\.0"),
    "zero seconds": (json.dumps(_record(seconds=0)), r"field 'seconds'.*greater than 0, got 0"),
    "NaN seconds": (json.dumps(_record(seconds=math.nan)), r"field 'seconds'.*finite number, got nan"),
    "Infinity seconds": (json.dumps(_record(seconds=math.inf)), r"field 'seconds'.*finite number, got inf"),
    "-Infinity seconds": (json.dumps(_record(seconds=-math.inf)), r"field 'seconds'.*got -inf"),
    "seconds overflowing to inf": (_raw("1e999"), r"field 'seconds'.*finite number, got inf"),
    "seconds of 400 digits": (_raw("1" + "0" * 400), r"field 'seconds'"),
    "seconds true": (json.dumps(_record(seconds=True)), r"field 'seconds'.*valid number, got True"),
    "seconds as a string": (json.dumps(_record(seconds="0.001")), r"field 'seconds'.*got '0\.001'"),
    "a JSON list": ("[1, 2]", r"should be an object, got \[1, 2\]"),
    "a JSON string": ('"tune me"', r"should be an object, got 'tune me'"),
    "a JSON number": ("12", r"should be an object, got 12"),
    "JSON null": ("null", r"should be an object, got None"),
    "a huge trial index": (json.dumps(_record(trial=10**40)), r"field 'trial'.*less than or equal"),
    "a negative trial index": (json.dumps(_record(trial=-1)), r"field 'trial'.*greater than or equal to 0, got -1"),
    "nested lists": ("[" * DEEP + "]" * DEEP, r"Invalid JSON: recursion limit exceeded"),
    "nested objects": ('{"a":' * DEEP + "1" + "}" * DEEP, r"Invalid JSON: recursion limit exceeded"),
    "nested knobs": (json.dumps(_record())[:-1] + ', "x": ' + "[" * DEEP + "]" * DEEP + "}",
                     r"Invalid JSON: recursion limit exceeded"),
    "another format": (json.dumps(_record(format=2)), r"field 'format'.*got 2"),
    "an unknown step": (json.dumps(_record(steps=[{"kind": "exec", "code": "1"}])), r"field 'steps\.0'.*'exec'"),
    "an extra field": (json.dumps(_record(payload="x")), r"field 'payload'.*Extra inputs"),
    "a missing field": (json.dumps({"format": 1}), r"field 'workload'.*Field required"),
    "infinite features": (json.dumps(_record())[:-1] + ', "features": [1e999]}', r"field 'features"),
    "a knob that is a list": (json.dumps(_record(knobs={"fuse": [[1]]})), r"field 'knobs\.fuse"),
    "NaN time": (json.dumps(_record(at=math.nan)), r"field 'at'.*finite number, got nan"),
    "Python source": ("__import__('os').system('touch pwned')", r"Invalid JSON: expected value at line 1 column 1"),
    "NUL bytes": ("\0\0\0", r"Invalid JSON"),
    "not UTF-8": (b'{"workload": "\xff\xfe"}', r"not UTF-8 text \(byte 0xff at column 15\)"),
}


@pytest.mark.parametrize("line,fault", BAD_LINES.values(), ids=BAD_LINES.keys())
def test_a_bad_line_is_a_schedule_error_naming_file_line_and_fault(tmp_path, line, fault):
    log = _log(tmp_path, line)
    where = rf"{log}:2: not a ptowsp tuning record: .*"
    started = time.perf_counter()
    with pytest.raises(pw.ScheduleError, match=where + fault):
        records.load(log)
    with pytest.raises(pw.ScheduleError, match=where + fault):
        pw.autoschedule.best(log, WL, "cpu")
    assert time.perf_counter() - started < 5.0  # no hang on deep or huge input


def test_a_bad_log_fails_the_search_before_its_first_trial(tmp_path):
    log = _log(tmp_path, json.dumps(_record(seconds=-1.0)))
    before = log.read_bytes()
    with pytest.raises(pw.ScheduleError, match=rf"{log}:2: .*field 'seconds'"):
        pw.AutoScheduler.search(WL, "cpu", num_trials=2, log_file=log, progress=False)
    assert log.read_bytes() == before  # nothing measured, nothing appended


# -- the file itself ----------------------------------------------------------------------------------
def _directory(tmp_path):
    (tmp_path / "logs").mkdir()
    return tmp_path / "logs"


BINARY = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


def _binary(tmp_path):
    path = tmp_path / "curve.png"
    path.write_bytes(BINARY)
    return path


def _fifo(tmp_path):
    path = tmp_path / "pipe.jsonl"
    os.mkfifo(path)  # reading it would block forever
    return path


def _through_a_file(tmp_path):
    (tmp_path / "plain").write_text("x")
    return tmp_path / "plain" / "tune.jsonl"


BAD_FILES = {
    "a directory": (_directory, r"tuning log {log} is a directory"),
    "binary": (_binary, r"{log}:1: not a ptowsp tuning record: not UTF-8 text \(byte 0x89 at column 1\)"),
    "a FIFO": (_fifo, r"tuning log {log} is not a regular file"),
    "a path through a file": (_through_a_file, r"cannot read tuning log {log}: Not a directory"),
}


@pytest.mark.parametrize("make,fault", BAD_FILES.values(), ids=BAD_FILES.keys())
@pytest.mark.parametrize("use", ["best", "search", "warm_start"])
def test_a_file_that_is_no_log_is_named(tmp_path, make, fault, use):
    log = make(tmp_path)
    with pytest.raises(pw.ScheduleError, match=fault.format(log=log)):
        if use == "best":
            pw.autoschedule.best(log, WL, "cpu")
        else:
            pw.AutoScheduler.search(WL, "cpu", num_trials=1, progress=False, **{"log_file" if use == "search"
                                                                                else "warm_start": log})
    if use == "search" and make is _binary:
        assert log.read_bytes() == BINARY  # never written to


@pytest.mark.parametrize("make,fault", [(_directory, r"tuning log {log} is a directory"),
                                        (lambda d: _log(d, "[1]"), r"{log}:2: not a ptowsp tuning record")],
                         ids=["a directory", "a bad line"])
def test_the_command_line_reports_a_bad_log(tmp_path, capsys, make, fault):
    from ptowsp.cli import main

    log = make(tmp_path)
    assert main(["tune", "softmax", "--trials", "1", "--log", str(log)]) == 2
    assert re.search(r"ptowsp tune: error: ScheduleError: " + fault.format(log=log), capsys.readouterr().err)


def test_a_missing_log_is_named_where_a_log_is_needed(tmp_path):
    log = tmp_path / "nope.jsonl"
    with pytest.raises(pw.ScheduleError, match=rf"tuning log {log} does not exist"):
        pw.autoschedule.best(log, WL, "cpu")
    with pytest.raises(pw.ScheduleError, match=rf"tuning log {log} does not exist"):
        pw.AutoScheduler.search(WL, "cpu", num_trials=1, warm_start=log, progress=False)
    assert records.load(log) == [] and not log.exists()  # a search's own log: created when it starts


def test_an_unreadable_log_is_named(tmp_path, monkeypatch):
    log = _log(tmp_path)

    def refuse(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", refuse)  # chmod cannot stop root, who runs CI
    with pytest.raises(pw.ScheduleError, match=rf"cannot read tuning log {log}: Permission denied"):
        pw.autoschedule.best(log, WL, "cpu")


def test_a_log_named_by_something_else_than_a_path_is_refused():
    with pytest.raises(pw.ScheduleError, match=r"named by a path .*got 42"):
        pw.autoschedule.best(42, WL, "cpu")  # type: ignore[arg-type]


def test_a_record_that_does_not_replay_is_named_by_line(tmp_path):
    log = tmp_path / "tune.jsonl"
    log.write_text(json.dumps(_record(steps=[{"kind": "split", "task": "C", "loop": "zz", "factor": 2}])) + "\n")
    with pytest.raises(pw.ScheduleError, match=rf"{log}:1: the record's schedule does not replay .*zz"):
        pw.autoschedule.best(log, WL, "cpu")


# -- cut-short lines and invalid costs -------------------------------------------------------------------
@pytest.mark.parametrize("tail", [b'{"format": 1, "workl', '{"workload": "caf\u00e9'.encode()[:-1]],
                         ids=["mid-JSON", "mid-character"])
def test_a_line_cut_short_is_skipped_with_a_warning(tmp_path, tail):
    log = _log(tmp_path)
    log.write_bytes(log.read_bytes() + tail)
    with pytest.warns(RuntimeWarning, match=rf"{log}:2: skipped a tuning record cut short"):
        assert len(records.load(log)) == 1


def test_a_cost_that_is_no_positive_finite_number_is_never_chosen():
    good = records.TrialRecord.of(GOOD, "cpu", 1, 2e-3)
    forged = [records.TrialRecord.model_construct(**{**good.__dict__, "seconds": s, "trial": 0})
              for s in (0.0, -1.0, math.nan, math.inf)]  # built past validation
    chosen = records.costs([*forged, good])
    assert [c[0] for c in chosen.values()] == [2e-3]


def test_an_invalid_measurement_is_a_failed_trial():
    values = [0.0, -1.0, math.nan, math.inf, True, 1e-3]

    def evaluate(*args):  # a closure: sent to the worker with cloudpickle, where it pops its own copy
        return values.pop(0)

    with Runner(WL, "cpu", workers=2, evaluate=evaluate) as runner:
        got = [runner.measure(GOOD) for _ in values]
    assert [m.seconds for m in got] == [None] * 5 + [1e-3]
    assert all(m.error.startswith("invalid measurement") for m in got[:5]), [m.error for m in got]


# -- hostile logs, generated --------------------------------------------------------------------------
MARKER = "ptowsp-pwned"
ESCAPES = [
    "__import__('os').system('touch {marker}')",
    "open('{marker}', 'w')",
    "().__class__.__base__.__subclasses__()",
    "exec(\"open('{marker}', 'w')\")",
    "9**9**9",
    "i < 4 or __import__('os').system('touch {marker}')",
]
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                      max_size=4),
                           max_leaves=12)


def _only_typed_errors(log: Path) -> None:
    """Reading and choosing from the log either works or raises a PtowspError subclass."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # cut-short lines
        for read in (records.load, lambda p: pw.autoschedule.best(p, WL, "cpu")):
            try:
                read(log)
            except pw.PtowspError:
                pass


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=60) | st.text(max_size=60).map(str.encode)
                | json_values.map(lambda v: json.dumps(v).encode()), max_size=5))
def test_garbage_lines_give_typed_errors_only(lines):
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "tune.jsonl"
        log.write_bytes(b"\n".join(lines))
        _only_typed_errors(log)


def _mutations():
    """A record with one field, step field or knob replaced by any JSON value, or an escape smuggled
    into a specialize condition."""
    field = st.sampled_from(sorted(_record()))
    step_field = st.sampled_from(["kind", "task", "loop", "factor", "loops", "when", "steps"])
    replace = st.tuples(field, json_values).map(lambda fv: _record(**{fv[0]: fv[1]}))
    in_step = st.tuples(st.integers(0, 2), step_field, json_values).map(
        lambda t: _record(steps=[{**s, t[1]: t[2]} if n == t[0] else s for n, s in enumerate(_record()["steps"])]))
    escape = st.sampled_from(ESCAPES).map(lambda when: _record(steps=[
        *_record()["steps"], {"kind": "specialize", "task": "C", "when": when, "steps": []}]))
    return replace | in_step | escape


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(_mutations())
def test_mutated_records_give_typed_errors_and_run_no_code(record):
    with tempfile.TemporaryDirectory() as d:
        marker = Path(d) / MARKER
        log = Path(d) / "tune.jsonl"
        text = json.dumps(record).replace("{marker}", str(marker))
        log.write_text(text + "\n")
        cwd = os.getcwd()
        os.chdir(d)  # a relative `touch` lands here too
        try:
            _only_typed_errors(log)
        finally:
            os.chdir(cwd)
        assert not marker.exists()


@pytest.mark.parametrize("when", ESCAPES)
def test_an_escape_in_a_record_is_a_schedule_error_and_creates_no_file(tmp_path, monkeypatch, when):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / MARKER
    steps = [*_record()["steps"], {"kind": "specialize", "task": "C", "when": when.format(marker=marker),
                                   "steps": []}]
    log = tmp_path / "tune.jsonl"
    log.write_text(json.dumps(_record(steps=steps)) + "\n")
    with pytest.raises(pw.ScheduleError, match=rf"{log}:1: the record's schedule does not replay"):
        pw.autoschedule.best(log, WL, "cpu")
    assert not marker.exists()


# -- opaque tasks that are lambdas or closures are tuned ------------------------------------------------
def _topk(fn) -> pw.Workload:
    """The tutorial's top-k idiom behind a compute task (so the search has loops to schedule)."""
    wl = pw.Workload("topk")
    scores = wl.input("scores", (8, 16))
    scaled = wl.compute("scaled", (8, 16), lambda i, j: scores[i, j] * 2.0 + 1.0)
    wl.output(wl.opaque("top2", fn, inputs=[scaled], outputs=[("idx", (8, 2), "int32")]))
    return wl


def _closure():
    k = 2
    order = np.argsort  # captured names: a closure, pickled by value

    def top(s):
        return order(-s, axis=1)[:, :k].astype(np.int32)

    return top


@pytest.mark.parametrize("fn", [lambda s: np.argsort(-s, axis=1)[:, :2].astype(np.int32), _closure()],
                         ids=["lambda", "closure"])
def test_a_workload_with_a_lambda_or_closure_opaque_task_is_tuned(tmp_path, fn):
    wl = _topk(fn)
    log = tmp_path / "tune.jsonl"  # missing: the search creates it
    runner = Runner(wl, "cpu", workers=2, repeat=1, min_time=0.0)
    with runner:
        res = pw.AutoScheduler.search(wl, "cpu", num_trials=4, log_file=log, workers=2, runner=runner,
                                      confirm=0, progress=False)
    assert [r.error for r in res.history] == [None] * len(res.history) and len(res.history) >= 2
    scores = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    want = pw.reference(wl, scores=scores)["idx"]
    for schedule in (res.schedule, pw.autoschedule.best(log, wl, "cpu")):
        np.testing.assert_array_equal(pw.build(schedule, target="cpu").run(scores=scores)["idx"], want)


def _holding_a_lock():
    lock = threading.Lock()

    def top(s):
        with lock:
            return np.argsort(-s, axis=1)[:, :2].astype(np.int32)

    return top


def _writing_a_file(path: Path):
    out = path.open("w")

    def top(s):
        out.write("called\n")
        return np.argsort(-s, axis=1)[:, :2].astype(np.int32)

    return top


@pytest.mark.parametrize("make,held", [(lambda d: _holding_a_lock(), "lock"),
                                       (lambda d: _writing_a_file(d / "out.txt"), "files")],
                         ids=["lock", "open file"])
def test_a_workload_that_cannot_travel_fails_before_the_first_trial(tmp_path, make, held):
    wl = _topk(make(tmp_path))
    log = tmp_path / "tune.jsonl"
    fault = rf"'topk' cannot be measured out of process: the function of opaque task 'top2' \(top\) .*{held}"
    with pytest.raises(pw.BuildError, match=fault):
        pw.AutoScheduler.search(wl, "cpu", num_trials=4, log_file=log, progress=False)
    assert not log.exists()  # not one trial


def test_a_workload_the_worker_cannot_set_up_fails_before_the_first_trial(tmp_path):
    def broken(s):
        raise RuntimeError("the model file is gone")

    wl = _topk(broken)
    log = tmp_path / "tune.jsonl"
    with pytest.raises(pw.BuildError, match=r"cannot set up workload 'topk' .*opaque task 'top2'.*model file is gone"):
        pw.AutoScheduler.search(wl, "cpu", num_trials=4, log_file=log, progress=False)
    assert records.load(log) == []
