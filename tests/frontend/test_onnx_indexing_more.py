"""Compress, ReverseSequence and Col2Im (frontend/onnx_indexing.py) against onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import onnx.helper as oh
import pytest
from onnx import TensorProto as TP
from onnx.reference import ReferenceEvaluator

import ptowsp as pw
from tests.frontend.test_onnx import model

RNG = np.random.default_rng(5)


def _check(m, feeds, **values):
    want = ReferenceEvaluator(m).run(None, {**feeds, **values})
    wl = pw.frontend.from_onnx(m, values=values)
    got = pw.build(wl, "cpu").run(**feeds)
    for o, w in zip(m.graph.output, want, strict=True):
        assert got[o.name].shape == w.shape and got[o.name].dtype == w.dtype
        np.testing.assert_allclose(got[o.name], w, rtol=1e-6)


@pytest.mark.parametrize("axis", [None, 0, -1])
def test_compress_by_a_condition_known_at_import(axis):
    attrs = {} if axis is None else {"axis": axis}
    m = model([oh.make_node("Compress", ["x", "c"], ["y"], **attrs)], {"x": ((3, 4), TP.FLOAT), "c": ((3,), TP.BOOL)},
              {"y": (None, TP.FLOAT)})
    with pytest.raises(pw.frontend.ValueNeeded, match="'c'"):
        pw.frontend.from_onnx(m)
    _check(m, {"x": RNG.standard_normal((3, 4)).astype(np.float32)}, c=np.array([True, False, True]))


def test_reverse_sequence_with_lengths_read_at_run_time():
    m = model([oh.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=0, time_axis=1)],
              {"x": ((3, 5, 2), TP.FLOAT), "lens": ((3,), TP.INT64)}, {"y": ((3, 5, 2), TP.FLOAT)})
    _check(m, {"x": RNG.standard_normal((3, 5, 2)).astype(np.float32), "lens": np.array([5, 1, 3])})


@pytest.mark.parametrize("strides, pads, dilations", [([1, 1], [0, 0, 0, 0], [1, 1]), ([2, 1], [1, 0, 1, 1], [1, 2])])
def test_col2im_sums_the_overlapping_blocks(strides, pads, dilations):
    image, block = np.array([5, 6]), np.array([2, 3])
    counts = [(image[d] + pads[d] + pads[d + 2] - dilations[d] * (block[d] - 1) - 1) // strides[d] + 1
              for d in range(2)]
    shape = (2, 3 * 6, int(np.prod(counts)))
    node = oh.make_node("Col2Im", ["x", "image", "block"], ["y"], strides=strides, pads=pads, dilations=dilations)
    m = model([node], {"x": (shape, TP.FLOAT)}, {"y": ((2, 3, 5, 6), TP.FLOAT)}, {"image": image, "block": block},
              18)
    _check(m, {"x": RNG.standard_normal(shape).astype(np.float32)})
