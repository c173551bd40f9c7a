"""Malformed ONNX models get a typed ptowsp error, never a raw exception from deep inside the importer.

A small CNN (Conv, Relu, MaxPool, Reshape, Gemm, Softmax) is mutated 1,000 times, one to three
structural changes at a time (attribute values and types, initializer dims, types and data, node
inputs, op types, names, input shapes, the opset, outputs, dropped and doubled nodes); each mutant
either imports and runs on `pw.reference`, or raises a PtowspError.  The cases the hostile-models
issue listed are checked one by one as well."""

from __future__ import annotations

import collections
import copy
import random
import traceback

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

import ptowsp as pw

WEIRD = [0, -1, 1, 2, 3, 7, -7, 2**31, -2**31, 2**62, 10**6]


def cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1"),
             nh.from_array(rng.standard_normal(8).astype(np.float32), "b1"),
             nh.from_array(rng.standard_normal((10, 8 * 4 * 4)).astype(np.float32), "w2"),
             nh.from_array(rng.standard_normal(10).astype(np.float32), "b2"),
             nh.from_array(np.array([1, -1], np.int64), "shape")]
    nodes = [oh.make_node("Conv", ["x", "w1", "b1"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1]),
             oh.make_node("Relu", ["c"], ["r"], name="relu"),
             oh.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             oh.make_node("Reshape", ["p", "shape"], ["f"], name="flatten"),
             oh.make_node("Gemm", ["f", "w2", "b2"], ["y"], name="fc", transB=1),
             oh.make_node("Softmax", ["y"], ["z"], name="softmax", axis=1)]
    graph = oh.make_graph(nodes, "cnn", [oh.make_tensor_value_info("x", TP.FLOAT, [1, 3, 8, 8])],
                          [oh.make_tensor_value_info("z", TP.FLOAT, [1, 10])], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def _attribute(g, rng):
    node = rng.choice(list(g.node))
    if not node.attribute:
        node.attribute.append(oh.make_attribute(rng.choice(["axis", "kernel_shape", "pads", "alpha", "mode"]),
                                                rng.choice([3, [1, 2], 0.5, "x"])))
        return
    a = rng.choice(list(node.attribute))
    if rng.random() < 0.2:
        a.type = rng.choice([0, 1, 2, 3, 4, 6, 7])  # the value no longer where its type says
    elif a.ints:
        a.ints[rng.randrange(len(a.ints))] = rng.choice(WEIRD)
        if rng.random() < 0.3:
            a.ints.append(rng.choice(WEIRD))
        if rng.random() < 0.3:
            del a.ints[rng.randrange(len(a.ints))]
    else:
        a.i = rng.choice(WEIRD)


def _initializer(g, rng):
    t = rng.choice(list(g.initializer))
    change = rng.choice(["dims", "type", "data"])
    if change == "dims" and t.dims:
        t.dims[rng.randrange(len(t.dims))] = rng.choice(WEIRD)
    elif change == "type":
        t.data_type = rng.choice([TP.INT8, TP.INT64, TP.DOUBLE, TP.FLOAT16, TP.BOOL, TP.STRING, TP.BFLOAT16, 0, 40])
    else:
        t.raw_data = t.raw_data[:rng.randrange(len(t.raw_data) + 1)]


def _node(g, rng):
    node = rng.choice(list(g.node))
    change = rng.choice(["input", "op", "name", "drop", "double"])
    if change == "input" and node.input:
        node.input[rng.randrange(len(node.input))] = rng.choice(["", "nothing", "x", "w1", "z", "shape"])
    elif change == "op":
        node.op_type = rng.choice(["Add", "MatMul", "Conv", "Relu", "Gather", "Concat", "Transpose", "Pad", "Slice",
                                   "Split", "Where", "Resize", "LSTM", "Bogus", "Cast", "Reshape"])
    elif change == "name":
        node.name = rng.choice(["", "a" * 300, "é", "x y", "1abc", "\x00", "conv"])
    elif change == "drop":
        g.node.remove(node)
    else:
        g.node.append(copy.deepcopy(node))


def _graph(m, rng):
    g = m.graph
    change = rng.choice(["shape", "opset", "output"])
    if change == "shape":
        dim = rng.choice(list(g.input[0].type.tensor_type.shape.dim))
        if rng.random() < 0.5:
            dim.dim_value = rng.choice(WEIRD[:8])
        else:
            dim.dim_param = rng.choice(["n", "", "1x"])
    elif change == "opset":
        m.opset_import[0].version = rng.choice([1, 6, 9, 11, 13, 21, 23, 99])
    else:
        g.output[0].name = rng.choice(["c", "x", "w1", "nothing", ""])


def mutant(base: onnx.ModelProto, rng: random.Random) -> onnx.ModelProto:
    m = copy.deepcopy(base)
    for _ in range(rng.choice([1, 1, 2, 3])):
        rng.choice([lambda: _attribute(m.graph, rng), lambda: _initializer(m.graph, rng),
                    lambda: _node(m.graph, rng), lambda: _graph(m, rng)])()
    return m


def outcome(model: onnx.ModelProto | bytes) -> str:
    """"ran", "refused", or the raw exception and where it came from."""
    try:
        wl = pw.frontend.from_onnx(model)
        feeds = {n: np.ones([d if isinstance(d, int) else 2 for d in wl.tensor(n).shape], wl.tensor(n).dtype)
                 for n in wl.inputs}
        pw.reference(wl, **feeds)
        return "ran"
    except pw.PtowspError:
        return "refused"
    except Exception as e:  # noqa: BLE001 - what the test counts
        where = traceback.extract_tb(e.__traceback__)[-1]
        return f"{type(e).__name__} at {where.filename}:{where.lineno}: {e}"


def test_a_thousand_mutants_of_a_cnn_raise_nothing_raw():
    rng, base = random.Random(20261128), cnn()
    outcomes = collections.Counter(outcome(mutant(base, rng).SerializeToString()) for _ in range(1000))
    raw = {k: n for k, n in outcomes.items() if k not in ("ran", "refused")}
    assert not raw, raw
    assert outcomes["ran"] > 50 and outcomes["refused"] > 500, outcomes  # the mutants do both


def _with(change) -> onnx.ModelProto:
    m = cnn()
    change(m)
    return m


def _set_pads(m):
    next(a for a in m.graph.node[0].attribute if a.name == "pads").ints[:] = [1, 1, 1]


def _missing_conv_inputs(m):
    del m.graph.node[0].input[1:]


def _dims_without_data(m, dims):
    t = m.graph.initializer[0]
    del t.dims[:]
    t.dims.extend(dims)


def _external(m, offset):
    t = m.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = TP.EXTERNAL
    t.external_data.extend([onnx.StringStringEntryProto(key="location", value="w.bin"),
                            onnx.StringStringEntryProto(key="offset", value=str(offset))])


LISTED = {
    "invalid UTF-8 graph name": lambda: cnn().SerializeToString().replace(b"\x12\x03cnn", b"\x12\x03\xff\xfe\xfd"),
    "a Conv with missing inputs": lambda: _with(_missing_conv_inputs),
    "an attribute list of the wrong length": lambda: _with(_set_pads),
    "initializer dims that do not match the data": lambda: _with(lambda m: _dims_without_data(m, [8, 3, 3, 2])),
    "2^40 elements declared, none given": lambda: _with(lambda m: _dims_without_data(m, [1 << 20, 1 << 20])),
    "external data at offset 2^62": lambda: _with(lambda m: _external(m, 1 << 62)),
    "external data at offset -5": lambda: _with(lambda m: _external(m, -5)),
}


@pytest.mark.parametrize("case", LISTED)
def test_each_listed_malformation_is_refused_with_a_typed_error(case):
    model = LISTED[case]()
    if isinstance(model, onnx.ModelProto):
        model = model.SerializeToString()
    assert outcome(model) == "refused"
