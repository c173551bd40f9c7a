"""Dynamic workloads: symbolic sizes, data-dependent domains, gathers (issue 9)."""

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.backends.cpu import jit
from ptowsp.workloads import matches


def _rows():
    wl = pw.Workload("rows")
    x = wl.input("x", ("n", 48))
    w = wl.input("w", (48,))
    k = pw.reduce_axis(48, "k")
    y = wl.compute("y", ("n", 48), lambda i, j: x[i, j] * w[j] + 1.0)
    z = wl.compute("z", ("n",), lambda i: pw.sum(y[i, k], axis=k))
    wl.output(y, z)
    return wl


def _varlen():
    wl = pw.Workload("varlen")
    x = wl.input("x", ("b", 64, 8))
    lens = wl.input("lens", ("b",), "int32")
    y = wl.compute("y", ("b", 64, 8), lambda b, s, d: x[b, s, d] * 2.0 + 1.0, domain=lambda b, s, d: s < lens[b])
    k = pw.reduce_axis(8, "k")
    z = wl.compute("z", ("b", 64), lambda b, s: pw.sum(y[b, s, k], axis=k), domain=lambda b, s: s < lens[b])
    wl.output(z)
    return wl


def _tiled_varlen(wl):
    return (wl.schedule().split("y", "s", 16).parallel("y", "b", "s.outer")
            .split("z", "s", 16).parallel("z", "b", "s.outer"))


def test_symbolic_size_is_bound_from_inputs_and_checked():
    wl = _rows()
    assert wl.sizes == ["n"]
    assert "x[n, 48]" in str(wl)
    a, b = np.ones((5, 48), "float32"), np.ones(48, "float32")
    assert pw.reference(wl, x=a, w=b)["z"].shape == (5,)
    bound = wl.bind(n=5)
    assert bound.tensor("x").shape == (5, 48) and not bound.sizes
    with pytest.raises(pw.InputError, match="expected a float32 array of shape \\(n, 48\\)"):
        pw.reference(wl, x=np.ones((5, 47), "float32"), w=b)


def test_sizes_must_agree_across_inputs():
    wl = pw.Workload("two")
    x = wl.input("x", ("n",))
    y = wl.input("y", ("n",))
    wl.output(wl.compute("z", ("n",), lambda i: x[i] + y[i]))
    with pytest.raises(pw.InputError, match="dimension 0 is n = 3.*from input 'x'"):
        pw.reference(wl, x=np.ones(3, "float32"), y=np.ones(4, "float32"))


def test_symbolic_bounds_are_checked_at_sample_sizes():
    wl = pw.Workload("shift")
    x = wl.input("x", ("n",))
    with pytest.raises(pw.BoundsError, match="with sizes n="):
        wl.compute("y", ("n",), lambda i: x[i + 1])


@pytest.mark.parametrize("target", ["numpy", "cpu"])
def test_one_build_serves_every_size(target):
    wl = _rows()
    rng = np.random.default_rng(0)
    schedules = [wl, wl.schedule().split("y", "i", 16).parallel("y", "i.outer").split("y", "j", 8)
                 .vectorize("y", "j.inner").split("z", "i", 8).parallel("z", "i.outer")]
    for schedule in schedules:
        prog = pw.build(schedule, target=target, workers=2)
        compiled = jit.COMPILATIONS
        for n in (1, 7, 16, 100, 333):
            a, b = rng.standard_normal((n, 48)).astype("float32"), rng.standard_normal(48).astype("float32")
            ref, out = pw.reference(wl, x=a, w=b), prog(x=a, w=b)
            for name in ref:
                assert matches(out[name], ref[name]), (target, n, name)
        assert jit.COMPILATIONS == compiled  # no compilation while running other sizes


def test_building_again_does_not_recompile():
    wl = _rows()
    pw.build(wl, target="cpu")
    before = jit.COMPILATIONS
    prog = pw.build(wl, target="cpu")
    assert jit.COMPILATIONS == before and prog._executable.from_cache


