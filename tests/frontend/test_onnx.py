"""pw.frontend.from_onnx: every operator against onnx's own reference evaluator, small models end to end
on cpu, and the errors for what it does not import."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator

import ptowsp as pw
from ptowsp.frontend.models import bert_layer, resnet18
from tests.conformance.onnx_cases import cnn_model

RNG = np.random.default_rng(0)
F32 = np.float32


def model(nodes, inputs, outputs, initializers=(), opset=17):
    """A model of `nodes`; inputs and outputs are {name: (shape, element type)}; initializers {name: array}."""
    graph = oh.make_graph(nodes, "test", [oh.make_tensor_value_info(n, t, s) for n, (s, t) in inputs.items()],
                          [oh.make_tensor_value_info(n, t, s) for n, (s, t) in outputs.items()],
                          [nh.from_array(np.asarray(a), n) for n, a in dict(initializers).items()])
    m = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    if all(s is not None for s, _ in outputs.values()):  # the checker wants every output's shape
        onnx.checker.check_model(m)
    return m


def check(m, feeds, target=None, rtol=1e-5, atol=1e-5):
    """The imported workload (pw.reference, and `target` when given) matches onnx.reference."""
    want = ReferenceEvaluator(m).run(None, feeds)
    wl = pw.frontend.from_onnx(m)
    names = [o.name for o in m.graph.output]
    got = pw.reference(wl, **feeds)
    for name, expected in zip(names, want, strict=True):
        np.testing.assert_allclose(got[name].reshape(expected.shape), expected, rtol=rtol, atol=atol)
    if target is not None:
        out = pw.build(wl, target).run(**feeds)
        for name, expected in zip(names, want, strict=True):
            np.testing.assert_allclose(out[name].reshape(expected.shape), expected, rtol=rtol, atol=atol)
    return wl


def one(op, shapes, attrs=None, inits=None, out_shape=None, out_type=TP.FLOAT, positive=False, opset=17):
    """A model of one node: inputs x0, x1, ... of `shapes` (random floats), then initializers by name."""
    inputs = {f"x{k}": (s, TP.FLOAT) for k, s in enumerate(shapes)}
    names = list(inputs) + list((inits or {}).keys())
    node = oh.make_node(op, names, ["y"], name=f"the_{op.lower()}", **(attrs or {}))
    m = model([node], inputs, {"y": (out_shape, out_type)}, inits or {}, opset)
    feeds = {n: (np.abs(RNG.standard_normal(s)) + 0.5 if positive else RNG.standard_normal(s)).astype(F32)
             for n, (s, _) in inputs.items()}
    return m, feeds


ELEMENTWISE = [
    ("Add", [(3, 4), (4,)], {}), ("Sub", [(2, 3, 4), (1, 3, 1)], {}), ("Mul", [(2, 3), (2, 1)], {}),
    ("Div", [(3, 4), (3, 4)], {"positive": True}), ("Pow", [(3, 4), (3, 4)], {"positive": True}),
    ("Max", [(3, 4), (4,)], {}), ("Min", [(3, 4), (3, 1)], {}),
    ("Relu", [(3, 5)], {}), ("Sigmoid", [(3, 5)], {}), ("Tanh", [(3, 5)], {}), ("Exp", [(3, 5)], {}),
    ("Log", [(3, 5)], {"positive": True}), ("Sqrt", [(3, 5)], {"positive": True}), ("Neg", [(3, 5)], {}),
    ("Abs", [(3, 5)], {}), ("Erf", [(3, 5)], {}), ("Reciprocal", [(3, 5)], {"positive": True}),
    ("Floor", [(3, 5)], {}), ("Ceil", [(3, 5)], {}), ("HardSwish", [(3, 5)], {}),
]


@pytest.mark.parametrize("op, element", [("Equal", TP.FLOAT), ("Less", TP.FLOAT), ("Greater", TP.FLOAT),
                                         ("LessOrEqual", TP.FLOAT), ("GreaterOrEqual", TP.FLOAT), ("And", TP.BOOL),
                                         ("Or", TP.BOOL), ("Xor", TP.BOOL), ("Not", TP.BOOL), ("Sign", TP.FLOAT),
                                         ("Softplus", TP.FLOAT)])
def test_comparisons_logic_and_the_rest_of_the_exporters_elementwise_ops(op, element):
    """Attention masks are built from these (Equal, Where, Not...); values rounded so that ties occur."""
    names = ["x0"] if op in ("Not", "Sign", "Softplus") else ["x0", "x1"]
    result = element if op in ("Sign", "Softplus") else TP.BOOL
    m = model([oh.make_node(op, names, ["y"], name="the_op")], {n: ((3, 4), element) for n in names},
              {"y": ((3, 4), result)})
    feeds = {n: RNG.random((3, 4)) > 0.5 if element == TP.BOOL else
             (np.round(RNG.standard_normal((3, 4)), 1) * 30).astype(F32) for n in names}
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    wl = pw.frontend.from_onnx(m)
    for got in (pw.reference(wl, **feeds)["y"], pw.build(wl, "cpu").run(**feeds)["y"]):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op, shapes, options", ELEMENTWISE, ids=[c[0] for c in ELEMENTWISE])
def test_elementwise_ops_broadcast_like_numpy(op, shapes, options):
    m, feeds = one(op, shapes, **options)
    check(m, feeds, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op, attrs, inits", [
    ("LeakyRelu", {"alpha": 0.2}, {}),
    ("Clip", {}, {"lo": np.array(-0.5, F32), "hi": np.array(0.7, F32)}),
    ("Softmax", {"axis": 1}, {}),
    ("Transpose", {"perm": [2, 0, 1]}, {}),
    ("ReduceMean", {"axes": [-1], "keepdims": 1}, {}),
    ("ReduceMax", {"axes": [0, 2], "keepdims": 0}, {}),
    ("ReduceSum", {"keepdims": 1}, {"axes": np.array([1], np.int64)}),
    ("Reshape", {}, {"shape": np.array([0, -1], np.int64)}),
    ("Flatten", {"axis": 2}, {}),
    ("Squeeze", {}, {"axes": np.array([1], np.int64)}),
    ("Unsqueeze", {}, {"axes": np.array([0, 3], np.int64)}),
    ("Identity", {}, {}),
], ids=lambda v: v if isinstance(v, str) else None)
def test_ops_with_attributes(op, attrs, inits):
    shape = (2, 1, 3) if op == "Squeeze" else (2, 3, 4)
    m, feeds = one(op, [shape], attrs, inits)
    check(m, feeds)


@pytest.mark.parametrize("op, attrs, opset", [
    ("Gelu", {}, 20), ("Gelu", {"approximate": "tanh"}, 20), ("HardSigmoid", {}, 17),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 17),
])
def test_what_torch_exports_for_activations(op, attrs, opset):
    m, feeds = one(op, [(4, 6)], attrs, opset=opset)
    check(m, feeds, target="cpu", rtol=1e-5, atol=1e-6)


def test_reshape_with_allowzero_makes_a_0_an_empty_dimension():
    """torch's exporter writes every view and flatten with allowzero=1 (and no 0: a plain reshape)."""
    m, feeds = one("Reshape", [(2, 3, 4)], {"allowzero": 1}, {"shape": np.array([2, -1], np.int64)})
    check(m, feeds)
    m, feeds = one("Reshape", [(0, 3)], {"allowzero": 1}, {"shape": np.array([3, 0], np.int64)})
    check(m, feeds)
    m, _ = one("Reshape", [(2, 3, 4)], {"allowzero": 1}, {"shape": np.array([0, -1], np.int64)})
    with pytest.raises(pw.WorkloadError, match=r"\(op Reshape\).*does not divide"):
        pw.frontend.from_onnx(m)


