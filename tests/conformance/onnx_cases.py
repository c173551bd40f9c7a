"""A model imported from ONNX (pw.frontend.from_onnx), for the catalogue: every target and schedule must
agree with onnx's own reference evaluator."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator

import ptowsp as pw

_RNG = np.random.default_rng(7)
_C = 6
_WEIGHTS = {"W": _RNG.standard_normal((_C, 3, 3, 3)).astype(np.float32) * 0.3,
            "B": _RNG.standard_normal(_C).astype(np.float32),
            "scale": _RNG.uniform(0.5, 1.5, _C).astype(np.float32), "bias": _RNG.standard_normal(_C).astype(np.float32),
            "mean": _RNG.standard_normal(_C).astype(np.float32), "var": _RNG.uniform(0.5, 1.5, _C).astype(np.float32),
            "G": _RNG.standard_normal((5, _C)).astype(np.float32), "GB": _RNG.standard_normal(5).astype(np.float32)}


def cnn_model():
    """conv (padded, strided) -> batch norm -> relu -> max pool -> global average pool -> flatten -> gemm -> softmax."""
    nodes = [oh.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[2, 1]),
             oh.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"], name="bn"),
             oh.make_node("Relu", ["bn"], ["r"], name="relu"),
             oh.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             oh.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
             oh.make_node("Flatten", ["g"], ["f"], name="flat"),
             oh.make_node("Gemm", ["f", "G", "GB"], ["logits"], name="fc", transB=1),
             oh.make_node("Softmax", ["logits"], ["probs"], name="softmax")]
    graph = oh.make_graph(nodes, "onnx_cnn", [oh.make_tensor_value_info("x", TP.FLOAT, [2, 3, 12, 10])],
                          [oh.make_tensor_value_info("probs", TP.FLOAT, [2, 5])],
                          [nh.from_array(a, n) for n, a in _WEIGHTS.items()])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def onnx_cnn() -> pw.Workload:
    return pw.frontend.from_onnx(cnn_model())


def onnx_cnn_formula(p: dict) -> dict:
    return {"probs": ReferenceEvaluator(cnn_model()).run(None, {"x": p["x"].astype(np.float32)})[0]}
