"""The blocked layout carried through the tasks around convolutions (schedules/passes/propagation.py)."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.schedules.passes import tiles
from ptowsp.schedules.passes.blocking import block_convolutions
from ptowsp.schedules.passes.propagation import propagate_blocking
from ptowsp.workloads import random_inputs

LANES = 8


def conv(wl, name, source, channels, stride=1):
    """A padded 3x3 convolution of `source` (NCHW), with a per-channel bias: conv + bias as ONNX gives them."""
    n_in, size = source.shape[1], source.shape[2]
    out = (size - 1) // stride + 1
    w = wl.constant(f"{name}_w", np.random.default_rng(len(name)).standard_normal((channels, n_in, 3, 3))
                    .astype(np.float32))
    b = wl.constant(f"{name}_b", np.linspace(-1, 1, channels, dtype=np.float32))
    c, r, s = pw.reduce_axis(n_in, f"c_{name}"), pw.reduce_axis(3, f"r_{name}"), pw.reduce_axis(3, f"s_{name}")

    def body(n, o, y, x):
        iy, ix = y * stride + r - 1, x * stride + s - 1
        inside = (iy >= 0) & (iy < size) & (ix >= 0) & (ix < size)
        return pw.sum(pw.where(inside, source.boundary("repeat_edge")[n, c, iy, ix], 0.0) * w[o, c, r, s], axis=(c, r, s))

    raw = wl.compute(f"{name}_raw", (1, channels, out, out), body)
    return wl.compute(name, (1, channels, out, out), lambda n, o, y, x: raw[n, o, y, x] + b[o])


def block(channels=16, size=12):
    """conv -> relu -> maxpool 3x3/2 -> conv -> residual add with the pool -> relu -> a transpose (NHWC)."""
    wl = pw.Workload("block")
    x = wl.input("X", (1, 3, size, size))
    a = conv(wl, "C1", x, channels)
    relu = wl.compute("R1", a.shape, lambda n, c, y, xx: pw.maximum(a[n, c, y, xx], 0.0))
    r, s = pw.reduce_axis(3, "r"), pw.reduce_axis(3, "s")
    half = size // 2
    clamped = relu.boundary("repeat_edge")
    pool = wl.compute("P", (1, channels, half, half), lambda n, c, y, xx: pw.max(pw.where(
        (y * 2 + r - 1 >= 0) & (xx * 2 + s - 1 >= 0), clamped[n, c, y * 2 + r - 1, xx * 2 + s - 1], -np.inf),
        axis=(r, s)))
    b = conv(wl, "C2", pool, channels)
    add = wl.compute("A", b.shape, lambda n, c, y, xx: pw.maximum(b[n, c, y, xx] + pool[n, c, y, xx], 0.0))
    wl.output(wl.compute("T", (1, half, half, channels), lambda n, y, xx, c: add[n, c, y, xx]))
    return wl


def test_the_tasks_between_convolutions_are_computed_blocked_and_their_unpackings_dropped():
    wl = block_convolutions(block(), LANES)
    out = propagate_blocking(wl, LANES)
    tasks = set(out.tasks)
    assert {"C1_blocked", "R1_blocked", "P_blocked", "C2_raw_pad_blocked", "A_blocked"} <= tasks
    assert not {"R1", "P", "C2_raw_pad"} & tasks  # unpackings nothing reads any more
    assert "A" in tasks  # the transpose reads the channels in its last dimension: it keeps the unpacking
    # the second convolution sums over blocks and lanes of the blocked padding
    assert "C2_raw_pad_blocked[" in str(out.task("C2_raw_blocked").body)
    inputs = random_inputs(wl)
    np.testing.assert_allclose(pw.reference(out, **inputs)["T"], pw.reference(wl, **inputs)["T"], rtol=1e-4,
                               atol=1e-4)


def test_a_workload_without_blocked_convolutions_is_left_alone():
    wl = pw.zoo.softmax(16, 16)
    assert propagate_blocking(wl, LANES) is wl


@pytest.mark.parametrize("workers", [1, 2])
def test_the_cpu_build_runs_the_blocked_graph_to_the_reference(workers):
    wl = block(channels=32, size=16)
    prog = pw.build(wl, "cpu", workers=workers)
    assert "P_blocked" in prog.schedule.workload.tasks
    inputs = random_inputs(wl, seed=4)
    np.testing.assert_allclose(prog.run(**inputs)["T"], pw.reference(wl, **inputs)["T"], rtol=1e-4, atol=1e-3)


def test_weights_that_fit_a_core_s_l2_are_not_prefetched(monkeypatch):
    monkeypatch.setattr(tiles, "STREAMED_WEIGHT_BYTES", 4 << 20)  # a core with 4 MB of L2: 2.4 MB stay there
    prog = pw.build(block(channels=256, size=8), "cpu", workers=2)
    assert [lp for lp in prog.schedule.nest("C2_raw_blocked").loops if lp.annotation != "parallel"][0].reduce
    assert not [step for step in prog.schedule.steps if step.kind == "prefetch_tensor"]


def test_a_long_reduction_over_a_blocked_input_walks_its_channel_blocks_outside_the_rows():
    wl = block(channels=256, size=8)  # the second convolution sums 9 taps x 256 channels
    prog = pw.build(wl, "cpu", workers=2)
    loops = prog.schedule.nest("C2_raw_blocked").loops
    serial = [lp for lp in loops if lp.annotation != "parallel"]
    assert serial[0].reduce and serial[0].extent == 256 // (prog.schedule.workload.tensor("C2_raw_blocked").shape[-1])
    assert not serial[1].reduce  # the rows come after the channel blocks
    # its 2.4 MB of weights, more than a core's L2, are fetched a channel block ahead
    fetched = [step.call() for step in prog.schedule.steps if step.kind == "prefetch_tensor"]
    assert fetched == [f"prefetch_tensor('C2_raw_blocked', 'C2_raw_weights', '{serial[0].name}', ahead=1)"]
    assert "prefetch C2_raw_weights[" in prog.source("C2_raw_blocked")
    inputs = random_inputs(wl, seed=5)
    np.testing.assert_allclose(prog.run(**inputs)["T"], pw.reference(wl, **inputs)["T"], rtol=1e-4, atol=2e-3)