@pytest.mark.parametrize("op, size, kernel, stride, pads", [
    ("MaxPool", 7, 3, 2, [0, 0, 0, 0]),  # the same size as ceil_mode=0 (SqueezeNet's)
    ("MaxPool", 8, 3, 2, [0, 0, 0, 0]),  # one more window, hanging over the end
    ("MaxPool", 8, 2, 2, [1, 1, 0, 0]),
    ("AveragePool", 7, 3, 2, [0, 0, 0, 0]),
])
def test_pools_with_ceil_mode(op, size, kernel, stride, pads):
    m, feeds = one(op, [(1, 2, size, size)], {"kernel_shape": [kernel, kernel], "strides": [stride, stride],
                                              "pads": pads, "ceil_mode": 1})
    check(m, feeds, target="cpu")


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads, axes", [([0, 1, 2, 0, 2, 1], None), ([0, 0, 0, 0, 0, 0], None), ([2, 1], [-1]),
                                        ([1, -1, 2, 0], [1, 2])])
def test_pad_in_every_mode_with_pads_and_axes_as_inputs(mode, pads, axes):
    inits = {"pads": np.array(pads, np.int64), "value": np.array(1.5, F32)}
    if axes is not None:
        inits["axes"] = np.array(axes, np.int64)
    m, feeds = one("Pad", [(2, 3, 4)], {"mode": mode}, inits, opset=19)
    if min(pads) >= 0:
        check(m, feeds, target="cpu")
        return
    # a negative pad crops (onnx's reference evaluator refuses it): axis 2 loses its first column
    x = feeds["x0"][:, :, 1:]
    want = np.pad(x, [(0, 0), (1, 2), (0, 0)], mode=mode, **({"constant_values": 1.5} if mode == "constant" else {}))
    wl = pw.frontend.from_onnx(m)
    np.testing.assert_array_equal(pw.reference(wl, **feeds)["y"], want)
    np.testing.assert_array_equal(pw.build(wl, "cpu").run(**feeds)["y"], want)


