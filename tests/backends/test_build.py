"""pw.build and pw.targets: the registry, the numpy target, errors."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.backends import base


def test_targets_lists_usable_backends():
    assert "numpy" in pw.targets()
    for target in pw.targets():
        assert base.backend(target).name == target


def test_build_a_workload_or_a_schedule():
    wl = pw.zoo.mlp(8, 6, 10, 4)
    rng = np.random.default_rng(0)
    inputs = {n: rng.standard_normal(wl.tensor(n).shape).astype(np.float32) for n in wl.inputs}
    before = {k: v.copy() for k, v in inputs.items()}
    expected = pw.reference(wl, **inputs)["Y"]
    for prog in (pw.build(wl, target="numpy"), pw.build(wl.schedule().split("H", "i", 3), target="numpy")):
        np.testing.assert_array_equal(prog.run(**inputs)["Y"], expected)
        np.testing.assert_array_equal(prog(**inputs)["Y"], expected)
        assert prog.target == "numpy" and prog.workload is wl
    for k, v in inputs.items():
        np.testing.assert_array_equal(v, before[k])


def test_build_errors():
    wl = pw.zoo.matmul(4, 4, 4)
    with pytest.raises(pw.BuildError, match="unknown target 'tpu'; targets on this machine: numpy"):
        pw.build(wl, target="tpu")
    with pytest.raises(pw.BuildError, match="takes a Workload or a Schedule"):
        pw.build("matmul")
    with pytest.raises(pw.InputError, match="missing input 'B'"):
        pw.build(wl)(A=np.zeros((4, 4), np.float32))


def test_unavailable_targets_say_why(monkeypatch):
    class Absent:
        name = "absent"

        def unavailable_reason(self):
            return "no such device on this machine"

        def compile(self, schedule):
            raise AssertionError("never compiled")

    monkeypatch.setitem(base._REGISTRY, "absent", Absent())
    assert "absent" not in pw.targets()
    with pytest.raises(pw.BuildError, match="target 'absent' is unavailable here: no such device"):
        pw.build(pw.zoo.matmul(4, 4, 4), target="absent")


def test_source_shows_the_lowered_nest():
    wl = pw.zoo.matmul(16, 8, 4)
    text = pw.build(wl.schedule().split("C", "i", 4).parallel("C", "i.outer")).source("C")
    assert text.splitlines()[0] == "parallel for i.outer in 0..4:  # task grid"
    assert "C[i.outer * 4 + i.inner, j] = C[i.outer * 4 + i.inner, j] + A[i.outer * 4 + i.inner, k] * B[k, j]" in text


@pytest.mark.skipif("cpu" not in pw.targets(), reason="needs the cpu target")
def test_an_unrolled_int8_gather_is_compiled_right():
    """LLVM's SLP vectorizer (off since) read the wrong row here: found by `make fuzz` (int8_gather,
    seed 42), the rows of a gather through int8 indices unrolled by 8 (backends/cpu/jit.py)."""
    wl = pw.Workload("int8_gather")
    table, idx = wl.input("T", (13, 6), "int8"), wl.input("idx", (9,), "int8")
    wl.output(wl.compute("Y", (9, 6), lambda i, j: table[idx[i] % 13, j] + table[(idx[i] + 1) % 13, 5 - j]))
    s = wl.schedule().cache_read("Y", "T", "local", "i").cache_write("Y", "local").unroll("Y", "i")
    rng = np.random.default_rng(0)
    inputs = {"T": rng.integers(-128, 128, (13, 6), dtype=np.int8),
              "idx": np.array([-52, -73, -128, -57, -51, 71, 91, 80, 48], dtype=np.int8)}
    np.testing.assert_array_equal(pw.build(s, target="cpu").run(**inputs)["Y"], pw.reference(wl, **inputs)["Y"])


def test_a_build_spares_existing_objects_from_the_collector_and_leaves_it_as_it_was(monkeypatch):
    import gc
    frozen_during = []
    original = base.backend("numpy").compile

    def compile_and_look(*args, **kwargs):
        frozen_during.append(gc.get_freeze_count())
        return original(*args, **kwargs)

    monkeypatch.setattr(base.backend("numpy"), "compile", compile_and_look)
    wl = pw.zoo.mlp(8, 6, 10, 4)
    assert gc.get_freeze_count() == 0
    pw.build(wl.schedule(), target="numpy")
    assert frozen_during[-1] > 0 and gc.get_freeze_count() == 0  # frozen while it ran, not after
    gc.freeze()  # the process's own freeze (a server before it forks) is not undone
    try:
        held = gc.get_freeze_count()
        pw.build(wl.schedule(), target="numpy")
        assert gc.get_freeze_count() >= held
    finally:
        gc.unfreeze()
