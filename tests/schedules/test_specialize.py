"""Tiered kernels: Schedule.specialize compiles variants once, the orchestrator picks one per instance."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.backends.cpu import jit
from ptowsp.backends.cuda import generate


def _rows() -> pw.Workload:
    """y[b, s] = sum_k x[b, s, k] for s < lens[b]: a row task whose cost follows the data."""
    wl = pw.Workload("rows")
    x = wl.input("x", ("batch", 16, 32))
    lens = wl.input("lens", ("batch",), "int32")
    k = pw.reduce_axis(32, "k")
    wl.output(wl.compute("y", ("batch", 16), lambda b, s: pw.sum(x[b, s, k], k), domain=lambda b, s: s < lens[b]))
    return wl


def _tiered(wl: pw.Workload) -> pw.Schedule:
    s = wl.schedule().split("y", "s", 4).parallel("y", "b", "s.outer")
    s.specialize("y", "lens[b] <= 4", lambda v: v.split("y", "k", 8).vectorize("y", "k.inner"))
    return s.specialize("y", "lens[b] <= 12", lambda v: v.split("y", "k", 16).unroll("y", "k.inner"))


def _inputs(lens):
    x = np.random.default_rng(0).standard_normal((len(lens), 16, 32)).astype(np.float32)
    return {"x": x, "lens": np.array(lens, np.int32)}


@pytest.mark.parametrize("target", ["cpu", "aicore"])
def test_each_instance_runs_the_first_variant_whose_condition_holds_on_its_tile(target):
    wl = _rows() if target == "cpu" else _rows().bind(batch=4)
    prog = pw.build(_tiered(wl), target=target, workers=2 if target == "cpu" else None)
    inputs = _inputs([3, 10, 16, 0])
    np.testing.assert_allclose(prog(**inputs)["y"], pw.reference(wl, **inputs)["y"], rtol=1e-5, atol=1e-5)
    ran = collections.Counter(e.name for e in prog.trace.events if e.id >= 0)
    # lens 3: 1 tile, variant 1; lens 10: 3 tiles, variant 2; lens 16: 4 tiles, the task's own loops; 0: none
    assert ran == {"y@1": 1, "y@2": 3, "y": 4}


def test_variants_are_compiled_once_serialised_and_reused_across_sizes():
    wl = _rows()
    s = _tiered(wl)
    text = s.to_json()
    assert "specialize" in str(s) and pw.Schedule.from_json(wl, text) == s
    prog = pw.build(pw.Schedule.from_json(wl, text), target="cpu")
    before = jit.COMPILATIONS
    for lens in ([1], [16, 2, 7], [5] * 9):
        inputs = _inputs(lens)
        np.testing.assert_allclose(prog(**inputs)["y"], pw.reference(wl, **inputs)["y"], rtol=1e-5, atol=1e-5)
    assert jit.COMPILATIONS == before


@pytest.mark.parametrize("build, match", [
    (lambda s: s.specialize("y", "lens[q] < 3", lambda v: v), "unknown name 'q'; a condition reads"),
    (lambda s: s.specialize("y", "x[b, 0, 0] < 3", lambda v: v), "reads x, a float32 input"),
    (lambda s: s.specialize("y", "b + 1", lambda v: v), "is int64, not a condition"),
    (lambda s: s.specialize("y", "lens[b] < 3", lambda v: v.prefetch(2)), "a variant takes loop steps"),
    (lambda s: s.specialize("y", "lens[b] < 3", lambda v: v.split("y", "s.outer", 2)), "s.outer is already parallel"),
])
def test_bad_specializations_are_refused_with_the_reason(build, match):
    with pytest.raises(pw.ScheduleError, match=match):
        build(_rows().schedule().split("y", "s", 4).parallel("y", "b", "s.outer"))


def test_a_variant_must_keep_the_task_grid_and_hosts_no_placement():
    wl = _rows()
    s = wl.schedule().specialize("y", "lens[b] < 3", lambda v: v.split("y", "k", 8)).parallel("y", "b")
    with pytest.raises(pw.BuildError, match=r"variant 1 .* has the task grid \[\], the task's own loops \[b in"):
        pw.build(s, target="cpu")
    two = pw.Workload("two")
    x = two.input("x", (8, 8))
    h = two.compute("h", (8, 8), lambda i, j: x[i, j] * 2.0)
    two.output(two.compute("y", (8, 8), lambda i, j: h[i, j] + 1.0))
    with pytest.raises(pw.ScheduleError, match="'h' is placed at its loops"):
        two.schedule().compute_at("h", "y", "i").specialize("y", "i < 3", lambda v: v.split("y", "j", 4))
    with pytest.raises(pw.BuildError, match="cuda target does not take yet"):
        generate(two.schedule().specialize("y", "i < 3", lambda v: v.split("y", "j", 4)))


def test_a_task_named_like_a_variant_kernel_keeps_its_own_code():
    wl = pw.Workload("twins")
    x = wl.input("x", (8, 16))
    y = wl.compute("y", (8, 16), lambda i, j: x[i, j] * 2.0)
    wl.output(wl.compute("ptowsp_y_v1", (8, 16), lambda i, j: y[i, j] + 1.0))
    wl.output(y)
    s = wl.schedule().split("y", "i", 4).parallel("y", "i.outer")
    s.specialize("y", "i < 4", lambda v: v.split("y", "j", 4))
    a = np.arange(128, dtype=np.float32).reshape(8, 16)
    out = pw.build(s, target="cpu").run(x=a)
    np.testing.assert_array_equal(out["ptowsp_y_v1"], a * 2 + 1)
    np.testing.assert_array_equal(out["y"], a * 2)
