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


def loop_model():
    """A Loop (an RNN step: tanh(U h + x), its states stacked) feeding a Scan that runs back over them,
    reversed in and out: ONNX control flow as ptowsp scans (frontend/onnx_control.py)."""
    vi = oh.make_tensor_value_info
    step = oh.make_graph(
        [oh.make_node("Identity", ["go"], ["still"]), oh.make_node("MatMul", ["U", "h"], ["uh"]),
         oh.make_node("Add", ["uh", "x"], ["z"]), oh.make_node("Tanh", ["z"], ["h2"]),
         oh.make_node("Mul", ["h2", "two"], ["y"])],
        "step", [vi("i", TP.INT64, []), vi("go", TP.BOOL, []), vi("h", TP.FLOAT, [_C])],
        [vi("still", TP.BOOL, []), vi("h2", TP.FLOAT, [_C]), vi("y", TP.FLOAT, [_C])],
        [nh.from_array(np.float32(2.0), "two")])
    back = oh.make_graph(
        [oh.make_node("Add", ["s", "y_t"], ["s2"]), oh.make_node("Sigmoid", ["s2"], ["o"])],
        "back", [vi("s", TP.FLOAT, [_C]), vi("y_t", TP.FLOAT, [_C])], [vi("s2", TP.FLOAT, [_C]), vi("o", TP.FLOAT, [_C])])
    nodes = [oh.make_node("Loop", ["M", "T", "x"], ["h", "ys"], name="rnn", body=step),
             oh.make_node("Scan", ["h", "ys"], ["s", "os"], name="back", body=back, num_scan_inputs=1,
                          scan_input_directions=[1], scan_output_directions=[1])]
    graph = oh.make_graph(nodes, "onnx_loop", [vi("x", TP.FLOAT, [_C])], [vi("s", TP.FLOAT, [_C]),
                                                                          vi("os", TP.FLOAT, [5, _C])],
                          [nh.from_array(np.int64(5), "M"), nh.from_array(np.array(True), "T"),
                           nh.from_array(_RNG.standard_normal((_C, _C)).astype(np.float32) * 0.4, "U")])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


_LOOP_MODEL = loop_model()


def onnx_loop() -> pw.Workload:
    return pw.frontend.from_onnx(_LOOP_MODEL)


def onnx_loop_formula(p: dict) -> dict:
    """The same in numpy, from the operators' specs (onnx's evaluator has no reversed Scan)."""
    u = nh.to_array(next(i for i in _LOOP_MODEL.graph.initializer if i.name == "U")).astype(np.float64)
    x = p["x"].astype(np.float64)
    h, ys = x, []
    for _ in range(5):
        h = np.tanh(u @ h + x)
        ys.append(2 * h)
    s, outs = h, [None] * 5
    for t in range(5):
        s = s + ys[4 - t]
        outs[4 - t] = 1 / (1 + np.exp(-s))
    return {"s": s, "os": np.array(outs)}
