"""Winograd's F(4x4, 3x3) for the cpu's 3x3 convolutions (schedules/passes/winograd.py)."""

from __future__ import annotations

import numpy as np
import pytest

import ptowsp as pw
from ptowsp.schedules.passes.default import default_schedule
from ptowsp.schedules.passes.winograd import POINTS, transforms, winograd_convolutions
from ptowsp.workloads import random_inputs, zoo
from tests.schedules.test_blocking import conv


@pytest.mark.parametrize("tile", sorted(POINTS))
def test_the_transforms_compute_a_one_dimensional_convolution_exactly(tile):
    at, g, bt = transforms(POINTS[tile])
    size = tile + 2
    assert at.shape == (tile, size) and g.shape == (size, 3) and bt.shape == (size, size)
    rng = np.random.default_rng(0)
    d, w = rng.standard_normal(size), rng.standard_normal(3)
    direct = np.array([d[i:i + 3] @ w for i in range(tile)])
    np.testing.assert_allclose(at @ ((g @ w) * (bt @ d)), direct, rtol=1e-12, atol=1e-12)


def test_a_convolution_becomes_the_winograd_tasks_with_blocks_of_whole_register_tiles():
    wl = conv(channels=8, size=28, out=16)
    rewritten = winograd_convolutions(wl, 8)
    assert rewritten.tasks == ["Y_pad", "Y_rows", "Y_input", "Y_filter_rows", "Y_filter", "Y_product", "Y_columns",
                               "Y_blocked", "Y"]
    assert rewritten.inputs == wl.inputs and rewritten.outputs == wl.outputs
    # 28 = 7 tiles of 4 a side: one block of 8 tile rows (the last padded), 56 register-tile rows
    # (winograd.py `_blocks`: 2 blocks of 4 tile rows compute as many tiles and read the filter twice)
    assert rewritten.tensor("Y_product").shape == (1, 6, 6, 56, 16)
    assert rewritten.tensor("Y_filter").shape == (6, 6, 1, 8, 16)  # one panel of 2 vectors of columns
    assert rewritten.tensor("Y_blocked").shape == (1, 2, 28, 28, 8)  # blocking.py's layout: propagation goes on
    assert rewritten.category("Y_product") is pw.Category.COMPLEX_OUT_FUSABLE


@pytest.mark.parametrize("channels, blocks", [(8, (7, 28)), (128, (4, 56))])
def test_blocks_are_larger_where_the_filter_must_come_from_memory_again_for_each(channels, blocks):
    """56 = 14 tiles of 4 a side.  A filter that fits in L2 (36 x 8 x 8 floats) is re-read from there:
    blocks of 2 tile rows waste nothing.  One of 2.4 MB (128 channels) costs a read from memory per
    block: blocks of 4 tile rows (56 tiles, the last two tile rows padded) read it 4 times, not 7."""
    rewritten = winograd_convolutions(conv(channels=channels, size=56, out=channels), 8)
    product = rewritten.tensor("Y_product").shape
    assert (product[0], product[3]) == blocks


def test_with_avx512_the_filter_is_stored_as_panels_of_4_vectors_the_product_a_tile_of_4_rows():
    wl = winograd_convolutions(conv(channels=16, size=28, out=64), 16)
    assert wl.tensor("Y_filter").shape == (6, 6, 1, 16, 64)
    schedule = default_schedule(wl, vector_bytes=64, workers=2)
    assert {"t": 4, "o": 64} in [step.factors for step in schedule.steps if getattr(step, "task", None) ==
                                 "Y_product" and step.kind == "tile"]


def test_an_image_too_small_for_tiles_of_4_takes_tiles_of_2():
    rewritten = winograd_convolutions(conv(channels=8, size=14, out=16), 8)  # 4 tiles of 4 a side, 7 of 2
    assert rewritten.tensor("Y_product").shape[1:3] == (4, 4)  # F(2x2, 3x3): a 4x4 input tile
    assert rewritten.tensor("Y_blocked").shape == (1, 2, 14, 14, 8)


@pytest.mark.parametrize("options", [{}, {"view": True}, {"padding": 0, "size": 30}, {"size": 14}], ids=str)
def test_the_winograd_workload_computes_what_the_convolution_does(options):
    wl = conv(channels=8, size=options.pop("size", 28), out=16, **options)
    rewritten = winograd_convolutions(wl, 8)
    assert rewritten is not wl
    inputs = random_inputs(wl)
    expected = pw.reference(wl, **inputs)["Y"]
    scale = np.abs(expected).max()
    np.testing.assert_allclose(pw.reference(rewritten, **inputs)["Y"], expected, rtol=1e-4, atol=1e-5 * scale)
    np.testing.assert_allclose(pw.build(wl, "cpu").run(**inputs)["Y"], expected, rtol=1e-4, atol=1e-5 * scale)


def test_an_image_wider_than_a_block_goes_one_tile_row_a_block():
    """66 tiles a row exceed MAX_BLOCK_TILES: one tile row, padded to 68, is a block (it once found none)."""
    wl = conv(channels=8, size=264, out=8)
    rewritten = winograd_convolutions(wl, 8)
    assert rewritten.tensor("Y_product").shape[0] == 66 and rewritten.tensor("Y_product").shape[3] == 68
    inputs = random_inputs(wl)
    expected = pw.reference(wl, **inputs)["Y"]
    np.testing.assert_allclose(pw.build(wl, "cpu").run(**inputs)["Y"], expected, rtol=1e-4,
                               atol=1e-5 * np.abs(expected).max())


def test_a_batch_of_images_has_its_own_blocks_per_image():
    wl = zoo.conv2d(2, 8, 14, 15, 8, 3, 1, 1)  # F(2x2, 3x3): 7 and 8 tiles a side
    rewritten = winograd_convolutions(wl, 8)
    inputs = random_inputs(wl)
    expected = pw.reference(wl, **inputs)["Y"]
    np.testing.assert_allclose(pw.reference(rewritten, **inputs)["Y"], expected, rtol=1e-4,
                               atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("options", [
    {"stride": 2}, {"dilation": 2, "padding": 2}, {"kernel": 5, "padding": 2}, {"kernel": 1, "padding": 0},
    {"size": 12}, {"channels": 4},
], ids=str)
def test_other_convolutions_are_left_to_blocking(options):
    """Strided, dilated and other kernels have no F(m x m, 3x3); an output under 7 tiles of 2 a side
    reuses its larger filter too little; input channels that are not whole vectors do not block."""
    wl = conv(**{"channels": 8, "size": 28, "out": 16, **options})
    assert winograd_convolutions(wl, 8) is wl


def test_the_cpu_default_takes_winograd_and_computes_the_input_transform_inside_the_product():
    wl = conv(channels=16, size=28, out=32)  # whole vectors of channels with AVX2's 8 lanes and AVX-512's 16
    built = pw.build(wl, "cpu", workers=2)
    placed = built.schedule.compute_at_locations
    # the filter (36 x 16 x 32 floats) is read per point (e, f) of the tile, 2 KB a point: not too wide to
    # group.  One block (56 tiles): the grid splits the points, the rows' transform is shared by them
    assert placed["Y_input"][0] == "Y_product" and "Y_rows" not in placed
    inputs = random_inputs(wl)
    expected = pw.reference(wl, **inputs)["Y"]
    np.testing.assert_allclose(built.run(**inputs)["Y"], expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())