def test_an_average_pool_hanging_over_the_end_divides_by_the_taps_inside():
    m, feeds = one("AveragePool", [(1, 2, 8, 8)], {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1})
    check(m, feeds)


@pytest.mark.parametrize("a, b", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)),
                                  ((2, 1, 3, 4), (3, 4, 2))])
def test_matmul_shapes(a, b):
    m, feeds = one("MatMul", [a, b])
    check(m, feeds, rtol=1e-4)


@pytest.mark.parametrize("attrs", [{}, {"transA": 1}, {"transB": 1, "alpha": 0.5, "beta": 2.0}])
def test_gemm(attrs):
    a = (4, 3) if attrs.get("transA") else (3, 4)
    b = (5, 4) if attrs.get("transB") else (4, 5)
    m, feeds = one("Gemm", [a, b], attrs, {"c": RNG.standard_normal(5).astype(F32)})
    check(m, feeds, rtol=1e-4)


@pytest.mark.parametrize("attrs, weight, bias", [
    ({"pads": [1, 1, 1, 1]}, (4, 3, 3, 3), True),
    ({"strides": [2, 2], "pads": [0, 1, 0, 1]}, (4, 3, 3, 3), False),
    ({"dilations": [2, 2], "pads": [2, 2, 2, 2]}, (4, 3, 3, 3), True),
    ({"group": 3, "pads": [1, 1, 1, 1]}, (6, 1, 3, 3), False),  # depthwise, 2 outputs per input channel
])
def test_conv(attrs, weight, bias):
    inits = {"w": RNG.standard_normal(weight).astype(F32)}
    if bias:
        inits["b"] = RNG.standard_normal(weight[0]).astype(F32)
    m, feeds = one("Conv", [(2, 3, 9, 9)], attrs, inits)
    check(m, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op, attrs", [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("GlobalAveragePool", {}), ("GlobalMaxPool", {}),
])
def test_pooling(op, attrs):
    m, feeds = one(op, [(2, 3, 8, 8)], attrs)
    check(m, feeds)


def test_batch_normalization_folds_into_one_multiply_add():
    c = 4
    inits = {"scale": RNG.uniform(0.5, 1.5, c).astype(F32), "bias": RNG.standard_normal(c).astype(F32),
             "mean": RNG.standard_normal(c).astype(F32), "var": RNG.uniform(0.5, 1.5, c).astype(F32)}
    m, feeds = one("BatchNormalization", [(2, c, 5, 5)], {"epsilon": 1e-3}, inits)
    wl = check(m, feeds)
    assert wl.tasks == ["y"]  # one task (named after the graph output it makes)


def test_where_and_cast():
    nodes = [oh.make_node("Where", ["c", "a", "b"], ["w"], name="pick"),
             oh.make_node("Cast", ["w"], ["y"], name="to_int", to=TP.INT32)]
    m = model(nodes, {"c": ((3, 4), TP.BOOL), "a": ((3, 4), TP.FLOAT), "b": ((4,), TP.FLOAT)},
              {"y": ((3, 4), TP.INT32)})
    feeds = {"c": RNG.random((3, 4)) > 0.5, "a": RNG.standard_normal((3, 4)).astype(F32) * 5,
             "b": RNG.standard_normal(4).astype(F32) * 5}
    check(m, feeds)


def test_a_small_cnn_imports_and_runs_on_cpu():
    m = cnn_model()  # conv, batch norm, relu, max pool, global average pool, flatten, gemm, softmax
    wl = check(m, {"x": RNG.standard_normal((2, 3, 12, 10)).astype(F32)}, target="cpu", rtol=1e-4, atol=1e-5)
    assert wl.outputs == ["probs"] and wl.tasks[:2] == ["conv_conv", "conv"]  # tasks named after their nodes
    assert "bn" not in wl.tasks  # the batch norm folded into the convolution's weights and bias


