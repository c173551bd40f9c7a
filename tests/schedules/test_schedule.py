"""Schedules as data: steps, loop names, validation at the step, JSON replay."""

from __future__ import annotations

import pytest

import ptowsp as pw


def design_workload():
    wl = pw.Workload("mlp")
    a, b, bias = wl.input("A", (512, 256)), wl.input("B", (256, 128)), wl.input("bias", (128,))
    k = pw.reduce_axis(256, "k")
    c = wl.compute("C", (512, 128), lambda i, j: pw.sum(a[i, k] * b[k, j], axis=k))
    wl.output(wl.compute("D", (512, 128), lambda i, j: pw.maximum(c[i, j] + bias[j], 0.0)))
    return wl


def design_schedule(wl):
    """The schedule of DESIGN.md section 3, verbatim."""
    return (wl.schedule()
            .tile("C", i=64, j=64)
            .split("C", "k", 8)
            .reorder("C", "i.outer", "j.outer", "k.outer", "i.inner", "k.inner", "j.inner")
            .vectorize("C", "j.inner")
            .unroll("C", "k.inner")
            .parallel("C", "i.outer", "j.outer")
            .fuse_by_category()
            .dispatch("round_robin")
            .prefetch(2)
            .bind("C", core="cube"))


def test_design_schedule_and_introspection():
    wl = design_workload()
    s = design_schedule(wl)
    assert isinstance(s, pw.Schedule)
    assert s.loops("C") == ["i.outer", "j.outer", "k.outer", "i.inner", "k.inner", "j.inner"]
    assert s.spatial_loops("C") == ["i.outer", "j.outer", "i.inner", "j.inner"]
    assert s.reduce_loops("C") == ["k.outer", "k.inner"]
    assert s.loops("D") == ["i", "j"]
    nest = s.nest("C")
    assert [(lp.name, lp.extent, lp.annotation) for lp in nest.loops] == [
        ("i.outer", 8, "parallel"), ("j.outer", 2, "parallel"), ("k.outer", 32, "serial"),
        ("i.inner", 64, "serial"), ("k.inner", 8, "unrolled"), ("j.inner", 64, "vectorized")]
    assert s.fuse_all_by_category and s.prefetch_depth == 2 and s.cores == {"C": "cube"}
    assert s.dispatch_policy.policy == "round_robin"
    assert str(s).splitlines()[1] == "    .tile('C', i=64, j=64)"


def test_json_replay_rebuilds_the_identical_schedule():
    wl = design_workload()
    s = design_schedule(wl)
    again = pw.Schedule.from_json(wl, s.to_json())
    assert again == s and again.to_json() == s.to_json()
    assert all(again.nest(t) == s.nest(t) for t in wl.tasks)
    assert again.steps == s.steps


def test_from_json_refuses_another_workload_and_garbage():
    s = design_schedule(design_workload())
    with pytest.raises(pw.ScheduleError, match="different definition"):
        pw.Schedule.from_json(pw.zoo.matmul(8, 8, 8), s.to_json())
    with pytest.raises(pw.ScheduleError, match="not a saved ptowsp schedule"):
        pw.Schedule.from_json(design_workload(), '{"steps": [{"kind": "explode"}]}')


