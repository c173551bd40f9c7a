"""ScatterElements, ScatterND and TensorScatter, checked against onnx.reference through pw.reference and cpu."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

from tests.frontend.test_onnx import check, model

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements(reduction, axis):
    data = RNG.standard_normal((4, 5)).astype(np.float32)
    shape = (3, 2)  # smaller than the data along every axis
    span = data.shape[axis]
    # distinct indices along the axis for reduction "none" (the standard leaves duplicates undefined)
    indices = np.stack([RNG.permutation(span)[:shape[axis % 2]] for _ in range(shape[1 - axis % 2])],
                       axis=1 - axis % 2).astype(np.int64) if reduction == "none" else \
        RNG.integers(-span, span, shape).astype(np.int64)
    node = oh.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=axis, reduction=reduction)
    m = model([node], {"d": (data.shape, TP.FLOAT), "i": (shape, TP.INT64), "u": (shape, TP.FLOAT)},
              {"y": (data.shape, TP.FLOAT)}, opset=18)
    check(m, {"d": data, "i": indices, "u": RNG.standard_normal(shape).astype(np.float32)}, target="cpu")


@pytest.mark.parametrize("indices, reduction", [
    (np.array([[1], [3]]), "none"),  # whole rows
    (np.array([[0, 2], [3, -1], [0, 2]]), "add"),  # single elements, one written twice
    (np.array([2, 1]), "none"),  # one index tuple
    (np.array([[[1, 0], [2, 2]], [[0, 1], [3, 0]]]), "max"),  # a 2-D batch of tuples
])
def test_scatter_nd(indices, reduction):
    data = RNG.standard_normal((4, 3, 2)).astype(np.float32)
    updates = RNG.standard_normal((*indices.shape[:-1], *data.shape[indices.shape[-1]:])).astype(np.float32)
    node = oh.make_node("ScatterND", ["d", "i", "u"], ["y"], reduction=reduction)
    m = model([node], {"d": (data.shape, TP.FLOAT), "i": (indices.shape, TP.INT64), "u": (updates.shape, TP.FLOAT)},
              {"y": (data.shape, TP.FLOAT)}, opset=18)
    check(m, {"d": data, "i": indices.astype(np.int64), "u": updates}, target="cpu")


@pytest.mark.parametrize("mode, write", [("linear", [0, 3]), ("circular", [4, 9])])
def test_tensor_scatter_writes_a_kv_cache_s_new_rows(mode, write):
    cache = RNG.standard_normal((2, 3, 6, 4)).astype(np.float32)
    update = RNG.standard_normal((2, 3, 2, 4)).astype(np.float32)
    node = oh.make_node("TensorScatter", ["c", "u", "w"], ["y"], mode=mode)
    m = model([node], {"c": (cache.shape, TP.FLOAT), "u": (update.shape, TP.FLOAT), "w": ((2,), TP.INT64)},
              {"y": (cache.shape, TP.FLOAT)}, opset=24)
    check(m, {"c": cache, "u": update, "w": np.array(write, np.int64)}, target="cpu")
