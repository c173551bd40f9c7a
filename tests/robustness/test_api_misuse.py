"""Bad input across the public API: each case must raise a typed ptowsp error whose message names
the fault (the task, step, tensor, value or file), never a raw exception from deep inside.

A case is (what the user did, the error class, a regular expression the message must match).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ptowsp as pw


def matmul() -> pw.Workload:
    wl = pw.Workload("mm")
    A, B = wl.input("A", (16, 16)), wl.input("B", (16, 16))
    k = pw.reduce_axis(16, "k")
    C = wl.compute("C", (16, 16), lambda i, j: pw.sum(A[i, k] * B[k, j], axis=k))
    wl.output(wl.compute("D", (16, 16), lambda i, j: pw.maximum(C[i, j], 0.0)))
    return wl


def rows() -> pw.Workload:
    """Variable-length rows: a symbolic size and an integer input for conditions."""
    wl = pw.Workload("rows")
    x = wl.input("x", ("batch", 16))
    wl.input("lens", ("batch",), "int32")
    wl.output(wl.compute("y", ("batch", 16), lambda b, s: x[b, s] * 2.0))
    return wl


def _inputs(**shapes) -> dict[str, np.ndarray]:
    return {name: np.ones(shape, np.float32) for name, shape in shapes.items()}


MM = _inputs(A=(16, 16), B=(16, 16))

# -- workload definition ---------------------------------------------------------------------------
DEFINITION = [
    ("newline in workload name", lambda: pw.Workload("a\nb"), pw.WorkloadError, r"'a\\nb' is not an identifier"),
    ("non-ASCII workload name", lambda: pw.Workload("résumé"), pw.WorkloadError, "'résumé' is not an identifier"),
    ("keyword workload name", lambda: pw.Workload("if"), pw.WorkloadError, "'if' is a Python keyword"),
    ("empty workload name", lambda: pw.Workload(""), pw.WorkloadError, "'' is not an identifier"),
    ("numeric workload name", lambda: pw.Workload(7), pw.WorkloadError, "must be a string, got int 7"),
    ("very long name", lambda: pw.Workload("x" * 200), pw.WorkloadError, "200 characters; at most 64"),
    ("space in input name", lambda: pw.Workload("w").input("a b", (2,)), pw.WorkloadError, "input name 'a b'"),
    ("dash in input name", lambda: pw.Workload("w").input("a-b", (2,)), pw.WorkloadError, "input name 'a-b'"),
    ("non-ASCII input name", lambda: pw.Workload("w").input("ä", (2,)), pw.WorkloadError, "input name 'ä'"),
    ("keyword input name", lambda: pw.Workload("w").input("lambda", (2,)), pw.WorkloadError, "'lambda' is a Python"),
    ("keyword size name", lambda: pw.Workload("w").input("x", ("if", 2)), pw.ShapeError, "size name 'if'"),
    ("non-ASCII size name", lambda: pw.Workload("w").input("x", ("ñ",)), pw.ShapeError, "size name 'ñ'"),
    ("digit-first size name", lambda: pw.Workload("w").input("x", ("2n",)), pw.ShapeError, "size name '2n'"),
    ("negative dimension", lambda: pw.Workload("w").input("x", (-3,)), pw.ShapeError, "got -3"),
    ("float dimension", lambda: pw.Workload("w").input("x", (2.5,)), pw.ShapeError, "got 2.5"),
    ("bool dimension", lambda: pw.Workload("w").input("x", (True,)), pw.ShapeError, "got True"),
    ("unknown dtype", lambda: pw.Workload("w").input("x", (2,), "complex64"), pw.DTypeError, "complex64"),
    ("dtype not a string", lambda: pw.Workload("w").input("x", (2,), 3), pw.DTypeError, "3"),
    ("duplicate input", lambda: _twice(), pw.WorkloadError, "already has a tensor or task named 'x'"),
    ("non-ASCII loop variable", lambda: _compute("w", lambda é: 1.0), pw.WorkloadError, "loop variable name 'é'"),
    ("loop count mismatch", lambda: _compute("w", lambda i, j: 1.0), pw.ShapeError, "1 dimension.*2 loop"),
    ("compute of a non-function", lambda: _compute("w", 3), pw.WorkloadError, "function of its loop"),
    ("compute with *args", lambda: _compute("w", lambda *i: 1.0), pw.WorkloadError, "one named parameter"),
    ("reduce axis bad name", lambda: pw.reduce_axis(4, "k k"), pw.WorkloadError, "reduce axis name 'k k'"),
    ("reduce axis keyword", lambda: pw.reduce_axis(4, "for"), pw.WorkloadError, "'for' is a Python keyword"),
    ("reduce axis negative", lambda: pw.reduce_axis(-1, "k"), pw.ShapeError, "reduce axis k.*got -1"),
    ("reduce axis float", lambda: pw.reduce_axis(2.0, "k"), pw.ShapeError, "reduce axis k.*got 2.0"),
    ("output of another workload", lambda: pw.Workload("w").output(matmul().tensor("C")), pw.WorkloadError,
     "tensor C used as an output belongs to another workload"),
    ("output not a tensor", lambda: pw.Workload("w").output("C"), pw.WorkloadError, "wl.output takes tensors.*got 'C'"),
    ("unknown size", lambda: pw.Workload("w").size("n"), pw.WorkloadError, "no size 'n'"),
    ("read out of bounds", lambda: _read(lambda x: lambda i: x[i + 1]), pw.BoundsError, "x"),
    ("too many indices", lambda: _read(lambda x: lambda i: x[i, 0]), pw.ShapeError, "x"),
    ("tensor without index", lambda: _read(lambda x: lambda i: x + 1.0), pw.ShapeError, r"x was used without"),
    ("opaque output bad dtype", lambda: _opaque_declared([("o", (4,), "complex128")]), pw.DTypeError, "complex128"),
    ("opaque output bad shape", lambda: _opaque_declared([("o", (-1,), "float32")]), pw.ShapeError, "got -1"),
    ("opaque output bad name", lambda: _opaque_declared([("o o", (4,), "float32")]), pw.WorkloadError, "'o o'"),
]


def _twice() -> None:
    wl = pw.Workload("w")
    wl.input("x", (2,))
    wl.input("x", (2,))


def _compute(name: str, fn) -> None:
    wl = pw.Workload(name)
    wl.compute("c", (4,), fn)


def _read(body) -> None:
    wl = pw.Workload("w")
    x = wl.input("x", (4,))
    wl.compute("y", (4,), body(x))


def _opaque_declared(outputs) -> None:
    wl = pw.Workload("w")
    x = wl.input("x", (4,))
    wl.opaque("op", lambda a: a, inputs=[x], outputs=outputs)


# -- schedule steps ----------------------------------------------------------------------------------
def _s() -> pw.Schedule:
    return matmul().schedule()


STEPS = [
    ("unknown task", lambda: _s().split("E", "i", 4), pw.ScheduleError, "split.*no task 'E'"),
    ("unknown loop", lambda: _s().split("C", "z", 4), pw.ScheduleError, "split.*'z'"),
    ("factor zero", lambda: _s().split("C", "i", 0), pw.ScheduleError, "split.*factor.*0"),
    ("factor negative", lambda: _s().split("C", "i", -2), pw.ScheduleError, "split.*-2"),
    ("factor float", lambda: _s().split("C", "i", 4.0), pw.ScheduleError, "factor.*integer"),
    ("factor string", lambda: _s().split("C", "i", "4"), pw.ScheduleError, "factor.*integer"),
    ("factor bool", lambda: _s().split("C", "i", True), pw.ScheduleError, "factor.*integer"),
    ("factor None", lambda: _s().split("C", "i", None), pw.ScheduleError, "factor"),
    ("tile unknown loop", lambda: _s().tile("C", q=4), pw.ScheduleError, "tile.*'q'"),
    ("tile factor float", lambda: _s().tile("C", i=2.5), pw.ScheduleError, "factors.i.*integer"),
    ("reorder drops a loop", lambda: _s().reorder("C", "j", "i"), pw.ScheduleError, "reorder.*k"),
    ("reorder repeats a loop", lambda: _s().reorder("C", "i", "i", "j", "k"), pw.ScheduleError, "reorder.*'i'"),
    ("reorder unknown loop", lambda: _s().reorder("C", "i", "j", "x"), pw.ScheduleError, "reorder.*'x'"),
    ("fuse non-adjacent", lambda: _s().fuse("C", "i", "k"), pw.ScheduleError, "fuse.*'i'.*'k'|fuse.*adjacent"),
    ("vectorize unknown loop", lambda: _s().vectorize("C", "w"), pw.ScheduleError, "vectorize.*'w'"),
    ("unroll unknown loop", lambda: _s().unroll("D", "k"), pw.ScheduleError, "unroll.*'k'"),
    ("parallel over a reduction", lambda: _s().parallel("C", "k"), pw.ScheduleError, "parallel.*reduc"),
    ("parallel of an inner loop", lambda: _s().parallel("C", "j"), pw.ScheduleError, "parallel.*'j'"),
    ("compute_at cycle", lambda: _s().compute_at("D", "C", "i"), pw.ScheduleError, "compute_at.*'D'"),
    ("compute_at unknown loop", lambda: _s().compute_at("C", "D", "q"), pw.ScheduleError, "compute_at.*'q'"),
    ("compute_at itself", lambda: _s().compute_at("C", "C", "i"), pw.ScheduleError, "compute_at.*'C'"),
    ("compute_inline of an output", lambda: _s().compute_inline("D"), pw.ScheduleError, "compute_inline.*'D'"),
    ("cache_read bad scope", lambda: _s().cache_read("C", "A", "l2"), pw.ScheduleError, "cache_read.*'l2'"),
    ("cache_read unread tensor", lambda: _s().cache_read("D", "A", "local"), pw.ScheduleError, "cache_read.*'A'"),
    ("cache_write bad scope", lambda: _s().cache_write("C", "dram"), pw.ScheduleError, "cache_write.*'dram'"),
    ("unknown dispatch", lambda: _s().dispatch("fastest"), pw.ScheduleError, "dispatch.*'fastest'"),
    ("prefetch negative", lambda: _s().prefetch(-1), pw.ScheduleError, "prefetch.*-1"),
    ("prefetch float", lambda: _s().prefetch(1.5), pw.ScheduleError, "prefetch.*1.5"),
    ("bind unknown core", lambda: _s().bind("C", core="tensor"), pw.ScheduleError, "bind.*'tensor'"),
    ("bind unknown thread axis", lambda: _s().bind("C", "i", "warp.x"), pw.ScheduleError, "bind.*warp.x"),
    ("fuse_tasks unknown", lambda: _s().fuse_tasks("C", "Z"), pw.ScheduleError, "fuse_tasks.*'Z'"),
    ("parallelize zero", lambda: _s().parallelize(0), pw.ScheduleError, "parallelize.*0"),
    ("parallelize string", lambda: _s().parallelize("8"), pw.ScheduleError, "parallelize.*'8'"),
    ("step on a late task", lambda: _late_task(), pw.ScheduleError,
     "'E' was added to workload 'mm' after this schedule was made"),
    ("specialize unknown task", lambda: _s().specialize("Q", "i < 3", lambda v: v), pw.ScheduleError, "'Q'"),
    ("specialize non-function variant", lambda: _s().specialize("C", "i < 3", 3), pw.ScheduleError,
     "variant must be a function"),
]


def _late_task() -> None:
    wl = matmul()
    s = wl.schedule()
    wl.output(wl.compute("E", (16, 16), lambda i, j: wl.tensor("D")[i, j] + 1.0))
    s.split("E", "i", 4)


# -- specialize conditions: data, never code -----------------------------------------------------------
CONDITIONS = [
    ("power", "9**9**9 > 0", r"'\*'"),
    ("call", "len(lens) > 0", r"'\(' where|unexpected '\('|'len'"),
    ("attribute escape", "().__class__.__base__", r"'\.'"),
    ("subclasses escape", "[c for c in ().__class__.__base__.__subclasses__()][0]", r"'\['|'\.'|'c'"),
    ("import escape", "__import__('os').system('true') == 0", r"'__import__'|\"'\""),
    ("string literal", "'a' < 'b'", "unexpected character \"'\""),
    ("float literal", "lens[b] < 2.5", r"unexpected character '\.'|'\.'"),
    ("lambda", "(lambda: 1)() == 1", "unexpected character ':'"),
    ("walrus", "(x := 1) == 1", "':'|unexpected character ':'"),
    ("semicolon", "b < 1; b", "';'"),
    ("unknown name", "q < 3", "unknown name 'q'"),
    ("unindexed tensor", "lens < 3", "input 'lens' is a tensor"),
    ("indexed size", "batch[0] < 3", "'batch' is not a tensor"),
    ("float tensor", "x[b, 0] < 3", "reads x, a float32 input"),
    ("not a comparison", "b + 1", "is int64, not a condition"),
    ("bare integer", "3", "the integer 3, not a comparison"),
    ("empty", "", "an empty condition"),
    ("blank", "   ", "an empty condition"),
    ("unbalanced", "(b < 3", "expected '\\)'"),
    ("dangling operator", "b < ", "ends where a value was expected"),
    ("trailing token", "b < 3 4", "unexpected '4' after a complete condition"),
    ("deep nesting", "(" * 500 + "b" + ")" * 500 + " < 3", "nested more than 64 levels"),
    ("too long", "b < 3 and " * 300 + "b < 3", "at most 2000 characters"),
    ("huge integer", "b < " + "9" * 40, "does not fit in int64"),
    ("division by zero", "b // 0 < 1", "'//' by zero|by zero"),
    ("and of integers", "b and 1", "'and' joins comparisons"),
    ("not of an integer", "not b", "'not' needs a comparison"),
    ("arithmetic on a comparison", "(b < 1) + 1 < 3", "on a comparison"),
    ("not a string", 42, "when: Input should be a valid string"),
]


# -- saved schedules ----------------------------------------------------------------------------------
def _saved(**changes) -> str:
    import json

    record = json.loads(matmul().schedule().split("C", "i", 4).to_json())
    record.update(changes)
    return json.dumps(record)


def _with_step(step: dict) -> str:
    import json

    record = json.loads(_saved())
    record["steps"].append(step)
    return json.dumps(record)


SAVED = [
    ("not JSON", "{not json", "not a saved ptowsp schedule"),
    ("empty text", "", "not a saved ptowsp schedule"),
    ("JSON list", "[]", "not a saved ptowsp schedule"),
    ("JSON number", "1e999", "not a saved ptowsp schedule"),
    ("bytes garbage", b"\xff\xfe\x00", "not a saved ptowsp schedule"),
    ("a dict instead of text", {"steps": []}, "JSON text of a saved schedule, got dict"),
    ("None", None, "JSON text of a saved schedule, got NoneType"),
    ("deeply nested JSON", "[" * 100000 + "]" * 100000, "not a saved ptowsp schedule"),
    ("other fingerprint", _saved(fingerprint="0" * 64), "different definition"),
    ("unknown step kind", _with_step({"kind": "explode", "task": "C"}), "not a saved ptowsp schedule"),
    ("extra field", _with_step({"kind": "split", "task": "C", "loop": "j", "factor": 4, "shell": "rm"}),
     "not a saved ptowsp schedule"),
    ("factor as string", _with_step({"kind": "split", "task": "C", "loop": "j", "factor": "4"}),
     "not a saved ptowsp schedule"),
    ("huge factor", _with_step({"kind": "split", "task": "C", "loop": "j", "factor": 10**30}),
     "split factor must be an integer in 1..2147483647"),
    ("unknown task in a step", _with_step({"kind": "split", "task": "Z", "loop": "j", "factor": 4}), "'Z'"),
    ("escape in a condition", _with_step({"kind": "specialize", "task": "C", "steps": [],
                                          "when": "().__class__.__base__.__subclasses__()"}), r"'\.'"),
    ("power bomb in a condition", _with_step({"kind": "specialize", "task": "C", "steps": [],
                                              "when": "9**9**9**9 > 1"}), r"'\*'"),
    ("condition not a string", _with_step({"kind": "specialize", "task": "C", "steps": [], "when": 3}),
     "not a saved ptowsp schedule"),
    ("missing steps", '{"workload": "mm", "fingerprint": "x"}', "not a saved ptowsp schedule"),
]


# -- building and running -----------------------------------------------------------------------------
def _built(target: str = "cpu", **options):
    return pw.build(matmul(), target=target, **options)


RUNS = [
    ("unknown target", lambda: pw.build(matmul(), target="tpu"), pw.BuildError, "'tpu'"),
    ("build of a string", lambda: pw.build("mm"), pw.BuildError, "Workload or a Schedule, got str"),
    ("workers as a string", lambda: _built(workers="16"), pw.BuildError, "workers.*'16'"),
    ("workers float", lambda: _built(workers=1.5), pw.BuildError, "workers.*1.5"),
    ("workers zero", lambda: _built(workers=0), pw.BuildError, "workers must be >= 1, got 0"),
    ("workers empty list", lambda: _built(workers=[]), pw.BuildError, "at least one core class"),
    ("workers unknown class", lambda: _built(workers=["gpu"]), pw.BuildError, "'gpu'"),
    ("window zero", lambda: _built(window=0), pw.BuildError, "window.*0"),
    ("window string", lambda: _built(window="4"), pw.BuildError, "window.*'4'"),
    ("missing input", lambda: _built().run(A=MM["A"]), pw.InputError, "B"),
    ("unexpected input", lambda: _built().run(**MM, Z=MM["A"]), pw.InputError, "Z"),
    ("wrong shape", lambda: _built().run(A=MM["A"], B=np.ones((16, 8), np.float32)), pw.InputError, "B.*16, 8"),
    ("wrong rank", lambda: _built().run(A=MM["A"], B=np.ones(16, np.float32)), pw.InputError, "B"),
    ("wrong dtype", lambda: _built().run(A=MM["A"], B=np.ones((16, 16), np.complex64)), pw.InputError, "B.*complex"),
    ("not an array", lambda: _built().run(A=MM["A"], B="ones"), pw.InputError, "B"),
    ("object array", lambda: _built().run(A=MM["A"], B=np.full((16, 16), None)), pw.InputError, "B.*object"),
    ("ragged list", lambda: _built().run(A=MM["A"], B=[[1.0], [1.0, 2.0]]), pw.InputError, "B"),
    ("source of an unknown task", lambda: _built().source("nope"), pw.BuildError, "no task 'nope'"),
    ("source of an input", lambda: _built().source("A"), pw.BuildError, "'A'"),
    ("dispatch affinity key not a grid loop", lambda: pw.build(matmul().schedule().dispatch(
        pw.dispatch.affinity("zz")), "cpu"), pw.PtowspError, "'zz'"),
    ("schedule of another workload", lambda: pw.build(matmul().schedule(), "cpu").run(
        x=np.ones((2, 16), np.float32)), pw.InputError, "x"),
    ("reference missing input", lambda: pw.reference(matmul(), A=MM["A"]), pw.InputError, "B"),
    ("symbolic size mismatch", lambda: pw.build(rows(), "cpu").run(
        x=np.ones((3, 16), np.float32), lens=np.ones(4, np.int32)), pw.InputError, "batch"),
    ("negative device clock", lambda: pw.DeviceModel(dispatch_latency=-1.0), pw.PtowspError, "dispatch_latency"),
]


def _cases(table, *, where: str):
    return [pytest.param(*case[1:], id=f"{where}: {case[0]}") for case in table]


@pytest.mark.parametrize("do, error, message", _cases(DEFINITION, where="definition") + _cases(STEPS, where="step")
                         + _cases(RUNS, where="run"))
def test_bad_input_gets_a_typed_error_naming_the_fault(do, error, message):
    with pytest.raises(error, match=message):
        do()


@pytest.mark.parametrize("when, message", [pytest.param(c[1], c[2], id=c[0]) for c in CONDITIONS])
def test_a_specialize_condition_is_parsed_never_run(when, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an escape that ran would leave a file here
    with pytest.raises(pw.ScheduleError, match=message):
        rows().schedule().specialize("y", when, lambda v: v.split("y", "s", 4))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text, message", [pytest.param(c[1], c[2], id=c[0]) for c in SAVED])
def test_a_hostile_saved_schedule_is_refused(text, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(pw.ScheduleError, match=message):
        pw.Schedule.from_json(matmul(), text)
    assert list(tmp_path.iterdir()) == []


def test_the_catalogue_is_large():
    assert len(DEFINITION) + len(STEPS) + len(RUNS) + len(CONDITIONS) + len(SAVED) >= 140


ESCAPES = ["__import__('os').system('touch {m}')", "open('{m}', 'w')",
           "().__class__.__base__.__subclasses__()[0]('{m}')", "exec(\"open('{m}','w')\")", "9**9**9**9"]


@settings(max_examples=150)
@given(data=st.data())
def test_a_mutated_saved_schedule_is_refused_or_replayed_never_run(data):
    import json
    import os
    import tempfile
    from pathlib import Path

    marker = Path(tempfile.gettempdir()) / f"ptowsp-hostile-schedule-{os.getpid()}"  # one path: same-length texts
    wl = rows()
    saved = json.loads(wl.schedule().split("y", "s", 4).parallel("y", "b", "s.outer")
                       .specialize("y", "lens[b] <= 4", lambda v: v.split("y", "s.inner", 2)).to_json())
    when = data.draw(st.one_of(st.sampled_from(ESCAPES).map(lambda e: e.format(m=marker)),
                               st.text(max_size=60), st.sampled_from(["lens[b] <= 4", "b < 1 or not b > 2"])))
    saved["steps"][-1]["when"] = when
    text = json.dumps(saved)
    cut = data.draw(st.integers(0, len(text)))
    text = data.draw(st.sampled_from([text, text[:cut], text[:cut] + data.draw(st.text(max_size=8)) + text[cut:]]))
    try:
        pw.Schedule.from_json(wl, text)
    except pw.PtowspError:
        pass
    assert not marker.exists()
