"""Workload: the task graph, categories, and mistakes caught where they are made."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import ptowsp as pw


def design_mlp():
    """The example of DESIGN.md section 3, verbatim."""
    wl = pw.Workload("mlp")
    A = wl.input("A", (512, 256))
    B = wl.input("B", (256, 128), dtype="float32")
    bias = wl.input("bias", (128,))
    k = pw.reduce_axis(256, "k")
    C = wl.compute("C", (512, 128), lambda i, j: pw.sum(A[i, k] * B[k, j], axis=k))
    D = wl.compute("D", (512, 128), lambda i, j: pw.maximum(C[i, j] + bias[j], 0.0))
    wl.output(D)
    return wl


def test_design_example():
    wl = design_mlp()
    assert wl.tasks == ["C", "D"]
    assert wl.category("C") is pw.Category.COMPLEX_OUT_FUSABLE
    assert wl.category("D") is pw.Category.INJECTIVE
    assert set(wl.graph.nodes) == {"A", "B", "bias", "C", "D"}
    assert set(wl.graph.edges) == {("A", "C"), ("B", "C"), ("C", "D"), ("bias", "D")}
    assert wl.graph.nodes["A"]["kind"] == "input" and wl.graph.nodes["C"]["kind"] == "compute"
    assert wl.graph.edges["C", "D"]["tensors"] == ["C"]
    assert str(wl.task("C")) == "C[i, j] = sum(A[i, k] * B[k, j], k)"
    assert wl.outputs == ["D"] and wl.inputs == ["A", "B", "bias"]
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((512, 256), (256, 128), (128,)))
    out = pw.reference(wl, A=a, B=b, bias=c)
    assert list(out) == ["D"]
    np.testing.assert_allclose(out["D"], np.maximum(a @ b + c, 0), rtol=1e-4, atol=1e-4)


def test_graph_is_a_read_only_copy():
    wl = design_mlp()
    with pytest.raises(nx.NetworkXError, match="Frozen"):
        wl.graph.add_node("X")
    assert "X" not in wl.graph


def test_graph_follows_tasks_added_after_it_was_read():
    wl = design_mlp()
    assert "E" not in wl.graph  # read (and shared) before E exists
    D = wl.tensor("D")
    wl.compute("E", (512, 128), lambda i, j: D[i, j] * 2.0)
    assert ("D", "E") in wl.graph.edges and wl.graph.nodes["E"]["kind"] == "compute"
    assert wl.graph is wl.graph  # one copy until the next change


@pytest.mark.parametrize(
    "fn, category",
    [
        (lambda x, w, i, j: x[i, j] * 2.0, pw.Category.INJECTIVE),
        (lambda x, w, i, j: x[j, i], pw.Category.INJECTIVE),  # transpose
        (lambda x, w, i, j: w[j], pw.Category.INJECTIVE),  # broadcast
        (lambda x, w, i, j: pw.sum(x[i, K] * w[K], K) + x[i, j], pw.Category.COMPLEX_OUT_FUSABLE),  # matvec
        (lambda x, w, i, j: pw.sum(x[i, K] * x[i, K], K), pw.Category.REDUCTION),  # sum of squares
        (lambda x, w, i, j: pw.max(x[i, K], K), pw.Category.REDUCTION),
        (lambda x, w, i, j: pw.sum(x[i, K], K) / 4.0, pw.Category.REDUCTION),
    ],
)
def test_categories_follow_the_expression(fn, category):
    wl = pw.Workload("c")
    x, w = wl.input("x", (4, 4)), wl.input("w", (4,))
    wl.compute("T", (4, 4), lambda i, j: fn(x, w, i, j))
    assert wl.category("T") is category


K = pw.reduce_axis(4, "K")


def test_opaque_tasks_run_on_the_host_and_feed_later_tasks():
    wl = pw.Workload("o")
    x = wl.input("X", (3, 5))

    def topk(a):
        idx = np.argsort(-a, axis=1)[:, :2]
        return idx.astype(np.int32), np.take_along_axis(a, idx, axis=1)

    idx, vals = wl.opaque("topk", topk, inputs=[x], outputs=[("idx", (3, 2), "int32"), ("vals", (3, 2))])
    y = wl.compute("Y", (3, 2), lambda i, j: vals[i, j] * 2.0 + pw.cast(idx[i, j], "float32"))
    wl.output(y, idx)
    assert wl.category("topk") is pw.Category.OPAQUE
    assert wl.producer("idx") == "topk" and wl.producer("X") is None
    assert set(wl.graph.edges) == {("X", "topk"), ("topk", "Y")}
    a = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    out = pw.reference(wl, X=a)
    i_ref, v_ref = topk(a)
    np.testing.assert_array_equal(out["idx"], i_ref)
    np.testing.assert_allclose(out["Y"], v_ref * 2 + i_ref)


def test_single_output_opaque_returns_a_tensor():
    wl = pw.Workload("o")
    x = wl.input("X", (4,))
    y = wl.opaque("sort", np.sort, inputs=[x], outputs=[("sorted", (4,))])
    assert isinstance(y, pw.Tensor) and y.name == "sorted"


def make(fn):
    wl = pw.Workload("e")
    a = wl.input("A", (4, 4))
    return fn(wl, a)


@pytest.mark.parametrize(
    "fn, error, match",
    [
        (lambda wl, a: wl.input("A", (2,)), pw.WorkloadError, "already has"),
        (lambda wl, a: wl.compute("A", (4,), lambda i: a[i, 0]), pw.WorkloadError, "already has"),
        (lambda wl, a: wl.input("bad name", (2,)), pw.WorkloadError, "identifier"),
        (lambda wl, a: wl.input("X", (-1, 2)), pw.ShapeError, "an int >= 0"),
        (lambda wl, a: wl.input("X", ("1n", 2)), pw.ShapeError, "identifier"),
        (lambda wl, a: wl.compute("X", ("m", 2), lambda i, j: a[0, 0]), pw.WorkloadError, "no input declares"),
        (lambda wl, a: wl.input("X", (2,), "complex64"), pw.DTypeError, "unsupported dtype"),
        (lambda wl, a: wl.compute("T", (4, 4), lambda i: a[i, 0]), pw.ShapeError, "2 dimension"),
        (lambda wl, a: wl.compute("T", (4,), lambda *i: a[i[0], 0]), pw.WorkloadError, "one named"),
        (lambda wl, a: wl.compute("T", (4,), lambda i: a[i]), pw.ShapeError, "task 'T': tensor A has 2"),
        (lambda wl, a: wl.compute("T", (4,), lambda i: a), pw.ShapeError, "index it"),
        (lambda wl, a: wl.compute("T", (4,), lambda i: a[i, K]), pw.WorkloadError, "outside a pw.sum"),
        (lambda wl, a: wl.compute("T", (4,), lambda i: pw.sum(a[i, i], pw.reduce_axis(4, "i"))),
         pw.WorkloadError, "enclosing loop"),
        (lambda wl, a: wl.output(a), pw.WorkloadError, "input, not the result of a task"),
        (lambda wl, a: wl.output("A"), pw.WorkloadError, "takes tensors"),
        (lambda wl, a: wl.output(), pw.WorkloadError, "at least one"),
        (lambda wl, a: wl.category("nope"), pw.WorkloadError, "no task 'nope'"),
        (lambda wl, a: wl.opaque("o", np.sort, inputs=[a], outputs=[]), pw.WorkloadError, "at least one output"),
        (lambda wl, a: wl.opaque("o", np.sort, inputs=[a], outputs=[("A", (4, 4))]), pw.WorkloadError, "already"),
        (lambda wl, a: wl.opaque("o", 3, inputs=[a], outputs=[("y", (4, 4))]), pw.WorkloadError, "callable"),
    ],
)
def test_mistakes_raise_where_they_are_made(fn, error, match):
    with pytest.raises(error, match=match):
        make(fn)


def test_tensors_of_another_workload_are_refused():
    other = pw.Workload("other")
    b = other.input("B", (4,))
    wl = pw.Workload("w")
    wl.input("B", (4,))
    with pytest.raises(pw.WorkloadError, match="another workload"):
        wl.compute("T", (4,), lambda i: b[i])
    with pytest.raises(pw.WorkloadError, match="another workload"):
        wl.output(other.compute("T", (4,), lambda i: b[i]))


def test_loop_variables_of_another_compute_are_refused():
    wl = pw.Workload("w")
    a = wl.input("A", (4,))
    leaked = []
    wl.compute("T", (4,), lambda i: leaked.append(i) or a[i])
    with pytest.raises(pw.WorkloadError, match="another compute"):
        wl.compute("U", (4,), lambda j: a[leaked[0]])


def test_printing_a_workload_lists_everything():
    text = str(design_mlp())
    assert "input A[512, 256] float32" in text
    assert "D[i, j] = maximum(C[i, j] + bias[j], 0.0)    # injective" in text
    assert text.endswith("output D")
