"""What a cpu run keeps from one run to the next (backends/cpu/setup.py, workloads/inputs.py InputCheck):
a later run is checked, placed and answered exactly as a first run would be."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.backends.buffers import Recycler, aligned_copy
from ptowsp.backends.cpu import executable
from ptowsp.workloads import random_inputs
from tests.tolerance import assert_sums_close

pytestmark = pytest.mark.skipif("cpu" not in pw.targets(), reason="the cpu target is unavailable here")


def _matmul() -> pw.Workload:
    wl = pw.Workload("mm_setup")
    a, b = wl.input("A", (8, 32)), wl.input("B", (32, 16))
    k = pw.reduce_axis(32, "k")
    c = wl.compute("C", (8, 16), lambda i, j: pw.sum(a[i, k] * b[k, j], axis=k))
    wl.output(wl.compute("D", (8, 16), lambda i, j: c[i, j] + 1.0))
    return wl


@pytest.mark.parametrize("bad, message", [
    (lambda ins: {**ins, "A": ins["A"].astype(np.float64)}, "dtype float64"),
    (lambda ins: {**ins, "A": ins["A"][:4]}, r"shape \(4, 32\)"),
    (lambda ins: {**ins, "A": ins["A"].tolist()}, "got list"),
    (lambda ins: {"A": ins["A"]}, "missing input 'B'"),
    (lambda ins: {**ins, "E": ins["A"]}, "unexpected input 'E'"),
    (lambda ins: {"A": ins["A"], "E": ins["B"]}, "unexpected input 'E'"),
])
def test_inputs_accepted_before_do_not_let_a_bad_run_through(bad, message):
    wl = _matmul()
    prog = pw.build(wl, "cpu", workers=2)
    inputs = random_inputs(wl)
    prog.run(**inputs)
    prog.run(**inputs)  # the signature is remembered now
    with pytest.raises(pw.InputError, match=message):
        prog.run(**bad(inputs))
    assert_sums_close(prog.run(**inputs)["D"], pw.reference(wl, **inputs)["D"], terms=32)


def test_a_strided_input_after_a_contiguous_one_is_read_as_its_values():
    wl = _matmul()
    prog = pw.build(wl, "cpu", workers=2)
    inputs = random_inputs(wl)
    prog.run(**inputs)
    wide = np.zeros((8, 64), np.float32)
    wide[:, ::2] = inputs["A"]
    strided = {**inputs, "A": wide[:, ::2]}  # same shape and dtype, not contiguous
    assert_sums_close(prog.run(**strided)["D"], pw.reference(wl, **inputs)["D"], terms=32)
    assert not np.shares_memory(prog.run(**inputs)["D"], prog.run(**inputs)["D"])  # each run its own output


def test_new_buffers_after_the_caller_kept_the_last_ones_get_their_own_addresses():
    wl = _matmul()
    prog = pw.build(wl, "cpu", workers=2)
    inputs = random_inputs(wl)
    kept = [prog.run(**inputs)["D"] for _ in range(3)]  # the caller holds each output: none is reused
    assert len({a.ctypes.data for a in kept}) == 3
    for out in kept:
        assert_sums_close(out, pw.reference(wl, **inputs)["D"], terms=32)


def test_the_recycler_knows_the_address_of_what_it_handed_out():
    buffers = Recycler()
    first = buffers.empty("x", (100,), np.float32)
    assert buffers.address("x") == first.ctypes.data and first.ctypes.data % 64 == 0
    del first
    again = buffers.empty("x", (100,), np.float32)  # reused: the same memory
    assert buffers.address("x") == again.ctypes.data


def test_constants_kernels_read_start_on_a_cache_line():
    raw = np.zeros(32 * 16 + 16, np.float32)
    skip = (16 - raw.ctypes.data % 64) % 64 // 4  # floats to a start 16 bytes past a cache line
    weights = raw[skip:skip + 32 * 16].reshape(32, 16)
    weights[...] = np.random.default_rng(0).standard_normal((32, 16))
    assert weights.ctypes.data % 64 != 0
    wl = pw.Workload("mm_const")
    a, b = wl.input("A", (8, 32)), wl.constant("W", weights)
    k = pw.reduce_axis(32, "k")
    wl.output(wl.compute("C", (8, 16), lambda i, j: pw.sum(a[i, k] * b[k, j], axis=k)))
    prog = pw.build(wl, "cpu", workers=2)
    exe = prog._executable
    assert all(exe.constant_addresses[name] % 64 == 0 for name in exe.arguments if name in exe.constants)
    inputs = random_inputs(wl)
    np.testing.assert_allclose(prog.run(**inputs)["C"], inputs["A"] @ weights, rtol=1e-5, atol=1e-5)


def test_an_aligned_copy_is_made_only_when_needed():
    aligned = aligned_copy(np.arange(64, dtype=np.float32))
    assert aligned.ctypes.data % 64 == 0 and aligned_copy(aligned) is aligned
    raw = np.arange(80, dtype=np.float32)
    skip = (16 - raw.ctypes.data % 64) % 64 // 4
    shifted = raw[skip:skip + 64]  # 16 bytes past a cache line
    moved = aligned_copy(shifted)
    assert shifted.ctypes.data % 64 == 16 and moved is not shifted
    assert moved.ctypes.data % 64 == 0 and np.array_equal(moved, shifted)
    strided = aligned_copy(np.arange(128, dtype=np.float32)[::2])
    assert strided.flags.c_contiguous and np.array_equal(strided, np.arange(0, 128, 2))


def test_a_dynamic_workload_keeps_the_set_up_of_its_latest_bindings_only(monkeypatch):
    monkeypatch.setattr(executable, "KEPT_SETUPS", 3)
    wl = pw.Workload("rows_setup")
    x = wl.input("x", ("n", 16))
    wl.output(wl.compute("y", ("n", 16), lambda i, j: x[i, j] * 2.0 + 1.0))
    prog = pw.build(wl, "cpu", workers=2)
    for n in (5, 9, 12, 30, 7, 5):
        inputs = random_inputs(wl, sizes={"n": n})
        np.testing.assert_allclose(prog.run(**inputs)["y"], inputs["x"] * 2.0 + 1.0, rtol=1e-6)
        assert len(prog._executable._setups) <= 3
