"""The cpu's channel blocking of convolutions (schedules/passes/blocking.py)."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.schedules.loopnest import UNROLLED, VECTORIZED
from ptowsp.schedules.passes.blocking import block_convolutions, channel_block
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.workloads import random_inputs, zoo


def conv(channels=4, size=8, out=16, kernel=3, stride=1, padding=1, dilation=1, view=False, dtype="float32"):
    """A convolution written the way users write it: a guard for the padding (or a boundary view)."""
    wl = pw.Workload("conv")
    x = wl.input("X", (1, channels, size, size), dtype)
    w = wl.input("W", (out, channels, kernel, kernel), dtype)
    c, r, s = pw.reduce_axis(channels, "c"), pw.reduce_axis(kernel, "r"), pw.reduce_axis(kernel, "s")
    span = (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    padded = x.boundary("constant", 0.0) if view else None

    def body(n, o, y, xx):
        iy, ix = y * stride + r * dilation - padding, xx * stride + s * dilation - padding
        if view:
            return pw.sum(padded[n, c, iy, ix] * w[o, c, r, s], axis=(c, r, s))
        inside = (iy >= 0) & (iy < size) & (ix >= 0) & (ix < size)
        return pw.sum(pw.where(inside, x[n, c, iy, ix], 0.0) * w[o, c, r, s], axis=(c, r, s))

    wl.output(wl.compute("Y", (1, out, span, span), body))
    return wl


def test_a_convolution_becomes_pad_packed_weights_blocked_contraction_and_unpack():
    wl = conv()
    blocked = block_convolutions(wl, 8)
    assert blocked.tasks == ["Y_pad", "Y_weights", "Y_blocked", "Y"]
    assert blocked.inputs == wl.inputs and blocked.outputs == wl.outputs
    assert blocked.tensor("Y_pad").shape == (1, 4, 10, 10)
    assert blocked.tensor("Y_weights").shape == (2, 3, 3, 4, 8)  # [ob, r, s, c, ol]: the channel loop walks lines
    assert blocked.tensor("Y_blocked").shape == (1, 2, 8, 8, 8)
    assert blocked.category("Y_blocked") is pw.Category.COMPLEX_OUT_FUSABLE
    assert "where" not in str(blocked.task("Y_blocked").body)  # the padding guard is gone from the contraction


@pytest.mark.parametrize("options", [
    {}, {"padding": 0}, {"padding": 2, "stride": 2}, {"kernel": 1, "padding": 0}, {"dilation": 2, "padding": 2},
    {"view": True}, {"kernel": 5, "padding": 2, "size": 9},
], ids=str)
def test_the_blocked_workload_computes_what_the_convolution_does(options):
    wl = conv(**options)
    blocked = block_convolutions(wl, 8)
    assert blocked is not wl
    inputs = random_inputs(wl)
    expected = pw.reference(wl, **inputs)["Y"]
    np.testing.assert_allclose(pw.reference(blocked, **inputs)["Y"], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pw.build(wl, "cpu").run(**inputs)["Y"], expected, rtol=1e-4, atol=1e-4)


def test_what_is_not_a_plain_convolution_is_left_as_written():
    depthwise = pw.Workload("depthwise")
    x, w = depthwise.input("X", (1, 16, 6, 6)), depthwise.input("W", (16, 1, 3, 3))
    r, s = pw.reduce_axis(3, "r"), pw.reduce_axis(3, "s")
    depthwise.output(depthwise.compute("Y", (1, 16, 4, 4), lambda n, o, y, xx: pw.sum(
        x[n, o, y + r, xx + s] * w[o, 0, r, s], axis=(r, s))))
    other_guard = pw.Workload("other_guard")
    x2, w2 = other_guard.input("X", (1, 4, 6, 6)), other_guard.input("W", (16, 4, 1, 1))
    c, k = pw.reduce_axis(4, "c"), pw.reduce_axis(1, "k")
    other_guard.output(other_guard.compute("Y", (1, 16, 6, 6), lambda n, o, y, xx: pw.sum(
        pw.where(c < 2, x2[n, c, y, xx], 0.0) * w2[o, c, k, k], axis=(c, k))))
    for wl in (depthwise, other_guard, conv(out=12), conv(dtype="float64"), zoo.matmul(16, 16, 16)):
        assert block_convolutions(wl, 8) is wl, wl.name


def test_constant_weights_are_packed_once_at_build_time():
    wl = pw.Workload("conv_const")
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((16, 3, 3, 3)).astype(np.float32)
    x, w = wl.input("X", (1, 3, 7, 7)), wl.constant("W", weights)
    c, r, s = pw.reduce_axis(3, "c"), pw.reduce_axis(3, "r"), pw.reduce_axis(3, "s")
    wl.output(wl.compute("Y", (1, 16, 5, 5), lambda n, o, y, xx: pw.sum(x[n, c, y + r, xx + s] * w[o, c, r, s],
                                                                        axis=(c, r, s))))
    prog = pw.build(wl, "cpu")
    assert "Y_weights" in prog.program.constants and "Y_weights" not in prog.program.kernels
    image = rng.standard_normal((1, 3, 7, 7)).astype(np.float32)
    np.testing.assert_allclose(prog.run(X=image)["Y"], pw.reference(wl, X=image)["Y"], rtol=1e-4, atol=1e-4)


def test_the_default_gives_the_blocked_contraction_a_register_tile_of_pixels_by_channel_blocks():
    blocked = block_convolutions(zoo.conv2d(1, 64, 56, 56, 64, 3, 1, 1), 16)
    nest = default_schedule(blocked, vector_bytes=64, workers=2).nest("Y_blocked")
    names = [lp.name for lp in nest.loops]
    assert names[-3:] == ["o_block.inner", "xx.inner", "o_lane"]
    assert nest.loop("o_lane").annotation == VECTORIZED and nest.loop("xx.inner").annotation == UNROLLED
    # 14 accumulators (AVX-512's 32 registers), the fewest loads per multiply-add: 7 pixels x 2 blocks
    assert (nest.loop("xx.inner").extent, nest.loop("o_block.inner").extent) == (7, 2)
    assert names[-6:-3] == ["r", "s", "c"]  # the reductions around the tile, the channels innermost


def test_with_avx2s_16_registers_a_7_pixel_row_takes_3_pixels_by_4_blocks_and_a_guarded_last_tile():
    wl = zoo.conv2d(1, 32, 7, 7, 32, 1, 1, 0)
    blocked = block_convolutions(wl, 8)
    s = default_schedule(blocked, vector_bytes=32, workers=2)
    nest = s.nest("Y_blocked")
    # 12 accumulators in 3 + 3 + 1 pixels (9.3 on average) rather than 7 x 1
    assert (nest.loop("xx.inner").extent, nest.loop("o_block.inner").extent) == (3, 4)
    inputs = random_inputs(wl)
    np.testing.assert_allclose(pw.build(s, "cpu", workers=2).run(**inputs)["Y"], pw.reference(wl, **inputs)["Y"],
                               rtol=1e-4, atol=1e-4)


def test_with_avx2s_16_registers_6_rows_by_2_blocks_keep_the_weights_live_not_the_broadcasts():
    wl = zoo.conv2d(1, 16, 56, 56, 16, 3, 1, 1)
    s = default_schedule(block_convolutions(wl, 8), vector_bytes=32, workers=2)
    nest = s.nest("Y_blocked")
    assert (nest.loop("xx.inner").extent, nest.loop("o_block.inner").extent) == (6, 2)
    # 6 broadcasts + 12 accumulators + a weight vector would be 19: the rows go outside the blocks
    assert [lp.name for lp in nest.loops][-3:] == ["xx.inner", "o_block.inner", "o_lane"]
    inputs = random_inputs(wl)
    np.testing.assert_allclose(pw.build(s, "cpu", workers=2).run(**inputs)["Y"], pw.reference(wl, **inputs)["Y"],
                               rtol=1e-4, atol=1e-4)


def test_an_epilogue_after_the_convolution_still_computes_the_same():
    wl = pw.Workload("conv_relu")
    x, w, b = wl.input("X", (1, 3, 9, 9)), wl.input("W", (16, 3, 3, 3)), wl.input("b", (16,))
    c, r, s = pw.reduce_axis(3, "c"), pw.reduce_axis(3, "r"), pw.reduce_axis(3, "s")
    y = wl.compute("Y", (1, 16, 7, 7), lambda n, o, i, j: pw.sum(x[n, c, i + r, j + s] * w[o, c, r, s],
                                                                 axis=(c, r, s)))
    wl.output(wl.compute("Z", (1, 16, 7, 7), lambda n, o, i, j: pw.maximum(y[n, o, i, j] + b[o], 0.0)))
    assert block_convolutions(wl, 8) is not wl
    inputs = random_inputs(wl)
    np.testing.assert_allclose(pw.build(wl, "cpu").run(**inputs)["Z"], pw.reference(wl, **inputs)["Z"],
                               rtol=1e-4, atol=1e-4)


def test_between_two_convolutions_the_activation_stays_blocked():
    """conv -> relu -> conv: the relu is inlined into the second's pad, which is blocked too
    (propagation.py) and reads the first's blocked result directly: no conversion between them."""
    wl = pw.Workload("two_convs")
    x = wl.input("X", (1, 8, 10, 10))
    first = conv_layer(wl, "Y1", x, wl.input("W1", (16, 8, 3, 3)))
    act = wl.compute("A1", (1, 16, 10, 10), lambda n, o, y, xx: pw.maximum(first[n, o, y, xx], 0.0))
    wl.output(conv_layer(wl, "Y2", act, wl.input("W2", (16, 16, 3, 3))))
    prog = pw.build(wl, "cpu")
    assert not {"Y1", "A1", "Y2_pad"} & set(prog.program.kernels)
    assert "Y1_blocked[" in prog.source("Y2_pad_blocked")
    inputs = random_inputs(wl)
    np.testing.assert_allclose(prog.run(**inputs)["Y2"], pw.reference(wl, **inputs)["Y2"], rtol=1e-4, atol=1e-3)


