"""Resize as taps per axis computed from onnx's reference at import (frontend/onnx_resize.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

import ptowsp as pw
from tests.frontend.test_onnx import check, model

RNG = np.random.default_rng(13)


def resize_model(shape, scales=None, sizes=None, roi=None, element=TP.FLOAT, **attrs):
    inits = {"roi": np.array(roi or [], np.float32), "scales": np.array(scales or [], np.float32)}
    names = ["x", "roi", "scales"]
    if sizes is not None:
        inits["sizes"] = np.array(sizes, np.int64)
        names = ["x", "roi", "", "sizes"]
    node = oh.make_node("Resize", names, ["y"], name="up", **attrs)
    return model([node], {"x": (shape, element)}, {"y": (None, element)}, inits, opset=19)


@pytest.mark.parametrize("attrs", [
    {"mode": "nearest"},
    {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
    {"mode": "linear"},
    {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
    {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
])
def test_upsampling_and_downsampling_match_the_reference(attrs):
    x = {"x": RNG.standard_normal((1, 2, 5, 6)).astype(np.float32)}
    check(resize_model((1, 2, 5, 6), scales=[1.0, 1.0, 2.0, 1.5], **attrs), x, target="cpu", rtol=1e-5, atol=1e-5)
    check(resize_model((1, 2, 5, 6), sizes=[1, 2, 3, 4], **attrs), x, target="cpu", rtol=1e-5, atol=1e-5)


def test_antialiased_downsampling_takes_every_tap_of_its_window():
    x = {"x": RNG.standard_normal((1, 1, 12, 12)).astype(np.float32)}
    wl = check(resize_model((1, 1, 12, 12), scales=[1.0, 1.0, 0.3, 0.25], mode="linear", antialias=1), x,
               target="cpu", rtol=1e-5, atol=1e-5)
    assert wl.task(wl.outputs[0]).tensor.shape == (1, 1, 3, 3)


def test_an_image_of_bytes_resizes_by_nearest_and_stays_bytes():
    x = {"x": RNG.integers(0, 255, (1, 3, 4, 4)).astype(np.uint8)}
    check(resize_model((1, 3, 4, 4), scales=[1.0, 1.0, 2.0, 2.0], element=TP.UINT8, mode="nearest"), x,
          target="cpu")
    with pytest.raises(pw.WorkloadError, match=r"'up' \(op Resize\): attribute mode='linear' is not supported"):
        pw.frontend.from_onnx(resize_model((1, 3, 4, 4), scales=[1.0, 1.0, 2.0, 2.0], element=TP.UINT8,
                                           mode="linear"))


def test_crop_and_resize_reads_the_extrapolation_value_outside_its_region():
    x = {"x": RNG.standard_normal((1, 1, 6, 6)).astype(np.float32)}
    m = resize_model((1, 1, 6, 6), sizes=[1, 1, 5, 4], roi=[0, 0, -0.2, 0.4, 1, 1, 0.6, 1.3], mode="linear",
                     coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=7.0)
    check(m, x, target="cpu", rtol=1e-5, atol=1e-5)
