"""Combining scatters (combine="add"|"max"|"min"): identities, order, domains, schedules, errors."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw


def _scores(combine: str, dtype: str = "float32") -> pw.Workload:
    """Each of n scores folded into one of 6 bins, where keep holds: bins 6..7 are never written."""
    wl = pw.Workload(f"scores_{combine}")
    x, idx, keep = wl.input("x", ("n",), dtype), wl.input("idx", ("n",), "int32"), wl.input("keep", ("n",), "int32")
    wl.output(wl.scatter("B", (8,), over=("n",), index=lambda i: (idx[i],), value=lambda i: x[i] * 3,
                         domain=lambda i: keep[i] > 0, combine=combine))
    return wl


def _inputs(n: int, dtype: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 100).astype(dtype)
    return {"x": x, "idx": rng.integers(0, 6, n).astype(np.int32), "keep": rng.integers(0, 4, n).astype(np.int32)}


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("combine", ["add", "max", "min"])
def test_targets_start_at_the_identity_and_fold_in_row_major_order(combine, dtype):
    wl, given = _scores(combine, dtype), _inputs(200, dtype)
    lowest = -np.inf if dtype == "float32" else np.iinfo(dtype).min
    start = {"add": 0, "max": lowest, "min": -lowest if dtype == "float32" else np.iinfo(dtype).max}[combine]
    expected = np.full(8, start, dtype)
    ufunc = {"add": np.add, "max": np.maximum, "min": np.minimum}[combine]
    kept = given["keep"] > 0
    ufunc.at(expected, given["idx"][kept], (given["x"] * 3).astype(dtype)[kept])
    assert wl.tasks == ["B_value", "B"] and wl.tensor("B").dtype == dtype
    for target, built in (("numpy", wl), ("cpu", wl), ("aicore", wl.bind({"n": 200}))):
        got = pw.build(built, target=target)(**given)["B"]
        np.testing.assert_array_equal(got, expected)  # one order everywhere: even float sums agree exactly


def test_a_parallel_vectorized_source_loop_is_race_free():
    """Each point computes its value into its own element; the fold is one host step."""
    wl, given = _scores("add"), _inputs(256, "float32", seed=1)
    s = wl.schedule().split("B_value", "i", 16).vectorize("B_value", "i.inner").parallel("B_value", "i.outer")
    np.testing.assert_array_equal(pw.build(s, target="cpu")(**given)["B"], pw.reference(wl, **given)["B"])


def test_out_of_range_targets_and_bad_arguments_are_named():
    wl, given = _scores("max"), _inputs(10, "float32")
    given["idx"][4], given["keep"][4] = 8, 1
    with pytest.raises(pw.TaskError, match=r"scatter 'B': coordinate 0 of the target of point \(4,\) is 8 "
                                           r"\(read from idx\), outside \[0, 8\)"):
        pw.build(wl, target="cpu")(**given)
    given["keep"][4] = 0  # outside the domain: never checked
    pw.reference(wl, **given)
    bad = pw.Workload("bad")
    y, flag, idx = bad.input("y", (4,)), bad.input("flag", (4,), "bool"), bad.input("idx", (4,), "int32")
    with pytest.raises(pw.WorkloadError, match=r"combine='sum' is not one of \['add', 'max', 'min'\]"):
        bad.scatter("a", (4,), over=(4,), index=lambda i: (idx[i],), value=lambda i: y[i], combine="sum")
    with pytest.raises(pw.WorkloadError, match="needs numeric values, got bool"):
        bad.scatter("b", (4,), over=(4,), index=lambda i: (idx[i],), value=lambda i: flag[i], combine="max")
    assert bad.tasks == []


def test_without_combine_a_repeated_target_points_at_combine():
    wl = pw.Workload("once")
    idx = wl.input("idx", (3,), "int32")
    wl.output(wl.scatter("C", (4,), over=(3,), index=lambda i: (idx[i],), value=lambda i: 1))
    with pytest.raises(pw.TaskError, match=r"at most once \(or give combine=\)"):
        pw.reference(wl, idx=np.array([1, 1, 2], np.int32))
