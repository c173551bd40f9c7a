"""Scatter: writes through an index map, each target at most once, on every target."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.backends.cpu import jit


def _unroute() -> pw.Workload:
    """Each expert's rows back to the tokens they came from: out[slots[e, c], j] = 2 y[e, c, j], c < counts[e]."""
    wl = pw.Workload("unroute")
    y = wl.input("y", (3, "n", 4))
    slots = wl.input("slots", (3, "n"), "int32")
    counts = wl.input("counts", (3,), "int32")
    wl.output(wl.scatter("out", ("n", 4), over=(3, "n", 4), index=lambda e, c, j: (slots[e, c], j),
                         value=lambda e, c, j: y[e, c, j] * 2.0, domain=lambda e, c, j: c < counts[e]))
    return wl


def _routing(n: int, seed: int):
    """Each of n tokens to one of 3 experts (expert 1 gets none), token order kept per expert."""
    rng = np.random.default_rng(seed)
    expert = rng.choice([0, 2], n)
    slots, counts = np.zeros((3, n), np.int32), np.zeros(3, np.int32)
    for e in range(3):
        tokens = np.flatnonzero(expert == e)
        counts[e], slots[e, :len(tokens)] = len(tokens), tokens
    y = rng.standard_normal((3, n, 4)).astype(np.float32)
    expected = np.zeros((n, 4), np.float32)
    for e in range(3):
        expected[slots[e, :counts[e]]] = 2 * y[e, :counts[e]]
    return {"y": y, "slots": slots, "counts": counts}, expected


@pytest.mark.parametrize("target", ["numpy", "cpu"])
def test_scatter_writes_each_target_once_and_zeroes_the_rest(target):
    wl = _unroute()
    prog = pw.build(wl, target=target)
    before = jit.COMPILATIONS
    for n, seed in ((1, 0), (7, 1), (40, 2)):
        inputs, expected = _routing(n, seed)
        np.testing.assert_array_equal(pw.reference(wl, **inputs)["out"], expected)
        np.testing.assert_array_equal(prog(**inputs)["out"], expected)
    assert jit.COMPILATIONS == before


def test_scatter_on_aicore_and_the_gather_skips_tiles_nothing_writes():
    inputs, expected = _routing(12, 3)
    inputs["counts"][2] = 0  # only expert 0's tokens are written back
    expected[:] = 0
    expected[inputs["slots"][0, :inputs["counts"][0]]] = 2 * inputs["y"][0, :inputs["counts"][0]]
    wl = _unroute().bind(n=12)
    np.testing.assert_array_equal(pw.build(wl, target="aicore").run(**inputs)["out"], expected)
    s = wl.schedule().split("out", "t0", 1).parallel("out", "t0.outer")
    prog = pw.build(s, target="cpu", workers=2)
    np.testing.assert_array_equal(prog.run(**inputs)["out"], expected)
    ran = sum(1 for e in prog.trace.events if e.name == "out")
    assert ran == inputs["counts"][0] and prog.trace.statistics["skipped"] == 12 - ran


def test_a_target_written_twice_or_out_of_range_is_named():
    wl = _unroute()
    inputs, _ = _routing(5, 4)
    inputs["slots"][0, :2], inputs["counts"][0] = (3, 3), max(2, inputs["counts"][0])
    with pytest.raises(pw.TaskError, match=r"scatter 'out': target \(3, 0\) is written by points"):
        pw.reference(wl, **inputs)
    with pytest.raises(pw.TaskError, match="at most once"):
        pw.build(wl, target="cpu")(**inputs)
    inputs["slots"][0, :2] = (9, 0)
    with pytest.raises(pw.TaskError,
                       match=r"coordinate 0 of the target of point \(0, 0, 0\) is 9 "
                             r"\(read from slots\), outside \[0, 5\)"):
        pw.reference(wl, **inputs)


def test_scatter_arguments_are_checked():
    wl = pw.Workload("bad")
    y, idx = wl.input("y", (4,)), wl.input("idx", (4,), "int32")
    k = pw.reduce_axis(4, "k")
    with pytest.raises(pw.ShapeError, match="index gives 1 coordinate"):
        wl.scatter("a", (4, 4), over=(4,), index=lambda i: (idx[i],), value=lambda i: y[i])
    with pytest.raises(pw.WorkloadError, match="not an integer"):
        wl.scatter("b", (4,), over=(4,), index=lambda i: (y[i],), value=lambda i: y[i])
    with pytest.raises(pw.WorkloadError, match="tuple of coordinates"):
        wl.scatter("c", (4,), over=(4,), index=lambda i: idx[i], value=lambda i: y[i])
    with pytest.raises(pw.WorkloadError, match="element expression"):
        wl.scatter("d", (4,), over=(4,), index=lambda i: (idx[i],), value=lambda i: pw.sum(y[k], k) + y[i])
    assert wl.tasks == []  # a refused scatter adds neither of its tasks