def conv_layer(wl, name, source, weights):
    """A padded 3x3 convolution of `source` (NCHW) in workload `wl`."""
    n_in, size = source.shape[1], source.shape[2]
    c, r, s = pw.reduce_axis(n_in, f"c{name}"), pw.reduce_axis(3, f"r{name}"), pw.reduce_axis(3, f"s{name}")

    def body(n, o, y, xx):
        iy, ix = y + r - 1, xx + s - 1
        inside = (iy >= 0) & (iy < size) & (ix >= 0) & (ix < size)
        return pw.sum(pw.where(inside, source[n, c, iy, ix], 0.0) * weights[o, c, r, s], axis=(c, r, s))

    return wl.compute(name, (1, weights.shape[0], size, size), body)


@pytest.mark.parametrize("view", [False, True])
def test_a_pointwise_convolution_of_an_input_is_a_matmul_over_its_pixels(view):
    wl = conv(channels=32, size=8, out=16, kernel=1, padding=0, view=view)
    flat = block_convolutions(wl, 8)
    assert flat.tasks == ["Y_pixels", "Y"] and flat.tensor("Y_pixels").shape == (1, 16, 64)
    body = str(flat.task("Y_pixels").body)
    assert "p // 8" in body and "p % 8" in body and "where" not in body  # no taps, no bounds checks
    s = default_schedule(flat, vector_bytes=32, workers=2)
    assert VECTORIZED in {lp.annotation for lp in s.nest("Y_pixels").loops}
    inputs = random_inputs(wl)
    got = pw.build(wl, "cpu", workers=2).run(**inputs)["Y"]
    np.testing.assert_allclose(got, pw.reference(wl, **inputs)["Y"], rtol=1e-4, atol=1e-4)