def test_split_fuse_and_tile_name_loops_as_designed():
    wl = design_workload()
    s = wl.schedule().split("D", "i", 100).split("D", "i.inner", 7).fuse("D", "i.inner.inner", "j")
    assert s.loops("D") == ["i.outer", "i.inner.outer", "i.inner.inner.j.fused"]
    nest = s.nest("D")
    assert [lp.extent for lp in nest.loops] == [6, 15, 7 * 128]
    split = nest.relations[0]
    assert (split.parent, split.factor, split.guarded) == ("i", 100, True)  # 512 = 5*100 + 12: a tail
    assert not nest.relations[1].guarded or nest.relations[1].parent_extent % 7  # 100 % 7 != 0
    t = wl.schedule().tile("C", {"j": 16, "i": 32})
    assert t.loops("C") == ["j.outer", "i.outer", "j.inner", "i.inner", "k"]
    big = wl.schedule().split("C", "i", 1000).nest("C").loops
    assert [(lp.name, lp.extent) for lp in big[:2]] == [("i.outer", 1), ("i.inner", 512)]


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda s: s.split("X", "i", 4), "has no task 'X'"),
        (lambda s: s.split("C", "x", 4), "split\\('C', 'x', 4\\): task 'C': has no loop 'x'; its loops are i, j, k"),
        (lambda s: s.split("C", "i", 0), "factor must be an integer in 1..2147483647, got 0"),
        (lambda s: s.split("C", "i", 2.5), "valid integer"),
        (lambda s: s.reorder("C", "i", "j"), "reorder drops k"),
        (lambda s: s.reorder("C", "i", "i", "k"), "twice"),
        (lambda s: s.fuse("C", "i", "k"), "directly inside"),
        (lambda s: s.fuse("C", "j", "k"), "cannot fuse the reduction loop k"),
        (lambda s: s.parallel("C", "k"), "reduction loop; parallel iterations would race"),
        (lambda s: s.parallel("C", "j"), "parallel loops must be the outermost"),
        (lambda s: s.vectorize("D", "j"), "at most 64 lanes"),
        (lambda s: s.split("D", "j", 8).vectorize("D", "j.outer"), "must stay innermost"),
        (lambda s: s.split("D", "j", 8).vectorize("D", "j.inner").split("D", "j.inner", 2), "already vectorized"),
        (lambda s: s.split("D", "j", 8).vectorize("D", "j.inner").reorder("D", "j.inner", "i", "j.outer"),
         "must stay innermost"),
        (lambda s: s.unroll("D", "i"), "unroll at most 256"),
        (lambda s: s.compute_inline("C"), "only injective tasks"),
        (lambda s: s.compute_inline("D"), "output of the workload"),
        (lambda s: s.compute_at("D", "C", "i"), "output of the workload"),
        (lambda s: s.compute_at("C", "D", "x"), "has no loop 'x'"),
        (lambda s: s.compute_at("C", "C", "i"), "compute_at cycle: C -> C"),
        (lambda s: s.compute_at("C", "D", "i").split("D", "i", 4), "loop i is where 'C' is computed"),
        (lambda s: s.cache_read("C", "bias", "shared"), "does not read 'bias'"),
        (lambda s: s.cache_read("C", "A", "l2"), "unknown memory scope"),
        (lambda s: s.cache_write("C", "local").cache_write("C", "ub"), "already cached"),
        (lambda s: s.fuse_tasks("D", "C"), "does not read 'D'"),
        (lambda s: s.dispatch("fastest"), "unknown dispatch policy"),
        (lambda s: s.dispatch("affinity"), "affinity needs key"),
        (lambda s: s.prefetch(-1), "must be >= 0"),
        (lambda s: s.bind("C", core="gpu"), "unknown core class"),
        (lambda s: s.bind("C", "i", "warp.x"), "thread axis"),
        (lambda s: s.fuse("D", "i", "j").bind("D", "i.j.fused", "threadIdx.x"), "65536 threads per block"),
        (lambda s: s.split("D", "i", 32).bind("D", "i.inner", "threadIdx.x").bind("D", "j", "threadIdx.x"),
         "bound to two loops"),
        (lambda s: s.bind("C", kernel="mma16"), "no intrinsic named 'mma16' is declared"),
        (lambda s: s.bind("C", "k", kernel="mma16"), "no intrinsic named 'mma16' is declared"),
        (lambda s: s.bind("C", core="cube", kernel="x"), "one of"),
    ],
)
def test_illegal_steps_raise_at_the_step(build, match):
    with pytest.raises(pw.ScheduleError, match=match):
        build(design_workload().schedule())


def test_a_failed_step_leaves_the_schedule_unchanged():
    s = design_workload().schedule().split("C", "i", 8)
    before = (s.loops("C"), s.steps)
    with pytest.raises(pw.ScheduleError):
        s.tile("C", j=4, nope=2)  # the first split would succeed; the whole step must not
    assert (s.loops("C"), s.steps) == before


def test_each_step_makes_a_new_frozen_state_and_a_copy_shares_it():
    import dataclasses
    s = design_workload().schedule().split("C", "i", 8)
    first = s.state
    with pytest.raises(pw.ScheduleError):
        s.compute_inline("D")  # an output: refused
    assert s.state is first  # nothing half done
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.inlined = frozenset({"C"})
    t = s.copy()
    assert t.state is first  # shared, not replayed
    t.unroll("C", "i.inner")
    assert s.state is first and t.state is not first and s.nest("C") is first.nests["C"]
    with pytest.raises(TypeError):
        first.compute_at["C"] = ("D", "i")  # the mappings are read-only too


