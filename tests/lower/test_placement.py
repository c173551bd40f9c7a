"""compute_at, cache_read, cache_write and vectorized reductions: what they lower to, and that
results never change (checked with the scalar interpreter and the cpu target)."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.lower import lower_program
from ptowsp.lower.interpret import interpret
from ptowsp.lower.ir import var
from ptowsp.lower.regions import read_box
from ptowsp.workloads import zoo
from tests.conformance.catalogue import random_inputs
from tests.tolerance import assert_sums_close


def results(schedule, target=None):
    wl = schedule.workload
    inputs = random_inputs(wl)
    expected = pw.reference(wl, **inputs)
    got = (interpret(lower_program(wl, schedule), **inputs) if target is None
           else pw.build(schedule, target=target).run(**inputs))
    return got, expected


def assert_same(schedule, exact=False):
    for target in (None, "cpu"):
        got, expected = results(schedule, target)
        for name, value in expected.items():
            if exact:
                np.testing.assert_array_equal(got[name], value)
            else:
                np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5)


def fused_softmax(rows=5, cols=37):
    wl = zoo.softmax(rows, cols)
    s = wl.schedule()
    for task in ("Y_max", "Y_sum"):
        s.split(task, "k", 16).vectorize(task, "k.inner")
    s.split("Y", "j", 16).vectorize("Y", "j.inner")
    for task in ("Y_sum", "Y_exp", "Y_max"):
        s.compute_at(task, "Y", "i")
    return s


def test_compute_at_computes_each_row_inside_the_consumer_loop():
    s = fused_softmax()
    source = pw.build(s, target="cpu").source("Y")
    assert source.startswith("for i in 0..5:\n  local Y_max: float32[1]")
    assert "local Y_exp: float32[1, 37]" in source
    assert "Y_exp[0, Y_exp.j] = exp(X[i, Y_exp.j] - Y_max[0])" in source
    assert set(lower_program(s.workload, s).kernels) == {"Y"}  # the producers have no kernels of their own
    assert_same(s)


def test_a_stencil_producer_covers_its_halo_shifted_inside_at_the_edges():
    wl = pw.Workload("blur")
    x = wl.input("x", (23,))
    a = wl.compute("a", (23,), lambda i: x[i] * 2.0)
    wl.output(wl.compute("b", (23,), lambda i: pw.where(i >= 1, a[i - 1], 0.0) + a[i]
                         + pw.where(i < 22, a[i + 1], 0.0)))
    s = wl.schedule().split("b", "i", 8).compute_at("a", "b", "i.outer")
    source = lower_program(wl, s).source("b")
    assert "local a: float32[10]" in source  # 8 outputs need 8 + 2 inputs
    assert "minimum(maximum(i.outer * 8 - 1, 0), 13)" in source  # shifted into 0..22 at both ends
    assert_same(s)


def test_read_box_is_symbolic_in_outer_loops_and_clamped():
    i, j = var("i", 10), var("j", 4)
    box = read_box([(i * 4 + j,), (i * 4 + j + 1,)], {"j": 4}, (40,))
    assert box.extents == (5,)
    assert str(box.starts[0]) == "minimum(i * 4, 35)"


def test_read_box_through_a_clamped_tile_start_is_a_tile_not_the_tensor():
    """A tile whose start is shifted inwards (`minimum(k * 4 + j * 2, 28)`, an anchor's box under a
    split's guard) read by the loops inside k: the clamp moves by at most as much as its argument, so
    the box is 2 x 2 + the tile's 2 wide, not all 30 (EfficientNet-B0's expansions had been recomputed
    whole in each of 8 tasks: 1.4 ms against 0.3)."""
    k, j, t = var("k", 8), var("j", 2), var("t", 2)
    start = pw.minimum(k * 4 + j * 2, 28)
    box = read_box([(start + t,)], {"j": 2, "t": 2}, (30,))
    assert box.extents == (4,) and str(box.starts[0]) == "minimum(minimum(k * 4, 28), 26)"
    for kv in range(8):  # every element the loops read lies in the box
        lo = min(kv * 4, 28)
        lo = min(lo, 26)
        assert all(lo <= min(kv * 4 + jv * 2, 28) + tv < lo + 4 for jv in range(2) for tv in range(2))


def test_read_box_of_a_block_index_is_exact_when_the_base_is_a_multiple_of_the_block():
    o = var("o", 2)
    c = var("c", 32)
    aligned = read_box([((o * 32 + c) // 16,)], {"c": 32}, (4,), shift=False)
    assert aligned.extents == (2,) and str(aligned.starts[0]) == "o * 32 // 16"
    shifted = read_box([((o * 32 + c + 3) // 16,)], {"c": 32}, (8,), shift=False)
    assert shifted.extents == (3,) and str(shifted.starts[0]) == "o * 32 // 16"  # 3..34: blocks 0..2
    unaligned = read_box([((o * 24 + c) // 16,)], {"c": 16}, (8,), shift=False)
    assert unaligned.extents == (2,)  # 16 values starting anywhere span at most 2 blocks


@pytest.mark.parametrize("tile", [4, 6])
def test_a_producer_read_through_a_division_is_computed_per_tile(tile):
    wl = pw.Workload("upsample")
    x = wl.input("x", (24,))
    a = wl.compute("a", (12,), lambda i: x[2 * i] + x[2 * i + 1])
    wl.output(wl.compute("b", (24,), lambda i: a[i // 2] * 3.0))
    s = wl.schedule().split("b", "i", tile).compute_at("a", "b", "i.outer")
    source = lower_program(wl, s).source("b")
    assert f"local a: float32[{tile // 2}]" in source  # a tile of b reads tile / 2 elements of a, not 12
    assert_same(s)


def test_compute_at_a_grid_loop_stages_per_task_instance():
    wl = zoo.rmsnorm(6, 20)
    s = wl.schedule().parallel("Y", "i").compute_at("Y_ms", "Y", "i")
    prog = lower_program(wl, s)
    assert prog.kernels["Y"].grid == (("i", 6),)
    assert "local Y_ms: float32[1]" in prog.source("Y")
    assert_same(s)


def test_nested_compute_at_renames_the_producers_loops():
    wl = pw.Workload("nested")
    x = wl.input("x", (4, 12))
    a = wl.compute("a", (4, 12), lambda i, j: x[i, j] * x[i, j])
    k = pw.reduce_axis(12, "k")
    b = wl.compute("b", (4,), lambda i: pw.sum(a[i, k], k))
    wl.output(wl.compute("c", (4, 12), lambda i, j: x[i, j] / b[i]))
    s = wl.schedule().compute_at("b", "c", "i").compute_at("a", "b", "i")
    source = lower_program(wl, s).source("c")
    assert "a[0, b.a.j] = x[i, b.a.j] * x[i, b.a.j]" in source  # a lives in b, which lives in c
    assert_same(s)


@pytest.mark.parametrize("build, match", [
    (lambda wl: wl.schedule().compute_at("Y_exp", "Y", "i"), "'Y_sum' reads 'Y_exp', which is computed at 'Y'"),
    (lambda wl: wl.schedule().compute_at("Y_max", "Y", "i"), "does not read 'Y_max'"),
])
def test_placements_that_cannot_hold_every_read_are_build_errors(build, match):
    wl = zoo.softmax(3, 7)
    with pytest.raises(pw.BuildError, match=match):
        lower_program(wl, build(wl))


def test_a_producer_read_after_the_reduction_cannot_live_in_its_loop():
    wl = pw.Workload("scaled_sum")
    x = wl.input("x", (3, 5))
    p = wl.compute("p", (3,), lambda i: x[i, 0] * 2.0)
    k = pw.reduce_axis(5, "k")
    wl.output(wl.compute("y", (3,), lambda i: pw.sum(x[i, k], k) * p[i]))
    with pytest.raises(pw.BuildError, match="'y' reads 'p' outside loop k, where compute_at puts it"):
        lower_program(wl, wl.schedule().compute_at("p", "y", "k"))
    assert_same(wl.schedule().compute_at("p", "y", "i"))


def test_a_computed_at_task_has_no_grid():
    wl = zoo.softmax(3, 7)
    with pytest.raises(pw.ScheduleError, match="cannot form a task grid"):
        wl.schedule().compute_at("Y_sum", "Y", "i").parallel("Y_sum", "i")
    with pytest.raises(pw.ScheduleError, match="has no grid of its own"):
        wl.schedule().parallel("Y_sum", "i").compute_at("Y_sum", "Y", "i")


def test_cache_read_copies_the_region_each_instance_or_loop_iteration_reads():
    wl = zoo.matmul(12, 10, 9)
    s = wl.schedule().tile("C", i=4, j=5).parallel("C", "i.outer").cache_read("C", "A", "shared")
    s.cache_read("C", "B", "local", "j.outer")
    source = lower_program(wl, s).source("C")
    assert "shared A.shared: float32[4, 9]" in source  # the task instance's rows of A
    assert "local B.local: float32[9, 5]" in source  # one j tile of B per j.outer iteration
    assert "A.shared[A.shared.i0, A.shared.i1] = A[i.outer * 4 + A.shared.i0, A.shared.i1]" in source
    assert_same(s)


def test_cache_write_accumulates_locally_then_copies_out():
    wl = zoo.matmul(6, 7, 5)
    s = wl.schedule().tile("C", i=3, j=4).parallel("C", "i.outer", "j.outer").cache_write("C", "local")
    source = lower_program(wl, s).source("C")
    assert "local C.local: float32[3, 4]" in source
    assert "C[i.outer * 3 + i.inner, j.outer * 4 + j.inner] = C.local[i.inner, j.inner]" in source
    assert_same(s)
    chain = zoo.elementwise_chain((5, 6), 3)
    out = chain.outputs[0]
    assert_same(chain.schedule().cache_write(out, "ub"))


def test_vectorized_reductions_keep_partials_per_lane():
    wl = zoo.softmax(3, 37)
    s = wl.schedule().split("Y_max", "k", 8).vectorize("Y_max", "k.inner")
    source = lower_program(wl, s).source("Y_max")
    assert "local Y_max_lanes: float32[8]" in source  # per row: the row loop encloses the reduction
    assert_same(s, exact=False)
    ints = pw.Workload("isum")
    x = ints.input("x", (4, 29), "int32")
    k = pw.reduce_axis(29, "k")
    ints.output(ints.compute("s", (4,), lambda i: pw.sum(x[i, k], k)))
    assert_same(ints.schedule().split("s", "k", 8).vectorize("s", "k.inner"), exact=True)


def test_a_producer_inside_a_task_caches_the_tensor_they_both_read_in_a_buffer_of_its_own():
    """Both cache K locally, each its own box (the consumer all of K at e, the producer computed inside
    at f its row e): one name for the two buffers made the consumer read the producer's one row
    (the fuzz found it in Winograd's two transform stages, each reading the same table)."""
    wl = pw.Workload("two_caches")
    x, k = wl.input("A", (2, 12)), wl.constant("K", np.arange(36, dtype=np.float32).reshape(6, 6))
    a, r = pw.reduce_axis(6, "a"), pw.reduce_axis(6, "r")
    p = wl.compute("P", (2, 6, 6), lambda b, e, w: pw.sum(k[e, a] * x[b, a + w], axis=a))
    wl.output(wl.compute("Q", (2, 6, 6), lambda b, e, f: pw.sum(k[f, r] * p[b, e, r], axis=r)))
    s = wl.schedule().compute_at("P", "Q", "f").cache_read("P", "K", "local", loop="w") \
        .cache_read("Q", "K", "local", loop="e")
    inputs = random_inputs(wl)
    expected = pw.reference(wl, **inputs)["Q"]
    for target in ("numpy", "cpu"):
        assert_sums_close(pw.build(s, target).run(**inputs)["Q"], expected, terms=36, err_msg=target)


def test_producers_under_a_split_s_guard_hold_one_row():
    """A LayerNorm's mean and variance computed per row inside a split of 197 rows by 50 (its last tile
    guarded): the variance reads the mean too, and each buffer holds the row's one value.  The guard's
    clamp and the variance's shifted read made their boxes differ, and the mean's box fell back to all
    197 rows, recomputed for every row (ViT's 25 LayerNorms: 7.4 ms against onnxruntime's 1.8)."""
    wl = pw.Workload("norm")
    x = wl.input("X", (197, 64))
    k, j = pw.reduce_axis(64, "k"), pw.reduce_axis(64, "j")
    mean = wl.compute("M", (197,), lambda i: pw.sum(x[i, k], k) / 64.0)
    var = wl.compute("V", (197,), lambda i: pw.sum((x[i, j] - mean[i]) * (x[i, j] - mean[i]), j) / 64.0)
    wl.output(wl.compute("Y", (197, 64), lambda i, c: (x[i, c] - mean[i]) * pw.rsqrt(var[i] + 1e-5)))
    s = wl.schedule().split("Y", "i", 50).compute_at("V", "Y", "i.inner").compute_at("M", "Y", "i.inner")
    source = lower_program(wl, s).source("Y")
    assert "local M: float32[1]" in source and "local V: float32[1]" in source
    assert_same(s)
