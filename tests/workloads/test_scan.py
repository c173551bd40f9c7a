"""Scans: definition rules and their errors, what a schedule may do to one, hand schedules on the
compiled targets, symbolic lengths.  Results on every target are in the conformance catalogue
(tests/conformance/scan_cases.py)."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from tests.conformance.scan_cases import iir_columns_transposed, lstm_reference

COMPILED = [t for t in pw.targets() if t in ("cpu", "aicore")]


def decay(steps: int = 6, width: int = 40) -> pw.Workload:
    wl = pw.Workload("decay")
    x = wl.input("X", (steps, width))
    c = wl.scan("C", (steps, width), axis="t", init=lambda i: x[0, i], update=lambda t, i: c[t - 1, i] * 0.5 + x[t, i])
    wl.output(c)
    return wl


def decay_numpy(x: np.ndarray) -> np.ndarray:
    out = x.copy()
    for t in range(1, len(x)):
        out[t] = out[t - 1] * 0.5 + x[t]
    return out


def test_a_scan_is_one_opaque_task_reading_only_its_inputs():
    wl = decay()
    assert wl.tasks == ["C"] and wl.category("C") is pw.Category.OPAQUE
    assert [t.name for t in wl.task("C").inputs] == ["X"]  # its own earlier steps are state
    assert list(wl.graph.edges) == [("X", "C")]
    assert "scan over t (1 initial step)" in str(wl)


def test_the_update_is_called_when_the_workload_is_next_used():
    wl = pw.Workload("later")
    x = wl.input("X", (4, 3))
    c = wl.scan("C", (4, 3), init=lambda i: x[0, i], update=lambda t, i: c[t - 1, i] + x[t, i])
    assert wl.tasks == ["C"]  # the first query settles it
    y = wl.compute("Y", (4, 3), lambda t, i: c[t, i] * 2.0)
    wl.output(y)
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(pw.reference(wl, X=a)["Y"], np.cumsum(a, 0) * 2)


def test_python_number_init_takes_the_workload_defaults_and_dtype_overrides():
    wl = pw.Workload("dtypes")
    x = wl.input("X", (5, 2), "int16")
    a = wl.scan("A", (5, 2), init=lambda i: 0.0, update=lambda t, i: a[t - 1, i] + 1.0)
    b = wl.scan("B", (5, 2), init=lambda i: 0, update=lambda t, i: b[t - 1, i] + 1)
    c = wl.scan("C", (5, 2), init=lambda i: x[0, i], update=lambda t, i: c[t - 1, i] * 3, dtype="int64")
    wl.output(a, b, c)
    assert [wl.tensor(n).dtype for n in "ABC"] == ["float32", "int32", "int64"]


@pytest.mark.parametrize("update, match", [
    (lambda c, x: lambda t, i: c[t, i] + 1.0, r"only at earlier steps: C\[.., t - d, ..\]"),
    (lambda c, x: lambda t, i: c[t + 1, i] + 1.0, "only at earlier steps"),
    (lambda c, x: lambda t, i: c[2 * t - 1, i] + 1.0, "only at earlier steps"),
    (lambda c, x: lambda t, i: c[t - 1, i] + x[t, i] * 2, None),  # control: legal
    (lambda c, x: lambda t, i: pw.cast(c[t - 1, i], "float64"), "init gives float32 and update gives float64"),
    (lambda c, x: lambda t, i: c, "returned tensor C itself"),
])
def test_update_errors_name_the_scan_and_the_rule(update, match):
    wl = pw.Workload("bad")
    x = wl.input("X", (4, 3))
    holder = {}
    holder["C"] = wl.scan("C", (4, 3), init=lambda i: x[0, i], update=lambda t, i: update(holder["C"], x)(t, i))
    if match is None:
        assert wl.tasks == ["C"]
        return
    with pytest.raises(pw.PtowspError, match=match) as info:
        wl.tasks
    assert "task 'C'" in str(info.value)
    assert "C" not in [*wl.tasks, *wl.inputs]  # the failed scan is gone: the workload stays consistent
    wl.compute("C", (4, 3), lambda t, i: x[t, i])  # and its name is free again


def test_definition_errors():
    wl = pw.Workload("bad")
    x = wl.input("X", (4, 3))
    with pytest.raises(pw.WorkloadError, match="axis='s' is not one of update's loop variables"):
        wl.scan("C", (4, 3), axis="s", init=lambda i: x[0, i], update=lambda t, i: x[t, i])
    with pytest.raises(pw.ShapeError, match="init takes 3 loop variable"):
        wl.scan("C", (4, 3), init=lambda a, b, c: x[0, a], update=lambda t, i: x[t, i])
    with pytest.raises(pw.WorkloadError, match="init must be a function"):
        wl.scan("C", (4, 3), init=1.0, update=lambda t, i: x[t, i])
    with pytest.raises(pw.BoundsError):
        wl.scan("C", (4, 3), init=lambda i: x[0, i + 1], update=lambda t, i: x[t, i])
    assert wl.tasks == []


def test_reading_past_the_initial_steps_is_a_bounds_error():
    """A delay of 2 makes two initial steps, so update never reads before step 0."""
    wl = pw.Workload("fib")
    x = wl.input("X", (6,), "int32")
    f = wl.scan("F", (6,), init=lambda t: x[t], update=lambda t: f[t - 1] + f[t - 2])
    wl.output(f)
    assert wl.task("F").scan.steps == 2
    np.testing.assert_array_equal(pw.reference(wl, X=np.array([1, 1, 5, 5, 5, 5], np.int32))["F"], [1, 1, 2, 3, 5, 8])


@pytest.mark.parametrize("step, match", [
    (lambda s: s.parallel("C", "t"), "scan axis t runs its steps in order; it cannot be parallel"),
    (lambda s: s.split("C", "t", 2), "scan axis t must stay one whole loop"),
    (lambda s: s.unroll("C", "t"), "cannot be unrolled"),
    (lambda s: s.cache_write("C", "local"), "cache_write is not supported on scans"),
    (lambda s: s.cache_read("C", "X", "local"), "cache_read is not supported on scans"),
    (lambda s: s.fuse("C", "t", "i"), "scan axis t must stay one whole loop"),
])
def test_schedule_steps_that_would_break_the_order_are_refused(step, match):
    with pytest.raises(pw.ScheduleError, match=match):
        step(decay().schedule())


def test_only_independent_axes_may_run_outside_the_scan_axis_or_in_parallel():
    wl = pw.zoo.lstm(steps=3, inputs=4, hidden=8)  # H[t - 1, k] under a sum: no independent axis
    with pytest.raises(pw.ScheduleError, match="reads its own earlier steps across j"):
        wl.schedule().reorder("state", "j", "t", "s")
    with pytest.raises(pw.ScheduleError, match="loop j.inner runs threadIdx.x, but update reads"):
        wl.schedule().split("state", "j", 4).bind("state", "j.inner", "threadIdx.x")
    wl.schedule().split("state", "j", 4).vectorize("state", "j.inner")  # inside the step: fine
    s = decay().schedule().reorder("C", "i", "t").parallel("C", "i")  # C[t - 1, i]: i is independent
    assert s.loops("C") == ["i", "t"]


def test_compute_at_into_or_of_a_scan_is_refused():
    wl = pw.Workload("placed")
    x = wl.input("X", (5, 8))
    p = wl.compute("P", (5, 8), lambda t, i: x[t, i] + 1.0)
    c = wl.scan("C", (5, 8), init=lambda i: p[0, i], update=lambda t, i: c[t - 1, i] + p[t, i])
    wl.output(wl.compute("D", (5, 8), lambda t, i: c[t, i] * 2.0))
    with pytest.raises(pw.ScheduleError, match="compute_at into it is not supported"):
        wl.schedule().compute_at("P", "C", "t")
    with pytest.raises(pw.ScheduleError, match="compute_at is not supported on scans"):
        wl.schedule().compute_at("C", "D", "t")
    got = pw.build(wl.schedule().compute_inline("P"), target="numpy").run(X=np.ones((5, 8), np.float32))
    np.testing.assert_array_equal(got["D"], np.cumsum(np.full((5, 8), 2.0), 0) * 2)


@pytest.mark.parametrize("target", COMPILED)
def test_iir_blur_under_halides_schedule(target):
    """Strips of 8 columns in parallel, every row of a strip in vectors (Halide's iir_blur schedule)."""
    wl = pw.zoo.iir_blur(24, 64, alpha=0.2)
    s = wl.schedule()
    for scan in ("blur_y_causal", "blur_y_anticausal", "Y_causal", "Y_anticausal"):
        s.split(scan, "x", 8).reorder(scan, "x.outer", s.loops(scan)[0], "x.inner")
        s.vectorize(scan, "x.inner").parallel(scan, "x.outer")
    image = np.random.default_rng(0).random((24, 64), dtype=np.float32)
    got = pw.build(s, target=target).run(image=image)["Y"]
    np.testing.assert_allclose(got, iir_columns_transposed(iir_columns_transposed(image, 0.2), 0.2), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("target", COMPILED)
def test_lstm_steps_vectorized_inside(target):
    wl = pw.zoo.lstm(steps=5, inputs=8, hidden=16)
    s = wl.schedule().split("state", "j", 8).vectorize("state", "j.inner")
    rng = np.random.default_rng(1)
    inputs = {n: rng.standard_normal(wl.tensor(n).shape).astype(np.float32) * 0.5 for n in ("X", "W", "U", "b")}
    np.testing.assert_allclose(pw.build(s, target=target).run(**inputs)["H"], lstm_reference(inputs), atol=1e-5)


@pytest.mark.parametrize("target", [t for t in ("numpy", "cpu") if t in pw.targets()])  # aicore: static only
def test_a_scan_over_a_symbolic_length(target):
    wl = pw.Workload("running")
    x = wl.input("X", ("n", 16))
    c = wl.scan("C", ("n", 16), init=lambda i: x[0, i], update=lambda t, i: c[t - 1, i] * 0.5 + x[t, i])
    wl.output(c)
    prog = pw.build(wl, target=target)
    for n in (1, 2, 9):
        a = np.random.default_rng(n).random((n, 16), dtype=np.float32)
        np.testing.assert_allclose(prog.run(X=a)["C"], decay_numpy(a), rtol=1e-6)


def random_scan_schedule(wl: pw.Workload, task: str, rng) -> pw.Schedule:
    """Up to six random loop steps on a scan; each one the rules refuse is skipped."""
    s = wl.schedule()
    for _ in range(rng.integers(1, 7)):
        loops = s.loops(task)
        loop = loops[rng.integers(len(loops))]
        extent = s.nest(task).loop(loop).extent
        step = rng.integers(5)
        try:
            if step == 0 and extent > 2:
                s.split(task, loop, int(rng.choice([2, 4, 8])))
            elif step == 1:
                s.reorder(task, *rng.permutation(loops).tolist())
            elif step == 2 and extent <= 16:
                s.vectorize(task, loop)
            elif step == 3:
                s.parallel(task, loop)
            elif step == 4 and extent <= 8:
                s.unroll(task, loop)
        except pw.ScheduleError:
            pass
    return s


@pytest.mark.parametrize("seed", range(24))
def test_random_legal_scan_schedules_match_the_reference(seed):
    """Whatever the rules let through (independent axes outside or in parallel, the rest inside the
    scan axis) computes the reference's values."""
    rng = np.random.default_rng(seed)
    wl = decay(10, 48) if seed % 2 else pw.zoo.lstm(steps=4, inputs=8, hidden=16)
    task = "C" if seed % 2 else "state"
    s = random_scan_schedule(wl, task, rng)
    inputs = {n: rng.standard_normal(wl.tensor(n).shape).astype(np.float32) * 0.5 for n in wl.inputs}
    want = pw.reference(wl, **inputs)
    for target in COMPILED:
        got = pw.build(s, target=target).run(**inputs)
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=f"{target}\n{s}")
