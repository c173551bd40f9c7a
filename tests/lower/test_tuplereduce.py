"""Several-value reductions: all values folded in one loop nest, on every path and nesting."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw


def _lse_pair(a, b):
    m = pw.maximum(a[0], b[0])
    return (m, a[1] * pw.exp(a[0] - m) + b[1] * pw.exp(b[0] - m))


LSE = pw.reducer(combine=_lse_pair, identity=(float("-inf"), 0.0), name="lse_pair")


def _workload(value, shape=(5, 4, 13)):
    wl = pw.Workload("several")
    x = wl.input("X", shape)
    j, k = pw.reduce_axis(shape[1], "j"), pw.reduce_axis(shape[2], "k")
    wl.output(wl.compute("Y", shape[:1], lambda i: value(x, i, j, k)))
    return wl


def _lse(x, i, j, k):
    m, s = LSE((x[i, 0, k], 1.0), axis=k)
    return m + pw.log(s)


def test_the_axes_are_walked_once_for_every_value():
    text = pw.build(_workload(_lse), target="cpu").source("Y")
    loops = [line.strip() for line in text.splitlines() if line.strip().startswith("for k ")]
    assert loops == ["for k in 0..13:"]
    assert "Y_r0v0[0] = " in text and "Y_r0v1[0] = " in text  # both accumulators updated in it


def test_a_value_used_alone_is_not_scheduled():
    wl = _workload(lambda x, i, j, k: LSE((x[i, 0, k], 1.0), axis=k)[1])
    assert wl.schedule().reduce_loops("Y") == []


@pytest.mark.parametrize("value", [
    _lse,
    lambda x, i, j, k: (lambda m, s: pw.where(s > 2.0, m, 0.0) + pw.where(m > 1.0, s, -s))(
        *LSE((x[i, 0, k], 1.0), axis=k)),  # values under different conditions
    lambda x, i, j, k: pw.sum((lambda m, s: m + pw.log(s))(*LSE((x[i, j, k], 1.0), axis=k)), axis=j),  # nested in
    lambda x, i, j, k: (lambda m, s: m * s)(*LSE((pw.sum(x[i, j, k], axis=j), 1.0), axis=k)),  # a sum nested in it
])
def test_compiled_values_match_the_reference(value):
    wl = _workload(value)
    x = np.random.default_rng(3).standard_normal((5, 4, 13)).astype(np.float32)
    expected = pw.reference(wl, X=x)["Y"]
    for schedule in (wl.schedule(), wl.schedule().fuse_by_category()):
        np.testing.assert_allclose(pw.build(schedule, target="cpu").run(X=x)["Y"], expected, rtol=1e-5, atol=1e-5)


def test_reference_of_nested_values_matches_numpy():
    wl = _workload(lambda x, i, j, k: pw.sum((lambda m, s: m + pw.log(s))(*LSE((x[i, j, k], 1.0), axis=k)), axis=j))
    x = np.random.default_rng(4).standard_normal((5, 4, 13)).astype(np.float32)
    np.testing.assert_allclose(pw.reference(wl, X=x)["Y"], np.logaddexp.reduce(x, axis=2).sum(axis=1), rtol=1e-5)
