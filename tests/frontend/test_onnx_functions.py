"""Operators the ONNX standard defines by function bodies, imported as those bodies (frontend/onnx_functions.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

import ptowsp as pw
from ptowsp.frontend.onnx_functions import expand, has_body
from tests.frontend.test_onnx import check, model

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("attrs", [{}, {"is_causal": 1}, {"is_causal": 1, "scale": 0.25}])
def test_attention_imports_as_the_standard_s_body_and_runs_on_cpu(attrs):
    """Attention (opset 23) has no handler: its context-dependent body (MatMul, Softmax, masks) is what is
    imported, with the node's attributes or the function's defaults (the scale 1/sqrt(head size))."""
    q, k, v = (1, 2, 5, 8), (1, 2, 6, 8), (1, 2, 6, 8)
    node = oh.make_node("Attention", ["q", "k", "v"], ["y"], name="attn", **attrs)
    m = model([node], {"q": (q, TP.FLOAT), "k": (k, TP.FLOAT), "v": (v, TP.FLOAT)}, {"y": ((1, 2, 5, 8), TP.FLOAT)},
              opset=23)
    feeds = {n: RNG.standard_normal(s).astype(np.float32) for n, s in (("q", q), ("k", k), ("v", v))}
    wl = check(m, feeds, target="cpu")
    assert any(name.startswith("attn__") for name in wl.tasks)  # the body's nodes, named after the node


def test_a_body_s_subgraph_reads_the_body_s_values_by_their_new_names():
    """LinearAttention's body holds a Scan whose body reads values of the function body around it: they
    are renamed with the rest, the Scan body's own values keep their names."""
    node = oh.make_node("LinearAttention", ["q", "k", "v"], ["y", "state"], name="lin", q_num_heads=2, kv_num_heads=2,
                        update_rule="linear")
    shapes = {"q": (1, 3, 8), "k": (1, 3, 8), "v": (1, 3, 8)}
    m = model([node], {n: (s, TP.FLOAT) for n, s in shapes.items()}, {"y": (None, TP.FLOAT), "state": (None, TP.FLOAT)},
              opset=27)
    assert "Scan" in [n.op_type for n in expand(node, 27, lambda name: (np.dtype("float32"), shapes[name]))]
    feeds = {n: RNG.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    check(m, feeds)


def test_an_operator_without_a_body_is_refused_by_name():
    assert has_body("Attention", 23) and not has_body("Attention", 22) and not has_body("Det", 23)
    with pytest.raises(pw.WorkloadError, match=r"ONNX node 'the_det' \(op Det\): operator 'Det' has no function body"):
        expand(oh.make_node("Det", ["x"], ["y"], name="the_det"), 23, lambda name: (np.dtype("float32"), (3, 3)))


def test_the_body_is_renamed_apart_and_keeps_the_node_s_own_values():
    node = oh.make_node("Attention", ["q", "k", "v"], ["y"], name="attn")
    nodes = expand(node, 23, lambda name: (np.dtype("float32"), (1, 2, 4, 8)))
    produced = {o for n in nodes for o in n.output}
    assert "y" in produced and not {"q", "k", "v"} & produced
    assert all(o == "y" or o.startswith("attn__") for o in produced)
    assert all(isinstance(n, onnx.NodeProto) and not any(a.ref_attr_name for a in n.attribute) for n in nodes)
