"""The numpy evaluator: chunking, laziness of where, documented arithmetic semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ptowsp as pw
from ptowsp.te.evaluate import iter_boxes


@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.integers(1, 50))
def test_boxes_cover_the_shape_exactly_once(shape, budget):
    seen = np.zeros(shape, dtype=int)
    for box in iter_boxes(tuple(shape), budget):
        assert math.prod(hi - lo for lo, hi in box) <= budget or all(hi - lo == 1 for lo, hi in box)
        seen[tuple(slice(lo, hi) for lo, hi in box)] += 1
    assert (seen == 1).all()


def run(shape, fn, **inputs):
    """Reference value of Out[loops] = fn(tensors, *loops) over `shape` (1 or 2 dims)."""
    wl = pw.Workload("t")
    t = {n: wl.input(n, a.shape, a.dtype.name) for n, a in inputs.items()}
    body = (lambda i: fn(t, i)) if len(shape) == 1 else (lambda i, j: fn(t, i, j))
    wl.output(wl.compute("Out", shape, body))
    return pw.reference(wl, **inputs)["Out"]


def test_where_reads_only_the_chosen_side():
    x = np.arange(5, dtype=np.float32)
    out = run((5,), lambda t, i: pw.where(i > 0, t["x"][i - 1], -1.0), x=x)
    np.testing.assert_array_equal(out, [-1, 0, 1, 2, 3])
    # the unchosen side may divide by zero or take log(0) without effect
    out = run((5,), lambda t, i: pw.where(t["x"][i] > 0, pw.log(t["x"][i]), 0.0), x=x)
    np.testing.assert_allclose(out, np.where(x > 0, np.log(np.maximum(x, 1)), 0))


def test_integer_division_floors_like_python():
    a = np.array([7, -7, 7, -7], dtype=np.int32)
    b = np.array([2, 2, -2, -2], dtype=np.int32)
    q = run((4,), lambda t, i: t["a"][i] // t["b"][i], a=a, b=b)
    r = run((4,), lambda t, i: t["a"][i] % t["b"][i], a=a, b=b)
    np.testing.assert_array_equal(q, [7 // 2, -7 // 2, 7 // -2, -7 // -2])
    np.testing.assert_array_equal(r, [7 % 2, -7 % 2, 7 % -2, -7 % -2])


def test_float16_sum_accumulates_in_float32():
    x = np.full((1, 4096), 1.0, dtype=np.float16)  # float16 alone stalls at 2048
    k = pw.reduce_axis(4096, "k")
    out = run((1,), lambda t, i: pw.sum(t["x"][i, k] * 1.0, k), x=x)
    assert out.dtype == np.float16 and float(out[0]) == 4096.0


def test_int32_sum_wraps_like_int32():
    x = np.full((1, 4), 2**30, dtype=np.int32)
    k = pw.reduce_axis(4, "k")
    out = run((1,), lambda t, i: pw.sum(t["x"][i, k], k), x=x)
    assert out.dtype == np.int32 and out[0] == np.int32(0)  # 2**32 wraps to 0


def test_max_propagates_nan_and_erf_is_exact():
    x = np.array([1.0, np.nan, -0.5], dtype=np.float64)
    out = run((3,), lambda t, i: pw.maximum(t["x"][i], 0.0), x=x)
    assert np.isnan(out[1]) and out[0] == 1.0 and out[2] == 0.0
    out = run((3,), lambda t, i: pw.erf(t["x"][i]), x=np.array([0.1, 1.0, -2.0]))
    np.testing.assert_array_equal(out, [math.erf(0.1), math.erf(1.0), math.erf(-2.0)])


def test_nested_reductions_and_unused_axes():
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    r, c = pw.reduce_axis(3, "r"), pw.reduce_axis(4, "c")
    # sum over rows of the row maxima, and a sum over an axis the body ignores
    out = run((2,), lambda t, i: pw.sum(pw.max(t["x"][r, c], c), r) + pw.sum(t["x"][0, 0] + 1.0, c), x=x)
    np.testing.assert_array_equal(out, [x.max(axis=1).sum() + 4.0] * 2)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64"])
def test_contraction_fast_path_matches_the_generic_path(dtype):
    rng = np.random.default_rng(1)
    a = rng.integers(-3, 4, (6, 5)).astype(dtype)
    b = rng.integers(-3, 4, (5, 7)).astype(dtype)
    k = pw.reduce_axis(5, "k")
    fast = run((6, 7), lambda t, i, j: pw.sum(t["a"][i, k] * t["b"][k, j], k), a=a, b=b)
    slow = run((6, 7), lambda t, i, j: pw.sum(pw.where(i >= 0, t["a"][i, k], 0) * t["b"][k, j], k), a=a, b=b)
    assert fast.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(fast, slow)
    np.testing.assert_array_equal(fast, (a.astype(np.int64) @ b.astype(np.int64)).astype(dtype))
