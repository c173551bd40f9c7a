"""argmax / argmin in the reference evaluator against numpy: ties, NaN, several axes, chunking."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw


def _workload(fn, shape, dtype="float32"):
    wl = pw.Workload("arg")
    x = wl.input("X", shape, dtype)
    axes = [pw.reduce_axis(n, f"r{d}") for d, n in enumerate(shape[1:])]
    wl.output(wl.compute("I", shape[:1], lambda i: fn(x[(i, *axes)], axis=axes)))
    return wl


@pytest.mark.parametrize("fn, ref", [(pw.argmax, np.argmax), (pw.argmin, np.argmin)])
def test_ties_take_the_first_index(fn, ref):
    x = np.random.default_rng(0).integers(0, 3, (20, 31)).astype(np.int32)
    got = pw.reference(_workload(fn, x.shape, "int32"), X=x)["I"]
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, ref(x, axis=1))


@pytest.mark.parametrize("fn, ref", [(pw.argmax, np.argmax), (pw.argmin, np.argmin)])
def test_the_first_nan_wins(fn, ref):
    x = np.random.default_rng(1).standard_normal((6, 9)).astype(np.float32)
    x[1, 4] = x[1, 7] = np.nan
    x[2, :] = np.nan
    x[3, 0] = np.nan
    x[4, :] = -np.inf
    x[5, :] = np.inf
    np.testing.assert_array_equal(pw.reference(_workload(fn, x.shape), X=x)["I"], ref(x, axis=1))


def test_several_axes_give_the_flat_row_major_index():
    x = np.random.default_rng(2).integers(-5, 6, (4, 5, 6, 7)).astype(np.int32)
    got = pw.reference(_workload(pw.argmax, x.shape, "int32"), X=x)["I"]
    np.testing.assert_array_equal(got, np.argmax(x.reshape(4, -1), axis=1))


def test_chunked_evaluation_keeps_the_first_index():
    """A small element budget makes the evaluator walk the axes in chunks; ties span chunks."""
    from ptowsp.te import evaluate

    wl = _workload(pw.argmin, (3, 40, 50), "int32")
    x = np.random.default_rng(3).integers(0, 2, (3, 40, 50)).astype(np.int32)
    x[1, 30:, :] = -1  # the minimum first appears in a later chunk
    task = wl.task("I")
    got = evaluate(task.value, task.loop_names, (3,), {"X": x}, budget=64)
    np.testing.assert_array_equal(got, np.argmin(x.reshape(3, -1), axis=1))


def test_bool_values_order_false_before_true():
    x = np.random.default_rng(4).integers(0, 2, (8, 13)).astype(bool)
    np.testing.assert_array_equal(pw.reference(_workload(pw.argmax, x.shape, "bool"), X=x)["I"], np.argmax(x, 1))
