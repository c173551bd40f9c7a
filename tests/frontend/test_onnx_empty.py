"""ONNX models with empty tensors (a dimension of 0), checked against onnx's reference evaluator with
shapes and dtypes compared exactly, on the reference and the cpu target."""

from __future__ import annotations

import numpy as np
import onnx.helper as oh
import pytest
from onnx import TensorProto as TP
from onnx.reference import ReferenceEvaluator

import ptowsp as pw
from tests.frontend.test_onnx import model

RNG = np.random.default_rng(0)


def _check(m, feeds):
    want = ReferenceEvaluator(m).run(None, feeds)
    wl = pw.frontend.from_onnx(m)
    for got in (pw.reference(wl, **feeds), pw.build(wl, "cpu").run(**feeds)):
        for name, expected in zip((o.name for o in m.graph.output), want, strict=True):
            assert got[name].shape == expected.shape and got[name].dtype == expected.dtype, name
            np.testing.assert_allclose(got[name], expected, rtol=1e-6)


@pytest.mark.parametrize("op, expected", [("ReduceSum", 0.0), ("ReduceMax", -np.inf), ("ReduceProd", 1.0)])
def test_a_reduction_over_an_empty_set_is_its_identity(op, expected):
    node = oh.make_node(op, ["x", "axes"], ["y"], keepdims=1)
    m = model([node], {"x": ((2, 0, 4), TP.FLOAT)}, {"y": ((2, 1, 4), TP.FLOAT)},
              {"axes": np.array([1], np.int64)}, 18)
    _check(m, {"x": np.zeros((2, 0, 4), np.float32)})


def test_a_split_with_a_part_of_length_0_and_a_concat_of_it():
    nodes = [oh.make_node("Split", ["x", "sizes"], ["a", "b", "c"], axis=1),
             oh.make_node("Concat", ["b", "c", "a"], ["y"], axis=1), oh.make_node("Relu", ["b"], ["r"])]
    m = model(nodes, {"x": ((2, 5), TP.FLOAT)}, {"y": ((2, 5), TP.FLOAT), "b": ((2, 0), TP.FLOAT),
                                                 "r": ((2, 0), TP.FLOAT)},
              {"sizes": np.array([3, 0, 2], np.int64)}, 18)
    _check(m, {"x": RNG.standard_normal((2, 5)).astype(np.float32)})


def test_an_empty_graph_input_beside_a_full_one():
    nodes = [oh.make_node("ReduceSum", ["e", "axes"], ["s"], keepdims=0), oh.make_node("Add", ["x", "s"], ["y"]),
             oh.make_node("CastLike", ["x", "like"], ["z"])]
    m = model(nodes, {"x": ((3,), TP.FLOAT), "e": ((0, 3), TP.FLOAT), "like": ((0,), TP.DOUBLE)},
              {"y": ((3,), TP.FLOAT), "z": ((3,), TP.DOUBLE)}, {"axes": np.array([0], np.int64)}, 18)
    _check(m, {"x": RNG.standard_normal(3).astype(np.float32), "e": np.zeros((0, 3), np.float32),
               "like": np.zeros((0,), np.float64)})