def test_an_mlp_from_a_file(tmp_path):
    nodes = [oh.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"), oh.make_node("Add", ["h", "b1"], ["hb"]),
             oh.make_node("Relu", ["hb"], ["a"]), oh.make_node("MatMul", ["a", "w2"], ["out"], name="fc2")]
    inits = {"w1": RNG.standard_normal((16, 32)).astype(F32), "b1": RNG.standard_normal(32).astype(F32),
             "w2": RNG.standard_normal((32, 4)).astype(F32)}
    m = model(nodes, {"x": ((5, 16), TP.FLOAT)}, {"out": ((5, 4), TP.FLOAT)}, inits)
    path = tmp_path / "mlp.onnx"
    onnx.save(m, path)
    x = RNG.standard_normal((5, 16)).astype(F32)
    got = pw.build(pw.frontend.from_onnx(path), "cpu").run(x=x)["out"]
    np.testing.assert_allclose(got, ReferenceEvaluator(m).run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_symbolic_dimensions_become_sizes_unless_shapes_binds_them():
    node = oh.make_node("Relu", ["x"], ["y"])
    m = model([node], {"x": (("batch", 4), TP.FLOAT)}, {"y": (("batch", 4), TP.FLOAT)})
    dynamic = pw.frontend.from_onnx(m)
    assert dynamic.sizes == ["batch"]
    prog = pw.build(dynamic, "cpu")
    for n in (1, 7):
        x = RNG.standard_normal((n, 4)).astype(F32)
        np.testing.assert_array_equal(prog(x=x)["y"], np.maximum(x, 0))
    wl = pw.frontend.from_onnx(m, shapes={"x": (3, 4)})
    assert wl.tensor("x").shape == (3, 4) and wl.sizes == []
    with pytest.raises(pw.InputError, match="shapes names 'z', which is not an input of the model"):
        pw.frontend.from_onnx(m, shapes={"z": (1,)})


def test_shape_arithmetic_over_a_symbolic_dimension_the_importer_cannot_carry_names_the_node():
    """Regrouping a symbolic dimension with a static one in the middle of a view (strides over a size)."""
    shape = oh.make_node("Constant", [], ["s"], value=nh.from_array(np.array([4, -1], np.int64)))
    view = oh.make_node("Reshape", ["x", "s"], ["y"], name="regroup")
    m = model([shape, view], {"x": ((2, "n", 2), TP.FLOAT)}, {"y": (None, TP.FLOAT)})
    with pytest.raises(pw.WorkloadError, match="'regroup'.*bind them with shapes="):
        pw.frontend.from_onnx(m)


# -- what it refuses -----------------------------------------------------------------------------
def test_an_unsupported_operator_names_the_node_and_op():
    m, _ = one("NonZero", [(3, 3)], out_shape=(2, 9))
    with pytest.raises(pw.WorkloadError, match=r"ONNX node 'the_nonzero' \(op NonZero\): operator "
                                                r"'NonZero' is not supported; supported: .*Conv"):
        pw.frontend.from_onnx(m)


def test_an_unsupported_attribute_names_it():
    m, _ = one("MaxPool", [(1, 2, 8, 8)], {"kernel_shape": [3, 3], "auto_pad": "SAME"})
    with pytest.raises(pw.WorkloadError, match=r"'the_maxpool' \(op MaxPool\): attribute auto_pad='SAME' is not "
                                                r"supported \(NOTSET, VALID, SAME_UPPER or SAME_LOWER\)"):
        pw.frontend.from_onnx(m)


def test_a_shape_computed_from_a_graph_inputs_value_names_that_input():
    nodes = [oh.make_node("Shape", ["x"], ["n"]), oh.make_node("Add", ["n", "n"], ["twice"]),
             oh.make_node("Min", ["twice", "s"], ["s2"]), oh.make_node("Reshape", ["x", "s2"], ["y"], name="view")]
    m = model(nodes, {"x": ((2, 6), TP.FLOAT), "s": ((2,), TP.INT64)}, {"y": ((3, 4), TP.FLOAT)})
    # the shape of x reaches s2 through Shape (known at import); the value of s does not
    with pytest.raises(pw.frontend.ValueNeeded, match=r"'view' \(op Reshape\): input 1 \(shape, 's2'\) must be "
                                                      r"known at import: it is computed from the value of the graph "
                                                      r"input 's'") as caught:
        pw.frontend.from_onnx(m)
    assert caught.value.input == "s"
    wl = pw.frontend.from_onnx(m, values={"s": np.array([3, 4])})
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    np.testing.assert_array_equal(pw.build(wl, "cpu").run(x=x)["y"], x.reshape(3, 4))


def test_a_shape_computed_from_a_data_inputs_values_names_it_too():
    nodes = [oh.make_node("Cast", ["x"], ["n"], to=TP.INT64), oh.make_node("Reshape", ["x", "n"], ["y"], name="view")]
    m = model(nodes, {"x": ((2,), TP.FLOAT)}, {"y": ((2,), TP.FLOAT)})
    with pytest.raises(pw.frontend.ValueNeeded, match=r"'view' \(op Reshape\): input 1 \(shape, 'n'\) must be "
                                                      r"known at import.*graph input 'x'"):
        pw.frontend.from_onnx(m)


def test_a_shape_given_as_a_graph_input_is_taken_as_a_value():
    nodes = [oh.make_node("Reshape", ["x", "s"], ["y"], name="view")]
    m = model(nodes, {"x": ((2, 6), TP.FLOAT), "s": ((2,), TP.INT64)}, {"y": ((3, 4), TP.FLOAT)})
    with pytest.raises(pw.frontend.ValueNeeded, match=r"'view' \(op Reshape\): input 1 \(shape, 's'\) must be "
                                                      r"known at import.*values=\{'s': \.\.\.\}") as caught:
        pw.frontend.from_onnx(m)
    assert caught.value.input == "s"
    wl = pw.frontend.from_onnx(m, values={"s": np.array([3, 4])})
    assert wl.inputs == ["x"]
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    np.testing.assert_array_equal(pw.build(wl, "cpu").run(x=x)["y"], x.reshape(3, 4))
    with pytest.raises(pw.InputError, match=r"values\['s'\] is a int32 array of shape \(2,\); the input is int64"):
        pw.frontend.from_onnx(m, values={"s": np.array([3, 4], np.int32)})
    with pytest.raises(pw.InputError, match="values names 'z', which is not an input"):
        pw.frontend.from_onnx(m, values={"z": np.array([3, 4])})


@pytest.mark.parametrize("what, message", [
    (b"not a model at all", "not an ONNX model"),
    (12, "from_onnx takes a path, bytes or an onnx.ModelProto, got int"),
])
def test_what_is_no_model_is_an_input_error(what, message):
    with pytest.raises(pw.InputError, match=message):
        pw.frontend.from_onnx(what)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(pw.InputError, match=r"ONNX file '.*nothing.onnx': cannot read it"):
        pw.frontend.from_onnx(tmp_path / "nothing.onnx")


# -- shape and gather operators, constant folding ----------------------------------------------------
@pytest.mark.parametrize("op, shapes, attrs, inits", [
    ("Expand", [(3, 1)], {}, {"shape": np.array([2, 3, 4], np.int64)}),
    ("Concat", [(2, 3), (2, 5), (2, 1)], {"axis": 1}, {}),
    ("Concat", [(2, 3), (4, 3)], {"axis": -2}, {}),
    ("Slice", [(6, 8)], {}, {"starts": np.array([1, -6], np.int64), "ends": np.array([5, 100], np.int64),
                              "axes": np.array([0, 1], np.int64), "steps": np.array([2, 3], np.int64)}),
    ("Slice", [(6, 8)], {}, {"starts": np.array([4], np.int64), "ends": np.array([0], np.int64),
                              "axes": np.array([1], np.int64), "steps": np.array([-1], np.int64)}),
    ("LayerNormalization", [(2, 3, 8)], {"epsilon": 1e-3},
     {"scale": RNG.standard_normal(8).astype(F32), "bias": RNG.standard_normal(8).astype(F32)}),
    ("LayerNormalization", [(2, 3, 8)], {"axis": 1}, {"scale": RNG.standard_normal((3, 8)).astype(F32)}),
], ids=["Expand", "Concat", "Concat-neg-axis", "Slice-steps", "Slice-reversed", "LayerNorm", "LayerNorm-axis1"])
def test_shape_ops(op, shapes, attrs, inits):
    m, feeds = one(op, shapes, attrs, inits)
    check(m, feeds, rtol=1e-4, atol=1e-5)


def test_split_gives_one_task_per_output():
    node = oh.make_node("Split", ["x", "sizes"], ["a", "b", "c"], name="three", axis=1)
    m = model([node], {"x": ((2, 9), TP.FLOAT)}, {n: (None, TP.FLOAT) for n in "abc"},
              {"sizes": np.array([2, 3, 4], np.int64)})
    wl = check(m, {"x": RNG.standard_normal((2, 9)).astype(F32)})
    assert wl.outputs == ["a", "b", "c"]


def test_gather_reads_rows_chosen_at_run_time():
    nodes = [oh.make_node("Gather", ["table", "ids"], ["y"], name="embed", axis=0)]
    m = model(nodes, {"ids": ((2, 5), TP.INT64)}, {"y": ((2, 5, 6), TP.FLOAT)},
              {"table": RNG.standard_normal((10, 6)).astype(F32)})
    ids = RNG.integers(-10, 10, (2, 5)).astype(np.int64)  # negative ids count from the end
    check(m, {"ids": ids}, target="cpu")


def test_shape_arithmetic_over_constants_is_folded():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as torch exports a view: folded at import."""
    nodes = [oh.make_node("Shape", ["x"], ["s"]), oh.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             oh.make_node("Unsqueeze", ["n", "axes"], ["n1"]), oh.make_node("Concat", ["n1", "minus"], ["to"], axis=0),
             oh.make_node("Reshape", ["x", "to"], ["y"], name="view")]
    inits = {"zero": np.array(0, np.int64), "axes": np.array([0], np.int64), "minus": np.array([-1], np.int64)}
    m = model(nodes, {"x": ((2, 3, 4), TP.FLOAT)}, {"y": ((2, 12), TP.FLOAT)}, inits)
    wl = check(m, {"x": RNG.standard_normal((2, 3, 4)).astype(F32)})
    assert wl.tasks == ["y"]  # the shape computation left no task


# -- whole models at reduced width ---------------------------------------------------------------
def test_a_bert_encoder_layer_at_reduced_width():
    m = bert_layer(seq=8, hidden=16, heads=2, ff=32)
    check(m, {"x": RNG.standard_normal((1, 8, 16)).astype(F32)}, target="cpu", rtol=1e-4, atol=1e-4)


def test_resnet18_at_reduced_width():
    m = resnet18(width=8, size=32, classes=10)
    wl = check(m, {"x": RNG.standard_normal((1, 3, 32, 32)).astype(F32)}, target="cpu", rtol=1e-3, atol=1e-3)
    convolutions = [t for t in wl.tasks if t.endswith("_conv_conv")]
    assert len(convolutions) == 20  # 17 convolutions and 3 projections, each batch norm folded into one
    assert not any(t.endswith("_bn") for t in wl.tasks)


def test_a_batch_norm_folds_into_its_conv_only_when_it_is_the_only_reader():
    c = 4
    inits = {"w": RNG.standard_normal((c, 3, 3, 3)).astype(F32), "scale": RNG.uniform(0.5, 1.5, c).astype(F32),
             "bias": RNG.standard_normal(c).astype(F32), "mean": RNG.standard_normal(c).astype(F32),
             "var": RNG.uniform(0.5, 1.5, c).astype(F32)}
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             oh.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"], name="bn"),
             oh.make_node("Add", ["bn", "c"], ["y"], name="y")]  # the conv's output is read twice: no folding
    m = model(nodes, {"x": ((1, 3, 6, 6), TP.FLOAT)}, {"y": ((1, c, 6, 6), TP.FLOAT)}, inits)
    wl = check(m, {"x": RNG.standard_normal((1, 3, 6, 6)).astype(F32)}, rtol=1e-4, atol=1e-5)
    assert wl.tasks == ["conv", "bn", "y"]


def long_names(m: onnx.ModelProto, length: int = 200) -> onnx.ModelProto:
    """The model with every node, value and initializer renamed to `length` characters (a checkpoint's
    parameter paths are long; passes then append their own suffixes)."""
    m = onnx.ModelProto.FromString(m.SerializeToString())
    renamed = {}

    def new(name: str) -> str:
        if name and name not in renamed:
            stem = f"model.encoder.layers.{len(renamed)}.{name}."
            renamed[name] = (stem * (length // len(stem) + 1))[:length]
        return renamed.get(name, name)

    graph = m.graph
    for value in [*graph.input, *graph.output, *graph.value_info]:
        value.name = new(value.name)
    for init in graph.initializer:
        init.name = new(init.name)
    for node in graph.node:
        node.name = new(node.name or node.op_type)
        node.input[:] = [new(n) for n in node.input]
        node.output[:] = [new(n) for n in node.output]
    return m


@pytest.mark.parametrize("make", [lambda: cnn_model(), lambda: bert_layer(seq=8, hidden=32, heads=2, ff=64)],
                         ids=["cnn", "bert_layer"])
def test_names_of_200_characters_build_on_every_target(make):
    m = long_names(make())
    feeds = {i.name: RNG.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(F32)
             for i in m.graph.input if i.name not in {t.name for t in m.graph.initializer}}
    want = ReferenceEvaluator(m).run(None, feeds)
    wl = pw.frontend.from_onnx(m)
    assert max(len(t) for t in wl.tasks) <= 64
    assert all(len(name) <= 64 for name in wl.inputs + wl.outputs)  # made identifiers, in the model's order
    for target in [t for t in pw.targets() if t != "cuda"]:  # (cuda: where a GPU is, its conformance run)
        prog = pw.build(wl, target)
        assert all(len(t) <= 64 for t in prog.schedule.workload.tasks)  # the target's passes named some
        got = prog.run(*feeds.values())
        for name, expected in zip(wl.outputs, want, strict=True):
            np.testing.assert_allclose(got[name].reshape(expected.shape), expected, rtol=1e-4, atol=1e-4,
                                       err_msg=target)


@pytest.mark.parametrize("given, message", [
    ((2,), r"has rank 1; the model declares \['n', 4\] \(rank 2\)"),
    ((2, 5), "gives dimension 1 as 5; the model declares it 4"),
    ((0, 4), "has a dimension below 1"),
    (("two", 4), "is not a sequence of integers"),
])
def test_shapes_bind_symbolic_dimensions_only(given, message):
    m = model([oh.make_node("Relu", ["x"], ["y"])], {"x": (["n", 4], TP.FLOAT)}, {"y": (["n", 4], TP.FLOAT)})
    assert pw.frontend.from_onnx(m, shapes={"x": (3, 4)}).tensor("x").shape == (3, 4)
    with pytest.raises(pw.InputError, match=message):
        pw.frontend.from_onnx(m, shapes={"x": given})


@pytest.mark.parametrize("opset, ir", [(99, None), (17, 99)])
def test_an_opset_or_ir_version_newer_than_the_importer_knows_is_refused(opset, ir):
    m = model([oh.make_node("Relu", ["x"], ["y"])], {"x": ((2, 3), TP.FLOAT)}, {"y": ((2, 3), TP.FLOAT)})
    m.opset_import[0].version = opset
    if ir is not None:
        m.ir_version = ir
    with pytest.raises(pw.InputError, match=f"opset {opset}, IR version {m.ir_version}: newer than this importer"):
        pw.frontend.from_onnx(m)


def test_a_value_with_two_producers_or_an_output_listed_twice_is_refused():
    nodes = [oh.make_node("Relu", ["x"], ["y"], name="first"), oh.make_node("Neg", ["x"], ["y"], name="second")]
    m = model(nodes, {"x": ((2, 3), TP.FLOAT)}, {"y": (None, TP.FLOAT)})  # (no shape: onnx's checker stays out)
    with pytest.raises(pw.InputError, match=r"'second' \(op Neg\): its output 'y' is already the output of node "
                                            "'first'"):
        pw.frontend.from_onnx(m)
    m = model(nodes[:1], {"x": ((2, 3), TP.FLOAT)}, {"y": ((2, 3), TP.FLOAT)})
    m.graph.output.append(m.graph.output[0])
    with pytest.raises(pw.InputError, match="graph output 'y' is listed 2 times"):
        pw.frontend.from_onnx(m)


@pytest.mark.parametrize("bias, initial, lens", [(True, True, False), (False, False, True)])
def test_an_lstm_as_torch_exports_it_is_a_scan(bias, initial, lens):
    steps, batch, inputs, hidden = 5, 2, 3, 4
    names = ["x", "W", "R", "B" if bias else "", "lens" if lens else "", "h0" if initial else "", "c0" if initial else ""]
    inits = {"W": RNG.standard_normal((1, 4 * hidden, inputs)).astype(F32),
             "R": RNG.standard_normal((1, 4 * hidden, hidden)).astype(F32) * 0.5}
    if bias:
        inits["B"] = RNG.standard_normal((1, 8 * hidden)).astype(F32)
    if lens:
        inits["lens"] = np.full(batch, steps, np.int32)
    inputs_ = {"x": ((steps, batch, inputs), TP.FLOAT)}
    if initial:
        inputs_ |= {"h0": ((1, batch, hidden), TP.FLOAT), "c0": ((1, batch, hidden), TP.FLOAT)}
    while names[-1] == "":
        names.pop()
    node = oh.make_node("LSTM", names, ["y", "y_h", "y_c"], name="lstm", hidden_size=hidden)
    m = model([node], inputs_, {"y": ((steps, 1, batch, hidden), TP.FLOAT), "y_h": ((1, batch, hidden), TP.FLOAT),
                                "y_c": ((1, batch, hidden), TP.FLOAT)}, inits)
    feeds = {n: RNG.standard_normal(s).astype(F32) for n, (s, _) in inputs_.items()}
    check(m, feeds, target="cpu", rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bias, initial", [(True, True), (False, False)])
def test_a_gru_as_torch_exports_it_is_a_scan(bias, initial):
    steps, batch, inputs, hidden = 5, 2, 3, 4
    names = ["x", "W", "R", "B" if bias else "", "", "h0" if initial else ""]
    inits = {"W": RNG.standard_normal((1, 3 * hidden, inputs)).astype(F32),
             "R": RNG.standard_normal((1, 3 * hidden, hidden)).astype(F32) * 0.5}
    if bias:
        inits["B"] = RNG.standard_normal((1, 6 * hidden)).astype(F32)
    inputs_ = {"x": ((steps, batch, inputs), TP.FLOAT)} | ({"h0": ((1, batch, hidden), TP.FLOAT)} if initial else {})
    while names[-1] == "":
        names.pop()
    node = oh.make_node("GRU", names, ["y", "y_h"], name="gru", hidden_size=hidden, linear_before_reset=1)
    m = model([node], inputs_, {"y": ((steps, 1, batch, hidden), TP.FLOAT), "y_h": ((1, batch, hidden), TP.FLOAT)},
              inits)
    feeds = {n: RNG.standard_normal(s).astype(F32) for n, (s, _) in inputs_.items()}
    check(m, feeds, target="cpu", rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op, direction, extra", [
    ("LSTM", "bidirectional", {}), ("GRU", "reverse", {"linear_before_reset": 0}),
    ("GRU", "bidirectional", {"linear_before_reset": 1}), ("RNN", "bidirectional", {}), ("RNN", "forward", {})])
def test_every_direction_of_rnn_lstm_and_gru(op, direction, extra):
    steps, batch, inputs, hidden, gates = 4, 2, 3, 3, {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    count = 2 if direction == "bidirectional" else 1
    inits = {"W": RNG.standard_normal((count, gates * hidden, inputs)).astype(F32),
             "R": RNG.standard_normal((count, gates * hidden, hidden)).astype(F32) * 0.5,
             "B": RNG.standard_normal((count, 2 * gates * hidden)).astype(F32)}
    node = oh.make_node(op, ["x", "W", "R", "B", "", "h0"], ["y", "y_h"], name="layer", hidden_size=hidden,
                        direction=direction, **extra)
    m = model([node], {"x": ((steps, batch, inputs), TP.FLOAT), "h0": ((count, batch, hidden), TP.FLOAT)},
              {"y": ((steps, count, batch, hidden), TP.FLOAT), "y_h": ((count, batch, hidden), TP.FLOAT)}, inits)
    feeds = {"x": RNG.standard_normal((steps, batch, inputs)).astype(F32),
             "h0": RNG.standard_normal((count, batch, hidden)).astype(F32)}
    check(m, feeds, target="cpu", rtol=1e-4, atol=1e-5)


def test_an_lstm_it_cannot_import_is_refused_naming_the_attribute():
    node = oh.make_node("LSTM", ["x", "W", "R"], ["y"], name="lstm", hidden_size=2, clip=3.0)
    m = model([node], {"x": ((3, 1, 2), TP.FLOAT)}, {"y": (None, TP.FLOAT)},
              {"W": np.ones((1, 8, 2), F32), "R": np.ones((1, 8, 2), F32)})
    with pytest.raises(pw.WorkloadError, match="'lstm' \\(op LSTM\\): attribute clip=3.0 is not supported"):
        pw.frontend.from_onnx(m)


def test_duplicate_node_names_get_numbers_in_order_skipping_taken_ones():
    """(Numbered from the last number each name got: 20,000 nodes of one name import in about 2 s, not 47.)"""
    names = ["a", "a_1", "a", "a", "b"]
    nodes = [oh.make_node("Relu", ["x" if i == 0 else f"v{i - 1}"], [f"v{i}" if i < len(names) - 1 else "y"],
                          name=n) for i, n in enumerate(names)]
    m = model(nodes, {"x": ((4,), TP.FLOAT)}, {"y": ((4,), TP.FLOAT)})
    assert pw.frontend.from_onnx(m).tasks == ["a", "a_1", "a_2", "a_3", "y"]


@pytest.mark.parametrize("upper, k", [(1, 0), (0, 0), (1, 2), (0, -1)])
def test_trilu_over_a_value_computed_at_run_time(upper, k):
    m, feeds = one("Trilu", [(2, 4, 5)], {"upper": upper}, {"k": np.array(k, np.int64)})
    check(m, feeds, target="cpu")
