"""TopK by rank (frontend/onnx_reductions.py), against onnx.reference through pw.reference and cpu."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

from tests.frontend.test_onnx import check, model


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("axis", [1, -1, 0])
def test_top_k_values_and_indices_with_ties_at_the_lower_index_first(largest, axis):
    x = np.random.default_rng(19).integers(0, 4, (5, 6, 7)).astype(np.float32)  # many ties
    k = 3
    node = oh.make_node("TopK", ["x", "k"], ["values", "indices"], axis=axis, largest=largest)
    m = model([node], {"x": (x.shape, TP.FLOAT)}, {"values": (None, TP.FLOAT), "indices": (None, TP.INT64)},
              {"k": np.array([k], np.int64)}, opset=11)
    check(m, {"x": x}, target="cpu")
