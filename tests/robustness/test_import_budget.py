"""A small file asking for a huge constant is refused before anything is allocated (frontend/onnx_budget.py).

Each case runs in a fresh process whose address space is capped at 3 GiB: a case that allocated its
constant would fail there with a MemoryError, not the InputError naming the node and the size."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

import ptowsp as pw
from ptowsp.schedules.passes.fold import foldable

CAP = 3 << 30


def _model(nodes, initializers, output="y"):
    graph = oh.make_graph(nodes, "hostile", [oh.make_tensor_value_info("x", TP.FLOAT, [1])],
                          [oh.make_tensor_value_info(output, TP.FLOAT, None)], initializers)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def _i64(name, values):
    return nh.from_array(np.array(values, np.int64), name)


def _huge_initializer():
    t = TP(name="w", data_type=TP.FLOAT, dims=[1 << 20, 1 << 20])  # claims 4 TiB, holds nothing
    return _model([oh.make_node("Add", ["x", "w"], ["y"], name="add")], [t])


CASES = {
    "ConstantOfShape": (lambda: _model([oh.make_node("ConstantOfShape", ["s"], ["c"], name="zeros"),
                                        oh.make_node("Add", ["x", "c"], ["y"])], [_i64("s", [1 << 16, 1 << 15])]),
                        r"ONNX node 'zeros' \(op ConstantOfShape\): output 'c': shape \[65536, 32768\] of float32 is "
                        r"8,589,934,592 bytes, above the import budget"),
    "Range": (lambda: _model([oh.make_node("Range", ["a", "b", "d"], ["r"], name="range"),
                              oh.make_node("Cast", ["r"], ["y"], to=TP.FLOAT)],
                             [_i64("a", 0), _i64("b", 1 << 40), _i64("d", 1)]),
              r"'range' \(op Range\): output 'r': shape \[1099511627776\] of int64"),
    "Expand": (lambda: _model([oh.make_node("Expand", ["one", "s"], ["e"], name="expand"),
                               oh.make_node("Add", ["x", "e"], ["y"])],
                              [nh.from_array(np.ones((1, 4), np.float32), "one"), _i64("s", [1 << 29, 4])]),
               r"'expand' \(op Expand\): output 'e': shape \[536870912, 4\]"),
    "Tile": (lambda: _model([oh.make_node("Tile", ["one", "r"], ["t"], name="tile"),
                             oh.make_node("Add", ["x", "t"], ["y"])],
                            [nh.from_array(np.ones((2, 4), np.float32), "one"), _i64("r", [1 << 28, 1])]),
             r"'tile' \(op Tile\): output 't': shape \[536870912, 4\]"),
    "initializer": (_huge_initializer, r"initializer 'w': shape \[1048576, 1048576\] of float32"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_huge_constant_is_refused_before_it_is_allocated(case, tmp_path):
    assert_refused_in_a_capped_process(*CASES[case], tmp_path, timeout=120)


def assert_refused_in_a_capped_process(make, message: str, tmp_path, timeout: float) -> None:
    """Import the model `make()` writes in a fresh process capped at CAP bytes: an InputError matching
    `message`, within `timeout` seconds."""
    path = tmp_path / "model.onnx"
    path.write_bytes(make().SerializeToString())
    code = f"""
import re, resource
resource.setrlimit(resource.RLIMIT_AS, ({CAP}, {CAP}))
import ptowsp as pw
try:
    pw.frontend.from_onnx({str(path)!r})
except pw.InputError as e:
    assert re.search({message!r}, str(e)), str(e)
    print("refused")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0 and done.stdout.strip() == "refused", done.stderr[-2000:]


def test_the_budget_is_the_callers():
    m = _model([oh.make_node("ConstantOfShape", ["s"], ["c"], name="zeros"), oh.make_node("Add", ["x", "c"], ["y"])],
               [_i64("s", [1024, 1024])])  # 4 MiB
    assert pw.frontend.from_onnx(m).tensor("y").shape == (1024, 1024)
    with pytest.raises(pw.InputError, match="4,194,304 bytes, above the import budget of 1,048,576 bytes"):
        pw.frontend.from_onnx(m, max_bytes=1 << 20)
    with pytest.raises(pw.InputError, match="max_bytes must be a positive number of bytes"):
        pw.frontend.from_onnx(m, max_bytes=0)


