"""ONNX Loop and Scan imported as ptowsp scans (frontend/onnx_control.py): onnx's own Scan cases, a loop
that stops on a computed condition, and what is refused.  The catalogue's onnx_loop case checks a
Loop feeding a reversed Scan on every target."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

import ptowsp as pw

vi = oh.make_tensor_value_info


def _running_sum_along_columns():
    """Scan over the columns of x (scan axis 1), a running sum of each column as the state, the
    outputs stacked as columns again (output axis 1); then the last state."""
    body = oh.make_graph([oh.make_node("Add", ["s_in", "col"], ["s_out"]), oh.make_node("Identity", ["s_out"], ["y"])],
                         "body", [vi("s_in", TP.FLOAT, [4]), vi("col", TP.FLOAT, [4])],
                         [vi("s_out", TP.FLOAT, [4]), vi("y", TP.FLOAT, [4])])
    scan = oh.make_node("Scan", ["s0", "x"], ["s", "ys"], name="cumsum", body=body, num_scan_inputs=1,
                        scan_input_axes=[1], scan_output_axes=[-1])
    graph = oh.make_graph([scan], "g", [vi("s0", TP.FLOAT, [4]), vi("x", TP.FLOAT, [4, 7])],
                          [vi("s", TP.FLOAT, None), vi("ys", TP.FLOAT, None)])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize("target", ["numpy", "cpu"])
def test_a_scan_along_an_inner_axis(target):
    x, s0 = np.random.default_rng(3).standard_normal((4, 7)).astype(np.float32), np.float32([1, 2, 3, 4])
    got = pw.build(pw.frontend.from_onnx(_running_sum_along_columns()), target).run(s0=s0, x=x)
    ys = s0[:, None] + np.cumsum(x, axis=1)
    np.testing.assert_allclose(got["ys"], ys, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["s"], ys[:, -1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", ["numpy", "cpu"])
def test_an_opset_8_scan_runs_each_batch_element_on_its_own(target):
    """Scan-8: axis 0 a batch, the sequence along axis 1, a reversed scan input (`directions`)."""
    body = oh.make_graph([oh.make_node("Mul", ["s_in", "row"], ["s_out"]), oh.make_node("Identity", ["s_out"], ["y"])],
                         "body", [vi("s_in", TP.FLOAT, [2]), vi("row", TP.FLOAT, [2])],
                         [vi("s_out", TP.FLOAT, [2]), vi("y", TP.FLOAT, [2])])
    scan = oh.make_node("Scan", ["", "s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1, directions=[1])
    graph = oh.make_graph([scan], "g", [vi("s0", TP.FLOAT, [3, 2]), vi("x", TP.FLOAT, [3, 4, 2])],
                          [vi("s", TP.FLOAT, None), vi("ys", TP.FLOAT, None)])
    x = np.random.default_rng(4).uniform(0.5, 1.5, (3, 4, 2)).astype(np.float32)
    s0 = np.float32([[1, 2], [3, 4], [5, 6]])
    got = pw.build(pw.frontend.from_onnx(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 8)])),
                   target).run(s0=s0, x=x)
    ys = s0[:, None, :] * np.cumprod(x[:, ::-1], axis=1)
    np.testing.assert_allclose(got["ys"], ys, rtol=1e-5)
    np.testing.assert_allclose(got["s"], ys[:, -1], rtol=1e-5)


def _doubling(trips: int = 50, limit: float = 100.0, scan_output: bool = False, counter: str = "int32"):
    """v = 2 v while sum(v) < limit (at most `trips` times), counting the iterations in `counter`."""
    dtype = {"int32": TP.INT32, "int64": TP.INT64}[counter]
    outs = [vi("c_out", TP.BOOL, []), vi("v_out", TP.FLOAT, [3]), vi("n_out", dtype, [])]
    body = oh.make_graph([oh.make_node("Mul", ["v_in", "two"], ["v_out"]),
                          oh.make_node("ReduceSum", ["v_out"], ["s"], keepdims=0),
                          oh.make_node("Less", ["s", "limit"], ["c_out"]),
                          oh.make_node("Add", ["n_in", "one"], ["n_out"])],
                         "body", [vi("i", TP.INT64, []), vi("c_in", TP.BOOL, []), vi("v_in", TP.FLOAT, [3]),
                                  vi("n_in", dtype, [])],
                         outs + ([vi("v_out", TP.FLOAT, [3])] if scan_output else []),
                         [nh.from_array(np.float32(2.0), "two"), nh.from_array(np.float32(limit), "limit"),
                          nh.from_array(np.array(1, counter), "one")])
    graph = oh.make_graph([oh.make_node("Loop", ["M", "", "v0", "n0"], ["v", "n"] + (["vs"] if scan_output else []),
                                        name="grow", body=body)],
                          "g", [vi("v0", TP.FLOAT, [3])], [vi("v", TP.FLOAT, None), vi("n", dtype, None)],
                          [nh.from_array(np.int64(trips), "M"), nh.from_array(np.array(0, counter), "n0")])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize("target", ["numpy", "cpu"])
def test_a_loop_stops_where_its_computed_condition_turns_false(target):
    """Carried values of two dtypes (float32 and int32) share the state; after the condition turns false
    they stop changing, as the loop would have stopped."""
    wl = pw.frontend.from_onnx(_doubling())
    for start in ([1.0, 2.0, 3.0], [40.0, 50.0, 60.0], [1e-3, 0.0, 0.0]):
        v, n = np.float32(start), 0
        while n < 50:
            v, n = v * 2, n + 1
            if not v.sum() < 100:
                break
        got = pw.build(wl, target).run(v0=np.float32(start))
        np.testing.assert_array_equal(got["v"], v)
        assert got["n"].reshape(-1).tolist() == [n]


def test_what_a_loop_cannot_become_is_refused():
    with pytest.raises(pw.WorkloadError, match="its condition is computed, so the length of its scan outputs is data"):
        pw.frontend.from_onnx(_doubling(scan_output=True))
    with pytest.raises(pw.WorkloadError, match=r"dtypes \['bool', 'float32', 'int64'\] share one state, which holds them "
                                               "exactly only when float64 holds each"):
        pw.frontend.from_onnx(_doubling(counter="int64"))


def _slicing_by_the_iteration(with_condition: bool = False):
    """y += x[i : i + 2] for i in 0..3 (a Slice whose starts count the iterations), each y a scan output;
    with_condition: the initial condition is a graph input."""
    body = oh.make_graph([oh.make_node("Identity", ["c_in"], ["c_out"]),
                          oh.make_node("Add", ["i", "two"], ["end"]),
                          oh.make_node("Unsqueeze", ["i", "zero"], ["start1"]),
                          oh.make_node("Unsqueeze", ["end", "zero"], ["end1"]),
                          oh.make_node("Slice", ["x", "start1", "end1"], ["part"]),
                          oh.make_node("Add", ["y_in", "part"], ["y_out"]),
                          oh.make_node("Identity", ["y_out"], ["y_step"])],
                         "body", [vi("i", TP.INT64, []), vi("c_in", TP.BOOL, []), vi("y_in", TP.FLOAT, [2])],
                         [vi("c_out", TP.BOOL, []), vi("y_out", TP.FLOAT, [2]), vi("y_step", TP.FLOAT, [2])],
                         [nh.from_array(np.int64(2), "two"), nh.from_array(np.array([0], np.int64), "zero")])
    inputs = [vi("x", TP.FLOAT, [6]), vi("y0", TP.FLOAT, [2])] + ([vi("c", TP.BOOL, [])] if with_condition else [])
    graph = oh.make_graph([oh.make_node("Loop", ["M", "c" if with_condition else "", "y0"], ["y", "ys"], body=body)],
                          "g", inputs, [vi("y", TP.FLOAT, None), vi("ys", TP.FLOAT, None)],
                          [nh.from_array(np.int64(4), "M")])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize("target", ["numpy", "cpu"])
def test_a_loop_whose_body_slices_by_the_iteration_is_unrolled(target):
    x, y0 = np.arange(6, dtype=np.float32), np.float32([10, 20])
    got = pw.build(pw.frontend.from_onnx(_slicing_by_the_iteration()), target).run(x=x, y0=y0)
    ys = y0 + np.cumsum([x[i:i + 2] for i in range(4)], axis=0)
    np.testing.assert_array_equal(got["ys"], ys)
    np.testing.assert_array_equal(got["y"], ys[-1])


def test_an_initial_condition_that_sets_the_scan_outputs_length_is_a_value_the_import_needs():
    with pytest.raises(pw.frontend.ValueNeeded, match="'c'") as e:
        pw.frontend.from_onnx(_slicing_by_the_iteration(with_condition=True))
    assert e.value.input == "c"
    wl = pw.frontend.from_onnx(_slicing_by_the_iteration(with_condition=True), values={"c": np.array(False)})
    got = pw.reference(wl, x=np.arange(6, dtype=np.float32), y0=np.float32([1, 2]))
    np.testing.assert_array_equal(got["y"], [1, 2])
    assert got["ys"].shape == (0, 2)


def test_a_loop_whose_condition_starts_false_runs_no_iteration():
    model = _doubling()
    model.graph.node[0].input[1] = "never"
    model.graph.initializer.append(nh.from_array(np.array(False), "never"))
    got = pw.reference(pw.frontend.from_onnx(model), v0=np.float32([1, 2, 3]))
    assert got["v"].tolist() == [1, 2, 3] and got["n"].reshape(-1).tolist() == [0]
