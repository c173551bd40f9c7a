"""GridSample (frontend/onnx_gridsample.py) against onnx's reference evaluator: every mode and padding,
align_corners, grid points inside and outside [-1, 1], 2-D and 3-D (cubic is 2-D only in the standard);
pw.reference for all, the cpu target for one of each mode."""

from __future__ import annotations

import itertools

import numpy as np
import onnx.helper as oh
import pytest
from onnx import TensorProto as TP
from onnx.reference import ReferenceEvaluator

import ptowsp as pw
from tests.frontend.test_onnx import model

RNG = np.random.default_rng(3)
CASES = [(mode, padding, corners, spatial) for mode, padding, corners, spatial in itertools.product(
    ["nearest", "linear", "cubic"], ["zeros", "border", "reflection"], [0, 1], [(5, 7), (3, 4, 5)])
    if not (mode == "cubic" and len(spatial) == 3)  # (cubic is 2-D only in the standard)
    and not (mode == "linear" and padding == "reflection" and len(spatial) == 3)]  # (the slowest; 2-D has it)
ON_CPU = {("nearest", "border", 1, (3, 4, 5)), ("nearest", "reflection", 0, (5, 7)), ("linear", "border", 0, (5, 7)),
          ("cubic", "zeros", 1, (5, 7)), ("linear", "zeros", 0, (3, 4, 5))}  # (reflection's taps compile slowly)


@pytest.mark.parametrize("mode, padding, align_corners, spatial", CASES)
def test_matches_onnx_reference(mode, padding, align_corners, spatial):
    out = (4,) * len(spatial)
    x_shape, grid_shape = (2, 3, *spatial), (2, *out, len(spatial))
    node = oh.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding,
                        align_corners=align_corners)
    m = model([node], {"x": (x_shape, TP.FLOAT), "grid": (grid_shape, TP.FLOAT)}, {"y": ((2, 3, *out), TP.FLOAT)},
              opset=20)
    feeds = {"x": RNG.standard_normal(x_shape).astype(np.float32),
             "grid": RNG.uniform(-1.6, 1.6, grid_shape).astype(np.float32)}  # some points outside
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    wl = pw.frontend.from_onnx(m)
    np.testing.assert_allclose(pw.reference(wl, **feeds)["y"], want, rtol=1e-5, atol=1e-5)
    if (mode, padding, align_corners, spatial) in ON_CPU:
        np.testing.assert_allclose(pw.build(wl, "cpu").run(**feeds)["y"], want, rtol=1e-5, atol=1e-5)