@pytest.mark.parametrize("target", ["numpy", "cpu"])
def test_domain_zeroes_outside_and_matches_reference(target):
    wl = _varlen()
    rng = np.random.default_rng(1)
    for schedule in (wl, _tiled_varlen(wl)):
        prog = pw.build(schedule, target=target, workers=2)
        for batch in (1, 3, 6):
            x = rng.standard_normal((batch, 64, 8)).astype("float32")
            lens = rng.integers(0, 65, batch).astype("int32")
            lens[0] = 0  # an empty sequence
            ref, out = pw.reference(wl, x=x, lens=lens), prog(x=x, lens=lens)
            assert matches(out["z"], ref["z"])
            assert not ref["z"][0].any()
            for b in range(batch):
                assert not ref["z"][b, lens[b]:].any()


def test_tiles_outside_the_domain_are_never_generated():
    wl = _varlen()
    prog = pw.build(_tiled_varlen(wl), target="cpu", workers=2)
    x = np.ones((4, 64, 8), "float32")
    lens = np.array([0, 1, 17, 64], "int32")
    prog(x=x, lens=lens)
    tiles = sum(-(-n // 16) for n in lens)  # 0 + 1 + 2 + 4 per task
    assert len(prog.trace.events) == 2 * tiles
    assert all(e.coords[1] * 16 < lens[e.coords[0]] for e in prog.trace.events)


def test_domain_over_computed_counts_is_decided_when_ready():
    wl = pw.Workload("counted")
    x = wl.input("x", (4, 32))
    counts = wl.opaque("count", lambda a: (a > 0).sum(axis=1).astype("int32"), inputs=[x],
                       outputs=[("counts", (4,), "int32")])
    y = wl.compute("y", (4, 32), lambda e, t: x[e, t] + 1.0, domain=lambda e, t: t < counts[e])
    wl.output(y)
    s = wl.schedule().split("y", "t", 8).parallel("y", "e", "t.outer")
    prog = pw.build(s, target="cpu", workers=2)
    a = np.zeros((4, 32), "float32")
    a[1, :3] = 1.0  # counts: 0, 3, 0, 32
    a[3] = 1.0
    out = prog(x=a)
    assert matches(out["y"], pw.reference(wl, x=a)["y"])
    kernels = [e for e in prog.trace.events if e.name == "y"]
    assert len(kernels) == 1 + 4 and prog.trace.statistics["skipped"] == 16 - 5


def _gather():
    wl = pw.Workload("gather")
    X = wl.input("X", ("n", 16))
    idx = wl.input("idx", (4, "m"), "int32")
    cnt = wl.input("cnt", (4,), "int32")
    G = wl.compute("G", (4, "m", 16), lambda e, t, d: X[idx[e, t], d] * 2.0, domain=lambda e, t, d: t < cnt[e])
    wl.output(G)
    return wl


@pytest.mark.parametrize("target", ["numpy", "cpu"])
def test_gather_through_an_index_tensor(target):
    wl = _gather()
    rng = np.random.default_rng(2)
    prog = pw.build(wl, target=target, workers=2)
    for n, m in ((10, 5), (50, 33)):
        x = rng.standard_normal((n, 16)).astype("float32")
        idx = rng.integers(0, n, (4, m)).astype("int32")
        cnt = rng.integers(0, m + 1, 4).astype("int32")
        cnt[1] = 0
        idx[1] = 999  # garbage where the domain does not hold: never read
        assert matches(prog(X=x, idx=idx, cnt=cnt)["G"], pw.reference(wl, X=x, idx=idx, cnt=cnt)["G"])


def test_bad_gather_index_is_named_in_debug_builds_and_clamped_otherwise():
    wl = _gather()
    x = np.arange(40, dtype="float32").reshape(10, 4).repeat(4, axis=1)
    idx = np.zeros((4, 3), "int32")
    idx[2, 1] = 12
    cnt = np.full(4, 3, "int32")
    with pytest.raises(pw.BoundsError, match="task 'G'.*index 12.*idx"):
        pw.reference(wl, X=x, idx=idx, cnt=cnt)
    with pytest.raises(pw.TaskError, match="task 'G'.*index 12 taken from idx \\(at e=2, t=1"):
        pw.build(wl, target="cpu", debug=True)(X=x, idx=idx, cnt=cnt)
    out = pw.build(wl, target="cpu")(X=x, idx=idx, cnt=cnt)
    assert np.array_equal(out["G"][2, 1], 2 * x[9])  # the nearest row
