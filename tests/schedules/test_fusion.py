"""Category fusion: each rule firing (and what it leaves unstored), each forbidden fusion refused with its reason."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.workloads import zoo
from tests.conformance.catalogue import random_inputs


def built(schedule: pw.Schedule) -> pw.Built:
    """Build for cpu and check the result against the reference on the way."""
    wl = schedule.workload
    prog = pw.build(schedule, target="cpu", workers=2)
    inputs = random_inputs(wl)
    expected = pw.reference(wl, **inputs)
    for name, value in prog.run(**inputs).items():
        scale = max(1.0, float(np.max(np.abs(expected[name]))))
        np.testing.assert_allclose(value, expected[name], rtol=1e-4, atol=1e-4 * scale)
    return prog


def stored(prog: pw.Built) -> set[str]:
    """Tasks that still run as kernels of their own (and so write their tensor to memory)."""
    return set(prog.program.order)


def exp_then_sum() -> pw.Workload:
    wl = pw.Workload("exp_sum")
    x = wl.input("x", (64, 32))
    e = wl.compute("e", (64, 32), lambda i, j: pw.exp(x[i, j]))
    k = pw.reduce_axis(32, "k")
    wl.output(wl.compute("s", (64,), lambda i: pw.sum(e[i, k], k)))
    return wl


def test_an_injective_chain_fuses_into_its_last_task():
    s = zoo.elementwise_chain().schedule().fuse_by_category()
    assert "fused T1 -> T2: inlined into T2; rule: injective chains fuse" in s.explain()
    assert stored(built(s)) == {"Y"}


def test_a_read_cache_of_a_tensor_fusion_inlines_is_dropped_saying_why():
    """T3 is inlined into Y: a cache_read of T3 in Y has no stored T3 left to copy, so fusion drops
    the step (it once reached lowering, which refused it: fusion made a legal schedule illegal)."""
    wl = zoo.elementwise_chain()
    s = wl.schedule().cache_read("Y", "T3", "local", "i").fuse_by_category()
    assert "dropped cache_read('Y', 'T3', 'local', 'i'): T3 is inlined" in s.explain()
    assert stored(built(s)) == {"Y"}  # built, and checked against the reference


def test_an_injective_producer_fuses_into_a_reduction():
    s = exp_then_sum().schedule().fuse_by_category()
    assert "fused e -> s: inlined into s; rule: injective producers fuse into a reduction" in s.explain()
    assert stored(built(s)) == {"s"}


def test_an_injective_consumer_fuses_into_a_matmul_as_an_epilogue_keeping_the_anchors_tiling():
    wl = zoo.mlp()
    s = (wl.schedule().tile("Y_mm", i=4, j=16).split("Y_mm", "k", 64)
         .reorder("Y_mm", "i.outer", "j.outer", "k.outer", "i.inner", "k.inner", "j.inner")
         .parallel("Y_mm", "i.outer").vectorize("Y_mm", "j.inner").split("Y", "i", 2).fuse_by_category())
    text = s.explain()
    assert "fused Y_mm -> Y: computed per output tile inside Y (epilogue)" in text
    assert "fused H -> G" in text  # through H_bias, inlined into G first
    assert "dropped split('Y', 'i', 2)" in text  # the folded task's own loop steps give way
    prog = built(s)
    assert stored(prog) == {"G", "Y"}
    source = prog.source("Y")
    assert "local Y_mm" in source and "i.outer" in source  # a tile-sized buffer, in the anchor's loops
    assert prog.program.kernels["Y"].grid  # the anchor's parallel loop is the fused task's grid


def two_matmuls(relu_first: bool = False) -> pw.Workload:
    wl = pw.Workload("two_matmuls")
    a, b, e = wl.input("A", (16, 24)), wl.input("B", (24, 8)), wl.input("E", (8, 12))
    if relu_first:
        a = wl.compute("R", (16, 24), lambda i, j: pw.maximum(a[i, j], 0.0))
    k, m = pw.reduce_axis(24, "k"), pw.reduce_axis(8, "m")
    c = wl.compute("C", (16, 8), lambda i, j: pw.sum(a[i, k] * b[k, j], k))
    wl.output(wl.compute("D", (16, 12), lambda i, j: pw.sum(c[i, m] * e[m, j], m)))
    return wl


def test_an_injective_producer_is_inlined_into_a_contraction_only_on_request():
    wl = two_matmuls(relu_first=True)
    assert "inlined into the contraction 'C', 'R' would be recomputed" in wl.schedule().fuse_by_category().explain()
    assert stored(built(wl.schedule().fuse_tasks("R", "C"))) == {"C", "D"}


def test_a_producer_with_several_consumers_stays_stored_unless_fused_explicitly():
    wl = zoo.softmax(16, 32)
    assert "'Y_exp' has 2 consumers (Y_sum, Y); fuse_by_category keeps it materialised" in (
        wl.schedule().fuse_by_category().explain())
    prog = built(wl.schedule().fuse_tasks("Y_exp", "Y_sum"))  # recomputed in both consumers
    assert "Y_exp" not in stored(prog)


def gelu_after_matmul(shift: int) -> pw.Workload:
    """H = X W + b, then gelu written as ONNX spells it, as separate tasks: H is read by two of
    them (x and erf(x / sqrt 2)), at the same point, or `shift` columns apart."""
    wl = pw.Workload("mm_gelu")
    x, w, b = wl.input("X", (16, 24)), wl.input("W", (24, 32)), wl.input("b", (32,))
    k = pw.reduce_axis(24, "k")
    mm = wl.compute("M", (16, 32), lambda i, j: pw.sum(x[i, k] * w[k, j], k))
    h = wl.compute("H", (16, 32), lambda i, j: mm[i, j] + b[j])
    e = wl.compute("E", (16, 32), lambda i, j: pw.erf(h[i, j] * 0.7071067811865476) + 1.0)
    wl.output(wl.compute("G", (16, 32), lambda i, j: h[i, (j + shift) % 32 if shift else j] * e[i, j] * 0.5))
    return wl


def test_a_producer_whose_consumers_all_inline_into_one_task_at_one_point_is_inlined_there_too():
    s = gelu_after_matmul(shift=0).schedule().fuse_by_category()
    text = s.explain()
    assert "fused H -> E: inlined into E" in text  # E and G both read H[i, j], and E is inlined into G
    assert "fused M -> G: computed per output tile inside G (epilogue)" in text  # so G is the matmul's epilogue
    assert stored(built(s)) == {"G"}


def test_a_producer_read_at_two_points_of_its_one_reader_stays_stored():
    s = gelu_after_matmul(shift=1).schedule().fuse_by_category()
    assert "'H' has 2 consumers (E, G); fuse_by_category keeps it materialised" in s.explain()
    assert "H" in stored(built(s))


@pytest.mark.parametrize("producer, consumer, reason", [
    ("Y_max", "Y_exp", "no rule fuses a reduction producer into an injective consumer"),
    ("Y_max", "Y", "'Y' does not read 'Y_max'"),
])
def test_forbidden_fusions_are_refused_with_the_rule(producer, consumer, reason):
    wl = zoo.softmax(16, 32)
    with pytest.raises(pw.ScheduleError, match=reason):
        wl.schedule().fuse_tasks(producer, consumer)


def test_a_matmul_cannot_fuse_into_a_matmul():
    with pytest.raises(pw.ScheduleError, match="no rule fuses a complex_out_fusable producer into a complex_out"):
        two_matmuls().schedule().fuse_tasks("C", "D")


def test_opaque_tasks_and_outputs_never_fuse():
    wl = pw.Workload("opaque_chain")
    x = wl.input("x", (4, 5))
    y = wl.compute("y", (4, 5), lambda i, j: x[i, j] * 2.0)
    z = wl.opaque("sort", lambda a: np.sort(a, axis=1), inputs=[y], outputs=[("z", (4, 5))])
    wl.output(y, z)
    with pytest.raises(pw.ScheduleError, match="opaque tasks never fuse"):
        wl.schedule().fuse_tasks("y", "sort")
    chain = zoo.elementwise_chain()
    chain.output(chain.tensor("T2"))
    with pytest.raises(pw.ScheduleError, match="'T2' is an output of the workload"):
        chain.schedule().fuse_tasks("T2", "T3")


def test_an_epilogue_that_reads_the_producer_transposed_is_left_unfused():
    wl = pw.Workload("matmul_transposed")
    a, b = wl.input("A", (32, 32)), wl.input("B", (32, 32))
    k = pw.reduce_axis(32, "k")
    c = wl.compute("C", (32, 32), lambda i, j: pw.sum(a[i, k] * b[k, j], k))
    wl.output(wl.compute("D", (32, 32), lambda i, j: c[j, i] + 1.0))
    s = wl.schedule().fuse_by_category()
    assert "reads 'C' at other indices than its own coordinates" in s.explain()
    assert stored(built(s)) == {"C", "D"}
    with pytest.raises(pw.ScheduleError, match="other indices"):
        built(wl.schedule().fuse_tasks("C", "D"))


def test_an_epilogue_may_read_index_0_of_a_dimension_of_1():
    """ONNX's batch of one: an imported bias add reads its matmul at [0, i, j] where its own coordinates
    are [b, i, j] with b in 0..1 -- the same element, so it is an epilogue."""
    wl = pw.Workload("batch_of_one")
    a, b, bias = wl.input("A", (1, 32, 16)), wl.input("B", (16, 32)), wl.input("bias", (32,))
    k = pw.reduce_axis(16, "k")
    c = wl.compute("C", (1, 32, 32), lambda n, i, j: pw.sum(a[n, i, k] * b[k, j], k))
    wl.output(wl.compute("D", (1, 32, 32), lambda n, i, j: c[0, i, j] + bias[j]))
    s = wl.schedule().fuse_by_category()
    assert "fused C -> D: computed per output tile inside D (epilogue)" in s.explain()
    inputs = random_inputs(wl)
    np.testing.assert_allclose(built(s).run(**inputs)["D"], pw.reference(wl, **inputs)["D"], rtol=1e-5, atol=1e-5)


def test_two_contractions_never_share_one_epilogue():
    """A residual add of two matmuls: the first takes it as its epilogue, the second stays stored."""
    wl = pw.Workload("residual")
    a, b, w = wl.input("A", (32, 16)), wl.input("B", (16, 32)), wl.input("W", (16, 32))
    k, q = pw.reduce_axis(16, "k"), pw.reduce_axis(16, "q")
    left = wl.compute("L", (32, 32), lambda i, j: pw.sum(a[i, k] * b[k, j], k))
    right = wl.compute("R", (32, 32), lambda i, j: pw.sum(a[i, q] * w[q, j], q))
    wl.output(wl.compute("S", (32, 32), lambda i, j: pw.maximum(left[i, j] + right[i, j], 0.0)))
    text = wl.schedule().fuse_by_category().explain()
    assert "fused L -> S" in text and "'S' is the epilogue of 'L' already" in text
    inputs = random_inputs(wl)
    np.testing.assert_allclose(built(wl.schedule().fuse_by_category()).run(**inputs)["S"],
                               pw.reference(wl, **inputs)["S"], rtol=1e-5, atol=1e-5)


def test_a_convolution_takes_its_activation_as_an_epilogue_and_keeps_its_register_tile():
    """Conv + ReLU in one kernel: the ReLU's loops hold the convolution's tile (pixels x a vector of
    channels, accumulators in registers), computed per tile.  Stored apart, MobileNetV2's ReLU6 after
    its 112 x 112 expansion read and wrote 4.8 MB a run (0.45 of its 4.4 ms)."""
    wl = pw.Workload("conv_relu")
    x, w = wl.input("X", (1, 3, 9, 9)), wl.input("W", (8, 3, 3, 3))
    c, r, s = pw.reduce_axis(3, "c"), pw.reduce_axis(3, "r"), pw.reduce_axis(3, "s")
    y = wl.compute("Y", (1, 8, 7, 7), lambda n, o, i, j: pw.sum(x[n, c, i + r, j + s] * w[o, c, r, s], axis=(c, r, s)))
    z = wl.compute("Z", (1, 8, 7, 7), lambda n, o, i, j: pw.maximum(y[n, o, i, j], 0.0))
    k = pw.reduce_axis(8, "k")
    wl.output(wl.compute("V", (1, 8, 7, 7), lambda n, o, i, j: pw.sum(z[n, k, i, j] * w[o, k % 3, 0, 0], axis=k)))
    assert "fused Y -> Z: computed per output tile inside Z (epilogue)" in wl.schedule().fuse_by_category().explain()
    prog = pw.build(wl, "cpu")
    schedule = prog.schedule
    assert schedule.compute_at_locations["Y_blocked"][0] == "Z_blocked" and "Z_blocked" in prog.program.order
    annotations = [lp.annotation for lp in schedule.nest("Y_blocked").loops]
    assert annotations[-2:] == ["unrolled", "vectorized"], str(schedule.nest("Y_blocked"))
    inputs = random_inputs(wl)
    np.testing.assert_allclose(prog.run(**inputs)["V"], pw.reference(wl, **inputs)["V"], rtol=1e-5, atol=1e-5)
