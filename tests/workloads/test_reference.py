"""pw.reference: input validation, no modified inputs, opaque tasks checked."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw


def scale_workload():
    wl = pw.Workload("scale")
    x = wl.input("x", (3, 4))
    n = wl.input("n", (4,), "int32")
    wl.output(wl.compute("y", (3, 4), lambda i, j: x[i, j] * 2.0 + pw.cast(n[j], "float32")))
    return wl


GOOD = {"x": np.ones((3, 4), np.float32), "n": np.arange(4, dtype=np.int32)}


@pytest.mark.parametrize(
    "inputs, match",
    [
        ({"x": GOOD["x"]}, "missing input 'n' of workload 'scale': expected a int32 array of shape \\(4,\\)"),
        (dict(GOOD, z=GOOD["n"]), "unexpected input 'z'"),
        (dict(GOOD, x=np.ones((4, 3), np.float32)), "'x': expected a float32 array of shape \\(3, 4\\), got shape"),
        (dict(GOOD, x=np.ones((3, 4))), "got dtype float64; convert with .astype\\('float32'\\)"),
        (dict(GOOD, x=[[1.0] * 4] * 3), "got list"),
    ],
)
def test_bad_inputs_raise_input_error_naming_the_input(inputs, match):
    with pytest.raises(pw.InputError, match=match):
        pw.reference(scale_workload(), **inputs)


def test_workload_without_outputs_is_refused():
    wl = pw.Workload("empty")
    wl.input("x", (2,))
    with pytest.raises(pw.WorkloadError, match="no outputs"):
        pw.reference(wl, x=np.ones(2, np.float32))


def test_inputs_are_never_modified_and_outputs_are_fresh():
    wl = pw.Workload("id")
    x = wl.input("x", (5,))

    def in_place(a):
        a += 1  # an opaque task that tries to write its input
        return a

    wl.output(wl.compute("y", (5,), lambda i: x[i]))
    x_in = np.arange(5, dtype=np.float32)
    before = x_in.copy()
    y = pw.reference(wl, x=x_in)["y"]
    y[0] = 99.0  # writable and not a view of the input
    np.testing.assert_array_equal(x_in, before)

    wl2 = pw.Workload("bad")
    x2 = wl2.input("x", (5,))
    wl2.output(wl2.opaque("inc", in_place, inputs=[x2], outputs=[("y", (5,))]))
    with pytest.raises(pw.TaskError, match="opaque task 'inc' raised ValueError"):
        pw.reference(wl2, x=x_in)
    np.testing.assert_array_equal(x_in, before)


@pytest.mark.parametrize(
    "fn, match",
    [
        (lambda a: (a, a), "returned 2 array"),
        (lambda a: a[:2], "shape \\(2,\\), declared \\(5,\\)"),
        (lambda a: a.astype(np.complex64), "dtype complex64"),
        (lambda a: 1 / 0, "ZeroDivisionError"),
    ],
)
def test_opaque_results_are_checked(fn, match):
    wl = pw.Workload("o")
    x = wl.input("x", (5,))
    wl.output(wl.opaque("f", fn, inputs=[x], outputs=[("y", (5,))]))
    with pytest.raises(pw.TaskError, match=match):
        pw.reference(wl, x=np.zeros(5, np.float32))


def test_intermediates_are_released_but_outputs_kept():
    wl = pw.Workload("chain")
    x = wl.input("x", (4,))
    a = wl.compute("a", (4,), lambda i: x[i] + 1.0)
    b = wl.compute("b", (4,), lambda i: a[i] * 2.0)
    c = wl.compute("c", (4,), lambda i: b[i] - a[i])
    wl.output(c, a)
    out = pw.reference(wl, x=np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(out["a"], [1, 2, 3, 4])
    np.testing.assert_array_equal(out["c"], [1, 2, 3, 4])
