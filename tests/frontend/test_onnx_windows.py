"""Sliding windows in one, two and three spatial dimensions: Conv, ConvTranspose and the pools, each checked
against onnx.reference through pw.reference and the cpu target."""

from __future__ import annotations

import numpy as np
import pytest
import onnx.helper as oh
from onnx import TensorProto as TP
from onnx.reference import ReferenceEvaluator

import ptowsp as pw

from tests.frontend.test_onnx import check, model, one

RNG = np.random.default_rng(5)


def weights(shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("x, w, attrs", [
    ((1, 3, 11), (4, 3, 3), {"strides": [2], "pads": [1, 1]}),  # 1-D
    ((1, 2, 5, 6, 7), (4, 2, 3, 3, 3), {"pads": [1, 0, 1, 1, 0, 1], "dilations": [1, 2, 1]}),  # 3-D
    ((1, 4, 7, 7), (4, 2, 3, 3), {"group": 2, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 8, 8), (2, 3, 2, 3), {"auto_pad": "SAME_LOWER"}),
])
def test_convolutions_in_any_number_of_spatial_dimensions_and_same_padding(x, w, attrs):
    m, feeds = one("Conv", [x], attrs, inits={"w": weights(w)})
    check(m, feeds, target="cpu", rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("x, w, attrs", [
    ((1, 2, 4, 4), (2, 3, 3, 3), {"strides": [2, 2], "pads": [1, 0, 0, 1]}),
    ((1, 4, 3, 5), (4, 1, 2, 2), {"dilations": [2, 1], "output_padding": [1, 0], "strides": [2, 2]}),
    ((1, 1, 5), (1, 2, 3), {"strides": [3], "output_shape": [17]}),  # past the full output: zeros at the end
    ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 2, 2, 2), (2, 1, 2, 2, 2), {}),  # 3-D
])
def test_transposed_convolutions(x, w, attrs):
    inits = {"w": weights(w), "b": weights((w[1] * attrs.get("group", 1),))}
    m, feeds = one("ConvTranspose", [x], attrs, inits=inits)
    check(m, feeds, target="cpu", rtol=1e-4, atol=1e-4)


def test_a_grouped_transposed_convolution_is_its_groups_side_by_side():
    """(onnx.reference fails on this one: the expected output is the two groups' own ConvTranspose.)"""
    x, w = RNG.standard_normal((1, 4, 3, 3)).astype(np.float32), weights((4, 3, 2, 2))
    m, _ = one("ConvTranspose", [x.shape], {"group": 2, "strides": [2, 1]}, inits={"w": w})
    halves = [ReferenceEvaluator(one("ConvTranspose", [(1, 2, 3, 3)], {"strides": [2, 1]},
                                     inits={"w": w[2 * g:2 * g + 2]})[0]).run(None, {"x0": x[:, 2 * g:2 * g + 2]})[0]
              for g in range(2)]
    got = pw.build(pw.frontend.from_onnx(m), "cpu").run(x0=x)["y"]
    np.testing.assert_allclose(got, np.concatenate(halves, axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op, x, attrs", [  # (dilated AveragePool: opset 19)
    ("MaxPool", (1, 2, 6, 7, 5), {"kernel_shape": [2, 3, 2], "dilations": [2, 1, 2], "pads": [1, 1, 0, 1, 1, 0]}),
    ("MaxPool", (1, 3, 10), {"kernel_shape": [3], "strides": [2], "auto_pad": "SAME_UPPER"}),
    ("AveragePool", (1, 2, 7, 7), {"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [1, 1, 1, 1]}),
    ("AveragePool", (1, 1, 6, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),  # past the end
    ("AveragePool", (1, 1, 6, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 1, 1, 1],
                                   "count_include_pad": 1}),
    ("LpPool", (1, 2, 6, 6), {"kernel_shape": [2, 3], "p": 2, "pads": [1, 0, 1, 0]}),
    ("LpPool", (1, 2, 7), {"kernel_shape": [3], "p": 3, "strides": [2]}),
    ("GlobalAveragePool", (1, 3, 4, 5, 2), {}),  # (onnx.reference's GlobalMaxPool keeps only 4-D shapes)
])
def test_pools_in_any_number_of_spatial_dimensions(op, x, attrs):
    m, feeds = one(op, [x], attrs, out_type=TP.FLOAT, opset=19)
    check(m, feeds, target="cpu", rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("storage_order, pads", [(0, [1, 1, 1, 1]), (1, [0, 1, 1, 0])])
def test_maxpool_indices_name_the_first_largest_input_element(storage_order, pads):
    node = oh.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 2], strides=[2, 1], pads=pads,
                        storage_order=storage_order)
    m = model([node], {"x": ((2, 3, 7, 6), TP.FLOAT)}, {"y": (None, TP.FLOAT), "i": (None, TP.INT64)})
    x = np.round(RNG.standard_normal((2, 3, 7, 6)) * 2).astype(np.float32)  # ties: the first one counts
    want = ReferenceEvaluator(m).run(None, {"x": x})
    got = pw.build(pw.frontend.from_onnx(m), "cpu").run(x=x)
    np.testing.assert_array_equal(got["y"], want[0])
    assert got["i"].dtype == np.int64
    np.testing.assert_array_equal(got["i"], want[1])
