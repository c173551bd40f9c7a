"""The default's inlining policy (issue 30, item 4): inline only where the recompute is bounded,
else compute the producer per block of its reader's rows, with a halo."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.schedules.passes.inlining import distinct_reads, evaluations, keep_stored, operations
from ptowsp.workloads import random_inputs
from tests.conformance.edge_cases import image_pipeline


@pytest.mark.parametrize("height, placed", [(512, {"bx": ("out", "y.outer")}), (24, {})])
def test_a_stencil_producer_stays_stored_per_row_block(height, placed):
    """Read at y - 1, y, y + 1: computed per block of rows with a halo where the grid makes blocks,
    else stored on its own (one row per iteration would recompute the halo every row)."""
    wl, _ = image_pipeline(height, 256)
    s = default_schedule(wl)
    assert s.inlined == {"by", "sharp", "clip", "curve"}  # read once per point: inlined
    assert s.compute_at_locations == placed
    inputs = random_inputs(wl)
    np.testing.assert_allclose(pw.build(s, "cpu").run(**inputs)["out"], pw.reference(wl, **inputs)["out"], rtol=1e-5)


def test_the_reason_names_the_reads_and_the_work():
    wl, _ = image_pipeline(16, 16)
    kept = keep_stored(wl, {"bx", "by", "sharp", "clip", "curve"})
    assert list(kept) == ["bx"]
    assert "inlined into 'out', 'bx' would be computed 3 times per element" in kept["bx"]


def test_a_producer_broadcast_over_a_new_axis_stays_stored():
    wl = pw.zoo.unsharp(64, 128)  # ratio (a 7-tap blur inlined) is read once per channel of out
    s = default_schedule(wl)
    assert "ratio" not in s.inlined and "blur_x" in s.inlined


def test_cheap_or_pointwise_producers_are_still_inlined():
    wl = pw.Workload("cheap")
    x = wl.input("X", (32, 32), "uint8")
    wide = wl.compute("wide", (32, 32), lambda y, c: pw.cast(x[y, c], "int32"))  # no arithmetic: free to repeat
    wl.output(wl.compute("sum3", (30, 32), lambda y, c: wide[y, c] + wide[y + 1, c] + wide[y + 2, c]))
    assert default_schedule(wl).inlined == {"wide"}
    chain = pw.zoo.elementwise_chain((64, 64), 6)
    assert len(default_schedule(chain).inlined) == len(chain.tasks) - 1


def test_inline_all_remains_a_choice():
    wl, _ = image_pipeline(64, 48)
    every = default_schedule(wl, choose=lambda name, candidates, default: "all" if name == "inline" else default)
    assert every.inlined == {"bx", "by", "sharp", "clip", "curve"}


@pytest.mark.parametrize("fn, reads, ops", [(lambda x, i: x[i] + x[i] * 2.0, 1, 2),
                                            (lambda x, i: pw.exp(x[i]) + x[i + 2], 2, 2)])
def test_counting_helpers(fn, reads, ops):
    wl = pw.Workload("count")
    x = wl.input("X", (10,))
    wl.compute("Y", (8,), lambda i: fn(x, i))
    assert distinct_reads(wl.task("Y").body, "X") == reads
    assert operations(wl.task("Y").body) == ops  # index arithmetic (i + 2) is not counted


def _pooled(activation):
    """X -> activation -> a 3x3 max pool of stride 2 (a reduction whose windows overlap)."""
    wl = pw.Workload("pool")
    x = wl.input("X", (1, 8, 16, 16))
    act = wl.compute("act", (1, 8, 16, 16), lambda n, c, y, z: activation(x[n, c, y, z]))
    r, s = pw.reduce_axis(3, "r"), pw.reduce_axis(3, "s")
    wl.output(wl.compute("pool", (1, 8, 7, 7), lambda n, c, y, z: pw.max(act[n, c, y * 2 + r, z * 2 + s], axis=(r, s))))
    return wl


def test_a_reduction_over_overlapping_windows_counts_each_tap():
    """A 3x3 max pool of stride 2 evaluates an inlined producer 9 times per output: 9 x 49 / 256 = 1.72 times per input
    element here: a requantization (7 operations, as an int8 model's QuantizeLinear -> DequantizeLinear)
    stays stored; a ReLU is still inlined."""
    requantized = _pooled(lambda v: (pw.cast(pw.round(v / 0.02 + 3.0), "float32") - 3.0) * 0.02 + v * 0.0)
    kept = keep_stored(requantized, {"act"})
    assert list(kept) == ["act"] and "would be computed 1.72266 times per element" in kept["act"]
    assert keep_stored(_pooled(lambda v: pw.maximum(v, 0.0)), {"act"}) == {}
    assert evaluations(requantized.task("pool").body, "act") == 9
    inputs = random_inputs(requantized)
    prog = pw.build(requantized, "cpu")
    np.testing.assert_allclose(prog.run(**inputs)["pool"], pw.reference(requantized, **inputs)["pool"], rtol=1e-5)