def test_a_pointwise_convolution_of_a_computed_tensor_stays_blocked():
    wl = pw.Workload("chain")
    x, w = wl.input("X", (1, 32, 8, 8)), wl.input("W", (16, 32, 1, 1))
    relu = wl.compute("R", x.shape, lambda n, c, y, xx: pw.maximum(x[n, c, y, xx], 0.0))
    c = pw.reduce_axis(32, "c")
    wl.output(wl.compute("Y", (1, 16, 8, 8), lambda n, o, y, xx: pw.sum(relu[n, c, y, xx] * w[o, c, 0, 0], axis=c)))
    assert "Y_blocked" in block_convolutions(wl, 8).tasks  # the blocked layout may carry on from its producer


def test_channels_in_half_vectors_are_blocked_by_half_vectors():
    """40 output channels are five 8-lane blocks but no whole 16-lane ones (AVX-512): that convolution is
    blocked by 8 and runs on 8-lane vectors, not unvectorized in NCHW (MobileNetV3-Small on AVX-512:
    6.9 -> 2.5 ms), in a register tile as large as AVX-512's registers allow; 32 channels keep whole
    vectors, and 20 are not blocked at all."""
    assert [channel_block(c, 16) for c in (32, 40, 20)] == [16, 8, None] and channel_block(12, 8) is None
    forty = zoo.conv2d(1, 16, 14, 14, 40, 1, 1, 0)
    blocked = block_convolutions(forty, 16)
    s = default_schedule(blocked, vector_bytes=64, workers=2)
    lanes = [blocked.task(t).tensor.shape[-1] for t in blocked.tasks
             if any(lp.annotation == VECTORIZED for lp in s.nest(t).loops) and len(blocked.task(t).tensor.shape) == 5]
    assert lanes and set(lanes) == {8}
    # AVX-512's 32 registers hold a tile of the whole 14-pixel row (AVX2's 16 held 2 of its divisors)
    assert [lp.extent for lp in s.nest("Y_blocked").loops if lp.annotation == "unrolled"] == [14]
    inputs = random_inputs(forty)
    got = pw.build(forty, "cpu").run(**inputs)["Y"]
    np.testing.assert_allclose(got, pw.reference(forty, **inputs)["Y"], rtol=1e-4, atol=1e-4)
