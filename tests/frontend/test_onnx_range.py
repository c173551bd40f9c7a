"""Range whose bounds are graph inputs: their values set the output's length, so the import asks for them."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

import ptowsp as pw
from tests.frontend.test_onnx import model


def test_a_float_range_over_graph_inputs_names_them_then_imports_with_their_values():
    node = oh.make_node("Range", ["start", "limit", "delta"], ["y"], name="steps")
    m = model([node], {n: ((), TP.FLOAT) for n in ("start", "limit", "delta")}, {"y": (None, TP.FLOAT)}, opset=11)
    with pytest.raises(pw.frontend.ValueNeeded, match=r"'steps' \(op Range\): input 0 \(start, 'start'\)") as e:
        pw.frontend.from_onnx(m)
    assert e.value.input == "start"
    given = {"start": np.array(1.0, np.float32), "limit": np.array(3.2, np.float32), "delta": np.array(0.5, np.float32)}
    wl = pw.frontend.from_onnx(m, values=given)
    np.testing.assert_allclose(pw.reference(wl)["y"], np.arange(1.0, 3.2, 0.5, dtype=np.float32))
