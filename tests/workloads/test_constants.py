"""Constant inputs (`wl.constant`) and constant folding (schedules/passes/fold.py) on every target."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.schedules.passes import fold
from ptowsp.workloads import ComputeTask

TARGETS = pw.targets()
RNG = np.random.default_rng(0)
W_VALUE = RNG.standard_normal((6, 5)).astype(np.float32)
S_VALUE = RNG.standard_normal(5).astype(np.float32)


def scaled_matmul(folded_output: bool = False) -> pw.Workload:
    """Y = relu(X @ (W * s) + 1): Ws and Wt read only constants (folded), Y_mm and Y read the input X."""
    wl = pw.Workload("scaled_matmul")
    x = wl.input("X", (4, 6))
    w, s = wl.constant("W", W_VALUE), wl.constant("s", S_VALUE)
    ws = wl.compute("Ws", (6, 5), lambda k, j: w[k, j] * s[j])
    wt = wl.compute("Wt", (6, 5), lambda k, j: ws[k, j] + 0.5)
    k = pw.reduce_axis(6, "k")
    y_mm = wl.compute("Y_mm", (4, 5), lambda i, j: pw.sum(x[i, k] * wt[k, j], k))
    y = wl.compute("Y", (4, 5), lambda i, j: pw.maximum(y_mm[i, j] + s[j], 0.0))
    wl.output(y, wt) if folded_output else wl.output(y)
    return wl


def expected(x: np.ndarray) -> np.ndarray:
    return np.maximum(x @ (W_VALUE * S_VALUE + 0.5) + S_VALUE, 0.0)


X = RNG.standard_normal((4, 6)).astype(np.float32)


# -- declaration --------------------------------------------------------------------------------------------

def test_a_constant_is_a_tensor_but_not_an_input():
    wl = scaled_matmul()
    w = wl.tensor("W")
    assert (w.shape, w.dtype) == ((6, 5), "float32")
    assert wl.inputs == ["X"]
    assert list(wl.constants) == ["W", "s"]
    np.testing.assert_array_equal(wl.constants["W"], W_VALUE)
    assert wl.producer("W") is None
    assert wl.graph.nodes["W"]["kind"] == "constant" and ("W", "Ws") in wl.graph.edges
    assert "  constant W[6, 5] float32 sha256:" in str(wl)


def test_the_workload_keeps_a_private_read_only_copy():
    value = np.ones((2, 3), np.float32)
    wl = pw.Workload("copy")
    c = wl.constant("C", value)
    x = wl.input("x", (2, 3))
    wl.output(wl.compute("Y", (2, 3), lambda i, j: c[i, j] + x[i, j]))
    fingerprint = wl.fingerprint
    value[:] = 7.0  # the caller's array changes after declaring: the workload does not
    assert np.all(wl.constants["C"] == 1.0) and wl.fingerprint == fingerprint
    np.testing.assert_array_equal(pw.reference(wl, x=np.zeros((2, 3), np.float32))["Y"], np.ones((2, 3)))
    with pytest.raises(ValueError, match="read-only"):
        wl.constants["C"][0, 0] = 3.0
    wl.constants.clear()  # a copy of the mapping
    assert list(wl.constants) == ["C"]


def test_fingerprint_depends_on_the_constant_value():
    def make(value):
        wl = pw.Workload("f")
        c = wl.constant("C", value)
        wl.output(wl.compute("Y", (3,), lambda i: c[i] * 2.0))
        return wl

    a, b = make(np.array([1, 2, 3], np.float32)), make(np.array([1, 2, 4], np.float32))
    assert str(a) != str(b) and a.fingerprint != b.fingerprint
    assert make(np.array([1, 2, 3], np.float32)).fingerprint == a.fingerprint
    assert make(np.array([1, 2, 3], np.float64)).fingerprint != a.fingerprint
    with pytest.raises(pw.ScheduleError, match="different definition"):
        pw.Schedule.from_json(b, a.schedule().to_json())


@pytest.mark.parametrize("value, dtype, expected_dtype", [
    ([1.0, 2.5], None, "float32"),  # Python floats: the workload default
    ([1, 2], None, "int64"),
    ([True, False], None, "bool"),
    (np.array([1.0, 2.0]), None, "float64"),  # an array keeps its dtype
    (np.array([1, 2], np.int32), None, "int32"),
    (np.array([1.0, 2.0]), "float16", "float16"),
    (np.array([1, 2], np.uint8), "int32", "int32"),
])
def test_constant_dtypes(value, dtype, expected_dtype):
    wl = pw.Workload("d")
    assert wl.constant("C", value, dtype=dtype).dtype == expected_dtype
    assert wl.constants["C"].dtype == np.dtype(expected_dtype)


@pytest.mark.parametrize("value, dtype, error, match", [
    (np.array([1, 2], np.complex64), None, pw.DTypeError, "constant 'C'.*unsupported dtype"),
    (np.array([1.0, 2.0]), "complex64", pw.DTypeError, "constant 'C'.*unsupported dtype"),
    (np.array([1.5, 2.0]), "int32", pw.DTypeError, "constant 'C'.*float64 value does not convert to int32"),
    (np.array([1j]), "float32", pw.DTypeError, "constant 'C'"),
    (np.array(["a"]), "float32", pw.DTypeError, "constant 'C'"),
    (np.array([2**40]), "int32", pw.DTypeError, "constant 'C'.*do not fit int32"),
    ([[1.0, 2.0], [3.0]], None, pw.ShapeError, "constant 'C'.*not a rectangular array"),
])
def test_bad_constants_are_refused(value, dtype, error, match):
    wl = pw.Workload("bad")
    with pytest.raises(error, match=match):
        wl.constant("C", value, dtype=dtype)
    assert not wl.constants and "C" not in wl.graph


@pytest.mark.parametrize("target", ["numpy", "cpu", "aicore"])
def test_a_scalar_constant_is_a_0d_tensor_read_at_no_index(target):
    wl = pw.Workload("scalar")
    x = wl.input("X", (5,))
    c = wl.constant("C", np.float32(3.0))
    assert c.shape == ()
    wl.output(wl.compute("Y", (5,), lambda i: x[i] * c[()]))
    got = pw.build(wl, target).run(X=np.arange(5, dtype=np.float32))["Y"]
    np.testing.assert_array_equal(got, np.arange(5, dtype=np.float32) * 3.0)


def test_a_constant_name_is_claimed_like_any_other():
    wl = pw.Workload("names")
    wl.input("A", (2,))
    with pytest.raises(pw.WorkloadError, match="already has a tensor or task named 'A'"):
        wl.constant("A", [1.0, 2.0])
    with pytest.raises(pw.WorkloadError, match="identifier"):
        wl.constant("not a name", [1.0])


def test_a_constant_is_not_passed_at_run_time():
    wl = scaled_matmul()
    with pytest.raises(pw.InputError, match="'W' is a constant of workload 'scaled_matmul'.*not passed at run time"):
        pw.reference(wl, X=X, W=W_VALUE)
    with pytest.raises(pw.InputError, match="'s' is a constant"):
        pw.build(wl, "numpy").run(X=X, s=S_VALUE)


def test_a_constant_cannot_be_an_output():
    wl = scaled_matmul()
    with pytest.raises(pw.WorkloadError, match="W is a constant, not the result of a task"):
        wl.output(wl.tensor("W"))
    assert wl.outputs == ["Y"]


def test_reference_reads_the_constants():
    got = pw.reference(scaled_matmul(folded_output=True), X=X)
    np.testing.assert_allclose(got["Y"], expected(X), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["Wt"], W_VALUE * S_VALUE + 0.5, rtol=1e-6)
    assert got["Wt"].flags.writeable


# -- folding ------------------------------------------------------------------------------------------------

def test_foldable_tasks_read_only_constants():
    wl = scaled_matmul()
    assert fold.foldable(wl) == {"Ws", "Wt"}  # Y_mm mixes a folded tensor with the input X; Y reads Y_mm
    op = wl.opaque("sorted", lambda a: np.sort(a, axis=1), inputs=[wl.tensor("W")], outputs=[("W_sorted", (6, 5))])
    after = wl.compute("after", (6, 5), lambda i, j: op[i, j] * 2.0)
    assert fold.foldable(wl) == {"Ws", "Wt"}  # opaque code may be impure, so it and its readers run each time
    assert after.name not in fold.foldable(wl)
    wt = wl.tensor("Wt")
    wl.compute("Wt2", (6, 5), lambda k, j: wt[k, j] * 2.0)  # the answer is kept per version of the workload
    assert fold.foldable(wl) == {"Ws", "Wt", "Wt2"}


def test_folded_values_are_read_only_and_evaluated_once(monkeypatch):
    wl = scaled_matmul()
    calls = []
    real = ComputeTask.evaluate
    monkeypatch.setattr(ComputeTask, "evaluate", lambda task, arrays: calls.append(task.name) or real(task, arrays))
    first = fold.fold_constants(wl)
    assert list(first) == ["Ws", "Wt"] and len(calls) == 2
    np.testing.assert_allclose(first["Wt"], W_VALUE * S_VALUE + 0.5, rtol=1e-6)
    assert not first["Wt"].flags.writeable
    pw.build(wl.schedule().fuse_by_category(), "numpy")
    pw.build(wl, "numpy")
    assert fold.fold_constants(wl)["Wt"] is first["Wt"] and len(calls) == 2
    # a task added later is folded on the next call, the earlier ones are not evaluated again
    wt = wl.tensor("Wt")
    wl.compute("Wt2", (6, 5), lambda k, j: wt[k, j] * wt[k, j])
    assert list(fold.fold_constants(wl)) == ["Ws", "Wt", "Wt2"] and len(calls) == 3


def test_a_failing_folded_task_is_a_build_error(monkeypatch):
    def fail(*args):
        raise FloatingPointError("overflow")

    monkeypatch.setattr(ComputeTask, "evaluate", fail)
    with pytest.raises(pw.BuildError, match="constant folding: task 'Ws'.*FloatingPointError: overflow"):
        pw.build(scaled_matmul(), "numpy")


@pytest.mark.skipif("cpu" not in TARGETS, reason="the cpu target is unavailable on this machine")
def test_a_folded_task_gets_no_kernel():
    wl = scaled_matmul()
    prog = pw.build(wl.schedule(), "cpu")
    assert prog.program.order == ("Y_mm", "Y")
    assert set(prog.program.kernels) == {"Y_mm", "Y"}
    assert all(inst.task not in ("Ws", "Wt") for inst in prog.program.instances)
    np.testing.assert_allclose(prog.program.constants["Wt"], W_VALUE * S_VALUE + 0.5, rtol=1e-6)
    assert set(prog.program.constants) == {"W", "s", "Ws", "Wt"}
    with pytest.raises(pw.BuildError, match="'Wt' has no kernel: it depends only on constants and was folded"):
        prog.source("Wt")
    with pytest.raises(pw.BuildError, match="'W' is a constant of the workload, not a task"):
        prog.source("W")
    assert "Wt[" in prog.source("Y_mm")  # the kernel reads the folded tensor like an input


def test_category_fusion_leaves_folded_tasks_alone():
    wl = scaled_matmul()
    s = wl.schedule().fuse_by_category()
    explained = s.explain()
    assert "not fused Ws -> Wt: 'Ws' depends only on constants and is folded at build time" in explained
    assert "not fused Wt -> Y_mm: 'Wt' depends only on constants" in explained
    assert "fused Y_mm -> Y" in explained
    with pytest.raises(pw.ScheduleError, match="'Ws' depends only on constants"):
        pw.build(wl.schedule().fuse_tasks("Ws", "Wt"), "numpy")


def _schedules(wl: pw.Workload, target: str) -> list[pw.Schedule]:
    if target == "numpy":
        return [wl.schedule(), wl.schedule().fuse_by_category()]
    # the schedule may still place a folded task: its readers then recompute it from the constants
    placed = (wl.schedule().compute_inline("Ws") if "Wt" in wl.outputs
              else wl.schedule().compute_inline("Ws").compute_at("Wt", "Y_mm", "i"))
    tiled = wl.schedule().split("Y_mm", "j", 2).parallel("Y_mm", "i").split("Wt", "k", 3).vectorize("Ws", "j")
    return [wl.schedule(), wl.schedule().fuse_by_category(), placed, tiled, tiled.fuse_by_category()]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("folded_output", [False, True])
def test_targets_match_the_reference(target, folded_output):
    wl = scaled_matmul(folded_output)
    ref = pw.reference(wl, X=X)
    for schedule in _schedules(wl, target):
        prog = pw.build(schedule, target)
        got = prog.run(X=X)
        assert got.keys() == ref.keys()
        for name, value in ref.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=f"{name} under {schedule}")
        assert {e.name for e in prog.trace.events if e.id >= 0} <= {"Y_mm", "Y"}
        if folded_output:  # every run returns its own writable copy of a folded output
            got["Wt"][:] = 0.0
            np.testing.assert_allclose(prog.run(X=X)["Wt"], ref["Wt"], rtol=1e-6)


@pytest.mark.skipif("cpu" not in TARGETS, reason="the cpu target is unavailable on this machine")
def test_a_placed_folded_task_stays_readable_by_its_other_consumers():
    wl = pw.Workload("two_readers")
    x = wl.input("x", (4, 3))
    c = wl.constant("c", np.arange(12, dtype=np.float32).reshape(4, 3))
    f = wl.compute("F", (4, 3), lambda i, j: c[i, j] * 3.0)
    y = wl.compute("Y", (4, 3), lambda i, j: f[i, j] + x[i, j])
    z = wl.compute("Z", (4, 3), lambda i, j: f[i, j] - x[i, j])
    wl.output(y, z)
    a = np.ones((4, 3), np.float32)
    # F is computed inside Y; Z reads the folded value, which exists whatever the schedule does with F
    got = pw.build(wl.schedule().compute_at("F", "Y", "i"), "cpu").run(x=a)
    np.testing.assert_allclose(got["Z"], np.arange(12).reshape(4, 3) * 3.0 - 1.0)
    np.testing.assert_allclose(got["Y"], np.arange(12).reshape(4, 3) * 3.0 + 1.0)


@pytest.mark.skipif("cpu" not in TARGETS, reason="the cpu target is unavailable on this machine")
def test_a_cached_cpu_build_gets_its_folded_values():
    def make():
        wl = pw.Workload("cached_constants")
        x = wl.input("x", (5,))
        c = wl.constant("c", np.linspace(0.0, 1.0, 5, dtype=np.float32))
        d = wl.compute("d", (5,), lambda i: c[i] * c[i] + 2.0)
        wl.output(wl.compute("y", (5,), lambda i: d[i] * x[i]), d)
        return wl

    a = np.full(5, 3.0, np.float32)
    pw.build(make(), "cpu").run(x=a)
    again = pw.build(make(), "cpu")  # a new workload object: folded anew, the kernels come from the cache
    assert again._executable.from_cache
    got = again.run(x=a)
    c = np.linspace(0.0, 1.0, 5, dtype=np.float32)
    np.testing.assert_allclose(got["d"], c * c + 2.0, rtol=1e-6)
    np.testing.assert_allclose(got["y"], (c * c + 2.0) * 3.0, rtol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_an_opaque_task_reads_a_constant(target):
    wl = pw.Workload("opaque_constant")
    x = wl.input("x", (3, 4))
    c = wl.constant("c", np.array([[3.0, 1.0, 2.0, 0.0]] * 3, np.float32))
    ordered = wl.opaque("order", lambda a: np.sort(a, axis=1), inputs=[c], outputs=[("ordered", (3, 4))])
    wl.output(wl.compute("y", (3, 4), lambda i, j: ordered[i, j] + x[i, j]))
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    assert not fold.foldable(wl)
    want = np.sort(wl.constants["c"], axis=1) + a
    np.testing.assert_allclose(pw.reference(wl, x=a)["y"], want)
    prog = pw.build(wl, target)
    np.testing.assert_allclose(prog.run(x=a)["y"], want)
    assert {e.name for e in prog.trace.events if e.id >= 0} == {"order", "y"}  # the opaque task runs at run time


@pytest.mark.parametrize("target", TARGETS)
def test_a_workload_of_constants_only(target):
    wl = pw.Workload("constants_only")
    c = wl.constant("c", [1.0, 2.0, 4.0])
    wl.output(wl.compute("d", (3,), lambda i: c[i] / 2.0))
    prog = pw.build(wl, target)
    np.testing.assert_array_equal(prog.run()["d"], np.array([0.5, 1.0, 2.0], np.float32))
    assert prog.trace.events == []
