"""Run buffers are reused only once the caller has let go of them (ptowsp/backends/buffers.py)."""

import numpy as np

import ptowsp as pw
from ptowsp.backends.buffers import Recycler
from ptowsp.workloads import random_inputs, zoo
from tests.tolerance import assert_sums_close


def test_an_unreferenced_array_is_reused_and_a_held_one_never_is():
    r = Recycler()
    first = r.empty("Y", (4, 8), np.float32)
    second = r.empty("Y", (4, 8), np.float32)
    assert second is not first  # still held here: a fresh one
    address = second.ctypes.data
    del first, second
    third = r.empty("Y", (4, 8), np.float32)
    assert third.ctypes.data == address  # dropped: taken back
    view = third[1:]
    del third
    assert r.empty("Y", (4, 8), np.float32).ctypes.data != address  # a view keeps its base from reuse
    assert view.ctypes.data == address + 8 * 4  # still the held memory, one row in
    assert address % 64 == 0  # every array starts on a cache line (aligned_empty)
    assert r.empty("Y", (4, 4), np.float32).shape == (4, 4)  # another shape or dtype: never a reuse
    assert r.empty("Y", (4, 4), np.float64).dtype == np.float64


def test_runs_reuse_dropped_outputs_and_never_touch_held_ones():
    wl = zoo.softmax(64, 32)
    prog = pw.build(wl, "cpu", workers=2)
    inputs = random_inputs(wl)
    addresses = {prog.run(**inputs)["Y"].ctypes.data for _ in range(5)}
    assert len(addresses) == 1, "a dropped output is taken back by the next run"

    held = prog.run(**inputs)["Y"]
    kept = held.copy()
    part = prog.run(**inputs)["Y"][:8]  # only a view survives: its base must not be reused
    other = {k: -v for k, v in inputs.items()}
    fresh = prog.run(**other)["Y"]
    assert held.ctypes.data != fresh.ctypes.data and part.base.ctypes.data != fresh.ctypes.data
    np.testing.assert_array_equal(held, kept)
    np.testing.assert_array_equal(part, kept[:8])
    assert_sums_close(fresh, pw.reference(wl, **other)["Y"], terms=64)


def test_intermediates_arena_is_reused_between_runs():
    wl = zoo.mlp(batch=16, d_in=32, d_hidden=64, d_out=32)
    prog = pw.build(wl.schedule(), "cpu", workers=2)  # unfused: intermediates live in the arena
    assert prog.memory_plan.arena_bytes > 0
    inputs = random_inputs(wl)
    want = pw.reference(wl, **inputs)
    for _ in range(3):
        out = prog.run(**inputs)
        for name, value in want.items():
            np.testing.assert_allclose(out[name], value, rtol=1e-4, atol=1e-5)
    arenas = set()
    for _ in range(3):
        prog.run(**inputs)
        arenas.add(prog._executable.buffers._kept[" arena"].ctypes.data)
    assert len(arenas) == 1
