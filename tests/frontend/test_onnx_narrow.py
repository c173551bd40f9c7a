"""float16/bfloat16 graphs: computed in float32 between the graph's edges by default, rounded at each
node with `narrow_floats="each_node"` (frontend/onnx_narrow.py), on the reference and the cpu target."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto as TP

import ptowsp as pw
from tests.frontend.test_onnx import model

RNG = np.random.default_rng(0)
NARROW = [(TP.FLOAT16, np.float16), (TP.BFLOAT16, ml_dtypes.bfloat16)]


def _chain(elem_type, dtype):
    """y = Cast(x * c, to=narrow) + d, z = x (a graph input passed through), k = a narrow Constant."""
    nodes = [oh.make_node("Mul", ["x", "c"], ["p"]), oh.make_node("Cast", ["p"], ["q"], to=elem_type),
             oh.make_node("Add", ["q", "d"], ["y"]), oh.make_node("Identity", ["x"], ["z"]),
             oh.make_node("Constant", [], ["k"], value=onnx.numpy_helper.from_array(np.array([0.1, 3], dtype)))]
    constants = {"c": np.array(1.7, dtype), "d": np.array(0.3, dtype)}
    m = model(nodes, {"x": ((64,), elem_type)}, {"y": ((64,), elem_type), "x": ((64,), elem_type),
                                                 "k": ((2,), elem_type)}, constants, 18)
    return m, constants


def _runs(wl, feeds):
    return pw.reference(wl, **feeds), pw.build(wl, "cpu").run(**feeds)


@pytest.mark.parametrize("elem_type, dtype", NARROW)
def test_a_narrow_graph_rounds_once_where_it_leaves(elem_type, dtype):
    m, k = _chain(elem_type, dtype)
    before = m.SerializeToString()
    x = (RNG.standard_normal(64) * 3).astype(dtype)
    wide = {n: a.astype(np.float32) for n, a in k.items()}
    want = (x.astype(np.float32) * wide["c"] + wide["d"]).astype(dtype)
    each_node = ((x * k["c"]).astype(dtype) + k["d"]).astype(dtype)
    assert not np.array_equal(want, each_node)  # the two modes are told apart by this input
    for got in _runs(pw.frontend.from_onnx(m), {"x": x}):
        assert got["y"].dtype == dtype and got["x_1"].dtype == dtype and got["k"].dtype == dtype
        np.testing.assert_array_equal(got["y"], want)
        np.testing.assert_array_equal(got["x_1"], x)  # an input as an output: a copy
        np.testing.assert_array_equal(got["k"], np.array([0.1, 3], dtype))
    for got in _runs(pw.frontend.from_onnx(m, narrow_floats="each_node"), {"x": x}):
        np.testing.assert_array_equal(got["y"], each_node)
    assert m.SerializeToString() == before  # the caller's model is not rewritten


def test_a_float32_graph_is_imported_as_it_is_in_either_mode():
    m = model([oh.make_node("Mul", ["x", "x"], ["y"])], {"x": ((4,), TP.FLOAT)}, {"y": ((4,), TP.FLOAT)})
    x = RNG.standard_normal(4).astype(np.float32)
    for mode in ("float32", "each_node"):
        np.testing.assert_array_equal(pw.reference(pw.frontend.from_onnx(m, narrow_floats=mode), x=x)["y"], x * x)


def test_an_unknown_mode_is_an_input_error_naming_the_choices():
    m, _ = _chain(TP.FLOAT16, np.float16)
    with pytest.raises(pw.InputError, match="narrow_floats must be one of 'float32', 'each_node', got 'fp16'"):
        pw.frontend.from_onnx(m, narrow_floats="fp16")
