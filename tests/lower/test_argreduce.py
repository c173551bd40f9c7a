"""argmax / argmin compiled: numpy's first index under split, reordered and vectorized reduce loops."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw


def _rows(fn, m=7, n=45):
    wl = pw.Workload("arg")
    x = wl.input("X", (m, n))
    r = pw.reduce_axis(n, "r")
    wl.output(wl.compute("I", (m,), lambda i: fn(x[i, r], axis=r)))
    return wl


def _schedules(wl):
    yield wl.schedule()
    yield wl.schedule().split("I", "r", 8).reorder("I", "i", "r.inner", "r.outer")  # index order broken
    yield wl.schedule().split("I", "r", 8).vectorize("I", "r.inner")  # kept scalar: see lower/argreduce.py
    yield wl.schedule().split("I", "i", 4).reorder("I", "i.outer", "r", "i.inner").vectorize("I", "i.inner")


@pytest.mark.parametrize("target", [t for t in pw.targets() if t != "numpy"])
@pytest.mark.parametrize("fn, ref", [(pw.argmax, np.argmax), (pw.argmin, np.argmin)])
def test_nan_ties_and_infinities_on_every_schedule(target, fn, ref):
    x = np.random.default_rng(0).integers(-2, 3, (7, 45)).astype(np.float32)
    x[1, 20] = x[1, 3] = np.nan
    x[2, :] = np.nan
    x[3, 40] = np.nan
    x[4, :] = -np.inf
    x[5, :] = np.inf
    wl = _rows(fn)
    for s in _schedules(wl):
        np.testing.assert_array_equal(pw.build(s, target=target).run(X=x)["I"], ref(x, axis=1), err_msg=str(s))


def test_vectorized_reduce_loop_keeps_a_pair_per_lane():
    wl = _rows(pw.argmax, n=45)
    s = wl.schedule().split("I", "r", 16).split("I", "r.inner", 8).unroll("I", "r.inner.outer")
    s.vectorize("I", "r.inner.inner")
    assert "I_lanesi" in pw.build(s, target="cpu").source("I")
