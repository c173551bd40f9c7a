"""Sin, Cos, Tan, Asin, Acos, Atan (frontend/onnx_trigonometry.py: polynomials in the language's own
arithmetic) against numpy in float64, within a few units in the last place of each dtype."""

from __future__ import annotations

import numpy as np
import onnx.helper as oh
import pytest
from onnx import TensorProto as TP

import ptowsp as pw
from tests.frontend.test_onnx import model

NUMPY = {"Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos, "Atan": np.arctan}
RANGES = {"Sin": 60.0, "Cos": 60.0, "Tan": 1.55, "Asin": 1.0, "Acos": 1.0, "Atan": 40.0}


@pytest.mark.parametrize("dtype, element, ulps", [(np.float32, TP.FLOAT, 4), (np.float64, TP.DOUBLE, 4)])
def test_within_a_few_units_in_the_last_place(dtype, element, ulps):
    ops = sorted(NUMPY)  # one model computing all six (one build)
    size = 4001
    m = model([oh.make_node(op, [f"x_{op}"], [op]) for op in ops], {f"x_{op}": ((size,), element) for op in ops},
              {op: ((size,), element) for op in ops})
    feeds = {f"x_{op}": np.linspace(-RANGES[op], RANGES[op], size).astype(dtype) for op in ops}
    got = pw.build(pw.frontend.from_onnx(m), "cpu").run(**feeds)
    for op in ops:
        want = NUMPY[op](feeds[f"x_{op}"].astype(np.float64))
        assert got[op].dtype == dtype
        # Tan near its poles: the error of x itself (half a unit) scales by 1 + tan^2
        scale = 1.0 + want ** 2 if op == "Tan" else 1.0
        # and where the result is near 0 (sin at k pi), what is left of pi's third part after the reduction
        floor = np.finfo(dtype).eps * 1e-9
        bound = ulps * np.spacing(np.abs(want).astype(dtype)) * scale + floor
        np.testing.assert_array_less(np.abs(got[op] - want), bound, err_msg=op)


def test_edges():
    x = np.array([1.0, -1.0, 1.5, np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32)
    ops = ["Asin", "Acos", "Atan"]
    m = model([oh.make_node(op, ["x"], [op]) for op in ops], {"x": ((8,), TP.FLOAT)},
              {op: ((8,), TP.FLOAT) for op in ops})
    got = pw.build(pw.frontend.from_onnx(m), "cpu").run(x=x)
    with np.errstate(invalid="ignore"):
        for op in ops:
            want = NUMPY[op](x.astype(np.float64)).astype(np.float32)
            finite = ~np.isnan(want) & (np.abs(x) <= 1)
            np.testing.assert_allclose(got[op][finite], want[finite], rtol=2e-7, atol=0, err_msg=op)
    assert np.isnan(got["Asin"][2]) and np.isnan(got["Acos"][2])  # |x| > 1: no angle
    np.testing.assert_allclose(got["Atan"][[2, 3, 4]], np.arctan([1.5, np.inf, -np.inf]).astype(np.float32))
    assert np.isnan(got["Atan"][5])
