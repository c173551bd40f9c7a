"""Standard models as ONNX graphs built with onnx.helper, random weights: what the tests import at
reduced width and benchmarks/models.py at full size (nothing is downloaded)."""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as nh

F32 = np.float32


def _model(nodes: list, name: str, inputs: dict, outputs: dict, weights: dict) -> onnx.ModelProto:
    graph = oh.make_graph(nodes, name, [oh.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
                          [oh.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()],
                          [nh.from_array(np.asarray(a), n) for n, a in weights.items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def resnet18(width: int = 64, size: int = 224, classes: int = 1000, batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """ResNet-18 as torchvision exports it: a 7x7 stem, max pool, four stages of two basic blocks (conv-bn-relu,
    conv-bn, a 1x1 projection where the shape changes, add, relu), global average pool and a fully connected
    layer.  Input "x" (batch, 3, size, size), output "logits"."""
    rng = np.random.default_rng(seed)
    nodes: list = []
    weights: dict = {}

    def conv_bn(src: str, ci: int, co: int, k: int, s: int, name: str) -> str:
        weights[f"{name}_w"] = rng.standard_normal((co, ci, k, k)).astype(F32) * math.sqrt(2.0 / (ci * k * k))
        for p, v in (("g", rng.uniform(0.5, 1.5, co)), ("b", rng.standard_normal(co) * 0.1),
                     ("m", rng.standard_normal(co) * 0.1), ("v", rng.uniform(0.5, 1.5, co))):
            weights[f"{name}_{p}"] = v.astype(F32)
        nodes.append(oh.make_node("Conv", [src, f"{name}_w"], [f"{name}_c"], name=f"{name}_conv", strides=[s, s],
                                  pads=[k // 2] * 4))
        nodes.append(oh.make_node("BatchNormalization", [f"{name}_c"] + [f"{name}_{p}" for p in "gbmv"],
                                  [f"{name}_bn"], name=f"{name}_bn"))
        return f"{name}_bn"

    stem = conv_bn("x", 3, width, 7, 2, "stem")
    nodes += [oh.make_node("Relu", [stem], ["stem_r"]),
              oh.make_node("MaxPool", ["stem_r"], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])]
    src, channels = "pool", width
    for stage, mult in enumerate((1, 2, 4, 8)):
        for block in range(2):
            tag, out = f"s{stage}b{block}", width * mult
            stride = 2 if block == 0 and stage > 0 else 1
            a = conv_bn(src, channels, out, 3, stride, f"{tag}a")
            nodes.append(oh.make_node("Relu", [a], [f"{tag}a_r"]))
            b = conv_bn(f"{tag}a_r", out, out, 3, 1, f"{tag}b")
            skip = src if stride == 1 and channels == out else conv_bn(src, channels, out, 1, stride, f"{tag}p")
            nodes += [oh.make_node("Add", [b, skip], [f"{tag}_sum"]), oh.make_node("Relu", [f"{tag}_sum"], [f"{tag}"])]
            src, channels = tag, out
    weights["fc_w"] = rng.standard_normal((classes, channels)).astype(F32) * math.sqrt(1.0 / channels)
    weights["fc_b"] = np.zeros(classes, F32)
    nodes += [oh.make_node("GlobalAveragePool", [src], ["gap"]), oh.make_node("Flatten", ["gap"], ["flat"]),
              oh.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1)]
    return _model(nodes, "resnet18", {"x": [batch, 3, size, size]}, {"logits": [batch, classes]}, weights)


def bert_layer(seq: int = 128, hidden: int = 768, heads: int = 12, ff: int = 3072, seed: int = 0) -> onnx.ModelProto:
    """A BERT encoder layer as torch exports it: Q, K, V projections, heads split by Reshape/Transpose, scaled
    scores, softmax, context, output projection, residual + LayerNorm, GELU through Erf, residual +
    LayerNorm.  Input "x" (1, seq, hidden), output "y"."""
    rng = np.random.default_rng(seed)
    d = hidden // heads
    w = {n: (rng.standard_normal(s) * math.sqrt(1.0 / s[0])).astype(F32) for n, s in
         {"wq": (hidden, hidden), "wk": (hidden, hidden), "wv": (hidden, hidden), "wo": (hidden, hidden),
          "w1": (hidden, ff), "w2": (ff, hidden)}.items()}
    w |= {n: (rng.standard_normal(s) * 0.1).astype(F32) for n, s in
          {"bq": (hidden,), "bk": (hidden,), "bv": (hidden,), "bo": (hidden,), "b1": (ff,), "b2": (hidden,),
           "be1": (hidden,), "be2": (hidden,)}.items()}
    w |= {"g1": rng.uniform(0.5, 1.5, hidden).astype(F32), "g2": rng.uniform(0.5, 1.5, hidden).astype(F32),
          "heads_shape": np.array([1, seq, heads, d], np.int64), "merged": np.array([1, seq, hidden], np.int64),
          "scale": np.array(math.sqrt(d), F32), "half": np.array(0.5, F32), "one": np.array(1.0, F32),
          "root2": np.array(math.sqrt(2.0), F32)}
    n = []
    for h in "qkv":
        n += [oh.make_node("MatMul", ["x", f"w{h}"], [f"{h}0"], name=f"{h}_proj"),
              oh.make_node("Add", [f"{h}0", f"b{h}"], [f"{h}1"], name=f"{h}_bias"),
              oh.make_node("Reshape", [f"{h}1", "heads_shape"], [f"{h}2"], name=f"{h}_heads"),
              oh.make_node("Transpose", [f"{h}2"], [f"{h}3"], name=f"{h}_t",
                           perm=[0, 2, 3, 1] if h == "k" else [0, 2, 1, 3])]
    n += [oh.make_node("MatMul", ["q3", "k3"], ["s0"], name="scores"),
          oh.make_node("Div", ["s0", "scale"], ["s1"], name="scaled"),
          oh.make_node("Softmax", ["s1"], ["p"], name="softmax", axis=-1),
          oh.make_node("MatMul", ["p", "v3"], ["c0"], name="context"),
          oh.make_node("Transpose", ["c0"], ["c1"], name="context_t", perm=[0, 2, 1, 3]),
          oh.make_node("Reshape", ["c1", "merged"], ["c2"], name="merge"),
          oh.make_node("MatMul", ["c2", "wo"], ["o0"], name="out_proj"), oh.make_node("Add", ["o0", "bo"], ["o1"]),
          oh.make_node("Add", ["o1", "x"], ["r1"], name="residual1"),
          oh.make_node("LayerNormalization", ["r1", "g1", "be1"], ["h1"], name="ln1", epsilon=1e-12),
          oh.make_node("MatMul", ["h1", "w1"], ["f0"], name="ff1"), oh.make_node("Add", ["f0", "b1"], ["f1"]),
          oh.make_node("Div", ["f1", "root2"], ["e0"]), oh.make_node("Erf", ["e0"], ["e1"], name="erf"),
          oh.make_node("Add", ["e1", "one"], ["e2"]), oh.make_node("Mul", ["f1", "e2"], ["e3"]),
          oh.make_node("Mul", ["e3", "half"], ["gelu"], name="gelu"),
          oh.make_node("MatMul", ["gelu", "w2"], ["f2"], name="ff2"), oh.make_node("Add", ["f2", "b2"], ["f3"]),
          oh.make_node("Add", ["f3", "h1"], ["r2"], name="residual2"),
          oh.make_node("LayerNormalization", ["r2", "g2", "be2"], ["y"], name="ln2", epsilon=1e-12)]
    return _model(n, "bert_layer", {"x": [1, seq, hidden]}, {"y": [1, seq, hidden]}, w)