def test_copy_is_independent():
    s = design_workload().schedule().split("C", "i", 8)
    t = s.copy().split("C", "j", 8)
    assert s.loops("C") == ["i.outer", "i.inner", "j", "k"] and t != s


def test_inline_and_compute_at_placement():
    wl = pw.Workload("chain")
    x = wl.input("x", (64,))
    a = wl.compute("a", (64,), lambda i: x[i] * 2.0)
    b = wl.compute("b", (64,), lambda i: a[i] + 1.0)
    c = wl.compute("c", (64,), lambda i: b[i] * b[i])
    wl.output(c)
    s = wl.schedule().compute_inline("a").split("c", "i", 8).compute_at("b", "c", "i.outer")
    assert s.inlined == {"a"} and s.compute_at_locations == {"b": ("c", "i.outer")}
    with pytest.raises(pw.ScheduleError, match="was inlined"):
        s.split("a", "i", 2)
    with pytest.raises(pw.ScheduleError, match="already computed at"):
        s.compute_at("b", "c", "i.inner")
    with pytest.raises(pw.ScheduleError, match="'a' is computed at one of its loops"):
        wl.schedule().compute_at("a", "b", "i").compute_inline("b")
    assert pw.Schedule.from_json(wl, s.to_json()) == s


def test_opaque_tasks_have_no_loops_and_never_fuse():
    wl = pw.Workload("o")
    x = wl.input("x", (4,))
    y = wl.opaque("sort", lambda a: a, inputs=[x], outputs=[("y", (4,))])
    z = wl.compute("z", (4,), lambda i: y[i] + 1.0)
    wl.output(z)
    with pytest.raises(pw.ScheduleError, match="opaque tasks have no loops"):
        wl.schedule().split("sort", "i", 2)
    with pytest.raises(pw.ScheduleError, match="opaque tasks never fuse"):
        wl.schedule().fuse_tasks("sort", "z")
    with pytest.raises(pw.ScheduleError, match="opaque"):
        wl.schedule().loops("sort")


@pytest.mark.parametrize(
    "producer, consumer, ok",
    [
        ("C", "D", True),  # epilogue into complex-out-fusable
        ("E", "F", True),  # injective chain
        ("F", "R", True),  # injective producer into reduction
        ("R", "G", False),  # reduction -> injective is not a rule
        ("C", "C2", False),  # complex -> complex
    ],
)
def test_fuse_tasks_follows_the_category_rules(producer, consumer, ok):
    wl = pw.Workload("f")
    a, b = wl.input("a", (8, 8)), wl.input("b", (8, 8))
    k = pw.reduce_axis(8, "k")
    c = wl.compute("C", (8, 8), lambda i, j: pw.sum(a[i, k] * b[k, j], k))
    wl.compute("C2", (8, 8), lambda i, j: pw.sum(c[i, k] * b[k, j], k))
    d = wl.compute("D", (8, 8), lambda i, j: c[i, j] + 1.0)
    e = wl.compute("E", (8, 8), lambda i, j: d[i, j] * 2.0)
    f = wl.compute("F", (8, 8), lambda i, j: e[i, j] * 2.0)
    r = wl.compute("R", (8,), lambda i: pw.max(f[i, k], k))
    wl.output(wl.compute("G", (8, 8), lambda i, j: f[i, j] - r[i]))
    if ok:
        assert wl.schedule().fuse_tasks(producer, consumer).fused_tasks == [(producer, consumer)]
    else:
        with pytest.raises(pw.ScheduleError, match="no rule fuses"):
            wl.schedule().fuse_tasks(producer, consumer)


def test_only_the_outermost_reduction_is_scheduled():
    wl = pw.Workload("r")
    x = wl.input("x", (4, 6))
    r, c = pw.reduce_axis(4, "r"), pw.reduce_axis(6, "c")
    wl.compute("one", (4,), lambda i: pw.sum(x[i, c], c) / 6.0)
    wl.compute("nested", (2,), lambda i: pw.sum(pw.max(x[r, c], c), r))
    wl.compute("siblings", (4,), lambda i: pw.sum(x[i, c], c) + pw.max(x[i, c], c))
    s = wl.schedule()
    assert s.loops("one") == ["i", "c"] and s.loops("nested") == ["i", "r"] and s.loops("siblings") == ["i"]