def _loop(trips: int | None) -> "onnx.ModelProto":
    """v = v + 1, `trips` times (None: no trip count, a condition that stays true)."""
    body = oh.make_graph([oh.make_node("Identity", ["c_in"], ["c_out"]), oh.make_node("Add", ["v_in", "one"], ["v_out"])],
                         "body", [oh.make_tensor_value_info("i", TP.INT64, []), oh.make_tensor_value_info("c_in", TP.BOOL, []),
                                  oh.make_tensor_value_info("v_in", TP.FLOAT, [1])],
                         [oh.make_tensor_value_info("c_out", TP.BOOL, []), oh.make_tensor_value_info("v_out", TP.FLOAT, [1])],
                         [nh.from_array(np.ones(1, np.float32), "one")])
    inits = [nh.from_array(np.array(True), "cond"), nh.from_array(np.zeros(1, np.float32), "v0")]
    if trips is not None:
        inits.append(_i64("trips", trips))
    loop = oh.make_node("Loop", ["trips" if trips is not None else "", "cond", "v0"], ["v"], name="loop", body=body)
    return _model([loop, oh.make_node("Add", ["x", "v"], ["y"])], inits)


def _matmul_of_constants(n: int):
    return _model([oh.make_node("ConstantOfShape", ["s"], ["a"], value=nh.from_array(np.ones(1, np.float32))),
                   oh.make_node("MatMul", ["a", "a"], ["m"], name="product"),
                   oh.make_node("ReduceSum", ["m"], ["y"], keepdims=0)], [_i64("s", [n, n])], output="y")


FOLDS = {
    "MatMul": (lambda: _matmul_of_constants(8192), r"'product' \(op MatMul\): folding it over its constant inputs "
               r"\(549,755,813,888 multiply-adds\) would take about 55 s, above the import's folding budget of 10 s"),
    "Loop": (lambda: _loop(1 << 40), r"'loop' \(op Loop\): the history of its 1,099,511,627,776 iterations: shape "
             r"\[1099511627777, 1, 1\] of float32 is 4,398,046,511,108 bytes, above the import budget"),
}


@pytest.mark.parametrize("case", FOLDS)
def test_a_fold_too_long_is_refused_before_it_runs(case, tmp_path):
    """Computed at import, these would take minutes, or never end: each is refused at once."""
    assert_refused_in_a_capped_process(*FOLDS[case], tmp_path, timeout=60)


def test_a_loop_too_long_to_fold_becomes_a_scan():
    """2^20 iterations: once 5.9 GiB and 55 s unrolled at import; now a ptowsp scan, imported at once,
    and compiled, not evaluated step by step at build (constant folding took 43 s over it)."""
    started = time.perf_counter()
    wl = pw.frontend.from_onnx(_loop(1 << 20))
    assert time.perf_counter() - started < 5
    scans = {t for t in wl.tasks if wl.task(t).scan is not None}
    assert scans and not scans & foldable(wl)
    assert pw.build(wl, "cpu").run(x=np.ones(1, np.float32))["y"].tolist() == [float((1 << 20) + 1)]


def test_a_loop_without_a_trip_count_is_refused():
    with pytest.raises(pw.WorkloadError, match="a Loop without a trip count M runs until its condition turns false"):
        pw.frontend.from_onnx(_loop(None))


def test_the_folding_budget_is_the_callers():
    m = _matmul_of_constants(256)  # 16.8 million multiply-adds: folded at once
    wl = pw.frontend.from_onnx(m)  # the output is a constant, copied out by a task of its name
    assert pw.reference(wl, x=np.zeros(1, np.float32))["y"].reshape(-1).tolist() == [256.0 ** 3]
    with pytest.raises(pw.InputError, match="above the import's folding budget of 0.0001 s"):
        pw.frontend.from_onnx(m, max_fold_seconds=1e-4)
    with pytest.raises(pw.InputError, match="max_fold_seconds must be a positive number of seconds"):
        pw.frontend.from_onnx(m, max_fold_seconds=-1)


def test_a_large_folded_constant_is_held_once():
    """A 512 MiB ConstantOfShape: the import's peak grows by the constant once (made by the evaluator and
    kept as it is), not three times (a private copy, and a copy of its bytes to hash them)."""
    code = """
import resource
import numpy as np
from onnx import TensorProto as TP, helper as oh, numpy_helper as nh
import ptowsp as pw
node = oh.make_node("ConstantOfShape", ["s"], ["c"], value=nh.from_array(np.ones(1, np.float32)))
graph = oh.make_graph([node, oh.make_node("Add", ["x", "c"], ["y"])], "g", [oh.make_tensor_value_info("x", TP.FLOAT, [1])],
                      [oh.make_tensor_value_info("y", TP.FLOAT, None)], [nh.from_array(np.array([1 << 13, 1 << 14]), "s")])
model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
wl = pw.frontend.from_onnx(model)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / (512 << 10))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout) <= 1.2, done.stdout
