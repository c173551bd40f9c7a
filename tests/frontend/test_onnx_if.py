"""ONNX If (frontend/onnx_branches.py): a condition known at import takes its branch; one computed at
run time picks each element between both branches; one that shapes the output needs its value."""

from __future__ import annotations

import numpy as np
import onnx.helper as oh
import pytest
from onnx import TensorProto as TP
from onnx.reference import ReferenceEvaluator

import ptowsp as pw
from tests.frontend.test_onnx import model

F = TP.FLOAT


def _if(then_nodes, then_out, else_nodes, else_out, out_shape):
    then = oh.make_graph(then_nodes, "then", [], [oh.make_tensor_value_info(then_out, F, None)])
    other = oh.make_graph(else_nodes, "else", [], [oh.make_tensor_value_info(else_out, F, None)])
    return oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other), out_shape


def _run(m, feeds, **values):
    wl = pw.frontend.from_onnx(m, values=values)
    want = ReferenceEvaluator(m).run(None, {**feeds, **values})[0]
    got = pw.build(wl, "cpu").run(**feeds)["y"]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)
    return wl


@pytest.mark.parametrize("c", [True, False])
def test_a_condition_computed_at_run_time_picks_between_both_branches(c):
    node, _ = _if([oh.make_node("Relu", ["x"], ["a"])], "a", [oh.make_node("Neg", ["x"], ["b"])], "b", (3,))
    cond = oh.make_node("ReduceMax", ["x"], ["c0"], keepdims=0)
    nodes = [cond, oh.make_node("Greater", ["c0", "zero"], ["c"]), node]
    m = model(nodes, {"x": ((3,), F)}, {"y": ((3,), F)}, {"zero": np.array(0.0 if c else 1e9, np.float32)}, 17)
    wl = _run(m, {"x": np.array([1.0, -2.0, 3.0], np.float32)})
    assert {"Relu", "Neg"} <= set(wl.tasks)  # both branches are computed, the condition picks


def test_a_constant_condition_imports_only_its_branch():
    node, _ = _if([oh.make_node("Relu", ["x"], ["a"])], "a", [oh.make_node("Unsqueeze", ["x", "ax"], ["b"])], "b",
                  (3,))
    m = model([node], {"x": ((3,), F)}, {"y": ((3,), F)}, {"c": np.array(True), "ax": np.array([0])}, 17)
    wl = _run(m, {"x": np.array([1.0, -2.0, 3.0], np.float32)})
    assert wl.tasks == ["Relu", "y"]  # the Relu, copied out as y: nothing of the other branch


def test_branches_of_other_shapes_need_the_condition_at_import():
    node, _ = _if([oh.make_node("Relu", ["x"], ["a"])], "a", [oh.make_node("Unsqueeze", ["x", "ax"], ["b"])], "b",
                  None)
    m = model([node], {"x": ((3,), F), "c": ((), TP.BOOL)}, {"y": (None, F)}, {"ax": np.array([0])}, 17)
    with pytest.raises(pw.frontend.ValueNeeded, match="'c'") as caught:
        pw.frontend.from_onnx(m)
    assert caught.value.input == "c"
    _run(m, {"x": np.array([1.0, -2.0, 3.0], np.float32)}, c=np.array(False))


def test_a_sequence_output_is_refused():
    then = oh.make_graph([oh.make_node("SequenceConstruct", ["x"], ["s"])], "then", [],
                         [oh.make_tensor_sequence_value_info("s", F, None)])
    node = oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=then)
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", F, (3,))],
                          [oh.make_tensor_sequence_value_info("y", F, None)],
                          [oh.make_tensor("c", TP.BOOL, (), [True])])
    m = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    with pytest.raises(pw.WorkloadError, match="'y' is a sequence_type, not a tensor"):
        pw.frontend.from_onnx(m)
