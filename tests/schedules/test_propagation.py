"""The blocked layout carried through the tasks around convolutions (schedules/passes/propagation.py)."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.schedules.passes import tiles
from ptowsp.schedules.passes.blocking import block_convolutions
from ptowsp.schedules.passes.default import default_schedule
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


def test_blocks_of_two_widths_meet_where_channel_counts_change():
    """On AVX-512 (16 lanes) 24 channels go in 8-lane blocks and 32 in 16-lane ones: the ReLU of the
    24-channel convolution is computed in its 8-lane blocks, and the 32-channel convolution after it
    sums over 8-lane blocks of its input (MobileNetV2's 144 -> 24 -> 144 channels)."""
    wl = pw.Workload("widths")
    x = wl.input("X", (1, 16, 8, 8))
    a = conv(wl, "C1", x, 24)
    relu = wl.compute("R1", a.shape, lambda n, c, y, xx: pw.maximum(a[n, c, y, xx], 0.0))
    wl.output(conv(wl, "C2", relu, 32))
    out = propagate_blocking(block_convolutions(wl, 16), 16)
    assert [out.task(t).tensor.shape[-1] for t in ("C1_raw_blocked", "R1_blocked", "C2_raw_blocked")] == [8, 8, 16]
    assert "R1" not in out.tasks and "R1_blocked[" in str(out.task("C2_raw_pad_blocked").body)
    inputs = random_inputs(wl)
    np.testing.assert_allclose(pw.reference(out, **inputs)["C2"], pw.reference(wl, **inputs)["C2"], rtol=1e-4,
                               atol=1e-4)
    got = pw.build(wl, "cpu", workers=2).run(**inputs)["C2"]
    np.testing.assert_allclose(got, pw.reference(wl, **inputs)["C2"], rtol=1e-4, atol=1e-4)


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


def _inverted_residual(project: int):
    """MobileNetV2's block as ONNX writes it: an expansion to 32 channels (3x3 here: a 1x1 of the model's
    input would be a matmul over its pixels), ReLU6, 3x3 depthwise, ReLU6, 1x1 projection to `project`
    channels."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)

    def weight(name, shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    limits = [numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["e"], name="expand", pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["e", "lo", "hi"], ["e6"], name="relu_e"),
             helper.make_node("Conv", ["e6", "wd"], ["d"], name="dw", group=32, pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["d", "lo", "hi"], ["d6"], name="relu_d"),
             helper.make_node("Conv", ["d6", "w2"], ["y"], name="project")]
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, project, 16, 16])],
                              [weight("w1", (32, 16, 3, 3)), weight("wd", (32, 1, 3, 3)),
                               weight("w2", (project, 32, 1, 1)), *limits])
    return pw.frontend.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("project", [32, 24])
def test_a_depthwise_convolution_takes_the_blocked_layout_of_the_convolution_before_it(project):
    """The depthwise convolution reads its own channel (no one-element channel sum), so it is computed
    blocked and nothing unpacks the expansion; a projection whose 24 channels are not whole blocks keeps
    its plain output and reads a plain input (a blocked one would put 16 floats between its pixels),
    one whose 32 are reads the blocked one.  The depthwise weights are packed by lanes.  The default vectorizes the blocked depthwise convolution
    a whole block at a time: its padding guards are one scalar test per vector, not int64 vectors."""
    wl = _inverted_residual(project)
    out = propagate_blocking(block_convolutions(wl, 16), 16)
    assert {"dw_blocked", "relu_d_blocked"} <= set(out.tasks) and "relu_e" not in out.tasks
    assert "wd_lanes[" in str(out.task("dw_blocked").body)  # its weights packed: a vector a tap, not a gather
    projection = out.task("y_blocked" if project == 32 else "y")  # named after the graph's output
    assert ("relu_d_blocked[" in str(projection.body)) == (project == 32)
    schedule = default_schedule(out, vector_bytes=64, workers=2)  # AVX-512's 16 float lanes
    lanes = [lp.extent for lp in schedule.nest("dw_blocked").loops if lp.annotation == "vectorized"]
    assert lanes == [16], str(schedule)
    inputs = random_inputs(wl, seed=3)
    np.testing.assert_allclose(pw.reference(out, **inputs)["y"], pw.reference(wl, **inputs)["y"], rtol=1e-4,
                               atol=1e-3)
